"""specsim: speculative decoding theory, engine and hardware models."""
__version__ = "0.1.0"
