"""The hardware cost of one speculative iteration, from datasheet rows and model shapes.

One iteration of speculative decoding at batch B drafts, verifies and bookkeeps:

    t_iter = t_target(n) + calls * t_draft_call + t_step + t_iteration
    t_plain = t_target(1) + t_step        (max(t_target(1), t_step): ``plain_hides_step``)
    speedup = tau * t_plain / t_iter

where n is the number of tokens the target scores per row (K + 1 for a chain, the
nodes of a tree with its root) and tau the mean tokens an iteration yields. Each pass:

    t_pass(n) = max(roofline(n), L * layer_floor) + all_reduce(n)
              (roofline(n) + L * layer_floor + all_reduce(n): ``floor_adds``)
    roofline(n) = max(FLOPs / (peak * FLOPS_EFFICIENCY), bytes / (bandwidth * BANDWIDTH_EFFICIENCY))

``CeilingUse`` says how an engine uses the ceilings: the efficiencies above and the max
for GPU and TPU engines (`DATASHEET_USE`); for specsim's CPU loop
(`specsim.experiment.ceiling_prediction`) fitted efficiencies and the p-norm of the two,
``(compute^p + memory^p)^(1/p)``: p = 1 a sum (a core loads, then computes), larger p a
partial overlap (a kernel computes on the rows it has while it streams the weights).
FLOPs and bytes are `specsim.roofline.forward_cost`'s (weights, KV cache, logits; no
intermediates: a GPU kernel keeps them on chip), split over ``tp`` devices with the
output head vocabulary-parallel as vLLM, SGLang and TensorRT-LLM shard it, plus two
ring all-reduces a layer (`specsim.roofline.allreduce_time`). A mixture-of-experts
layer reads the distinct experts its B*n tokens route to (`expected_experts`) and
computes ``experts_per_token`` of them per token. The draft costs, per call:

* ``draft_model``: a pass of the draft model (its own layers and floor);
* ``eagle``: one decoder layer of the target's width, its input projection and the
  target's output head (`specsim.presets.eagle_head_shape`);
* ``medusa``: every head's residual block and output head, once an iteration;
  ``hydra``: one such head per sequential call;
* ``ngram``, ``ngram_tree``, ``lookahead``: no model pass (free drafts).

``layer_floor`` is the per-layer latency floor of kernel launches (CUDA graphs) or
Python dispatch (PyTorch eager): why a 68M-parameter draft costs far more than its
parameter ratio. Eager dispatch runs ahead of the GPU, so a pass costs the larger of the
two; a CUDA graph or a compiled XLA program runs its kernels back to back, each paying a
fixed cost on top of its work (``floor_adds``). SGLang's overlap scheduler hides a plain step's host work
behind the GPU pass, which its speculative decoding pays in full (``plain_hides_step``).
The floor and the per-step, per-iteration and per-call overheads are `EngineOverheads`,
one set per engine class with a prior (`PRIOR_OVERHEADS`), fitted to published results
by `specsim.published` (leave-one-source-out). Formulas: docs/design.md (iteration cost);
evidence for each form: docs/studies/published-speedups.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from specsim.errors import InvalidArgument
from specsim.presets import ModelShape, as_roofline_config, eagle_head_shape, get_shape
from specsim.roofline import (Hardware, allreduce_time, attention_pairs_factor,
                              canonical_dtype, dtype_bytes, forward_cost, load_hardware,
                              predict_time)
from specsim.validation import choice, positive_int

__all__ = ["ENGINE_CLASSES", "DRAFTER_KINDS", "FREE_DRAFTERS", "EngineOverheads",
           "PRIOR_OVERHEADS", "BANDWIDTH_EFFICIENCY", "FLOPS_EFFICIENCY",
           "ALLREDUCE_LATENCY", "EAGLE3_DRAFT_VOCAB", "MEDUSA_HEADS", "MOE_FLOOR_FACTOR",
           "expected_experts", "CeilingUse", "DATASHEET_USE", "PassCost", "dense_pass_cost",
           "pass_cost", "pass_time", "DrafterSpec", "IterationTerms", "iteration_terms",
           "speedup_from_terms", "IterationBreakdown", "breakdown", "engine_class"]

# Engines as published results name them -> the class whose overheads they share.
# Each serving engine (CUDA graphs, its own scheduler and sampler) is a class of its own.
ENGINE_CLASSES = {"hf-eager": "eager", "pytorch-eager": "eager", "t5x-tpu": "xla",
                  "jax": "xla", "vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}
DRAFTER_KINDS = ("draft_model", "eagle", "medusa", "hydra", "ngram", "ngram_tree",
                 "lookahead")
FREE_DRAFTERS = ("ngram", "ngram_tree", "lookahead")

# Achievable fractions of the datasheet ceilings (priors, not fitted): decode-time GEMVs
# stream weights at close to the memory bandwidth; small-M GEMMs reach a fraction of the
# tensor-core peak. Both enter every pass alike, so the speedup depends on them only
# where a pass turns compute-bound or meets the launch floor.
BANDWIDTH_EFFICIENCY = 0.85
FLOPS_EFFICIENCY = 0.6
# Latency of one small all-reduce (seconds): a few microseconds over NVLink (a prior:
# no datasheet states it); two per layer in a tensor-parallel pass.
ALLREDUCE_LATENCY = 8e-6
# EAGLE-3 heads score a reduced draft vocabulary of 32000 tokens (draft_vocab_size in
# their config.json, e.g. SpecForge's configs/llama3-8B-eagle3.json); EAGLE-1/2 heads
# score the target's whole vocabulary.
EAGLE3_DRAFT_VOCAB = 32000
# Medusa-1 checkpoints of the Vicuna models carry 5 heads (medusa_num_heads 5 in their
# config.json); all of them run once an iteration.
MEDUSA_HEADS = 5
# A mixture-of-experts layer launches about twice a dense layer's kernels (router, top-k,
# token permutation, two grouped GEMMs, un-permutation besides attention): its share of
# the launch floor (a prior).
MOE_FLOOR_FACTOR = 2.0


@dataclass(frozen=True)
class CeilingUse:
    """How an engine's passes use a chip's ceilings: the fractions of its peak FLOP/s and
    bandwidth they reach, and how compute and memory traffic combine. ``overlap``: a
    GPU kernel streams weights while its tensor cores work, so a pass costs the larger
    of the two; without it they combine as the p-norm ``(compute^p + memory^p)^(1/p)``
    with p = ``blend`` (1: they add, as a CPU core that loads, then computes; between 1
    and the max as p grows)."""
    flops_efficiency: float = FLOPS_EFFICIENCY
    bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY
    overlap: bool = True
    blend: float = 1.0

    def __post_init__(self) -> None:
        for name in ("flops_efficiency", "bandwidth_efficiency"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise InvalidArgument(f"{name} must be a finite number > 0, got {v!r}")
        if not isinstance(self.overlap, bool):
            raise InvalidArgument(f"overlap must be True or False, got {self.overlap!r}")
        b = self.blend
        if not (isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b)
                and b >= 1):
            raise InvalidArgument(f"blend must be a finite number >= 1, got {b!r}")
        if self.overlap and b != 1:
            raise InvalidArgument("blend applies only without overlap (overlap=False); "
                                  f"got overlap=True and blend={b!r}")


# Datasheet ceilings as GPU and TPU engines use them (the priors above).
DATASHEET_USE = CeilingUse()


@dataclass(frozen=True)
class EngineOverheads:
    """Seconds an engine spends beyond the roofline: ``layer_floor`` per layer of every
    pass (launch or dispatch floor), ``step`` per target pass (sampling, host work and
    synchronisation; plain and speculative decoding alike), ``iteration`` per speculative
    iteration (acceptance, tree masks, bookkeeping) and ``draft_call`` per sequential
    drafter call. How the engine spends them (not fitted): ``floor_adds`` - a pass costs
    its roofline plus L floors (kernels run back to back, each with a fixed cost), else
    the larger of the two (dispatch runs ahead of the GPU); ``plain_hides_step`` - a plain
    step costs the larger of its pass and its host step (an overlap scheduler), else
    their sum."""
    layer_floor: float
    step: float
    iteration: float
    draft_call: float
    floor_adds: bool = False
    plain_hides_step: bool = False

    SECONDS = ("layer_floor", "step", "iteration", "draft_call")

    def __post_init__(self) -> None:
        for name in self.SECONDS:
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise InvalidArgument(f"{name} must be a finite number >= 0 seconds, got {v!r}")
        for name in ("floor_adds", "plain_hides_step"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgument(f"{name} must be True or False, got "
                                      f"{getattr(self, name)!r}")

    def as_array(self) -> np.ndarray:
        """The four overheads in seconds, in `SECONDS` order."""
        return np.array([getattr(self, name) for name in self.SECONDS], float)

    def with_seconds(self, x) -> "EngineOverheads":
        """A copy with the four overheads replaced by ``x`` (`SECONDS` order), its
        ``floor_adds`` and ``plain_hides_step`` kept."""
        values = np.asarray(x, float)
        if values.shape != (len(self.SECONDS),):
            raise InvalidArgument(f"x must hold {len(self.SECONDS)} seconds "
                                  f"({', '.join(self.SECONDS)}), got shape {values.shape}")
        return dataclasses.replace(self, **{n: float(v) for n, v in zip(self.SECONDS, values)})


# Priors (order-of-magnitude engineering estimates, replaced by the fit where published
# rows of that engine class exist): PyTorch eager dispatches each of a Llama layer's
# ~25 kernels from Python at ~10 us each, running ahead of the GPU (the larger of the
# two); CUDA graphs replay a layer's ~10 kernels at a few us of launch gap each and XLA
# fuses a layer into a few TPU ops, run one after another: the gaps add to the work
# (floor_adds). SGLang overlaps a plain step's host scheduling with the GPU (its
# overlap scheduler) but not a speculative iteration's: "speculative decoding currently
# does not support overlap scheduling", github.com/sgl-project/sglang/pull/9588.
_GRAPH = dict(layer_floor=2e-5, step=5e-4, iteration=5e-4, draft_call=2e-4, floor_adds=True)
PRIOR_OVERHEADS = {
    "eager": EngineOverheads(layer_floor=2.5e-4, step=2e-3, iteration=3e-3, draft_call=1.5e-3),
    "vllm": EngineOverheads(**_GRAPH),
    "sglang": EngineOverheads(**_GRAPH, plain_hides_step=True),
    "trtllm": EngineOverheads(**_GRAPH),
    "xla": EngineOverheads(layer_floor=1e-5, step=1e-4, iteration=2e-4, draft_call=1e-4,
                           floor_adds=True),
}


def engine_class(engine: str) -> str:
    """'hf-eager' -> 'eager'; InvalidArgument listing the engines otherwise."""
    try:
        return ENGINE_CLASSES[str(engine).lower()]
    except KeyError:
        raise InvalidArgument(f"engine must be one of {sorted(ENGINE_CLASSES)}, "
                              f"got {engine!r}") from None


def expected_experts(n_experts: int, experts_per_token: int, n_tokens) -> np.ndarray:
    """Expected distinct experts that ``n_tokens`` tokens read with top-k routing, each
    token picking ``experts_per_token`` of ``n_experts`` uniformly:
    E * (1 - (1 - k/E)^n). One token reads k; many read all E."""
    E = positive_int("n_experts", n_experts)
    k = positive_int("experts_per_token", experts_per_token)
    if k > E:
        raise InvalidArgument(f"experts_per_token ({k}) must be at most n_experts ({E})")
    n = np.asarray(n_tokens, float)
    if np.any(n < 0):
        raise InvalidArgument("n_tokens must be >= 0")
    out = E * (1.0 - (1.0 - k / E) ** n)
    return float(out) if out.ndim == 0 else out


# ---- one forward pass ---------------------------------------------------------------
@dataclass(frozen=True)
class PassCost:
    """One pass on one device of a tensor-parallel group: FLOPs and bytes, the roofline
    seconds they take at the efficient ceilings, the all-reduce seconds, and the layers
    the launch floor multiplies (MOE_FLOOR_FACTOR per mixture-of-experts layer);
    ``overlap``: the roofline is the larger of compute and memory seconds, else their
    p-norm with p = ``blend`` (1: their sum; `CeilingUse`)."""
    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    allreduce_s: float
    layers: float
    overlap: bool = True
    blend: float = 1.0

    @property
    def roofline_s(self) -> float:
        hi = max(self.compute_s, self.memory_s)
        if self.overlap or hi == 0:
            return hi
        if self.blend == 1:
            return self.compute_s + self.memory_s
        p = self.blend
        return hi * ((self.compute_s / hi) ** p + (self.memory_s / hi) ** p) ** (1 / p)


def _ceilings(hw: Hardware, dtype: str, use: CeilingUse) -> tuple[float, float]:
    try:
        peak = hw.peak(dtype)
    except ValueError:
        peak = hw.peak("bfloat16") if "bfloat16" in hw.dtypes else max(v for _, v in hw.peak_flops)
    return peak * use.flops_efficiency, hw.bandwidth * use.bandwidth_efficiency


def _timed(hw: Hardware, dtype: str, use: CeilingUse, *, flops: float, nbytes: float,
           allreduce_s: float = 0.0, layers: float = 1) -> PassCost:
    peak, bw = _ceilings(hw, dtype, use)
    return PassCost(flops=float(flops), bytes=float(nbytes), compute_s=float(flops / peak),
                    memory_s=float(nbytes / bw), allreduce_s=float(allreduce_s),
                    layers=layers, overlap=use.overlap, blend=use.blend)


def dense_pass_cost(n_params: float, hw: Hardware, *, n_tokens: int, batch: int = 1,
                    logits: int = 0, tp: int = 1, dtype: str = "bfloat16",
                    use: CeilingUse = DATASHEET_USE) -> PassCost:
    """A pass of ``n_params`` dense weights (a head, a small cell) over ``n_tokens``
    tokens of each of ``batch`` rows: 2 FLOPs a weight a token, the weights read once at
    ``dtype`` and ``logits`` fp32 scores a token written, split over ``tp`` devices."""
    P = float(n_params)
    if not (math.isfinite(P) and P > 0):
        raise InvalidArgument(f"n_params must be a finite number > 0, got {n_params!r}")
    N = positive_int("batch", batch) * positive_int("n_tokens", n_tokens)
    p = positive_int("tp", tp)
    dt = _storage_dtype(dtype)
    return _timed(hw, dt, use, flops=2.0 * N * P / p,
                  nbytes=(P * dtype_bytes(dt) + 4.0 * N * int(logits)) / p)


def _storage_dtype(dtype: str) -> str:
    """fp8 weights are stored in one byte; the roofline module knows 2- and 4-byte types."""
    return "float16" if str(dtype).lower() in ("float8", "fp8") else canonical_dtype(dtype)


def pass_cost(shape: ModelShape, hw: Hardware, *, n_tokens: int, batch: int = 1,
              context: int = 512, tp: int = 1, dtype: str | None = None,
              use: CeilingUse = DATASHEET_USE) -> PassCost:
    """Cost of one forward pass of ``shape`` over ``n_tokens`` new tokens for each of
    ``batch`` rows with ``context`` tokens cached, on one of ``tp`` tensor-parallel
    ``hw`` chips whose ceilings the engine uses as ``use`` says (see the module
    docstring for what is counted)."""
    n = positive_int("n_tokens", n_tokens)
    B = positive_int("batch", batch)
    p = positive_int("tp", tp)
    S = max(positive_int("context", context), n)
    raw_dtype = dtype or shape.dtype
    fp8 = str(raw_dtype).lower() in ("float8", "fp8")
    dt = _storage_dtype(raw_dtype)
    if shape.is_moe:
        read = expected_experts(shape.n_experts, shape.experts_per_token, B * n)
        bytes_cfg = as_roofline_config(shape, d_ff=max(1, round(read * shape.d_expert)))
        flops_cfg = as_roofline_config(shape, d_ff=shape.experts_per_token * shape.d_expert)
    else:
        bytes_cfg = flops_cfg = as_roofline_config(shape)
    by = forward_cost(bytes_cfg, B, n, S, dt, activations=False)
    fl = by if flops_cfg is bytes_cfg else forward_cost(flops_cfg, B, n, S, dt, activations=False)
    flops_by = dict(fl.flops_by)
    # specsim's CPU engine computes kv-head pairs (attention_pairs_factor); a GPU kernel
    # computes the grouped form once.
    flops = fl.flops - flops_by["attention"] * (1 - 1 / attention_pairs_factor(flops_cfg, n))
    nbytes = by.bytes
    w = dtype_bytes(dt)
    if fp8:                                   # weights at one byte, the rest as bf16
        weights = dict(by.bytes_by)["weights"]
        nbytes -= weights / 2
    if shape.cross_attention:                 # T5 decoder: cross-attention weights + K/V
        attn = shape.attention_params()
        flops += shape.n_layers * 2.0 * B * n * attn + shape.n_layers * 4.0 * B * shape.n_heads * n * S * shape.head_dim
        nbytes += shape.n_layers * (attn * w + 2.0 * B * S * shape.n_kv_heads * shape.head_dim * w)
    ar = 0.0
    if p > 1:
        ar = allreduce_time(hw, as_roofline_config(shape), B, n, p, dt, latency=ALLREDUCE_LATENCY)
    return _timed(hw, dt, use, flops=flops / p, nbytes=nbytes / p, allreduce_s=ar,
                  layers=shape.n_layers * (MOE_FLOOR_FACTOR if shape.is_moe else 1.0))


# ---- the drafter ----------------------------------------------------------------------
@dataclass(frozen=True)
class DrafterSpec:
    """What drafts: ``kind`` (one of DRAFTER_KINDS), the draft model for ``draft_model``
    (a preset name or `ModelShape`), ``calls`` sequential drafter calls an iteration and
    ``width`` tokens each call scores per row (1 for a chain; a tree level's nodes).
    For ``eagle``: ``fused_inputs`` feature vectors its input projection takes and
    ``draft_vocab`` tokens its output head scores (None: the target's vocabulary)."""
    kind: str
    calls: int
    width: int = 1
    draft_model: ModelShape | None = None
    fused_inputs: int = 2
    draft_vocab: int | None = None

    def __post_init__(self) -> None:
        choice("kind", self.kind, DRAFTER_KINDS)
        if self.kind == "draft_model" and self.draft_model is None:
            raise InvalidArgument("kind 'draft_model' needs draft_model (a preset name or "
                                  "ModelShape)")
        if self.calls < 0 or self.width < 1:
            raise InvalidArgument(f"calls must be >= 0 and width >= 1, got {self.calls}, "
                                  f"{self.width}")


def draft_call_cost(drafter: DrafterSpec, target: ModelShape, hw: Hardware, *, batch: int,
                    context: int, tp: int, dtype: str,
                    use: CeilingUse = DATASHEET_USE) -> PassCost | None:
    """One sequential drafter call; None for a free drafter. Medusa/Hydra heads: a
    residual block (D x D) and an output head (D x V) each (`dense_pass_cost`)."""
    if drafter.kind in FREE_DRAFTERS or drafter.calls == 0:
        return None
    if drafter.kind == "draft_model":
        return pass_cost(get_shape(drafter.draft_model), hw, n_tokens=drafter.width,
                         batch=batch, context=context, tp=tp, dtype=dtype, use=use)
    if drafter.kind == "eagle":
        head = eagle_head_shape(target, fused_inputs=drafter.fused_inputs,
                                draft_vocab=drafter.draft_vocab)
        c = pass_cost(head, hw, n_tokens=drafter.width, batch=batch, context=context, tp=tp,
                      dtype=dtype, use=use)
        dt = _storage_dtype(dtype)
        fc = drafter.fused_inputs * target.d_model * target.d_model
        return _timed(hw, dt, use, flops=c.flops + 2.0 * batch * drafter.width * fc / tp,
                      nbytes=c.bytes + fc * dtype_bytes(dt) / tp, allreduce_s=c.allreduce_s)
    heads = MEDUSA_HEADS if drafter.kind == "medusa" else 1
    per_head = target.d_model * target.d_model + target.d_model * target.vocab_size
    return dense_pass_cost(heads * per_head, hw, n_tokens=drafter.width, batch=batch,
                           logits=heads * target.vocab_size, tp=tp, dtype=dtype, use=use)


# ---- one iteration ----------------------------------------------------------------------
@dataclass(frozen=True)
class IterationTerms:
    """The overhead-free parts of one iteration and of one plain decoding step: the
    passes' roofline and all-reduce seconds and the layers each floor multiplies. With
    `EngineOverheads` these give the times (`speedup_from_terms`)."""
    plain: PassCost
    verify: PassCost
    draft: PassCost | None
    draft_calls: int


def iteration_terms(target, hw, drafter: DrafterSpec, *, verify_tokens: int, batch: int = 1,
                    context: int = 512, tp: int = 1, dtype: str | None = None,
                    use: CeilingUse = DATASHEET_USE) -> IterationTerms:
    """`IterationTerms` for ``target`` (preset name or shape) on ``hw`` (a `Hardware` or a
    row name of the datasheet table) verifying ``verify_tokens`` tokens a row, its
    ceilings used as ``use`` says."""
    shape = get_shape(target)
    hw = hw if isinstance(hw, Hardware) else load_hardware(hw)
    dt = dtype or shape.dtype
    kw = dict(batch=batch, context=context, tp=tp, dtype=dt, use=use)
    plain = pass_cost(shape, hw, n_tokens=1, **kw)
    verify = pass_cost(shape, hw, n_tokens=verify_tokens, **kw)
    draft = draft_call_cost(drafter, shape, hw, **kw)
    calls = 0 if draft is None else drafter.calls
    return IterationTerms(plain=plain, verify=verify, draft=draft, draft_calls=calls)


def pass_time(cost: PassCost, o: EngineOverheads) -> float:
    """One pass: its roofline and its layers' floor (added, or the larger of the two:
    `EngineOverheads.floor_adds`), plus its all-reduces."""
    floor = cost.layers * o.layer_floor
    body = cost.roofline_s + floor if o.floor_adds else max(cost.roofline_s, floor)
    return float(body + cost.allreduce_s)


def iteration_times(terms: IterationTerms, overheads: EngineOverheads) -> tuple[float, float]:
    """(seconds of one plain decoding step, seconds of one speculative iteration)."""
    o = overheads
    plain_pass = pass_time(terms.plain, o)
    plain = max(plain_pass, o.step) if o.plain_hides_step else plain_pass + o.step
    it = pass_time(terms.verify, o) + o.step + o.iteration
    if terms.draft is not None:
        it = it + terms.draft_calls * (pass_time(terms.draft, o) + o.draft_call)
    return float(plain), float(it)


def speedup_from_terms(terms: IterationTerms, overheads: EngineOverheads, tau) -> float:
    """tau * t_plain / t_iter: tokens per second of speculative over plain decoding."""
    plain, it = iteration_times(terms, overheads)
    return float(np.asarray(tau, float) * plain / it)


@dataclass(frozen=True)
class IterationBreakdown:
    """Seconds of one iteration by term, and the term that bounds it."""
    terms: dict
    total_s: float
    plain_s: float
    bound: str


def breakdown(terms: IterationTerms, overheads: EngineOverheads) -> IterationBreakdown:
    """The iteration's seconds split into named terms that add up to it: the target's
    verify pass as its roofline (memory or compute, whichever bounds it) or launch floor
    (whichever sets it; both where the floor adds), its all-reduces, the drafter's calls,
    and the engine's step and iteration overheads; ``bound`` names the largest."""
    o = overheads
    v = terms.verify
    floor = v.layers * o.layer_floor
    parts = {"target memory": 0.0, "target compute": 0.0, "launch floor": 0.0}
    roof = "target compute" if v.compute_s >= v.memory_s else "target memory"
    if o.floor_adds:
        parts["launch floor"], parts[roof] = floor, v.roofline_s
    elif floor >= v.roofline_s:
        parts["launch floor"] = floor
    else:
        parts[roof] = v.roofline_s
    parts["all-reduce"] = v.allreduce_s
    parts["draft"] = 0.0 if terms.draft is None else terms.draft_calls * (
        pass_time(terms.draft, o) + o.draft_call)
    parts["engine overhead"] = o.step + o.iteration
    plain, total = iteration_times(terms, overheads)
    return IterationBreakdown(terms=parts, total_s=total, plain_s=plain,
                              bound=max(parts, key=parts.get))
