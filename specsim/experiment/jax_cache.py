"""XLA's persistent compilation cache: lives in `specsim.compile_cache` (on by default,
``SPECSIM_COMPILATION_CACHE=0`` turns it off); this name is kept for the demo."""

from specsim.compile_cache import enable as enable_compilation_cache  # noqa: F401
