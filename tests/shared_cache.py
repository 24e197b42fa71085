"""The test run's shared compile cache (conftest) for a process a test starts."""

from __future__ import annotations

import os


def shared_cache_env() -> dict[str, str]:
    """Environment variables that point a child Python at the run's shared persistent
    compile cache, every program kept, so that the programs the suite already compiled
    are read back, not compiled again; empty when the run has no shared cache."""
    folder = os.environ.get("SPECSIM_TEST_JAX_CACHE")
    if not folder:
        return {}
    return {"JAX_COMPILATION_CACHE_DIR": folder, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
