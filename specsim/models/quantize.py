"""Weight-only quantisation of a parameter pytree: int8 per output channel, int4 in
groups along the input dimension, dequantised inside the matmul.

    qparams = quantize_params(params, cfg, bits=8)                  # per output channel
    qparams = quantize_params(params, cfg, bits=4, group_size=32)   # groups of 32 inputs
    w_hat = dequantize(qparams["layers"][0]["w_qkv"])               # dense fp32 again

A weight matrix w [..., Din, Dout] (the layout `forward` multiplies as ``x @ w``; a
stacked leading L axis is allowed) becomes a `QuantizedWeight`: a pytree node whose
children are the integer values and the fp32 scales, and whose ``bits`` and
``group_size`` are static aux data (so `jit`, `lax.scan` over stacked layers and every
tree map see two arrays per matrix). Symmetric quantisation, per group g of
``group_size`` consecutive input rows and per output column j::

    scale[g, j] = max_i∈g |w[i, j]| / qmax          qmax = 2^(bits-1) - 1 (127, 7)
    q[i, j]     = round(w[i, j] / scale[g, j])      in [-qmax, qmax], never clipped
    ŵ[i, j]     = q[i, j] * scale[g, j]             |w - ŵ| <= scale / 2

With ``asymmetric=True`` each group also has an fp32 offset, and the 2^bits levels span
the group's range rather than ±max|w| (llama.cpp's Q4_1 format, "scale and min")::

    scale[g, j]  = (max_i∈g w[i, j] - min_i∈g w[i, j]) / (2^bits - 1)
    offset[g, j] = min_i∈g w[i, j] + 2^(bits-1) * scale[g, j]
    q[i, j]      = round((w[i, j] - offset[g, j]) / scale[g, j])   in [-2^(bits-1), 2^(bits-1) - 1]
    ŵ[i, j]      = q[i, j] * scale[g, j] + offset[g, j]

Weights that are already 16 evenly spaced levels per group of 32 (a model read from a
Q4_1 GGUF, as the embedded SmolLM2 is) come back exactly, up to the fp32 rounding of the
scale and offset; symmetric int4 cannot represent them (15 levels centred on zero).

int8 uses one group of all Din rows (one scale per output channel) unless
``group_size`` is given. int4 values are packed two per byte along the input
dimension (rows 2i and 2i+1 in the low and high nibble of byte i), so ``values`` is
[..., Din/2, Dout] int8 and the bytes a pass reads are Din*Dout/2 plus the scales.
Packing halves what is stored and read, which is what a fused kernel is bound by, so
int4 is packed. specsim's CPU kernel is one (`specsim.models.kernels.small_matmul_quantized`,
used by `forward` under matmul "auto" on one CPU device for decode steps and verify
passes): it reads the stored bytes and scales and dequantises in registers, so the
roofline's bytes (`specsim.roofline.forward_cost(weight_bits=...)`) are what it reads.
XLA's dots on XLA:CPU (``matmul="xla"``, prefill) do not fuse the dequantisation:
they write a dense fp32 copy of every matrix and then multiply, and that write dominates
whether int4 is packed or not. The copy costs least under ``layer_loop="scan"``, where
one layer body's buffers are reused; inside an unrolled decode loop XLA hoists the
dequantisation out of the loop and every step reads fp32 copies, so
`specsim.models.quantize_model` lays a quantised model out for the scan. The output head
is left dense by default: quantising it lowers α at temperature 1 and, with XLA's
dequantised copy per pass, cost more time than it saved (see docs/studies/int8.md).

Activations: by default a product multiplies x as it is (fp32). With
``activations="int8"`` the format also rounds x to int8 per group of ``group_size``
inputs before the product (llama.cpp's Q8 activations: one scale per group,
`quantize_activations`), y = x̂ @ ŵ, which the kernel sums in integers (VNNI): a
cheaper step, and another rounding beside the weights' (docs/studies/int4.md).

What is quantised: the projection and MLP matrices of every layer (`QUANTIZED_NAMES`);
with ``head=True`` also the output head (for tied embeddings an ``lm_head`` is added
holding the quantised transpose of ``embed``, and ``embed`` stays dense for the input
gather). Norm scales, biases, embeddings and positions stay dense.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from specsim.errors import InvalidArgument

__all__ = ["QuantizedWeight", "QUANTIZED_NAMES", "BITS", "ACTIVATIONS", "quantize_weight",
           "dequantize", "quantize_params", "dequantize_params", "is_quantized",
           "quantized_matmul", "quantize_activations", "check_quantize_args", "param_bytes",
           "concat_columns", "split_columns"]

BITS = (4, 8)
# What a matmul does with x before multiplying: "fp32" x as it is; "int8" x rounded to int8
# per group of the weight's group_size (`quantize_activations`), as llama.cpp's Q8 activations
ACTIVATIONS = ("fp32", "int8")
QUANTIZED_NAMES = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "w_fc", "w_proj",
                   "w_qkv", "w_gate_up")      # the last two: fused projections


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class QuantizedWeight:
    """A weight-only quantised matrix. values: int8 [..., Din, Dout] (bits=8) or packed
    [..., Din/2, Dout] (bits=4); scales: fp32 [..., Din/group_size, Dout]; offsets: None
    (symmetric) or fp32 like scales (asymmetric: ŵ = q * scale + offset); activations:
    one of `ACTIVATIONS`, what a product does with x (int8: x̂ @ ŵ, x̂ = x rounded to int8
    per group, `quantize_activations`)."""
    values: Any
    scales: Any
    bits: int
    group_size: int
    offsets: Any = None
    activations: str = "fp32"

    def tree_flatten(self):
        return ((self.values, self.scales, self.offsets),
                (self.bits, self.group_size, self.activations))

    @classmethod
    def tree_unflatten(cls, aux, children):
        values, scales, offsets = children
        bits, group_size, activations = aux
        return cls(values, scales, bits, group_size, offsets, activations)

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical (dequantised) shape [..., Din, Dout]."""
        *lead, rows, cols = self.values.shape
        return (*lead, rows * (2 if self.bits == 4 else 1), cols)

    @property
    def nbytes(self) -> int:
        return (int(self.values.nbytes) + int(self.scales.nbytes)
                + (0 if self.offsets is None else int(self.offsets.nbytes)))


def is_quantized(x) -> bool:
    return isinstance(x, QuantizedWeight)


def _pack_int4(q: np.ndarray) -> np.ndarray:
    """q int8 in [-8, 7], [..., Din, Dout] (Din even) -> [..., Din/2, Dout] int8."""
    lo, hi = q[..., 0::2, :], q[..., 1::2, :]
    return ((lo.astype(np.uint8) & 0x0F) | (hi.astype(np.uint8) << 4)).astype(np.int8)


def _unpack_int4(p):
    """p int8 [..., Din/2, Dout] -> int8 [..., Din, Dout] (arithmetic shifts keep signs)."""
    lo = jnp.right_shift(jnp.left_shift(p, 4), 4)
    hi = jnp.right_shift(p, 4)
    out = jnp.stack([lo, hi], axis=-2)                               # [..., Din/2, 2, Dout]
    return out.reshape(*p.shape[:-2], 2 * p.shape[-2], p.shape[-1])


def check_quantize_args(bits, group_size, in_dims=()) -> int | None:
    """Validate ``bits`` (4 or 8) and ``group_size`` (None, or a positive integer dividing
    every input dimension in ``in_dims``; even for int4). Returns group_size as int."""
    if isinstance(bits, bool) or bits not in BITS:
        raise InvalidArgument(f"bits must be 4 or 8, got {bits!r}")
    if group_size is None:
        if bits == 4:
            raise InvalidArgument("group_size is required for bits=4 (int4 is quantised in groups "
                             "along the input dimension), e.g. 32")
        return None
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) \
            or group_size < 1:
        raise InvalidArgument(f"group_size must be a positive integer or None, got {group_size!r}")
    if bits == 4 and group_size % 2:
        raise InvalidArgument(f"group_size must be even for bits=4 (two values per byte), "
                         f"got {group_size}")
    bad = sorted({int(d) for d in in_dims if int(d) % int(group_size)})
    if bad:
        raise InvalidArgument(f"group_size {group_size} must divide the input dimension of every "
                         f"quantised matrix; it does not divide {bad}")
    return int(group_size)


def quantize_weight(w, bits: int = 8, group_size: int | None = None, *,
                    asymmetric: bool = False, activations: str = "fp32") -> QuantizedWeight:
    """Quantise one matrix w [..., Din, Dout] (see the module docstring; ``asymmetric``:
    levels over each group's range, with offsets; ``activations``: one of `ACTIVATIONS`,
    kept in the format). The arithmetic runs in float64 on the host, so the only rounding
    beyond the format's is fp32's in `dequantize`."""
    if isinstance(w, QuantizedWeight):
        w = dequantize(w)
    arr = np.asarray(w, np.float64)
    if arr.ndim < 2:
        raise InvalidArgument(f"w must be a matrix [..., Din, Dout], got shape {arr.shape}")
    din, dout = arr.shape[-2:]
    g = check_quantize_args(bits, group_size, (din,)) or din
    if not isinstance(asymmetric, bool):
        raise InvalidArgument(f"asymmetric must be True or False, got {asymmetric!r}")
    check_activations(activations, g)
    half = 2 ** (bits - 1)
    grouped = arr.reshape(*arr.shape[:-2], din // g, g, dout)         # [..., Din/g, g, Dout]
    if asymmetric:
        lo, hi = grouped.min(axis=-2), grouped.max(axis=-2)            # [..., Din/g, Dout]
        scale = (hi - lo) / (2 * half - 1)
        scale = np.where(scale > 0, scale, 1.0)                        # a constant group
        offset = np.where(hi > lo, lo + half * scale, lo)
        # the scale and offset as the kernel reads them (fp32), so q rounds against those
        scale, offset = scale.astype(np.float32), offset.astype(np.float32)
        q = np.rint((grouped - offset[..., None, :]) / scale[..., None, :])
        q = np.clip(q, -half, half - 1)
    else:
        scale = np.abs(grouped).max(axis=-2) / (half - 1)               # [..., Din/g, Dout]
        scale = np.where(scale > 0, scale, 1.0)                        # an all-zero group
        q, offset = np.rint(grouped / scale[..., None, :]), None
    q = q.reshape(arr.shape).astype(np.int8)
    values = _pack_int4(q) if bits == 4 else q
    return QuantizedWeight(jnp.asarray(values), jnp.asarray(scale, jnp.float32), bits, g,
                           None if offset is None else jnp.asarray(offset, jnp.float32),
                           activations)


# The largest group with int8 activations: a group's integer sum Σ xq (q + 128) fits int32
MAX_INT8_ACTIVATION_GROUP = 65536


def check_activations(activations, group_size: int) -> None:
    """InvalidArgument unless ``activations`` is one of `ACTIVATIONS` (and, for "int8",
    ``group_size`` is at most `MAX_INT8_ACTIVATION_GROUP`)."""
    if activations not in ACTIVATIONS:
        raise InvalidArgument(f"activations must be one of {ACTIVATIONS}, got {activations!r}")
    if activations == "int8" and group_size > MAX_INT8_ACTIVATION_GROUP:
        raise InvalidArgument(f"int8 activations take groups of at most "
                              f"{MAX_INT8_ACTIVATION_GROUP} inputs, got group_size {group_size}")


def quantize_activations(x, group_size: int):
    """x [..., Din] rounded to int8 per group of ``group_size`` inputs and back to fp32:
    x̂ = xq * d, d = amax / 127, xq = round-half-even(x * (127 / amax)) in fp32 (0 where a
    group is all zero), amax the group's max |x|. The kernel forms the same xq and d.
    Its derivative is taken as one (straight through): the rounding is piecewise constant."""
    *lead, din = x.shape
    xg = x.reshape(*lead, din // group_size, group_size)
    amax = jnp.max(jnp.abs(xg), axis=-1, keepdims=True)
    inv = jnp.where(amax > 0, jnp.float32(127) / jnp.where(amax > 0, amax, 1), 0)
    xhat = (jnp.round(xg * inv) * (amax / jnp.float32(127))).reshape(x.shape)
    return x + jax.lax.stop_gradient(xhat - x)


def _grouped_values(qw: QuantizedWeight, dtype):
    """Integer values as ``dtype``, [..., Din/g, g, Dout]."""
    q = _unpack_int4(qw.values) if qw.bits == 4 else qw.values
    *lead, din, dout = q.shape
    return q.astype(dtype).reshape(*lead, din // qw.group_size, qw.group_size, dout)


def dequantize(qw: QuantizedWeight, dtype=jnp.float32):
    """The dense matrix ŵ = q * scale (+ offset), [..., Din, Dout] in ``dtype``."""
    grouped = _grouped_values(qw, jnp.float32) * qw.scales[..., None, :]
    if qw.offsets is not None:
        grouped = grouped + qw.offsets[..., None, :]
    return grouped.reshape(qw.shape).astype(dtype)


def concat_columns(parts) -> QuantizedWeight | None:
    """Quantised matrices side by side along Dout (their columns are independent), or
    None when their formats differ (bits, groups, offsets or not)."""
    if len({(p.bits, p.group_size, p.offsets is None, p.activations) for p in parts}) != 1:
        return None
    cat = lambda xs: jnp.concatenate(xs, -1)                           # noqa: E731
    p0 = parts[0]
    return QuantizedWeight(cat([p.values for p in parts]), cat([p.scales for p in parts]),
                           p0.bits, p0.group_size,
                           None if p0.offsets is None else cat([p.offsets for p in parts]),
                           p0.activations)


def split_columns(qw: QuantizedWeight, cuts) -> list[QuantizedWeight]:
    """``qw`` cut along Dout at ``cuts`` (column indices), as `jnp.split` does."""
    split = lambda a: jnp.split(a, cuts, -1)                           # noqa: E731
    offs = [None] * (len(cuts) + 1) if qw.offsets is None else split(qw.offsets)
    return [QuantizedWeight(v, sc, qw.bits, qw.group_size, o, qw.activations)
            for v, sc, o in zip(split(qw.values), split(qw.scales), offs)]


def quantized_matmul(x, qw: QuantizedWeight, preferred_element_type=None):
    """x [..., Din] @ ŵ [Din, Dout] -> [..., Dout], dequantising inside the matmul. One
    group per column (int8 per channel): (x @ q) * scale, the scale applied to the
    output. In groups (int4, grouped int8): the scales are applied to the per-group
    partial products, y = Σ_g (x_g @ q_g) * scale_g, so no scaled copy of ŵ is formed
    (the same sum as x @ ŵ up to fp32 rounding). XLA:CPU still converts q to fp32 before
    each dot: handing `lax.dot_general` the int8 operand with an fp32 accumulator, or
    int8 x int8 -> int32, lowers to the same convert + dot (see docs/studies/int8.md).
    More than `DENSE_ROWS` rows in groups (a prefill): x @ ŵ with ŵ formed first. int8
    activations: the same with x̂ (`quantize_activations`) for x."""
    out_type = preferred_element_type or x.dtype
    if qw.activations == "int8":
        x = quantize_activations(x, qw.group_size)
    rows = int(np.prod(x.shape[:-1]))
    if qw.values.ndim != 2 or (rows > DENSE_ROWS and qw.scales.shape[0] > 1):
        # stacked, or a prefill in groups: ŵ once, then one matmul (per-group dots of
        # g inputs are a batched GEMM too thin to run well)
        return jnp.matmul(x, dequantize(qw, x.dtype), preferred_element_type=out_type)
    G = qw.scales.shape[0]
    xg = x.reshape(*x.shape[:-1], G, qw.group_size)                   # [..., G, g]
    if G == 1 and qw.bits == 8:
        y = jnp.matmul(x, qw.values.astype(x.dtype), preferred_element_type=out_type)
        y = y * qw.scales[0].astype(out_type)                         # [..., Dout]
    else:
        q = _grouped_values(qw, x.dtype)                              # [G, g, Dout]
        part = jnp.einsum("...Gg,Ggo->...Go", xg, q, preferred_element_type=out_type)
        y = jnp.einsum("...Go,Go->...o", part, qw.scales.astype(out_type))
    if qw.offsets is None:
        return y
    return y + jnp.einsum("...G,Go->...o", jnp.sum(xg, -1).astype(out_type),   # Σ_g (Σx_g) o_g
                          qw.offsets.astype(out_type))


# Above this many rows, a product with grouped weights on XLA's dots forms ŵ first: one
# dense matmul instead of a batched matmul of Din/g thin dots, several times faster for
# a prefill (docs/studies/int4.md).
DENSE_ROWS = 16


def _in_dims(cfg) -> tuple[int, ...]:
    """Input dimensions of the quantised matrices (the head's is d_model)."""
    return tuple(sorted({cfg.d_model, cfg.q_dim, cfg.d_ff}))


def quantize_params(params: dict, cfg, bits: int = 8, group_size: int | None = None, *,
                    head: bool | tuple = False, asymmetric: bool = False,
                    activations: str = "fp32") -> dict:
    """``params`` with every layer's `QUANTIZED_NAMES` matrices (and, with ``head``, the
    output head) quantised to ``bits`` in groups of ``group_size`` input rows (None: per
    output channel, int8 only), with offsets where ``asymmetric``. ``head``: False (dense),
    True (as the layers), or its own format (bits, group_size, asymmetric).
    ``activations`` (one of `ACTIVATIONS`): what every quantised matrix's product does
    with x, the head's too. Works on stacked and per-layer layouts; leaves that are
    already quantised are re-quantised from their dequantised values."""
    check_quantize_args(bits, group_size, _in_dims(cfg))
    head_format = (bits, group_size, asymmetric) if head is True else head
    if head_format:
        if not isinstance(head_format, tuple) or len(head_format) != 3:
            raise InvalidArgument(f"head must be a bool or (bits, group_size, asymmetric), "
                                  f"got {head!r}")
        check_quantize_args(*head_format[:2], (cfg.d_model,))

    def layer(lp: dict) -> dict:
        return {k: quantize_weight(v, bits, group_size, asymmetric=asymmetric,
                                   activations=activations)
                if k in QUANTIZED_NAMES else v for k, v in lp.items()}

    layers = params["layers"]
    out = dict(params)
    out["layers"] = (tuple(layer(lp) for lp in layers) if isinstance(layers, (tuple, list))
                     else layer(layers))
    if head_format:
        dense = params.get("lm_head")
        if dense is None:                                             # tied: quantise embed.T
            dense = np.asarray(params["embed"]).T
        hb, hg, ha = head_format
        out["lm_head"] = quantize_weight(dense, hb, hg, asymmetric=ha, activations=activations)
    return out


def dequantize_params(params: dict, dtype=jnp.float32) -> dict:
    """Every `QuantizedWeight` of ``params`` replaced by its dense ŵ."""
    return jax.tree_util.tree_map(lambda x: dequantize(x, dtype) if is_quantized(x) else x,
                                  params, is_leaf=is_quantized)


def param_bytes(params) -> int:
    """Bytes the pytree stores (quantised values and scales counted as stored)."""
    return int(sum(np.asarray(x).nbytes if not hasattr(x, "nbytes") else int(x.nbytes)
                   for x in jax.tree_util.tree_leaves(params)))
