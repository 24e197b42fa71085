"""Hardware ceilings, the FLOPs and bytes of one forward pass, and roofline time.

    hw = load_hardware("h100-sxm")
    cost = forward_cost(SMOLLM2_135M, batch=1, n_tokens=5, context=1024, dtype="bfloat16")
    predict_time(hw, cost, overhead=20e-6)               # max(FLOPs/peak, bytes/bandwidth) + t0
    predict_time(hw, cost, overhead=20e-6, mode="sum")   # FLOPs/peak + bytes/bandwidth + t0

NumPy only (no JAX): the theory side imports this without an accelerator stack.

What `forward_cost` counts, for the transformer of `specsim.models.transformer`
(B batch, T new tokens per row, S = ``context``, the KV-cache slots the pass reads):

* FLOPs, 2 per multiply-add of every matrix product: the Q/K/V and output projections, the
  MLP, attention scores and the weighted sum over **all S cache slots** (G times that when
  the engine takes its kv-head-pairs form, see `attention_pairs_factor`) (XLA's attention
  reads the whole preallocated cache and masks by position, so its cost grows with the cache
  size S, not with the number of tokens already in it; specsim's CPU attention kernel,
  `specsim.models.kernels.cache_attention`, reads only the slots up to each row's
  position: there S is the context), and the output head over the full
  vocabulary. Elementwise work (norms, rotary, softmax, activations, residuals) is estimated
  at a few FLOPs per element and reported as its own component.
* Bytes moved to and from main memory: every weight read once per pass (the tied embedding
  is read once, as the head; the input embedding reads only the B*T gathered rows; weights
  quantised weight-only, ``weight_bits=8|4``, are read as stored by
  `specsim.models.quantize`: bits/8 bytes per value plus one fp32 scale per group of
  ``group_size`` input rows and output column, or per output column), the KV
  cache read (S slots) and written (T new slots when updated in place; the whole cache when
  ``cache_update="copy"``, which is what a non-donated cache costs), the intermediate
  activations written and read once each (including the fp32 attention scores), and the
  fp32 logits written.

This is a model of an ideal implementation: XLA's own ``cost_analysis()`` of the compiled
forward (unrolled loop over per-layer arrays) agrees on FLOPs within 1% for a
SmolLM2-width model (8% on tiny configs, where our elementwise estimate matters), and on
bytes outside the layers within 2%; per layer it counts 1.06x our bytes at one token and
1.37x at 8 (it counts every op's operands and outputs after fusion, including
intermediates that stay in cache). tests/test_roofline.py states the tolerances.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from specsim.errors import InvalidArgument
from specsim.resources import data_path
from specsim.validation import choice, positive_int

HARDWARE_CSV = data_path("hardware.csv")       # shipped with the package

# Canonical dtype names and their spellings; bytes per element.
_DTYPE_ALIASES = {
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "float32": "float32", "fp32": "float32", "single": "float32",
    "tfloat32": "tfloat32", "tf32": "tfloat32",
}
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "tfloat32": 4}
_CSV_FLOPS_COLUMNS = {"bfloat16": "bf16_tflops", "float16": "fp16_tflops",
                      "tfloat32": "tf32_tflops", "float32": "fp32_tflops"}


def canonical_dtype(dtype) -> str:
    """'bf16' -> 'bfloat16', numpy/jax dtypes by name; ValueError for anything else."""
    name = getattr(dtype, "name", None) or str(dtype)
    try:
        return _DTYPE_ALIASES[name.lower()]
    except KeyError:
        raise ValueError(f"dtype must be one of {sorted(set(_DTYPE_ALIASES))}, got {dtype!r}") from None


def dtype_bytes(dtype) -> int:
    return _DTYPE_BYTES[canonical_dtype(dtype)]


# ---- hardware ------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Hardware:
    """One chip's ceilings. ``peak_flops`` is a tuple of (dtype, FLOP/s) pairs so that the
    record stays hashable; `peak(dtype)` looks one up."""
    name: str
    peak_flops: tuple[tuple[str, float], ...]
    bandwidth: float                 # bytes/s of main memory (HBM, GDDR, DRAM)
    memory_bytes: float = math.nan
    source: str = ""
    vendor: str = ""
    kind: str = ""
    flops_basis: str = "dense"
    notes: str = ""
    # chip-to-chip link (NVLink, ICI, PCIe): bytes/s per chip, both directions together
    # as datasheets state it (NaN: not published); see `allreduce_time`
    interconnect_bandwidth: float = math.nan
    interconnect: str = ""

    def __post_init__(self) -> None:
        pairs = tuple((canonical_dtype(d), float(v)) for d, v in dict(self.peak_flops).items())
        if not pairs:
            raise ValueError("peak_flops must name at least one dtype")
        for d, v in pairs:
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"peak_flops[{d!r}] must be a positive number, got {v!r}")
        if not (self.bandwidth > 0 and math.isfinite(self.bandwidth)):
            raise ValueError(f"bandwidth must be a positive number of bytes/s, got {self.bandwidth!r}")
        object.__setattr__(self, "peak_flops", pairs)

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.peak_flops)

    def peak(self, dtype="bfloat16") -> float:
        """Peak FLOP/s for ``dtype``; ValueError naming the dtypes this chip lists."""
        want = canonical_dtype(dtype)
        for d, v in self.peak_flops:
            if d == want:
                return v
        raise ValueError(f"{self.name} lists no peak for dtype {want!r}; it lists {self.dtypes}")

    def ridge_point(self, dtype="bfloat16") -> float:
        """Arithmetic intensity (FLOPs/byte) where compute and memory time are equal."""
        return self.peak(dtype) / self.bandwidth


def _parse_row(row: Mapping[str, str]) -> Hardware:
    peaks = tuple((d, float(row[col]) * 1e12) for d, col in _CSV_FLOPS_COLUMNS.items()
                  if row.get(col, "").strip())
    return Hardware(name=row["name"], peak_flops=peaks,
                    bandwidth=float(row["bandwidth_GBps"]) * 1e9,
                    memory_bytes=float(row["memory_bytes"]), source=row["source"],
                    vendor=row["vendor"], kind=row["kind"], flops_basis=row["flops_basis"],
                    notes=row.get("notes", ""),
                    interconnect_bandwidth=float(row.get("interconnect_GBps") or "nan") * 1e9,
                    interconnect=row.get("interconnect", ""))


def _read_rows(path: Path = HARDWARE_CSV) -> list[dict]:
    with open(path, newline="") as fh:
        lines = [line for line in fh if not line.startswith("#")]
    return list(csv.DictReader(lines))


def hardware_names(path: Path = HARDWARE_CSV) -> tuple[str, ...]:
    return tuple(r["name"] for r in _read_rows(path))


def load_hardware(name: str, path: Path = HARDWARE_CSV) -> Hardware:
    """One row of ``specsim/data/hardware.csv`` as a `Hardware` (names are case-insensitive)."""
    rows = _read_rows(path)
    for row in rows:
        if row["name"].lower() == str(name).lower():
            return _parse_row(row)
    raise ValueError(f"unknown hardware {name!r}; known: {[r['name'] for r in rows]}")


def hardware_table(path: Path = HARDWARE_CSV):
    """The datasheet table as a pandas DataFrame (pandas imported lazily), with derived
    columns in SI units: bandwidth (bytes/s) and ridge point at bf16 (FLOPs/byte)."""
    import pandas as pd

    df = pd.DataFrame(_read_rows(path))
    for col in ("memory_bytes", "bandwidth_GBps", "interconnect_GBps",
                *_CSV_FLOPS_COLUMNS.values()):
        df[col] = pd.to_numeric(df[col].replace("", np.nan))
    df["bandwidth"] = df["bandwidth_GBps"] * 1e9
    df["ridge_bf16"] = df["bf16_tflops"] * 1e12 / df["bandwidth"]
    return df


# ---- cost of one forward pass --------------------------------------------------------
@dataclass(frozen=True)
class ForwardCost:
    """FLOPs and bytes of one forward pass, total and per component (tuples of
    (name, value) so the record is hashable)."""
    flops: float
    bytes: float
    flops_by: tuple[tuple[str, float], ...] = field(default=())
    bytes_by: tuple[tuple[str, float], ...] = field(default=())
    batch: int = 1
    n_tokens: int = 1
    context: int = 1
    dtype: str = "float32"

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte."""
        return self.flops / self.bytes


def _flops_by(cfg, B: int, T: int, S: int) -> dict[str, float]:
    """FLOPs of one forward pass by part: B rows, T new tokens, S cache slots read."""
    L, D, F, V = cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.vocab_size
    H, G, E = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    Q, K = H * E, G * E
    N = B * T
    gpt2 = cfg.arch == "gpt2"
    n_mlp = 2 if gpt2 else 3
    has_bias = gpt2 or cfg.qkv_bias

    flops = {
        "qkv": L * 2.0 * N * D * (Q + 2 * K),
        "attn_out": L * 2.0 * N * Q * D,
        "mlp": L * 2.0 * N * D * F * n_mlp,
        # scores + weighted sum, all S slots; G x that in the kv-head-pairs form
        "attention": L * 2.0 * 2.0 * B * H * T * S * E * attention_pairs_factor(cfg, T),
        "head": 2.0 * N * D * V,
    }
    norm = 7.0 if gpt2 else 4.0                 # per element: (center,) square, mean, rsqrt-mul, scale
    elem = (2 * norm * N * D                    # two norms
            + (0 if gpt2 else 3.0 * N * (Q + K))  # rotary on q and k
            + (N * (Q + 2 * K) if has_bias else 0)
            + 5.0 * B * H * T * S               # scale, mask, max, exp, normalise
            + (8.0 if gpt2 else 5.0) * N * F    # gelu-tanh / silu * up
            + 2.0 * N * D)                      # residual adds
    flops["elementwise"] = L * elem + norm * N * D
    return flops


# The engine's decode/verify attention (`specsim.models.attention.attention_pairs`)
# computes every (kv head, kv head) pair and keeps the diagonal, reading the cache in
# place, when a model has at most this many kv heads and a pass at most this many new
# tokens: G x the attention FLOPs of the grouped form (tests/test_roofline.py holds the
# two modules' limits equal).
PAIRS_MAX_KV_HEADS = 4
PAIRS_MAX_TOKENS = 16


def attention_pairs_factor(cfg, n_tokens: int) -> int:
    """How many times the ideal attention FLOPs the engine's attention computes."""
    pairs = cfg.n_kv_heads <= PAIRS_MAX_KV_HEADS and n_tokens <= PAIRS_MAX_TOKENS
    return int(cfg.n_kv_heads) if pairs else 1


def forward_cost(cfg, batch: int = 1, n_tokens: int = 1, context: int | None = None,
                 dtype=None, *, cache_update: str = "inplace",
                 activations: bool = True, weight_bits: int | None = None,
                 group_size: int | None = None, quantized_head: bool = False,
                 asymmetric: bool = False) -> ForwardCost:
    """FLOPs and bytes of ``forward(params, cfg, tokens[batch, n_tokens], cache)`` with a
    KV cache of ``context`` slots (the slots the pass reads; see the module docstring).

    ``dtype`` is the storage dtype of weights, activations and cache (default
    ``cfg.dtype``); scores and logits are fp32 as in the implementation.
    ``cache_update``: "inplace" writes the T new slots; "copy" writes the whole cache.
    ``activations``: count intermediate tensors (and the unfused fp32 attention scores) as
    main-memory traffic, as an unfused implementation moves them; set False for the ideal
    of a fused kernel whose intermediates stay on chip (weights + KV cache + logits only).
    For a narrow model such as SmolLM2-135M (d=576) these intermediates bound the
    arithmetic intensity to a few hundred FLOPs/byte however large the batch.
    ``weight_bits`` (8 or 4; None: dense ``dtype``), ``group_size`` (input rows per fp32
    scale; None: one scale per output column) and ``quantized_head``: the layout of
    `specsim.models.quantize` (projection/MLP matrices of every layer, and the head when
    ``quantized_head``; ``asymmetric``: an fp32 offset per group beside each scale). FLOPs
    are unchanged (the ideal dequantises on the fly); on
    XLA:CPU the dequantised matrix is written and read again, which this does not count.
    """
    B = positive_int("batch", batch)
    T = positive_int("n_tokens", n_tokens)
    S = positive_int("context", T if context is None else context)
    if S < T:
        raise InvalidArgument(f"context ({S}) must be at least n_tokens ({T}): the new "
                              f"tokens are written into the cache")
    choice("cache_update", cache_update, ("inplace", "copy"))
    dt = canonical_dtype(dtype or cfg.dtype)
    w = _DTYPE_BYTES[dt]
    flops = _flops_by(cfg, B, T, S)
    L, D, F, V = cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.vocab_size
    H, G, E = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    Q, K = H * E, G * E
    N = B * T
    gpt2 = cfg.arch == "gpt2"
    kv_slot = 2.0 * L * B * G * E * w           # bytes of k and v for one slot of every row
    act_per_layer = w * N * (6 * D + 2 * (Q + 2 * K) + 2 * Q + 4 * F) + 2 * 4.0 * B * H * T * S
    bytes_ = {
        "weights": _weight_bytes(cfg, N, w, weight_bits, group_size, quantized_head,
                                 asymmetric),
        "kv_read": kv_slot * S,
        "kv_write": kv_slot * (S if cache_update == "copy" else T),
        "activations": (L * act_per_layer + w * N * D * 2) if activations else 0.0,
        "logits": 4.0 * N * V,
    }
    return ForwardCost(flops=float(sum(flops.values())), bytes=float(sum(bytes_.values())),
                       flops_by=tuple(flops.items()), bytes_by=tuple(bytes_.items()),
                       batch=B, n_tokens=T, context=S, dtype=dt)


def _weight_bytes(cfg, N: int, w: int, weight_bits, group_size, quantized_head,
                  asymmetric: bool = False) -> float:
    """Bytes of the weights one pass over N tokens reads: every layer matrix (dense at
    ``w`` bytes per value, or quantised), norms and biases, the head once, and the N
    gathered embedding (and gpt2 position) rows."""
    L, D, F, V = cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.vocab_size
    Q, K = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    gpt2 = cfg.arch == "gpt2"
    qbytes = _quantized_bytes_fn(weight_bits, group_size, w, asymmetric)
    matrices = [(D, Q + 2 * K), (Q, D)] + ([(D, F), (F, D)] if gpt2 else [(D, F)] * 2 + [(F, D)])
    dense_layer = (2 if not gpt2 else 4) * D
    if gpt2 or cfg.qkv_bias:
        dense_layer += Q + 2 * K + (D + F + D if gpt2 else 0)
    layer_bytes = sum(qbytes(i, o) for i, o in matrices) + dense_layer * w
    # head matrix D*V read once (tied or not); the input embedding only gathers N rows
    head_bytes = qbytes(D, V) if quantized_head else D * V * w
    total = L * layer_bytes + head_bytes + (N * D + (2 * D if gpt2 else D)) * w
    if gpt2:
        total += N * D * w                      # learned position rows
    return float(total)


def _quantized_bytes_fn(weight_bits, group_size, w, asymmetric: bool = False):
    """bytes(Din, Dout) of one weight matrix: dense at ``w`` bytes per value, or quantised
    (bits/8 per value + 4-byte scales per group of ``group_size`` rows and column, and as
    many 4-byte offsets where ``asymmetric``)."""
    if weight_bits is None:
        if group_size is not None:
            raise InvalidArgument("group_size needs weight_bits (8 or 4)")
        return lambda din, dout: din * dout * w
    if isinstance(weight_bits, bool) or weight_bits not in (4, 8):
        raise InvalidArgument(f"weight_bits must be 4, 8 or None, got {weight_bits!r}")
    if group_size is not None:
        group_size = positive_int("group_size", group_size)

    def nbytes(din, dout):
        g = din if group_size is None else group_size
        if din % g:
            raise InvalidArgument(f"group_size {g} must divide the input dimension {din}")
        return din * dout * weight_bits / 8 + (din // g) * dout * (8.0 if asymmetric else 4.0)
    return nbytes


def forward_costs(cfg, n_tokens, batch, context, dtype=None, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised helper: arrays of FLOPs and bytes for broadcast arrays of
    (n_tokens, batch, context)."""
    n, b, c = np.broadcast_arrays(np.asarray(n_tokens), np.asarray(batch), np.asarray(context))
    fl = np.empty(n.shape, float)
    by = np.empty(n.shape, float)
    for idx in np.ndindex(n.shape):
        cost = forward_cost(cfg, int(b[idx]), int(n[idx]), int(c[idx]), dtype, **kwargs)
        fl[idx], by[idx] = cost.flops, cost.bytes
    return fl, by


# ---- time ----------------------------------------------------------------------------
def _ceilings(hw_or_params, dtype) -> tuple[float, float]:
    """(peak FLOP/s, bytes/s) from a Hardware, a fit result (attributes peak_flops and
    bandwidth as numbers) or a (peak, bandwidth) pair."""
    if isinstance(hw_or_params, Hardware):
        return hw_or_params.peak(dtype), hw_or_params.bandwidth
    peak = getattr(hw_or_params, "peak_flops", None)
    bw = getattr(hw_or_params, "bandwidth", None)
    if peak is None or bw is None:
        try:
            peak, bw = hw_or_params
        except (TypeError, ValueError):
            raise ValueError("hw_or_params must be a Hardware, an object with peak_flops and "
                             "bandwidth, or a (peak_flops, bandwidth) pair") from None
    peak, bw = float(peak), float(bw)
    if not (peak > 0 and bw > 0):
        raise ValueError(f"peak_flops and bandwidth must be positive, got {peak!r}, {bw!r}")
    return peak, bw


def predict_time(hw_or_params, cost, overhead: float = 0.0, *, mode: str = "max",
                 dtype=None):
    """Roofline time of one pass: ``overhead + max(FLOPs/peak, bytes/bandwidth)``
    (``mode="max"``), or the pessimistic ``overhead + FLOPs/peak + bytes/bandwidth``
    (``mode="sum"``: no overlap of compute and memory traffic).

    ``cost`` is a `ForwardCost`, a sequence of them (returns an array), or a
    (flops, bytes) pair of numbers or arrays. The peak is looked up for ``dtype``
    (default: the cost's dtype) when ``hw_or_params`` is a `Hardware`.
    """
    if mode not in ("max", "sum"):
        raise ValueError(f"mode must be 'max' or 'sum', got {mode!r}")
    if not (overhead >= 0 and math.isfinite(overhead)):
        raise ValueError(f"overhead must be a finite number >= 0 seconds, got {overhead!r}")
    if isinstance(cost, ForwardCost):
        flops, bytes_, cost_dtype = np.float64(cost.flops), np.float64(cost.bytes), cost.dtype
    elif isinstance(cost, (list, tuple)) and cost and isinstance(cost[0], ForwardCost):
        flops = np.array([c.flops for c in cost])
        bytes_ = np.array([c.bytes for c in cost])
        cost_dtype = cost[0].dtype
    else:
        try:
            flops, bytes_ = (np.asarray(x, float) for x in cost)
        except (TypeError, ValueError):
            raise ValueError("cost must be a ForwardCost, a list of them, or (flops, bytes)") from None
        cost_dtype = "bfloat16"
    peak, bw = _ceilings(hw_or_params, dtype or cost_dtype)
    compute, memory = flops / peak, bytes_ / bw
    t = overhead + (np.maximum(compute, memory) if mode == "max" else compute + memory)
    return float(t) if np.ndim(t) == 0 else t


def bound(hw_or_params, cost: ForwardCost, dtype=None) -> str:
    """'compute' or 'memory': which ceiling limits this pass."""
    peak, bw = _ceilings(hw_or_params, dtype or cost.dtype)
    return "compute" if cost.flops / peak >= cost.bytes / bw else "memory"


# ---- several devices: tensor parallelism ------------------------------------------------
# The layout of `specsim.sharding`: attention heads, kv heads and MLP columns split over
# ``model`` devices, embedding/head and norms replicated, the batch split over ``data``.
# Each layer then all-reduces its [B, T, D] output twice (after the attention output
# projection and after the MLP down projection). A ring all-reduce of M bytes over p
# devices sends and receives 2 (p - 1) / p * M bytes per device, each direction at half
# the chip's (bidirectional) interconnect bandwidth.
def _mesh_sizes(cfg, batch: int, model: int, data: int) -> tuple[int, int]:
    model = positive_int("model", model)
    data = positive_int("data", data)
    for what, n in (("n_heads", cfg.n_heads), ("n_kv_heads", cfg.n_kv_heads),
                    ("d_ff", cfg.d_ff)):
        if n % model:
            raise ValueError(f"model ({model} devices) must divide {what} ({n})")
    if batch % data:
        raise ValueError(f"data ({data} devices) must divide the batch ({batch})")
    return model, data


def allreduce_bytes(cfg, batch: int = 1, n_tokens: int = 1, model: int = 1,
                    dtype=None) -> float:
    """Bytes one device sends (and receives) in the all-reduces of one tensor-parallel
    pass over ``model`` devices: 2 per layer of B*T*D activations, ring algorithm,
    ``L * 2 * 2 (p - 1) / p * B*T*D*bytes``. ``batch`` is the batch one device holds."""
    B = positive_int("batch", batch)
    T = positive_int("n_tokens", n_tokens)
    p = positive_int("model", model)
    w = dtype_bytes(dtype or cfg.dtype)
    return float(cfg.n_layers * 2 * 2.0 * (p - 1) / p * B * T * cfg.d_model * w)


def allreduce_time(hw_or_bandwidth, cfg, batch: int = 1, n_tokens: int = 1, model: int = 1,
                   dtype=None, *, latency: float = 0.0) -> float:
    """Seconds of a pass's tensor-parallel all-reduces: `allreduce_bytes` over one
    direction of the interconnect (half the chip's bidirectional figure), plus
    ``latency`` seconds per all-reduce (2 per layer; a few microseconds on NVLink, not a
    datasheet figure). ``hw_or_bandwidth``: a `Hardware` or bidirectional bytes/s. 0 for
    one device."""
    if not (latency >= 0 and math.isfinite(latency)):
        raise ValueError(f"latency must be a finite number >= 0 seconds, got {latency!r}")
    nbytes = allreduce_bytes(cfg, batch, n_tokens, model, dtype)
    if model == 1:
        return 0.0
    bw = (hw_or_bandwidth.interconnect_bandwidth if isinstance(hw_or_bandwidth, Hardware)
          else float(hw_or_bandwidth))
    if not (bw > 0 and math.isfinite(bw)):
        name = getattr(hw_or_bandwidth, "name", "the interconnect")
        raise ValueError(f"{name}: no interconnect bandwidth (specsim/data/hardware.csv column "
                         f"interconnect_GBps); pass bytes/s instead")
    return nbytes / (bw / 2) + cfg.n_layers * 2 * latency


def sharded_cost(cfg, batch: int = 1, n_tokens: int = 1, context: int | None = None,
                 dtype=None, *, model: int = 1, data: int = 1, **kwargs) -> ForwardCost:
    """FLOPs and bytes of one pass on ONE device of a (data, model) mesh: the pass of a
    model with n_heads/model heads, n_kv_heads/model kv heads and d_ff/model MLP columns
    (replicated embedding, head and norms) over batch/data rows. Keywords as
    `forward_cost`; the all-reduces are `allreduce_time`'s."""
    model, data = _mesh_sizes(cfg, positive_int("batch", batch), model, data)
    import dataclasses
    part = dataclasses.replace(cfg, n_heads=cfg.n_heads // model,
                               n_kv_heads=cfg.n_kv_heads // model, d_ff=cfg.d_ff // model)
    return forward_cost(part, batch // data, n_tokens, context, dtype, **kwargs)


def predict_time_sharded(hw: Hardware, cfg, batch: int = 1, n_tokens: int = 1,
                         context: int | None = None, dtype=None, *, model: int = 1,
                         data: int = 1, overhead: float = 0.0, latency: float = 0.0,
                         mode: str = "max", **kwargs) -> float:
    """Roofline time of one pass on a (data, model) mesh of ``hw`` chips: the slowest
    (every) device's `predict_time` of its `sharded_cost`, plus the all-reduces, not
    overlapped with compute. ``overhead`` is the fixed per-pass cost t0 (on a GPU the
    kernel launches, which the fit measures). With model = data = 1 this is
    `predict_time` of `forward_cost`."""
    cost = sharded_cost(cfg, batch, n_tokens, context, dtype, model=model, data=data, **kwargs)
    t = predict_time(hw, cost, overhead, mode=mode)
    return t + allreduce_time(hw, cfg, batch // data, n_tokens, model, dtype, latency=latency)


def device_scaling(hw: Hardware, cfg, batch: int = 1, n_tokens: int = 1,
                   context: int | None = None, dtype=None, *, devices=(1, 2, 4, 8),
                   overhead: float = 0.0, latency: float = 0.0, **kwargs) -> list[dict]:
    """What tensor parallelism over n chips buys against 1: for each n in ``devices``
    (that divides the heads, kv heads and MLP width), the pass time and its speedup
    over one chip, split into the compute/memory part and the all-reduce part."""
    t1 = predict_time_sharded(hw, cfg, batch, n_tokens, context, dtype, overhead=overhead,
                              **kwargs)
    rows = []
    for n in devices:
        n = positive_int("devices", n)
        if cfg.n_heads % n or cfg.n_kv_heads % n or cfg.d_ff % n:
            continue
        comm = allreduce_time(hw, cfg, batch, n_tokens, n, dtype, latency=latency)
        t = predict_time_sharded(hw, cfg, batch, n_tokens, context, dtype, model=n,
                                 overhead=overhead, latency=latency, **kwargs)
        rows.append(dict(devices=n, time=t, allreduce_time=comm, speedup=t1 / t))
    return rows
