"""specsim's CPU matmul kernel (`specsim.models.kernels`): products against a float64
NumPy oracle, rows independent of the row count, derivatives and vmap, `forward` equal
with and without it, where the programs use it, and clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsim.errors import InvalidArgument
from specsim.models import kernels, transformer as tr
from specsim.models.config import TINY_GPT2, TINY_LLAMA, TINY_QWEN2

HAS_COMPILER = kernels._compiler() is not None
needs_kernel = pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the kernel")


@needs_kernel
def test_the_kernel_builds_where_there_is_a_compiler():
    assert kernels.available(), kernels.unavailable_reason()
    assert kernels.unavailable_reason() == ""
    assert kernels.library_path().exists()


def _oracle(x, w, layer, transposed):
    wl = np.asarray(w, np.float64)[int(np.clip(layer, 0, w.shape[0] - 1))]
    return np.asarray(x, np.float64) @ (wl.T if transposed else wl)


@needs_kernel
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("M, K, N", [(1, 576, 960), (2, 64, 48), (5, 100, 37), (6, 33, 16),
                                     (7, 48, 160), (13, 19, 45), (4, 8, 3)])
def test_products_match_a_float64_oracle(M, K, N, transposed):
    rng = np.random.default_rng(M * 1000 + K + N)
    x = rng.standard_normal((M, K)).astype(np.float32)
    shape = (3, N, K) if transposed else (3, K, N)
    w = rng.standard_normal(shape).astype(np.float32)
    f = jax.jit(lambda x, w, i: kernels.small_matmul(x, w, i, transposed=transposed))
    for layer in (0, 2, -1, 7):                     # out of range clamps, as w[i] under jit
        got = np.asarray(f(x, w, layer))
        want = _oracle(x, w, layer, transposed)
        assert got.shape == (M, N)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(K))


@needs_kernel
def test_two_dimensional_weights_and_leading_axes():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 40)).astype(np.float32)
    w = rng.standard_normal((40, 24)).astype(np.float32)
    got = np.asarray(jax.jit(kernels.small_matmul)(x, w))
    np.testing.assert_allclose(got, x.astype(np.float64) @ w, rtol=1e-5, atol=1e-4)
    e = np.ascontiguousarray(w.T)                                       # [N, K]
    got_t = np.asarray(jax.jit(lambda x, e: kernels.small_matmul(x, e, transposed=True))(x, e))
    np.testing.assert_allclose(got_t, got, rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize("transposed", [False, True])
def test_a_rows_result_does_not_depend_on_how_many_rows_there_are(transposed):
    """What makes a verify pass agree with a decode step bit for bit."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((11, 96)).astype(np.float32)
    w = rng.standard_normal((2, 80, 96) if transposed else (2, 96, 80)).astype(np.float32)
    f = jax.jit(lambda x, w: kernels.small_matmul(x, w, 1, transposed=transposed))
    full = np.asarray(f(x, w))
    for m in (1, 2, 5, 6, 7):
        np.testing.assert_array_equal(np.asarray(f(x[:m], w)), full[:m])
    np.testing.assert_array_equal(np.asarray(f(x[4:5], w)), full[4:5])


@needs_kernel
def test_derivatives_and_vmap_follow_the_plain_product():
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.standard_normal((3, 20)).astype(np.float32))
    w = jnp.asarray(rng.standard_normal((2, 20, 12)).astype(np.float32))

    def loss(f):
        return lambda x, w: jnp.sum(jnp.sin(f(x, w)))
    ours = jax.grad(loss(lambda x, w: kernels.small_matmul(x, w, 1)), argnums=(0, 1))(x, w)
    plain = jax.grad(loss(lambda x, w: x @ w[1]), argnums=(0, 1))(x, w)
    for a, b in zip(ours, plain):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    xs = jnp.stack([x, 2 * x])
    got = jax.vmap(lambda x: kernels.small_matmul(x, w, 0))(xs)
    np.testing.assert_allclose(np.asarray(got), np.asarray(xs @ w[0]), rtol=1e-5, atol=1e-5)


def test_bad_arguments_are_clear_errors():
    x = jnp.ones((2, 8), jnp.float32)
    with pytest.raises(InvalidArgument, match="contraction"):
        kernels.small_matmul(x, jnp.ones((9, 4), jnp.float32))
    with pytest.raises(InvalidArgument, match=r"stacked \[L, K, N\]"):
        kernels.small_matmul(x, jnp.ones((8, 4), jnp.float32), 0)
    with pytest.raises(InvalidArgument, match=r"\[K, N\] without a layer"):
        kernels.small_matmul(x, jnp.ones((1, 8, 4), jnp.float32))
    with pytest.raises(InvalidArgument, match="float32"):
        kernels.small_matmul(x.astype(jnp.bfloat16), jnp.ones((8, 4), jnp.bfloat16))
    with pytest.raises(InvalidArgument, match="matmul must be one of"):
        TINY_LLAMA.replace(matmul="fast")
    with pytest.raises(InvalidArgument, match="float32"):
        kernels.use_kernel("kernel", 1, "bfloat16")
    with pytest.raises(InvalidArgument, match="matmul must be one of"):
        kernels.use_kernel("fast", 1, "float32")


@needs_kernel
def test_when_auto_uses_the_kernel(monkeypatch):
    assert kernels.use_kernel("auto", 1, "float32")
    assert kernels.use_kernel("auto", kernels.MAX_ROWS, "float32")
    assert not kernels.use_kernel("auto", kernels.MAX_ROWS + 1, "float32")   # prefill
    assert kernels.use_kernel("kernel", kernels.MAX_ROWS + 1, "float32")
    assert not kernels.use_kernel("auto", 1, "bfloat16")
    assert not kernels.use_kernel("xla", 1, "float32")
    monkeypatch.setenv(kernels.ENV_SWITCH, "0")
    assert not kernels.use_kernel("auto", 1, "float32")
    assert kernels.use_kernel("kernel", 1, "float32")


def _forward_pair(cfg, tokens_shape):
    """(prefill logits, one-step logits, lowered one-step text) of a random model."""
    params = tr.arrange_layers(tr.init_params(jax.random.PRNGKey(0), cfg), cfg)
    rng = np.random.default_rng(0)
    toks = jnp.asarray(rng.integers(3, cfg.vocab_size, tokens_shape), jnp.int32)
    f = jax.jit(lambda p, t, c: tr.forward(p, cfg, t, c))
    logits, cache = f(params, toks, tr.init_cache(cfg, tokens_shape[0], 32))
    step = toks[:, -1:]
    out, _ = f(params, step, cache)
    return np.asarray(logits), np.asarray(out), f.lower(params, step, cache).as_text()


@needs_kernel
@pytest.mark.parametrize("base", [TINY_LLAMA, TINY_QWEN2, TINY_GPT2], ids=lambda c: c.name)
@pytest.mark.parametrize("loop", ["scan", "unroll"])
def test_forward_is_the_same_with_and_without_the_kernel(base, loop):
    """Tied and untied heads, biases, both layer loops: logits equal to float32 rounding,
    the kernel in the program where it applies and nowhere under "xla"."""
    runs = {mm: _forward_pair(base.replace(layer_loop=loop, matmul=mm), (2, 3))
            for mm in ("xla", "auto")}
    for a, b in zip(runs["xla"][:2], runs["auto"][:2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert kernels.TARGET in runs["auto"][2]
    assert kernels.TARGET not in runs["xla"][2]
    # matmul weights, and the head (tied: the embedding transposed; untied: lm_head)
    n_calls = runs["auto"][2].count(f"@{kernels.TARGET}") or runs["auto"][2].count(kernels.TARGET)
    assert n_calls >= 2


@needs_kernel
def test_many_rows_run_xla_dots():
    cfg = TINY_LLAMA.replace(matmul="auto")
    params = tr.arrange_layers(tr.init_params(jax.random.PRNGKey(0), cfg), cfg)
    toks = jnp.ones((1, kernels.MAX_ROWS + 1), jnp.int32)
    text = jax.jit(lambda p, t, c: tr.forward(p, cfg, t, c)).lower(
        params, toks, tr.init_cache(cfg, 1, 32)).as_text()
    assert kernels.TARGET not in text


_NO_COMPILER = textwrap.dedent("""
    import warnings, jax, jax.numpy as jnp, numpy as np
    from specsim.errors import InvalidArgument
    from specsim.models import kernels, transformer as tr
    from specsim.models.config import TINY_LLAMA
    assert not kernels.available()
    assert "failed" in kernels.unavailable_reason(), kernels.unavailable_reason()
    cfg = TINY_LLAMA.replace(matmul="auto")
    params = tr.arrange_layers(tr.init_params(jax.random.PRNGKey(0), cfg), cfg)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out, _ = jax.jit(lambda p, t, c: tr.forward(p, cfg, t, c))(
            params, jnp.ones((1, 2), jnp.int32), tr.init_cache(cfg, 1, 16))
    assert np.isfinite(np.asarray(out)).all()
    assert any("unavailable" in str(w.message) for w in seen), [str(w.message) for w in seen]
    try:
        kernels.use_kernel("kernel", 1, "float32")
    except InvalidArgument as e:
        assert "unavailable" in str(e)
    else:
        raise AssertionError("matmul='kernel' ran without a kernel")
    import os
    left = [p for p in os.listdir(os.path.join(os.environ["SPECSIM_CACHE"], "kernels"))]
    assert left == [], left          # no half-written library
    print("ok")
""")


def test_a_failed_build_falls_back_to_xla_with_a_warning(tmp_path):
    env = dict(os.environ, CXX="false", SPECSIM_CACHE=str(tmp_path), JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", _NO_COMPILER], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


@needs_kernel
@pytest.mark.parametrize("M, K, N", [(1, 576, 960), (5, 100, 37), (7, 48, 160), (3, 19, 45)])
def test_int8_products_match_the_dequantised_oracle(M, K, N):
    """int8 per output channel: (x @ q) * scale from the int8 bytes, against float64 x @ ŵ."""
    from specsim.models.quantize import quantize_weight
    rng = np.random.default_rng(K + N)
    x = rng.standard_normal((M, K)).astype(np.float32)
    qw = quantize_weight(rng.standard_normal((3, K, N)).astype(np.float32), 8)
    f = jax.jit(kernels.small_matmul_int8)
    for layer in (0, 2, 5):
        got = np.asarray(f(x, qw, layer))
        li = min(layer, 2)
        w_hat = np.asarray(qw.values[li], np.float64) * np.asarray(qw.scales[li], np.float64)
        np.testing.assert_allclose(got, x.astype(np.float64) @ w_hat, rtol=1e-5,
                                   atol=2e-6 * np.sqrt(K) * np.abs(w_hat).max())
    one = np.asarray(jax.jit(kernels.small_matmul_int8)(x[:1], type(qw)(
        qw.values[1], qw.scales[1], 8, K)))
    np.testing.assert_array_equal(one, np.asarray(f(x, qw, 1))[:1])


@needs_kernel
def test_int8_kernel_takes_only_per_channel_int8_and_differentiates_in_x():
    from specsim.models.quantize import quantize_weight
    rng = np.random.default_rng(4)
    w = rng.standard_normal((32, 24)).astype(np.float32)
    assert kernels.takes_quantized(quantize_weight(w, 8))
    for other in (quantize_weight(w, 8, group_size=16), quantize_weight(w, 4, group_size=16)):
        assert not kernels.takes_quantized(other)
        with pytest.raises(InvalidArgument, match="one scale per output column"):
            kernels.small_matmul_int8(jnp.ones((1, 32)), other)
    qw = quantize_weight(w, 8)
    x = jnp.asarray(rng.standard_normal((2, 32)).astype(np.float32))
    w_hat = qw.values.astype(jnp.float32) * qw.scales
    g = jax.grad(lambda x: jnp.sum(jnp.sin(kernels.small_matmul_int8(x, qw))))(x)
    g_ref = jax.grad(lambda x: jnp.sum(jnp.sin(x @ w_hat)))(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_ref), rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize("base", [TINY_LLAMA, TINY_GPT2], ids=lambda c: c.name)
@pytest.mark.parametrize("loop", ["scan", "unroll"])
def test_an_int8_model_runs_the_int8_kernel_and_gives_the_same_logits(base, loop):
    from specsim.models.quantize import quantize_params
    texts, outs = {}, {}
    for mm in ("xla", "auto"):
        cfg = base.replace(layer_loop=loop, matmul=mm)
        params = tr.arrange_layers(quantize_params(
            tr.init_params(jax.random.PRNGKey(0), cfg), cfg, 8, head=True), cfg)
        toks = jnp.asarray([[5, 7, 11]], jnp.int32)
        f = jax.jit(lambda p, t, c: tr.forward(p, cfg, t, c))
        outs[mm] = np.asarray(f(params, toks, tr.init_cache(cfg, 1, 16))[0])
        texts[mm] = f.lower(params, toks, tr.init_cache(cfg, 1, 16)).as_text()
    np.testing.assert_allclose(outs["auto"], outs["xla"], rtol=1e-5, atol=1e-5)
    assert f"@{kernels.TARGET_INT8}(" in texts["auto"]
    assert f"@{kernels.TARGET_INT8}(" not in texts["xla"]
    # every matmul weight and the head: none left to a dequantising XLA dot
    assert f"@{kernels.TARGET}(" not in texts["auto"]
