"""XLA's persistent compilation cache, so a second demo on this machine skips most
compilation (timings never include compilation)."""

from __future__ import annotations

import os
from pathlib import Path


def enable_compilation_cache(path: str | Path | None = None) -> Path:
    """Keep XLA's compiled programs on disk (default ``~/.cache/specsim/jax``, or
    ``$SPECSIM_JAX_CACHE``) and return the folder."""
    import jax

    path = Path(path or os.environ.get("SPECSIM_JAX_CACHE",
                                       Path.home() / ".cache" / "specsim" / "jax"))
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    return path
