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
from specsim.models import attention, kernels, transformer as tr
from specsim.models.config import TINY_GPT2, TINY_LLAMA, TINY_QWEN2
from shared_cache import shared_cache_env

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


def run_without_a_compiler(script: str, cache) -> None:
    """Run ``script`` in a fresh Python whose C++ compiler fails (CXX=false) and whose
    specsim cache is ``cache`` (so no kernel library is built yet); it must exit 0 and
    print "ok" last."""
    env = dict(os.environ, CXX="false", SPECSIM_CACHE=str(cache), JAX_PLATFORMS="cpu")
    # the eager ops of building and quantising the model are read back, not compiled again
    env.update(shared_cache_env())
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


def test_a_failed_build_falls_back_to_xla_with_a_warning(tmp_path):
    run_without_a_compiler(_NO_COMPILER, tmp_path)


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
    """Grouped formats go to `small_matmul_quantized` (tests/test_kernels_int4.py)."""
    from specsim.models.quantize import quantize_weight
    rng = np.random.default_rng(4)
    w = rng.standard_normal((32, 24)).astype(np.float32)
    assert kernels.takes_quantized(quantize_weight(w, 8))
    for other in (quantize_weight(w, 8, group_size=16), quantize_weight(w, 4, group_size=16)):
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


# ---- attention over the cache in place ---------------------------------------------------

def _attention_oracle(q, k_all, v_all, layer, positions):
    """float64 masked softmax attention of q [B, T, H, E] over k_all[layer] [B, S, G, E]:
    query t of row b attends slots 0..positions[b, t]; [B, T, H*E]."""
    B, T, H, E = q.shape
    lay = min(max(layer, 0), k_all.shape[0] - 1)                # clamped as k_all[layer]
    k, v = k_all[lay].astype(np.float64), v_all[lay].astype(np.float64)
    S, G = k.shape[1], k.shape[2]
    out = np.empty((B, T, H, E))
    for b in range(B):
        for t in range(T):
            n = min(positions[b, t] + 1, S)
            for h in range(H):
                g = h // (H // G)
                s = k[b, :n, g] @ q[b, t, h].astype(np.float64) / np.sqrt(E)
                w = np.exp(s - s.max())
                out[b, t, h] = (w / w.sum()) @ v[b, :n, g]
    return out.reshape(B, T, H * E)


@needs_kernel
@pytest.mark.parametrize("B, T, H, G, E, S, layer", [
    (1, 1, 9, 3, 64, 512, 0),      # SmolLM2's heads, a decode step
    (8, 5, 9, 3, 64, 40, 1),       # a verify pass at batch 8
    (2, 3, 6, 2, 10, 21, 2),       # head size not a multiple of 8
    (3, 2, 4, 4, 8, 9, 7),         # no grouping; the layer clamped as k_all[layer] is
    (1, 16, 8, 1, 24, 70, 0),      # one kv head, the most new tokens "auto" sends
])
def test_cache_attention_matches_a_float64_oracle(B, T, H, G, E, S, layer):
    rng = np.random.default_rng(B * 100 + T)
    L = 3
    q = rng.standard_normal((B, T, H, E)).astype(np.float32)
    k = rng.standard_normal((L, B, S, G, E)).astype(np.float32)
    v = rng.standard_normal((L, B, S, G, E)).astype(np.float32)
    # each row its own context. Row 0 stops short of the last slot, which holds garbage
    # that only a read past its position would see; with B > 1 the last row attends past
    # the end (every slot).
    start = rng.integers(0, max(1, S - 1 - T), B)
    if B > 1:
        start[-1] = S + 4
    positions = (start[:, None] + np.arange(T)[None]).astype(np.int32)
    assert positions[0].max() < S - 1
    k[:, 0, -1] = 1e4
    v[:, 0, -1] = 1e4
    got = np.asarray(kernels.cache_attention(q, k, v, layer, positions))
    want = _attention_oracle(q, k, v, layer, positions)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    traced = jax.jit(kernels.cache_attention)(q, k, v, jnp.int32(layer), positions)
    np.testing.assert_array_equal(np.asarray(traced), got)


@needs_kernel
def test_a_querys_attention_does_not_depend_on_the_other_queries():
    """A verify pass and a decode step agree bit for bit: the query at a position gives the
    same floats alone, with later queries, and with other rows beside it."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((4, 5, 9, 64)).astype(np.float32)
    k = rng.standard_normal((2, 4, 300, 3, 64)).astype(np.float32)
    v = rng.standard_normal((2, 4, 300, 3, 64)).astype(np.float32)
    positions = (np.array([[10], [100], [250], [37]]) + np.arange(5)[None]).astype(np.int32)
    full = np.asarray(kernels.cache_attention(q, k, v, 1, positions))
    for t in range(5):
        one = kernels.cache_attention(q[:, t:t + 1], k, v, 1, positions[:, t:t + 1])
        np.testing.assert_array_equal(np.asarray(one)[:, 0], full[:, t])
    row = kernels.cache_attention(q[2:3], k[:, 2:3], v[:, 2:3], 1, positions[2:3])
    np.testing.assert_array_equal(np.asarray(row)[0], full[2])
    # row 0 alone (few slots) is one part of the pool's work; beside the others, two
    short = kernels.cache_attention(q[:1], k[:, :1], v[:, :1], 1, positions[:1])
    np.testing.assert_array_equal(np.asarray(short)[0], full[0])


@needs_kernel
def test_a_query_with_no_slot_to_attend_is_nan_as_the_masked_softmax():
    q = np.ones((2, 1, 2, 8), np.float32)
    k = np.ones((1, 2, 4, 1, 8), np.float32)
    got = np.asarray(kernels.cache_attention(q, k, k, 0, np.array([[-1], [0]], np.int32)))
    assert np.isnan(got[0]).all() and np.isfinite(got[1]).all()
    want = np.asarray(attention.attention_grouped(jnp.asarray(q), jnp.asarray(k[0]), jnp.asarray(k[0]),
                                            jnp.asarray([[-1], [0]]), TINY_LLAMA.replace(
                                                n_heads=2, n_kv_heads=1, head_dim=8)))
    assert np.isnan(want[0]).all()


def test_cache_attention_bad_arguments_are_clear_errors():
    q = jnp.ones((1, 2, 4, 8), jnp.float32)
    k = jnp.ones((2, 1, 16, 2, 8), jnp.float32)
    pos = jnp.zeros((1, 2), jnp.int32)
    if not kernels.available():
        pytest.skip("no kernel")
    with pytest.raises(InvalidArgument, match=r"\[L, B, S, G, E\] alike"):
        kernels.cache_attention(q, k, k[:, :, :8], 0, pos)
    with pytest.raises(InvalidArgument, match="does not fit the cache"):
        kernels.cache_attention(q[..., :4], k, k, 0, pos)
    with pytest.raises(InvalidArgument, match="does not fit the cache"):
        kernels.cache_attention(jnp.ones((1, 2, 3, 8), jnp.float32), k, k, 0, pos)
    with pytest.raises(InvalidArgument, match="positions must be integer"):
        kernels.cache_attention(q, k, k, 0, jnp.zeros((1, 3), jnp.int32))
    with pytest.raises(InvalidArgument, match="float32"):
        kernels.cache_attention(q.astype(jnp.bfloat16), k, k, 0, pos)


def _tree_oracle(q, k, v, layer, start, rows):
    """float64 attention of query t of row b over the slots before start[b] and start[b]
    + u where rows[b, t, u] (below S), by hand."""
    B, T, H, E = q.shape
    L, _, S, G, _ = k.shape
    k, v = k[min(max(layer, 0), L - 1)].astype(np.float64), v[min(max(layer, 0), L - 1)]
    out = np.zeros((B, T, H, E))
    for b in range(B):
        for t in range(T):
            sl = [s for s in range(min(max(start[b], 0), S))] + \
                 [start[b] + u for u in range(rows.shape[2]) if rows[b, t, u] and start[b] + u < S]
            for h in range(H):
                g = h // (H // G)
                s = k[b, sl, g] @ q[b, t, h].astype(np.float64) / np.sqrt(E)
                w = np.exp(s - s.max())
                out[b, t, h] = (w / w.sum()) @ v[b, sl, g]
    return out.reshape(B, T, H * E)


@needs_kernel
@pytest.mark.parametrize("B, T, H, G, E, S, layer", [
    (1, 9, 9, 3, 64, 64, 1),       # SmolLM2's heads, a tree of 8 nodes below its root
    (3, 5, 6, 2, 10, 21, 0),       # head size not a multiple of 8; a row running past S
])
def test_tree_attention_matches_a_float64_oracle_and_a_decode_step_bit_for_bit(
        B, T, H, G, E, S, layer):
    """Each node attends its context and its ancestors (random masks here, self always);
    its output is the float64 oracle's, and, bit for bit, `cache_attention`'s for one
    query whose slots are the same keys and values moved to contiguous slots, as a
    decode step sees an accepted path."""
    rng = np.random.default_rng(B * 10 + T)
    q = rng.standard_normal((B, T, H, E)).astype(np.float32)
    k = rng.standard_normal((2, B, S, G, E)).astype(np.float32)
    v = rng.standard_normal((2, B, S, G, E)).astype(np.float32)
    start = rng.integers(1, S - T, B).astype(np.int32)
    if B > 1:
        start[-1] = S - 2                      # nodes past S are dropped
    rows = (rng.random((B, T, T)) < 0.4) | np.eye(T, dtype=bool)[None]
    got = np.asarray(kernels.tree_attention(q, k, v, layer, start, rows))
    np.testing.assert_allclose(got, _tree_oracle(q, k, v, layer, start, rows),
                               rtol=2e-5, atol=2e-5)
    traced = jax.jit(kernels.tree_attention)(q, k, v, jnp.int32(layer), start, rows)
    np.testing.assert_array_equal(np.asarray(traced), got)
    for b in range(B):
        for t in range(T):
            sl = list(range(start[b])) + [start[b] + u for u in range(T)
                                          if rows[b, t, u] and start[b] + u < S]
            kk, vv = k.copy(), v.copy()
            kk[:, b, :len(sl)], vv[:, b, :len(sl)] = k[:, b, sl], v[:, b, sl]
            one = kernels.cache_attention(q[:, t:t + 1], kk, vv, layer,
                                          np.full((B, 1), len(sl) - 1, np.int32))
            np.testing.assert_array_equal(np.asarray(one)[b, 0], got[b, t])


def test_tree_attention_bad_arguments_are_clear_errors():
    if not kernels.available():
        pytest.skip("no kernel")
    q = jnp.ones((2, 3, 4, 8), jnp.float32)
    k = jnp.ones((1, 2, 16, 2, 8), jnp.float32)
    start, rows = jnp.zeros((2,), jnp.int32), jnp.ones((2, 3, 3), bool)
    with pytest.raises(InvalidArgument, match=r"tree_attention takes q"):
        kernels.tree_attention(q, k, k[:, :, :8], 0, start, rows)
    with pytest.raises(InvalidArgument, match="start must be integer"):
        kernels.tree_attention(q, k, k, 0, jnp.zeros((3,), jnp.int32), rows)
    with pytest.raises(InvalidArgument, match="rows must be bool"):
        kernels.tree_attention(q, k, k, 0, start, rows.astype(jnp.int32))
    with pytest.raises(InvalidArgument, match="rows must be bool"):
        kernels.tree_attention(q, k, k, 0, start, rows[:, :2])


@needs_kernel
def test_when_auto_attends_in_place(monkeypatch):
    assert kernels.use_attention_kernel("auto", 1, "float32")
    assert kernels.use_attention_kernel("auto", 500, "float32")     # a prefill too
    with pytest.raises(InvalidArgument, match="new_tokens must be an integer >= 1"):
        kernels.use_attention_kernel("auto", 0, "float32")
    assert kernels.use_attention_kernel("kernel", 500, "float32")
    assert not kernels.use_attention_kernel("xla", 1, "float32")
    monkeypatch.setenv(kernels.ATTENTION_SWITCH, "0")       # the attention alone off
    assert not kernels.use_attention_kernel("auto", 1, "float32")
    assert kernels.use_kernel("auto", 1, "float32")
    monkeypatch.setenv(kernels.ATTENTION_SWITCH, "1")
    monkeypatch.setenv(kernels.ENV_SWITCH, "0")             # every kernel off
    assert not kernels.use_attention_kernel("auto", 1, "float32")


@needs_kernel
@pytest.mark.parametrize("base", [TINY_LLAMA, TINY_GPT2], ids=lambda c: c.name)
def test_forward_attends_in_place_and_differentiates_as_xla(base, monkeypatch):
    """The kernel in a decode step's program and in a longer prefill's, the same logits
    as XLA's attention, and the same gradients (the kernel's derivatives are XLA's)."""
    cfg = base.replace(matmul="auto")
    params = tr.arrange_layers(tr.init_params(jax.random.PRNGKey(1), cfg), cfg)
    toks = jnp.asarray([[5, 7, 11, 2], [3, 9, 4, 8]], jnp.int32)

    def loss(p, t):
        logits, _ = tr.forward(p, cfg, t, tr.init_cache(cfg, t.shape[0], 24))
        return jnp.sum(jax.nn.log_softmax(logits)[..., 1])

    def run():
        jax.clear_caches()
        text = jax.jit(loss).lower(params, toks).as_text()
        long = jax.jit(loss).lower(params, jnp.ones((1, 17), jnp.int32)).as_text()
        return (float(jax.jit(loss)(params, toks)),
                jax.jit(jax.grad(loss))(params, toks), text, long)
    ours = run()
    monkeypatch.setenv(kernels.ATTENTION_SWITCH, "0")
    plain = run()
    assert kernels.TARGET_ATTENTION in ours[2] and kernels.TARGET_ATTENTION not in plain[2]
    assert kernels.TARGET_ATTENTION in ours[3] and kernels.TARGET_ATTENTION not in plain[3]
    np.testing.assert_allclose(ours[0], plain[0], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(ours[1]), jax.tree.leaves(plain[1])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
