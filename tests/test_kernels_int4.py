"""specsim's CPU matmul kernel over grouped quantised weights (int4 packed two per byte,
grouped int8; `specsim.models.kernels.small_matmul_quantized`, ``grouped_matmul.cc``),
with fp32 activations and with int8 activations (x rounded to int8 per group).

Oracles: float64 x @ ŵ with ŵ unpacked from the stored bytes here, independently of
`specsim.models.quantize` (int8 activations: x̂ @ ŵ with x̂ rounded here in NumPy's
float32); a row's result alone against the same row among many (bit for bit); the VNNI
path against the portable loop (bit for bit); XLA's dequantising path in `forward`; the
fp32 target's greedy output for an int4 self-draft."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from test_kernels import run_without_a_compiler

from specsim import models
from specsim.decode import generate_autoregressive, generate_speculative
from specsim.drafters import quantized_self_drafter
from specsim.errors import InvalidArgument
from specsim.models import kernels, transformer as tr
from specsim.models.config import TINY_GPT2, TINY_LLAMA, TINY_QWEN2
from specsim.models.quantize import (QuantizedWeight, dequantize, quantize_params,
                                     quantize_weight)

HAS_COMPILER = kernels._compiler() is not None
needs_kernel = pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the kernel")


def _w_hat64(qw: QuantizedWeight) -> np.ndarray:
    """ŵ in float64 from the stored bytes: nibbles unpacked with NumPy (low nibble row 2i,
    high nibble row 2i+1, two's complement), each group's rows times its scales, plus its
    offsets where the format has them."""
    v = np.asarray(qw.values)
    if qw.bits == 4:
        u = v.view(np.uint8).astype(np.int64)
        lo, hi = u & 0x0F, u >> 4
        lo, hi = np.where(lo > 7, lo - 16, lo), np.where(hi > 7, hi - 16, hi)
        q = np.empty((*v.shape[:-2], 2 * v.shape[-2], v.shape[-1]), np.int64)
        q[..., 0::2, :], q[..., 1::2, :] = lo, hi
    else:
        q = v.astype(np.int64)
    w = q * np.repeat(np.asarray(qw.scales, np.float64), qw.group_size, axis=-2)
    if qw.offsets is not None:
        w = w + np.repeat(np.asarray(qw.offsets, np.float64), qw.group_size, axis=-2)
    return w


def _x_hat64(x: np.ndarray, g: int) -> np.ndarray:
    """x [M, K] rounded to int8 per group of g as the format says, in NumPy's float32
    (amax, 127 / amax, the product and its round-half-even), returned as float64
    xq * (amax / 127)."""
    xg = np.asarray(x, np.float32).reshape(x.shape[0], -1, g)
    amax = np.abs(xg).max(-1, keepdims=True)
    inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    xq = np.rint(xg * inv)
    assert np.abs(xq).max() <= 127
    return (xq.astype(np.float64) * (amax / np.float32(127)).astype(np.float64)).reshape(x.shape)


@needs_kernel
@pytest.mark.parametrize("bits, group_size, K, N, asym", [
    (4, 32, 576, 960, False), (4, 64, 1536, 576, False), (4, 2, 40, 37, False),
    (4, 8, 48, 16, False), (4, 6, 30, 5, False), (8, 32, 576, 960, False),
    (8, 5, 40, 19, False), (8, 12, 48, 33, False), (8, 1, 16, 18, False),
    (4, 32, 576, 960, True), (4, 6, 30, 5, True), (8, 5, 40, 19, True),
    (8, None, 48, 33, True)])
@pytest.mark.parametrize("M", [1, 3, 6, 8])
def test_grouped_products_match_a_float64_oracle(bits, group_size, K, N, asym, M):
    """Symmetric and asymmetric (offsets) formats, every row count up to a register
    block and past it, stacked layers read in place (and clamped)."""
    rng = np.random.default_rng(bits * 1000 + K + N + M)
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_t(3, (3, K, N)).astype(np.float32) + (0.7 if asym else 0.0)
    qw = quantize_weight(w, bits, group_size, asymmetric=asym)
    w_hat = _w_hat64(qw)
    f = jax.jit(kernels.small_matmul_quantized)
    for layer in (0, 2, -1, 7):                     # out of range clamps, as w[i] under jit
        got = np.asarray(f(x, qw, layer))
        want = x.astype(np.float64) @ w_hat[int(np.clip(layer, 0, 2))]
        assert got.shape == (M, N) and got.dtype == np.float32
        scale = np.abs(x).max() * np.abs(w_hat).max()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=4e-7 * K * scale)
        # the error is the float rounding of a sum, far below the format's own step
        assert np.abs(got - want).max() < 1e-3 * np.abs(want).max()


@needs_kernel
@pytest.mark.parametrize("bits, group_size, K, N, asym", [
    (4, 32, 576, 960, False), (4, 32, 1536, 200, True), (4, 2, 40, 37, False),
    (4, 6, 30, 69, True), (4, 8, 48, 16, False), (8, 32, 576, 96, False), (8, 5, 40, 19, True),
    (8, 12, 48, 133, False), (8, 1, 16, 18, False), (8, None, 48, 33, False)])
@pytest.mark.parametrize("M", [1, 2, 3, 8])
def test_int8_activation_products_match_a_float64_oracle(bits, group_size, K, N, asym, M):
    """x rounded to int8 per group, then x̂ @ ŵ: the kernel's integer sums and fp32
    epilogue against float64, every row count (one and two rows take the wide blocks),
    groups whose rows do not fill the four bytes of a VNNI lane, columns past the blocks;
    the portable loop gives the same bits as the VNNI path."""
    rng = np.random.default_rng(bits * 1000 + K + N + M + 7)
    x = rng.standard_normal((M, K)).astype(np.float32)
    if M > 1 or (group_size or K) < K:
        x[-1, :group_size or K] = 0.0              # an all-zero group: scale 0, xq 0
    w = rng.standard_t(3, (2, K, N)).astype(np.float32) + (0.7 if asym else 0.0)
    qw = quantize_weight(w, bits, group_size, asymmetric=asym, activations="int8")
    w_hat, x_hat = _w_hat64(qw), _x_hat64(x, qw.group_size)
    f = jax.jit(kernels.small_matmul_quantized, static_argnames="portable")
    for layer in (1, 5):
        got = np.asarray(f(x, qw, layer))
        want = x_hat @ w_hat[1]
        scale = np.abs(x).max() * np.abs(w_hat).max()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7 * K * scale)
        np.testing.assert_array_equal(np.asarray(f(x, qw, layer, portable=True)), got)
    # far from x @ ŵ only by the rounding of x (about 1/254 of a group's max |x|)
    assert np.abs(got - x @ w_hat[1]).max() < 0.02 * np.abs(x @ w_hat[1]).max()


@needs_kernel
@pytest.mark.parametrize("bits, group_size, asym, act", [
    (4, 32, False, "fp32"), (4, 4, False, "fp32"), (8, 16, False, "fp32"),
    (8, 5, False, "fp32"), (4, 32, True, "fp32"), (8, 5, True, "fp32"),
    (4, 32, False, "int8"), (4, 10, True, "int8"), (8, 32, False, "int8"), (8, 5, True, "int8")])
def test_a_rows_result_does_not_depend_on_the_row_count(bits, group_size, asym, act):
    """What makes a verify pass agree with a decode step bit for bit (int8 activations:
    one and two rows take the wide blocks, more the middle ones, past six in halves)."""
    rng = np.random.default_rng(bits + group_size)
    x = rng.standard_normal((11, 160)).astype(np.float32)
    qw = quantize_weight(rng.standard_normal((2, 160, 200)).astype(np.float32), bits,
                         group_size, asymmetric=asym, activations=act)
    f = jax.jit(lambda x: kernels.small_matmul_quantized(x, qw, 1))
    full = np.asarray(f(x))
    for m in (1, 2, 3, 4, 5, 6, 7, 8):
        np.testing.assert_array_equal(np.asarray(f(x[:m])), full[:m])
    np.testing.assert_array_equal(np.asarray(f(x[4:5])), full[4:5])


_PRODUCT = textwrap.dedent("""
    import sys, numpy as np
    from specsim.models import kernels
    from specsim.models.quantize import quantize_weight
    rng = np.random.default_rng(0)
    qw = quantize_weight(rng.standard_normal((2, 576, 4099)).astype(np.float32), 4, 32)
    x = rng.standard_normal((5, 576)).astype(np.float32)
    np.save(sys.argv[1], np.asarray(kernels.small_matmul_quantized(x, qw, 1)))
""")


@needs_kernel
def test_a_rows_result_does_not_depend_on_the_threads(tmp_path):
    """The columns split over the pool's threads, each part in its own panels: one thread
    (``SPECSIM_KERNEL_THREADS=1``) gives the same bits as the pool."""
    outs = []
    for threads in ("1", "all"):
        env = dict(os.environ, SPECSIM_KERNEL_THREADS=threads, JAX_PLATFORMS="cpu")
        path = tmp_path / f"{threads}.npy"
        done = subprocess.run([sys.executable, "-c", _PRODUCT, str(path)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        outs.append(np.load(path))
    np.testing.assert_array_equal(outs[0], outs[1])


@needs_kernel
def test_two_dimensional_weights_leading_axes_and_per_column_int8():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 64)).astype(np.float32)
    w = rng.standard_normal((64, 40)).astype(np.float32)
    for qw in (quantize_weight(w, 4, 16), quantize_weight(w, 8, 8), quantize_weight(w, 8)):
        got = np.asarray(jax.jit(kernels.small_matmul_quantized)(x, qw))
        assert got.shape == (2, 3, 40)
        np.testing.assert_allclose(got, x.astype(np.float64) @ _w_hat64(qw), rtol=1e-5,
                                   atol=1e-4)
    per_column = quantize_weight(w, 8)        # one scale per column: the int8 kernel, as before
    np.testing.assert_array_equal(kernels.small_matmul_quantized(x, per_column),
                                  kernels.small_matmul_int8(x, per_column))


@needs_kernel
@pytest.mark.parametrize("bits, group_size, asym", [(4, 8, False), (8, 4, False), (4, 8, True)])
def test_derivatives_and_vmap_follow_the_dequantised_product(bits, group_size, asym):
    rng = np.random.default_rng(6)
    qw = quantize_weight(rng.standard_normal((2, 32, 24)).astype(np.float32), bits, group_size,
                         asymmetric=asym)
    x = jnp.asarray(rng.standard_normal((3, 32)).astype(np.float32))

    def loss(mm):
        return lambda x, s, o: jnp.sum(jnp.sin(mm(x, QuantizedWeight(qw.values, s, bits,
                                                                      group_size, o))))
    args = (x, qw.scales, qw.offsets)
    ours = jax.grad(loss(lambda x, q: kernels.small_matmul_quantized(x, q, 1)),
                    argnums=(0, 1, 2))(*args)
    plain = jax.grad(loss(lambda x, q: x @ dequantize(q)[1]), argnums=(0, 1, 2))(*args)
    for a, b in zip(ours, plain):
        if b is None:                                  # no offsets: nothing to differentiate
            assert a is None
            continue
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)
    xs = jnp.stack([x, 2 * x])
    got = jax.vmap(lambda x: kernels.small_matmul_quantized(x, qw, 0))(xs)
    np.testing.assert_allclose(np.asarray(got), np.asarray(xs @ dequantize(qw)[0]),
                               rtol=1e-5, atol=1e-5)


def test_bad_group_sizes_and_shapes_are_clear_errors():
    rng = np.random.default_rng(7)
    q4 = quantize_weight(rng.standard_normal((32, 24)).astype(np.float32), 4, 8)
    q8 = quantize_weight(rng.standard_normal((32, 24)).astype(np.float32), 8, 8)
    x = jnp.ones((2, 32), jnp.float32)
    bad = [
        (QuantizedWeight(q8.values, q8.scales, 8, 5), r"qw.group_size must be a positive "
                                                      r"integer dividing the input dimension 32"),
        (QuantizedWeight(q4.values, q4.scales, 4, 3), r"qw.group_size .* even for 4 bits"),
        (QuantizedWeight(q8.values, q8.scales, 8, 0), r"qw.group_size"),
        (QuantizedWeight(q8.values, q8.scales, 8, 16), r"qw.scales must be \[\.\.\., "
                                                       r"Din/group_size, Dout\] = \[2, 24\]"),
        (QuantizedWeight(q4.values, q4.scales[:, :20], 4, 8), r"qw.scales must be"),
        (QuantizedWeight(q8.values, q8.scales, 3, 8), r"qw.bits must be one of \(4, 8\)"),
        (QuantizedWeight(q8.values.astype(jnp.int32), q8.scales, 8, 8), r"qw.values must be int8"),
        (QuantizedWeight(q8.values[None, None], q8.scales[None, None], 8, 8), r"qw.values"),
        (jnp.ones((32, 24)), r"qw must be a QuantizedWeight"),
        (QuantizedWeight(q4.values, q4.scales, 4, 8, q4.scales[:2]), r"qw.offsets must be None "
                                                                     r"or float32 like"),
        (QuantizedWeight(q4.values, q4.scales, 4, 8, q4.scales.astype(jnp.bfloat16)),
         r"qw.offsets must be None or float32"),
    ]
    for qw, match in bad:
        assert not kernels.takes_quantized(qw)
        with pytest.raises(InvalidArgument, match=match):
            kernels.small_matmul_quantized(x, qw)
    assert kernels.takes_quantized(q4) and kernels.takes_quantized(q8)
    with pytest.raises(InvalidArgument, match=r"qw.activations|activations must be one of"):
        kernels.small_matmul_quantized(x, QuantizedWeight(q4.values, q4.scales, 4, 8,
                                                          activations="int4"))
    with pytest.raises(InvalidArgument, match=r"activations must be one of \('fp32', 'int8'\)"):
        quantize_weight(np.ones((32, 4), np.float32), 4, 8, activations="fp16")
    with pytest.raises(InvalidArgument, match="at most 65536 inputs"):
        quantize_weight(np.ones((2 * 65536, 1), np.float32), 8, 2 * 65536, activations="int8")
    with pytest.raises(InvalidArgument, match=r"x's last axis \(31\) must equal qw's input"):
        kernels.small_matmul_quantized(jnp.ones((2, 31), jnp.float32), q4)
    with pytest.raises(InvalidArgument, match="float32"):
        kernels.small_matmul_quantized(x.astype(jnp.bfloat16), q4)
    with pytest.raises(InvalidArgument, match=r"stacked \[L, K, N\] with a layer"):
        kernels.small_matmul_quantized(x, q4, 0)
    with pytest.raises(InvalidArgument, match="one scale per output column"):
        kernels.small_matmul_int8(x, q8)            # the per-column kernel keeps its format


def _lowered(params, cfg, toks):
    f = jax.jit(lambda p, t, c: tr.forward(p, cfg, t, c))
    cache = tr.init_cache(cfg, toks.shape[0], 16)
    return np.asarray(f(params, toks, cache)[0]), f.lower(params, toks, cache).as_text()


# each loop with each format (the weights' layouts the kernel reads), and each
# architecture's matrices (Qwen2's QKV bias, GPT-2's biased fused matrices) under one of
# them: a full grid (12 cases) repeats the same paths
@needs_kernel
@pytest.mark.parametrize("base, loop, bits, asym, act", [
    (TINY_LLAMA, "scan", 4, False, "fp32"), (TINY_LLAMA, "unroll", 8, False, "fp32"),
    (TINY_QWEN2, "scan", 8, False, "fp32"), (TINY_GPT2, "unroll", 4, False, "fp32"),
    (TINY_QWEN2, "scan", 4, True, "fp32"), (TINY_LLAMA, "scan", 4, False, "int8"),
    (TINY_QWEN2, "unroll", 4, True, "int8")],
    ids=lambda v: getattr(v, "name", str(v)))
def test_a_grouped_model_runs_the_kernel_and_gives_xlas_logits(base, loop, bits, asym, act):
    """Every layer matrix and the quantised head read by the grouped kernel under "auto"
    (no dequantising XLA dot left), none under "xla"; logits equal to fp32 rounding, at a
    decode step (1 row) and a verify width (2 x 3 rows); with int8 activations XLA's path
    rounds x as the kernel does (`quantize.quantize_activations`)."""
    group_size = 4
    for shape in ((1, 1), (2, 3)):
        outs, texts = {}, {}
        for mm in ("xla", "auto"):
            cfg = base.replace(layer_loop=loop, matmul=mm)
            params = tr.arrange_layers(quantize_params(
                tr.init_params(jax.random.PRNGKey(0), cfg), cfg, bits, group_size, head=True,
                asymmetric=asym, activations=act),
                cfg)
            toks = jnp.asarray(np.arange(5, 5 + shape[0] * shape[1]).reshape(shape), jnp.int32)
            outs[mm], texts[mm] = _lowered(params, cfg, toks)
        np.testing.assert_allclose(outs["auto"], outs["xla"], rtol=1e-5, atol=1e-5)
        assert f"@{kernels.TARGET_GROUPED}(" in texts["auto"]
        assert f"@{kernels.TARGET_GROUPED}(" not in texts["xla"]
        assert f"@{kernels.TARGET}(" not in texts["auto"]
        assert "dot_general" not in texts["auto"], "a matmul left to XLA"


@needs_kernel
def test_load_int4_and_the_int4_self_draft_run_the_kernel():
    model = models.load("tiny-llama", quantize="int4", group_size=4)
    drafter = quantized_self_drafter(models.load("tiny-llama"), bits=4, group_size=4)
    for params, cfg in ((model.params, model.cfg), (drafter.params, drafter.cfg)):
        _, text = _lowered(params, cfg, jnp.asarray([[5]], jnp.int32))
        assert f"@{kernels.TARGET_GROUPED}(" in text


@needs_kernel
@pytest.mark.parametrize("k, asym, activations", [(2, False, "fp32"), (4, False, "fp32"),
                                                  (3, True, "fp32"), (3, False, "int8")])
def test_greedy_output_of_an_int4_self_draft_equals_the_fp32_targets(k, asym, activations):
    """The target fp32 (its weights scaled for peaked distributions), the draft its int4
    self in groups of 4 by the kernel (x as it is, or rounded to int8): drafts are
    rejected (α < 1), yet the output is the target's greedy output token for token."""
    cfg = TINY_LLAMA.replace(layer_loop="scan", eos_token_id=53)
    params = jax.tree_util.tree_map_with_path(         # norm scales as they are
        lambda path, a: a if "norm" in str(path[-1]) else a * 12.0,
        tr.arrange_layers(tr.init_params(jax.random.PRNGKey(1), cfg), cfg))
    target = models.Model(cfg, params)
    prompts = [[1, 5, 7, 9, 11], [3, 3], [4, 8, 15, 16, 23, 42, 4, 8, 15, 16, 23]]
    ref = generate_autoregressive(target, prompts, 24)
    drafter = quantized_self_drafter(target, bits=4, group_size=4, asymmetric=asym,
                                     activations=activations)
    assert {w.activations for w in jax.tree_util.tree_leaves(
        drafter.params, is_leaf=lambda a: isinstance(a, QuantizedWeight))
        if isinstance(w, QuantizedWeight)} == {activations}
    res = generate_speculative(target, drafter, prompts, 24, k)
    assert res.tokens == ref.tokens
    assert 0 < res.stats.alpha_per_proposal < 1


_NO_COMPILER = textwrap.dedent("""
    import warnings, jax, jax.numpy as jnp, numpy as np
    from specsim.errors import InvalidArgument
    from specsim.models import kernels, transformer as tr
    from specsim.models.config import TINY_LLAMA
    from specsim.models.quantize import dequantize_params, quantize_params
    assert not kernels.available()
    cfg = TINY_LLAMA.replace(matmul="auto")
    params = tr.init_params(jax.random.PRNGKey(0), cfg)
    outs = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for bits, asym in ((4, False), (8, False), (4, True)):
            qp = tr.arrange_layers(quantize_params(params, cfg, bits, 4, head=True,
                                                   asymmetric=asym), cfg)
            out, _ = jax.jit(lambda p, t, c: tr.forward(p, cfg, t, c))(
                qp, jnp.ones((1, 2), jnp.int32), tr.init_cache(cfg, 1, 16))
            dense = tr.arrange_layers(dequantize_params(qp), cfg)
            want, _ = tr.forward(dense, cfg.replace(matmul="xla"), jnp.ones((1, 2), jnp.int32),
                                 tr.init_cache(cfg, 1, 16))
            np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-5, atol=1e-5)
    msgs = [str(w.message) for w in seen if "unavailable" in str(w.message)]
    assert len(msgs) == 1, msgs
    try:
        kernels.small_matmul_quantized(jnp.ones((1, 8)), qp["lm_head"])
    except InvalidArgument as e:
        assert "unavailable" in str(e)
    else:
        raise AssertionError("the kernel ran without a library")
    print("ok")
""")


def test_without_a_compiler_grouped_weights_fall_back_to_xla_with_one_warning(tmp_path):
    run_without_a_compiler(_NO_COMPILER, tmp_path)
