"""The persistent compilation cache: a second process start reuses the first one's
compiled programs (counted through JAX's monitoring events, not timed); the switch
turns it off; the CLI / notebook hooks do not import JAX."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specsim import compile_cache

ROOT = Path(__file__).resolve().parent.parent

# One process: enable the cache (or not), build the speculative program of a tiny model,
# report JAX's cache events and what the cache folder holds.
RUN = textwrap.dedent("""
    import collections, json, os, sys
    import jax
    from jax import monitoring
    from specsim import compile_cache, decode, models
    from specsim.drafters import NGramDrafter

    events = collections.Counter()
    monitoring.register_event_listener(lambda event, **kw: events.update([event]))
    folder = compile_cache.enable(min_compile_secs=0)
    model = models.load("tiny-llama")
    out = decode.generate_speculative(model, NGramDrafter(model.cfg.vocab_size),
                                      [[5, 6, 7, 5, 6]], 6, k=2, eos_token_id=None)
    d = os.environ["SPECSIM_JAX_CACHE"]
    print("JSON" + json.dumps(dict(
        folder=None if folder is None else str(folder),
        hits=events["/jax/compilation_cache/cache_hits"],
        misses=events["/jax/compilation_cache/cache_misses"],
        traces=decode.TRACE_COUNTS["speculative"],
        entries=len(os.listdir(d)) if os.path.isdir(d) else -1,
        jax_dir=jax.config.jax_compilation_cache_dir,
        tokens=out.tokens)))
""")


def _run(code: str, env_extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE",
                                "SPECSIM_COMPILATION_CACHE", "SPECSIM_JAX_CACHE"))}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), **env_extra)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("JSON"))
    return json.loads(line[4:])


def test_second_process_start_reuses_compiled_programs(tmp_path):
    env = {"SPECSIM_JAX_CACHE": str(tmp_path / "jax")}
    first = _run(RUN, env)
    second = _run(RUN, env)
    assert first["folder"] == second["folder"] == str(tmp_path / "jax")
    assert first["jax_dir"] == str(tmp_path / "jax")
    assert first["hits"] == 0 and first["misses"] >= 1      # a cold cache compiles
    assert first["entries"] >= first["misses"] > 0          # and writes what it compiled
    assert second["traces"] == 1                            # traced again (new process) ...
    assert second["misses"] == 0                            # ... but nothing recompiled
    assert second["hits"] == first["misses"]                # every program read back
    assert second["entries"] == first["entries"]
    assert second["tokens"] == first["tokens"]


def test_switch_off_by_environment(tmp_path):
    got = _run(RUN, {"SPECSIM_JAX_CACHE": str(tmp_path / "jax"),
                     "SPECSIM_COMPILATION_CACHE": "0"})
    assert got["folder"] is None and got["jax_dir"] is None
    assert got["entries"] == -1 and got["hits"] == 0        # no folder made, nothing read


def test_switch_off_by_argument(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECSIM_JAX_CACHE", str(tmp_path / "jax"))
    assert compile_cache.enable(enabled=False) is None
    assert not (tmp_path / "jax").exists()


def test_cli_and_notebook_hooks_do_not_import_jax(tmp_path):
    code = textwrap.dedent("""
        import json, os, sys
        from specsim import compile_cache
        nb = compile_cache.enable_in_notebook()          # not in a kernel: nothing
        cli = compile_cache.enable_deferred()
        print("JSON" + json.dumps(dict(nb=nb, cli=str(cli), jax="jax" in sys.modules,
                                       env=os.environ.get("JAX_COMPILATION_CACHE_DIR"))))
    """)
    got = _run(code, {"SPECSIM_CACHE": str(tmp_path / "root")})
    want = str(tmp_path / "root" / "jax")
    assert got == dict(nb=None, cli=want, jax=False, env=want)
    off = _run(code, {"SPECSIM_CACHE": str(tmp_path / "root"),
                      "SPECSIM_COMPILATION_CACHE": "off"})
    assert off == dict(nb=None, cli="None", jax=False, env=None)


def test_default_dir_and_switch_values(monkeypatch, tmp_path):
    monkeypatch.delenv("SPECSIM_JAX_CACHE", raising=False)
    monkeypatch.setenv("SPECSIM_CACHE", str(tmp_path))
    assert compile_cache.default_dir() == tmp_path / "jax"
    monkeypatch.delenv("SPECSIM_CACHE")
    assert compile_cache.default_dir() == Path.home() / ".cache" / "specsim" / "jax"
    for value, on in [("0", False), ("False", False), (" off ", False), ("no", False),
                      ("1", True), ("yes", True), ("", True)]:
        monkeypatch.setenv("SPECSIM_COMPILATION_CACHE", value)
        assert compile_cache.enabled_by_env() is on


def test_min_compile_secs_is_validated():
    with pytest.raises(ValueError, match="min_compile_secs must be a number >= 0"):
        compile_cache.enable(min_compile_secs=-1)
