"""JAX's persistent compilation cache for specsim: a warm start reuses compiled programs.

    compile_cache.enable()                 # ~/.cache/specsim/jax; what the CLI does
    compile_cache.enable(enabled=False)    # leave JAX's settings alone
    SPECSIM_COMPILATION_CACHE=0 specsim demo --quick     # the same switch, from the shell

On by default for the command line (`specsim.cli.main` calls `enable_deferred`) and for
notebooks (importing specsim inside a Jupyter kernel calls `enable_in_notebook`). A speculative program of
SmolLM2-135M takes seconds to compile on a CPU; with the cache, a second process that
builds the same program (same shapes, static arguments, devices and jax version) reads
the executable from disk instead. Timings never include compilation either way.

The folder: ``path`` if given, else ``$SPECSIM_JAX_CACHE``, else ``jax/`` under the
specsim cache root (``$SPECSIM_CACHE``, default ``~/.cache/specsim``). Only programs that
took at least ``min_compile_secs`` to compile are written: 0.25 s by default, so that the
prefill program every generation starts from (`specsim.decode`) is kept too; the many
tiny eager programs are cheaper to compile than to read back (JAX's own default is 1 s;
see docs/studies/compile-time.md).

Turning it off (``enabled=False`` or ``SPECSIM_COMPILATION_CACHE`` in 0/false/off/no)
means specsim does not turn it on; a cache the user configured for JAX directly
(``JAX_COMPILATION_CACHE_DIR``) is left as it is.

This module imports JAX only inside `enable`; `enable_deferred` (CLI, notebooks) sets
JAX's environment variables instead when JAX is not imported yet, so ``import specsim``
and ``specsim speedup`` stay free of JAX.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from specsim import environment

__all__ = ["ENV_SWITCH", "ENV_DIR", "MIN_COMPILE_SECS", "default_dir", "enabled_by_env",
           "enable", "enable_deferred", "enable_in_notebook"]

ENV_SWITCH = "SPECSIM_COMPILATION_CACHE"
ENV_DIR = "SPECSIM_JAX_CACHE"
MIN_COMPILE_SECS = 0.25


def default_dir() -> Path:
    """``$SPECSIM_JAX_CACHE``, else ``$SPECSIM_CACHE/jax`` (default ``~/.cache/specsim/jax``)."""
    return environment.path(ENV_DIR) or environment.cache_root() / "jax"


def enabled_by_env() -> bool:
    """False when ``$SPECSIM_COMPILATION_CACHE`` says off (0, false, off, no); else True."""
    return environment.is_on(ENV_SWITCH)


def _check(min_compile_secs) -> float:
    if isinstance(min_compile_secs, bool) or not isinstance(min_compile_secs, (int, float)) \
            or not min_compile_secs >= 0:
        raise ValueError(f"min_compile_secs must be a number >= 0, got {min_compile_secs!r}")
    return float(min_compile_secs)


def enable(path: str | Path | None = None, *, enabled: bool | None = None,
           min_compile_secs: float = MIN_COMPILE_SECS) -> Path | None:
    """Point JAX's persistent compilation cache at ``path`` (default `default_dir`) and
    return the folder; None (and nothing changed) when switched off by ``enabled=False``
    or, with ``enabled=None``, by ``$SPECSIM_COMPILATION_CACHE``."""
    min_compile_secs = _check(min_compile_secs)
    if enabled is None:
        enabled = enabled_by_env()
    if not enabled:
        return None
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    folder = Path(path) if path is not None else default_dir()
    folder.mkdir(parents=True, exist_ok=True)
    changed = jax.config.jax_compilation_cache_dir != str(folder)
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_secs)
    if changed:
        # JAX decides once per process whether to use the cache (at its first compile);
        # start that decision afresh for the new folder.
        compilation_cache.reset_cache()
    return folder


def enable_deferred(min_compile_secs: float = MIN_COMPILE_SECS) -> Path | None:
    """`enable` without importing JAX: when JAX is not imported yet, set its environment
    variables (``JAX_COMPILATION_CACHE_DIR``, ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS``;
    values the user set win), which JAX reads when it is imported; else `enable`. None
    when switched off by ``$SPECSIM_COMPILATION_CACHE``."""
    min_compile_secs = _check(min_compile_secs)
    if not enabled_by_env():
        return None
    if "jax" in sys.modules:
        return enable(min_compile_secs=min_compile_secs)
    folder = default_dir()
    folder.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(folder))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", str(min_compile_secs))
    return Path(os.environ["JAX_COMPILATION_CACHE_DIR"])


def _in_kernel() -> bool:
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython else None
    return shell is not None and "ipykernel" in sys.modules


def enable_in_notebook(min_compile_secs: float = MIN_COMPILE_SECS) -> Path | None:
    """`enable_deferred` when running inside a Jupyter kernel; None elsewhere."""
    return enable_deferred(min_compile_secs) if _in_kernel() else None
