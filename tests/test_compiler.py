"""specsim's XLA compiler options (`specsim.models.compiler`): which backends get them,
what turns them off, that they reach XLA's compile, and that every compiled program of
the engine and its cost model goes through `compiler.jit`."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsim import decode, pass_costs
from specsim.models import compiler, transformer


def test_cpu_gets_the_options_other_backends_none(monkeypatch):
    monkeypatch.delenv(compiler.ENV_SWITCH, raising=False)
    monkeypatch.setenv("XLA_FLAGS", "")
    assert compiler.options("cpu") == compiler.CPU_OPTIONS      # this jaxlib knows both
    assert compiler.options("gpu") == {}
    assert compiler.options("tpu") == {}


@pytest.mark.parametrize("word", ["0", "false", "OFF", "no"])
def test_the_switch_turns_them_off(monkeypatch, word):
    monkeypatch.setenv(compiler.ENV_SWITCH, word)
    assert compiler.options("cpu") == {}


def test_an_option_set_in_xla_flags_is_left_to_the_flag(monkeypatch):
    monkeypatch.delenv(compiler.ENV_SWITCH, raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x --xla_backend_optimization_level=0")
    assert compiler.options("cpu") == {"xla_cpu_use_fusion_emitters": False}


def test_an_option_this_jaxlib_does_not_know_is_dropped(monkeypatch):
    monkeypatch.delenv(compiler.ENV_SWITCH, raising=False)
    monkeypatch.setattr(compiler, "CPU_OPTIONS",
                        {**compiler.CPU_OPTIONS, "xla_cpu_no_such_option_s29": True})
    assert compiler._known("xla_cpu_no_such_option_s29", True) is False
    assert "xla_cpu_no_such_option_s29" not in compiler.options("cpu")


def test_the_options_reach_the_compile(monkeypatch):
    """An option the compiler rejects, forced through `options`, fails the jitted
    program's compile: so `jit` hands `options()` to XLA (and chooses them at first use,
    not at decoration)."""
    monkeypatch.delenv(compiler.ENV_SWITCH, raising=False)
    prog = compiler.jit(lambda x: x * 2)
    monkeypatch.setattr(compiler, "options", lambda backend=None: {"xla_cpu_no_such_s29": 1})
    with pytest.raises(Exception, match="xla_cpu_no_such_s29"):
        prog(jnp.ones(3))
    monkeypatch.undo()
    ok = compiler.jit(lambda x: x * 2, static_argnums=())
    np.testing.assert_array_equal(ok(jnp.ones(3)), 2.0)
    assert ok.__wrapped__.__name__ == "<lambda>"
    with pytest.raises(TypeError, match="compiler_options"):
        compiler.jit(lambda x: x, compiler_options={})


def test_every_engine_and_cost_program_goes_through_it():
    """The programs a run executes and the ones that time its passes for the cost model
    are compiled alike (a pass cost measured under other options would predict another
    program)."""
    from specsim.decode import autoregressive, policy_loop, prefill, speculative
    programs = [prefill.prefill_program, prefill.drafter_prefill_program,
                autoregressive.autoregressive_program, speculative.speculative_program,
                policy_loop.policy_program, transformer._forward_jit,
                pass_costs._target_1_program, pass_costs._verify_program,
                pass_costs._draft_program]
    assert all(isinstance(p, compiler._Jit) for p in programs)
    files = [*Path(decode.__file__).parent.glob("*.py"), pass_costs.__file__, transformer.__file__]
    src = "\n".join(open(f).read() for f in files)
    assert "jax.jit(" not in src


def test_defining_programs_starts_no_backend():
    """Importing the engine (whose programs are decorated at import) leaves JAX's
    backends alone, so a user can still choose a platform after ``import specsim.decode``."""
    code = textwrap.dedent("""
        import jax._src.xla_bridge as xb
        import specsim.decode, specsim.pass_costs
        print("INIT", xb.backends_are_initialized())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "INIT False" in out


def test_same_numbers_with_and_without_the_options():
    """The options change how XLA emits code, not what it computes: a forward pass of a
    random model gives the same logits (to fp32 rounding) both ways."""
    from specsim import models
    m = models.load("tiny-llama", seed=0)
    cache = transformer.init_cache(m.cfg, 2, 16)
    toks = jnp.asarray(np.random.default_rng(0).integers(0, m.cfg.vocab_size, (2, 5)),
                       jnp.int32)
    args = (m.params, m.cfg, toks, cache)
    with_opts = jax.jit(transformer.forward, static_argnums=1,
                        compiler_options=compiler.options("cpu") or None)(*args)[0]
    without = jax.jit(transformer.forward, static_argnums=1)(*args)[0]
    np.testing.assert_allclose(np.asarray(with_opts), np.asarray(without), rtol=2e-5, atol=2e-5)
