"""specsim: speculative decoding theory, engine and hardware models."""
__version__ = "0.1.0"

# Notebooks get JAX's persistent compilation cache by default (no JAX import here; see
# specsim.compile_cache; SPECSIM_COMPILATION_CACHE=0 turns it off).
from specsim import compile_cache as _compile_cache  # noqa: E402

_compile_cache.enable_in_notebook()
