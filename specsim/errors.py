"""The exception family of specsim, rooted in ``ValueError``.

Every error specsim raises on purpose is a `SpecsimError`, and `SpecsimError` is a
``ValueError``, so callers written against ``except ValueError`` (and tests using
``pytest.raises(ValueError)``) keep working. The subclasses let a caller catch one kind:

- `InvalidArgument`: a public argument outside its allowed range (raised by
  `specsim.validation`; the message starts with the argument's name and states the range).
- `ConfigError`: a model or run configuration that cannot work (inconsistent sizes, a
  parameter layout that does not match its layer loop, an unsupported architecture).
- `CheckpointError`: a checkpoint that cannot be read or translated (missing files,
  unknown tensor names, an unsupported format); the underlying I/O or parse error is
  chained as ``__cause__`` (``raise CheckpointError(...) from exc``).

This module imports nothing, so every layer (theory included) may use it.
"""

from __future__ import annotations

__all__ = ["SpecsimError", "InvalidArgument", "ConfigError", "CheckpointError"]


class SpecsimError(ValueError):
    """Root of specsim's errors (a ``ValueError``)."""


class InvalidArgument(SpecsimError):
    """A public argument outside its allowed range; the message names the argument."""


class ConfigError(SpecsimError):
    """A configuration (model, drafter, run) that cannot work as given."""


class CheckpointError(SpecsimError):
    """A checkpoint that cannot be read or translated; the cause is chained."""
