"""Each term of the iteration cost model against a case computed by hand."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from specsim import iteration_cost as ic
from specsim.errors import InvalidArgument
from specsim.presets import ModelShape, eagle_head_shape, get_shape
from specsim.roofline import Hardware

# A chip with round ceilings: 100 TFLOP/s bf16, 1 TB/s, 100 GB/s links.
HW = Hardware(name="round", peak_flops=(("bfloat16", 1e14),), bandwidth=1e12,
              interconnect_bandwidth=1e11)
PEAK = 1e14 * ic.FLOPS_EFFICIENCY
BW = 1e12 * ic.BANDWIDTH_EFFICIENCY
# Dense toy: L=2, D=64, 4 heads of 16 (2 kv heads), F=128, V=100, untied head.
TOY = ModelShape(name="toy", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16,
                 d_ff=128, vocab_size=100)


def _toy_bytes(n, B=1, S=32, w=2):
    """Weights + gathered embedding rows + KV read (S slots) and written (n) + fp32 logits."""
    L, D, F, V, G, E = 2, 64, 128, 100, 2, 16
    attn = D * 64 + 2 * D * 32 + 64 * D
    weights = L * (attn + 3 * D * F + 2 * D) * w + D * V * w + (B * n * D + D) * w
    kv = 2.0 * L * B * G * E * w * (S + n)
    return weights + kv + 4.0 * B * n * V


def _toy_flops(n, B=1, S=32):
    L, D, F, V, H, E = 2, 64, 128, 100, 4, 16
    N = B * n
    mat = L * 2.0 * N * (D * (64 + 2 * 32) + 64 * D + 3 * D * F) + 2.0 * N * D * V
    attention = L * 4.0 * B * H * n * S * E
    elementwise = L * (2 * 4.0 * N * D + 3.0 * N * (64 + 32) + 5.0 * B * H * n * S
                       + 5.0 * N * F + 2.0 * N * D) + 4.0 * N * D
    return mat + attention + elementwise


def test_expected_experts_by_hand():
    assert ic.expected_experts(8, 2, 1) == pytest.approx(2.0)
    assert ic.expected_experts(8, 2, 2) == pytest.approx(8 * (1 - 0.75 ** 2))   # 3.5
    assert ic.expected_experts(128, 8, 16) == pytest.approx(128 * (1 - (15 / 16) ** 16))
    assert ic.expected_experts(8, 2, 0) == 0.0
    assert ic.expected_experts(8, 2, 10_000) == pytest.approx(8.0)
    with pytest.raises(InvalidArgument, match="experts_per_token"):
        ic.expected_experts(4, 5, 1)


def test_dense_pass_bytes_flops_and_seconds_by_hand():
    c = ic.pass_cost(TOY, HW, n_tokens=3, batch=1, context=32)
    assert c.bytes == pytest.approx(_toy_bytes(3), rel=1e-12)
    assert c.flops == pytest.approx(_toy_flops(3), rel=1e-12)
    assert c.memory_s == pytest.approx(_toy_bytes(3) / BW)
    assert c.compute_s == pytest.approx(_toy_flops(3) / PEAK)
    assert c.allreduce_s == 0.0 and c.layers == 2


def test_tensor_parallel_splits_the_pass_and_adds_two_all_reduces_a_layer():
    one = ic.pass_cost(TOY, HW, n_tokens=3, batch=2, context=32)
    two = ic.pass_cost(TOY, HW, n_tokens=3, batch=2, context=32, tp=2)
    assert two.bytes == pytest.approx(one.bytes / 2) and two.flops == pytest.approx(one.flops / 2)
    # ring: L * 2 all-reduces of B*T*D*2 bytes, 2(p-1)/p of it each way at half the link
    moved = 2 * 2 * 2.0 * (1 / 2) * 2 * 3 * 64 * 2
    assert two.allreduce_s == pytest.approx(moved / (1e11 / 2) + 2 * 2 * ic.ALLREDUCE_LATENCY)


def test_a_mixture_of_experts_pass_reads_the_experts_its_tokens_route_to():
    moe = TOY.replace(name="moe", n_experts=8, experts_per_token=2, d_expert=32)
    one = ic.pass_cost(moe, HW, n_tokens=1, context=32)
    four = ic.pass_cost(moe, HW, n_tokens=4, context=32)
    w, L, D = 2, 2, 64
    per_expert = 3 * D * 32 * w
    read4 = ic.expected_experts(8, 2, 4)
    # bytes differ by the extra experts read, plus the per-token terms of 3 more tokens
    per_token = lambda n: (n * D) * w + 2.0 * L * 2 * 16 * w * n + 4.0 * n * 100
    assert four.bytes - one.bytes == pytest.approx(
        L * (read4 - 2) * per_expert + per_token(4) - per_token(1), rel=1e-9)
    assert one.layers == 2 * ic.MOE_FLOOR_FACTOR
    # compute: 2 experts a token, whatever the number read
    dense_like = TOY.replace(name="d", d_ff=64)
    assert four.flops == pytest.approx(ic.pass_cost(dense_like, HW, n_tokens=4, context=32).flops)


def test_fp8_weights_are_read_in_one_byte():
    bf16 = ic.pass_cost(TOY, HW, n_tokens=1, context=32, dtype="bfloat16")
    fp8 = ic.pass_cost(TOY, HW, n_tokens=1, context=32, dtype="float8")
    weights = 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128 + 2 * 64) * 2 + 64 * 100 * 2 + 2 * 64 * 2
    assert bf16.bytes - fp8.bytes == pytest.approx(weights / 2)


def test_medusa_heads_and_eagle_head_by_hand():
    t = TOY
    med = ic.draft_call_cost(ic.DrafterSpec(kind="medusa", calls=1), t, HW, batch=1, context=32,
                             tp=1, dtype="bfloat16")
    per_head = 64 * 64 + 64 * 100
    assert med.bytes == pytest.approx(ic.MEDUSA_HEADS * (per_head * 2 + 4.0 * 100))
    eag = ic.draft_call_cost(ic.DrafterSpec(kind="eagle", calls=3, width=2), t, HW, batch=1,
                             context=32, tp=1, dtype="bfloat16")
    head = ic.pass_cost(eagle_head_shape(t), HW, n_tokens=2, context=32)
    assert eag.bytes == pytest.approx(head.bytes + 2 * 64 * 64 * 2)
    assert eag.flops == pytest.approx(head.flops + 2.0 * 2 * 2 * 64 * 64)
    assert ic.draft_call_cost(ic.DrafterSpec(kind="ngram", calls=0), t, HW, batch=1, context=32,
                              tp=1, dtype="bfloat16") is None


def test_a_reduced_draft_vocabulary_shrinks_the_eagle_head_by_hand():
    """An EAGLE head over 40 of the toy's 100 tokens reads 60 fewer head columns (D = 64,
    2 bytes each), writes 60 fewer fp32 logits for each of its 2 tokens and computes 60
    fewer output columns for them."""
    full, reduced = (ic.draft_call_cost(ic.DrafterSpec(kind="eagle", calls=3, width=2,
                                                       draft_vocab=v), TOY, HW, batch=1,
                                        context=32, tp=1, dtype="bfloat16")
                     for v in (None, 40))
    assert full.bytes - reduced.bytes == pytest.approx(60 * 64 * 2 + 4.0 * 2 * 60)
    assert full.flops - reduced.flops == pytest.approx(2.0 * 2 * 60 * 64)
    with pytest.raises(ValueError, match="draft_vocab"):
        eagle_head_shape(TOY, draft_vocab=0)


def _cost(roof, layers=10, ar=0.0):
    return ic.PassCost(flops=0.0, bytes=roof * BW, compute_s=0.0, memory_s=roof,
                       allreduce_s=ar, layers=layers)


def test_iteration_times_and_speedup_by_hand():
    terms = ic.IterationTerms(plain=_cost(10e-3), verify=_cost(12e-3, ar=1e-3),
                              draft=_cost(0.1e-3, layers=2), draft_calls=4)
    o = ic.EngineOverheads(layer_floor=0.2e-3, step=1e-3, iteration=2e-3, draft_call=0.5e-3)
    plain, it = ic.iteration_times(terms, o)
    # launch floor: 10 layers * 0.2 ms = 2 ms < 10 ms roofline; the draft's 2 * 0.2 > 0.1 ms
    assert plain == pytest.approx(10e-3 + 1e-3)
    assert it == pytest.approx(12e-3 + 1e-3 + 1e-3 + 2e-3 + 4 * (0.4e-3 + 0.5e-3))
    assert ic.speedup_from_terms(terms, o, 3.0) == pytest.approx(3.0 * plain / it)


def test_the_launch_floor_binds_a_small_pass():
    terms = ic.IterationTerms(plain=_cost(1e-3), verify=_cost(1e-3), draft=None, draft_calls=0)
    o = ic.EngineOverheads(layer_floor=0.5e-3, step=0.0, iteration=0.0, draft_call=0.0)
    assert ic.iteration_times(terms, o) == pytest.approx((5e-3, 5e-3))
    b = ic.breakdown(terms, o)
    assert b.bound == "launch floor" and b.terms["launch floor"] == pytest.approx(5e-3)


def test_a_floor_that_adds_and_a_plain_step_that_hides_its_host_work_by_hand():
    """floor_adds: a pass costs its roofline plus L floors (kernels back to back);
    plain_hides_step: a plain step costs the larger of its pass and its host step, while a
    speculative iteration pays both."""
    terms = ic.IterationTerms(plain=_cost(10e-3), verify=_cost(12e-3, ar=1e-3),
                              draft=_cost(0.1e-3, layers=2), draft_calls=4)
    o = ic.EngineOverheads(layer_floor=0.2e-3, step=1e-3, iteration=2e-3, draft_call=0.5e-3,
                           floor_adds=True)
    plain, it = ic.iteration_times(terms, o)
    # 10 layers * 0.2 ms on top of each pass; the draft's 2 layers * 0.2 ms on its 0.1 ms
    assert plain == pytest.approx(10e-3 + 2e-3 + 1e-3)
    assert it == pytest.approx(12e-3 + 2e-3 + 1e-3 + 1e-3 + 2e-3 + 4 * (0.5e-3 + 0.5e-3))
    b = ic.breakdown(terms, o)
    assert b.terms["launch floor"] == pytest.approx(2e-3)
    assert b.terms["target memory"] == pytest.approx(12e-3)
    assert sum(b.terms.values()) == pytest.approx(b.total_s)
    hides = ic.EngineOverheads(layer_floor=0.2e-3, step=1e-3, iteration=2e-3,
                               draft_call=0.5e-3, floor_adds=True, plain_hides_step=True)
    assert ic.iteration_times(terms, hides) == pytest.approx((12e-3, it))
    slow_host = hides.with_seconds([0.2e-3, 15e-3, 2e-3, 0.5e-3])
    assert slow_host.floor_adds and slow_host.plain_hides_step and slow_host.step == 15e-3
    assert ic.iteration_times(terms, slow_host)[0] == pytest.approx(15e-3)
    np.testing.assert_allclose(slow_host.as_array(), [0.2e-3, 15e-3, 2e-3, 0.5e-3])
    with pytest.raises(InvalidArgument, match="x must hold 4"):
        hides.with_seconds([1e-3, 1e-3])
    with pytest.raises(InvalidArgument, match="floor_adds"):
        ic.EngineOverheads(layer_floor=0, step=0, iteration=0, draft_call=0, floor_adds="yes")


def test_the_priors_say_how_each_engine_spends_its_overheads():
    """Eager dispatch overlaps the GPU; graph-replayed and compiled passes add their
    floors; only SGLang's plain step hides its host work."""
    p = ic.PRIOR_OVERHEADS
    assert not p["eager"].floor_adds
    assert all(p[c].floor_adds for c in ("vllm", "sglang", "trtllm", "xla"))
    assert [c for c in p if p[c].plain_hides_step] == ["sglang"]


def test_breakdown_names_the_largest_term():
    terms = ic.IterationTerms(plain=_cost(10e-3), verify=_cost(10e-3),
                              draft=_cost(1e-3, layers=1), draft_calls=20)
    o = ic.EngineOverheads(layer_floor=0.0, step=0.0, iteration=0.0, draft_call=0.0)
    b = ic.breakdown(terms, o)
    assert b.bound == "draft" and b.terms["draft"] == pytest.approx(20e-3)
    assert b.total_s == pytest.approx(30e-3)


def test_a_small_draft_costs_more_than_its_parameter_ratio_at_the_floor():
    """The reason for the launch floor: a 68M draft step on a 7B target under PyTorch
    eager dispatch costs its 2 layers' floor, far above 68M/6.7B of a target step."""
    o = ic.PRIOR_OVERHEADS["eager"]
    t = ic.iteration_terms("vicuna-7b", "a100-80gb",
                           ic.DrafterSpec(kind="draft_model", calls=1, draft_model="vicuna-68m"),
                           verify_tokens=2)
    draft_s = float(np.maximum(t.draft.roofline_s, t.draft.layers * o.layer_floor))
    target_s = float(np.maximum(t.plain.roofline_s, t.plain.layers * o.layer_floor))
    ratio = get_shape("vicuna-68m").n_params() / get_shape("vicuna-7b").n_params()
    assert draft_s / target_s > 5 * ratio


def test_bad_inputs_name_the_argument():
    with pytest.raises(InvalidArgument, match="kind"):
        ic.DrafterSpec(kind="magic", calls=1)
    with pytest.raises(InvalidArgument, match="draft_model"):
        ic.DrafterSpec(kind="draft_model", calls=1)
    with pytest.raises(InvalidArgument, match="layer_floor"):
        ic.EngineOverheads(layer_floor=-1.0, step=0, iteration=0, draft_call=0)
    with pytest.raises(InvalidArgument, match="engine"):
        ic.engine_class("tgi")
    with pytest.raises(InvalidArgument, match="batch"):
        ic.pass_cost(TOY, HW, n_tokens=1, batch=0)
    assert math.isfinite(ic.pass_cost(TOY, HW, n_tokens=64, context=8).memory_s)


def test_an_engine_that_does_not_overlap_adds_compute_and_memory_at_its_efficiencies():
    """`CeilingUse`: the toy pass at 50% of the peak and 25% of the bandwidth, compute and
    memory seconds added (a CPU core) or the larger of them (the datasheet default)."""
    use = ic.CeilingUse(flops_efficiency=0.5, bandwidth_efficiency=0.25, overlap=False)
    c = ic.pass_cost(TOY, HW, n_tokens=3, batch=1, context=32, use=use)
    compute, memory = _toy_flops(3) / (1e14 * 0.5), _toy_bytes(3) / (1e12 * 0.25)
    assert c.compute_s == pytest.approx(compute) and c.memory_s == pytest.approx(memory)
    assert c.roofline_s == pytest.approx(compute + memory)
    d = ic.pass_cost(TOY, HW, n_tokens=3, batch=1, context=32)
    assert d == ic.pass_cost(TOY, HW, n_tokens=3, batch=1, context=32, use=ic.DATASHEET_USE)
    assert d.roofline_s == pytest.approx(max(_toy_flops(3) / PEAK, _toy_bytes(3) / BW))
    for bad in (dict(flops_efficiency=0.0), dict(bandwidth_efficiency=math.nan),
                dict(overlap="no"), dict(blend=0.5), dict(blend=math.inf),
                dict(blend=True), dict(blend=2.0, overlap=True)):
        with pytest.raises(InvalidArgument, match=next(iter(bad))):
            ic.CeilingUse(**bad)


def test_a_partial_overlap_is_the_p_norm_of_compute_and_memory():
    """`CeilingUse.blend`: 3 s of compute and 4 s of memory make 5 s at p = 2 (3-4-5),
    7 s at p = 1 and tend to the larger, 4 s, as p grows; the toy pass at p = 3 by hand."""
    pc = ic.PassCost(flops=1.0, bytes=1.0, compute_s=3.0, memory_s=4.0, allreduce_s=0.0,
                     layers=1, overlap=False, blend=2.0)
    assert pc.roofline_s == pytest.approx(5.0)
    assert dataclasses.replace(pc, blend=1.0).roofline_s == pytest.approx(7.0)
    assert dataclasses.replace(pc, blend=400.0).roofline_s == pytest.approx(4.0, rel=2e-3)
    assert dataclasses.replace(pc, compute_s=0.0, memory_s=0.0).roofline_s == 0.0
    use = ic.CeilingUse(flops_efficiency=0.5, bandwidth_efficiency=0.25, overlap=False,
                        blend=3.0)
    c = ic.pass_cost(TOY, HW, n_tokens=3, batch=1, context=32, use=use)
    compute, memory = _toy_flops(3) / (1e14 * 0.5), _toy_bytes(3) / (1e12 * 0.25)
    assert c.blend == 3.0
    assert c.roofline_s == pytest.approx((compute ** 3 + memory ** 3) ** (1 / 3))


def test_a_dense_pass_by_hand():
    """1e6 fp32 weights over 2 tokens of 3 rows writing 10 logits a token, split over 2
    devices: 2 FLOPs a weight a token; the weights once and the fp32 logits."""
    hw = Hardware(name="cpu", peak_flops=(("float32", 1e11),), bandwidth=1e10)
    use = ic.CeilingUse(flops_efficiency=0.5, bandwidth_efficiency=0.5, overlap=False)
    c = ic.dense_pass_cost(1e6, hw, n_tokens=2, batch=3, logits=10, tp=2, dtype="float32",
                           use=use)
    assert c.flops == pytest.approx(2.0 * 6 * 1e6 / 2)
    assert c.bytes == pytest.approx((4e6 + 4.0 * 6 * 10) / 2)
    assert c.roofline_s == pytest.approx(6e6 / 5e10 + 2000120 / 5e9)
    with pytest.raises(InvalidArgument, match="n_params"):
        ic.dense_pass_cost(0, hw, n_tokens=1)
