"""A decoder-only transformer in pure JAX: parameters are a pytree, the forward pass is
a pure function, and the KV cache is preallocated.

    forward(params, cfg, tokens, cache) -> (logits, cache)

processes T new tokens for every row of a batch, each row at its own position
``cache.length[b]``, and returns the cache with ``length`` advanced by T. A caller that
wants to keep only some of those tokens (speculative decoding rejecting drafts) sets
``length`` back; nothing is copied or shrunk, stale entries beyond ``length`` are masked
and later overwritten.

Dimension names (einsums and shape comments): B batch, T new tokens, S cache slots,
D model, H query heads, G kv heads, R query heads per kv head, E head dim, F ffn,
V vocab, L layers.

Parameter pytree (layers stacked along a leading L axis, as `init_params` returns them
for ``layer_loop="scan"``; `unstack_layers` turns ``layers`` into a tuple of L dicts
with the same names and no L axis, the layout of ``layer_loop="unroll"``)::

    embed      [V, D]                   token embedding
    pos_embed  [P, D]                   gpt2 only, learned positions
    layers:
      attn_norm_scale [L, D]            (+ attn_norm_bias for gpt2)
      wq [L, D, H*E]  wk [L, D, G*E]  wv [L, D, G*E]  wo [L, H*E, D]
      bq [L, H*E]  bk [L, G*E]  bv [L, G*E]   when cfg.qkv_bias or gpt2
      bo [L, D]                         gpt2 only
      mlp_norm_scale [L, D]             (+ mlp_norm_bias for gpt2)
      llama: w_gate [L, D, F]  w_up [L, D, F]  w_down [L, F, D]
      gpt2:  w_fc [L, D, F]  b_fc [L, F]  w_proj [L, F, D]  b_proj [L, D]
    final_norm_scale [D]                (+ final_norm_bias for gpt2)
    lm_head    [D, V]                   only when not cfg.tie_embeddings (or a quantised head)

With ``cfg.fused_projections`` (the default) `arrange_layers` replaces wq/wk/wv by one
``w_qkv [L, D, H*E + 2*G*E]`` (bq/bk/bv by ``b_qkv``) and w_gate/w_up by one
``w_gate_up [L, D, 2F]`` (`fuse_projections`; `unfuse_projections` gives the names back
for saving and tensor-parallel sharding); `forward` runs either layout.

Any of the matrices wq..w_proj (and lm_head) may be a `QuantizedWeight` (weight-only
int8/int4, `specsim.models.quantize`): `_mm` dequantises it inside the matmul; dense
arrays take the plain ``x @ w`` path unchanged.

Layer loop: ``cfg.layer_loop`` chooses ``lax.scan`` over stacked layers (compile time
flat in depth; the default) or a Python loop that XLA unrolls over per-layer arrays. The
loaders (`specsim.models.load`) and `init_params` lay the layers out for the configured
loop (`arrange_layers`), and `forward` refuses the other layout (a `ConfigError` pointing
at `Model.with_layer_loop`) rather than run a slow path: "scan" over per-layer arrays
would stack them inside the program (a copy of the weights per call), and slicing
stacked weights inside an unrolled XLA:CPU program is several times slower than either.
With specsim's CPU matmul kernel (`specsim.models.kernels`, ``matmul="auto"`` on one CPU
device) the kernel reads a layer's weights in place from the stack, so the scanned step
is as fast as the unrolled one and compiles about twice as fast; without it
(``matmul="xla"``) the unrolled step is faster on XLA:CPU, so ``with_layer_loop("unroll")``
is worth it for long runs there (see docs/studies/layer-loop.md).

Attention (`specsim.models.attention`): XLA's reads the whole preallocated cache, so
size caches to the job (prompt + new + k + 1). On one CPU device under matmul "auto",
every pass attends by the kernel instead (`kernels.cache_attention`, and
`kernels.tree_attention` for a token tree's `BlockMask`): no slice copy, and only the
slots each query attends, so a step's cost follows the context (see
docs/studies/cpu-attention-kernel.md and docs/studies/decode-step-profile.md).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specsim.errors import ConfigError, InvalidArgument
from specsim.models import attention as att
from specsim.models import compiler, kernels
from specsim.models.config import ModelConfig
from specsim.models.quantize import (QuantizedWeight, concat_columns, is_quantized,
                                     quantized_matmul, split_columns)
from specsim.validation import positive_int


class KVCache(NamedTuple):
    k: jax.Array       # [L, B, S, G, E]
    v: jax.Array       # [L, B, S, G, E]
    length: jax.Array  # [B] int32: tokens already in the cache for each row

    @property
    def cache_len(self) -> int:
        """S: KV slots per row."""
        return self.k.shape[2]

    @property
    def max_len(self) -> int:
        """Old name of `cache_len`."""
        return self.cache_len

    @property
    def batch(self) -> int:
        return self.k.shape[1]


def init_cache(cfg: ModelConfig, batch: int, cache_len: int, dtype=None) -> KVCache:
    """An empty cache of ``cache_len`` slots per row."""
    batch = positive_int("batch", batch)
    cache_len = positive_int("cache_len", cache_len)
    if cfg.arch == "gpt2" and cache_len > cfg.max_seq_len:
        raise InvalidArgument(
            f"cache_len ({cache_len}) exceeds the learned positions of {cfg.name} "
            f"(max_seq_len={cfg.max_seq_len})")
    dtype = jnp.dtype(dtype or cfg.dtype)
    shape = (cfg.n_layers, batch, cache_len, cfg.n_kv_heads, cfg.head_dim)
    return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype),
                   jnp.zeros((int(batch),), jnp.int32))


# ---- parameters ------------------------------------------------------------------------
def param_shapes(cfg: ModelConfig) -> dict:
    """The shape of every parameter, as the same nested dict `init_params` returns."""
    L, D, F, V = cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.vocab_size
    Q, K = cfg.q_dim, cfg.kv_dim
    layers = {"attn_norm_scale": (L, D), "wq": (L, D, Q), "wk": (L, D, K), "wv": (L, D, K),
              "wo": (L, Q, D), "mlp_norm_scale": (L, D)}
    shapes: dict = {"embed": (V, D), "final_norm_scale": (D,)}
    if cfg.arch == "llama":
        layers.update(w_gate=(L, D, F), w_up=(L, D, F), w_down=(L, F, D))
        if cfg.qkv_bias:
            layers.update(bq=(L, Q), bk=(L, K), bv=(L, K))
    else:
        layers.update(attn_norm_bias=(L, D), mlp_norm_bias=(L, D), bq=(L, Q), bk=(L, K),
                      bv=(L, K), bo=(L, D), w_fc=(L, D, F), b_fc=(L, F), w_proj=(L, F, D),
                      b_proj=(L, D))
        shapes.update(pos_embed=(cfg.max_seq_len, D), final_norm_bias=(D,))
    if not cfg.tie_embeddings:
        shapes["lm_head"] = (D, V)
    shapes["layers"] = layers
    return shapes


def init_params(key: jax.Array, cfg: ModelConfig) -> dict:
    """Random parameters: normal(0, 0.02) matrices (scaled 1/sqrt(2L) on residual
    outputs), unit norm scales, small random biases (so bias bugs cannot hide), with the
    layers laid out for ``cfg.layer_loop`` (stacked for "scan", per-layer for "unroll";
    the values do not depend on the layout)."""
    shapes = param_shapes(cfg)
    flat, treedef = jax.tree_util.tree_flatten_with_path(shapes, is_leaf=lambda x: isinstance(x, tuple))
    keys = jax.random.split(key, len(flat))
    dtype = jnp.dtype(cfg.dtype)
    leaves = []
    for (path, shape), k in zip(flat, keys):
        name = path[-1].key
        if "norm_scale" in name:
            leaf = 1.0 + 0.1 * jax.random.normal(k, shape)
        elif "norm_bias" in name or name.startswith("b"):
            leaf = 0.02 * jax.random.normal(k, shape)
        else:
            std = 0.02 / math.sqrt(2 * cfg.n_layers) if name in ("wo", "w_down", "w_proj") else 0.02
            leaf = std * jax.random.normal(k, shape)
        leaves.append(leaf.astype(dtype))
    return arrange_layers(jax.tree_util.tree_unflatten(treedef, leaves), cfg)


def stack_layers(params: dict) -> dict:
    """``params`` with its layers as one dict of stacked [L, ...] arrays (the layout
    `init_params` returns; what ``layer_loop="scan"`` runs on)."""
    layers = params["layers"]
    if isinstance(layers, dict):
        return params
    names = layers[0].keys()
    stack = lambda *xs: jnp.stack(xs)                                 # noqa: E731
    return dict(params, layers={k: jax.tree_util.tree_map(stack, *[lp[k] for lp in layers])
                                for k in names})


def unstack_layers(params: dict) -> dict:
    """``params`` with its layers as a tuple of per-layer dicts of separate arrays: the
    fastest layout for ``layer_loop="unroll"`` on XLA:CPU (see the module docstring)."""
    layers = params["layers"]
    if isinstance(layers, tuple):
        return params
    n = next(iter(layers.values())).shape[0]
    return dict(params, layers=tuple(_take_layers(layers, i) for i in range(n)))


def _take_layers(layers: dict, index) -> dict:
    """Stacked layers indexed along L (an int or an index array); quantised weights
    (`QuantizedWeight`: values and scales) are indexed leaf by leaf."""
    return jax.tree_util.tree_map(lambda v: v[index], layers)


def arrange_layers(params: dict, cfg: ModelConfig) -> dict:
    """The layout ``cfg`` runs fastest on (loaders call this): layers stacked or per-layer
    for ``cfg.layer_loop``, projections fused or not for ``cfg.fused_projections``."""
    layered = unstack_layers(params) if cfg.layer_loop == "unroll" else stack_layers(params)
    if cfg.fused_projections:
        return fuse_projections(layered)
    return unfuse_projections(layered, cfg)


# Fused projections: (fused leaf, its parts in column order). One matmul in place of
# three (two) reads the same weights with fewer calls; never slower than the separate
# matmuls (`benchmarks/bench_models.py`, `fused_vs_separate`; see
# docs/studies/decode-step-profile.md).
FUSED = (("w_qkv", ("wq", "wk", "wv")), ("b_qkv", ("bq", "bk", "bv")),
         ("w_gate_up", ("w_gate", "w_up")))


def _concat_columns(parts):
    """Matrices (or biases) [..., Dout_i] side by side along the last axis; quantised
    ones (same bits and groups: their columns are independent) value- and scale-wise."""
    if all(isinstance(p, QuantizedWeight) for p in parts):
        return concat_columns(parts)
    if any(isinstance(p, QuantizedWeight) for p in parts):
        return None
    return jnp.concatenate(parts, -1)


def _split_columns(x, sizes):
    cuts = np.cumsum(sizes)[:-1].tolist()
    if isinstance(x, QuantizedWeight):
        return split_columns(x, cuts)
    return jnp.split(x, cuts, -1)


def _part_sizes(cfg: ModelConfig) -> dict:
    return {"w_qkv": (cfg.q_dim, cfg.kv_dim, cfg.kv_dim), "b_qkv": (cfg.q_dim, cfg.kv_dim,
            cfg.kv_dim), "w_gate_up": (cfg.d_ff, cfg.d_ff)}


def _each_layer(params: dict, fn) -> dict:
    layers = params["layers"]
    if isinstance(layers, (tuple, list)):
        return dict(params, layers=tuple(fn(lp) for lp in layers))
    return dict(params, layers=fn(layers))


def fuse_projections(params: dict) -> dict:
    """``params`` with each layer's q/k/v projections (and biases) as one ``w_qkv``
    [..., D, Q+2K] (``b_qkv``) and llama's gate/up as one ``w_gate_up`` [..., D, 2F]:
    two matmuls where there were five. Works on stacked and per-layer layouts and on
    quantised weights of one format; already fused leaves are kept."""
    def layer(lp: dict) -> dict:
        lp = dict(lp)
        for fused, parts in FUSED:
            if all(p in lp for p in parts) and (fused != "b_qkv" or "w_qkv" in lp):
                joined = _concat_columns([lp[p] for p in parts])
                if joined is not None:
                    lp = {k: v for k, v in lp.items() if k not in parts}
                    lp[fused] = joined
        return lp

    return _each_layer(params, layer)


def unfuse_projections(params: dict, cfg: ModelConfig) -> dict:
    """The inverse of `fuse_projections` (the checkpoint names: wq, wk, wv, bq, bk, bv,
    w_gate, w_up), for what reads weights by name (saving, tensor-parallel sharding)."""
    sizes = _part_sizes(cfg)

    def layer(lp: dict) -> dict:
        lp = dict(lp)
        for fused, parts in FUSED:
            if fused in lp:
                lp.update(zip(parts, _split_columns(lp.pop(fused), sizes[fused])))
        return lp

    return _each_layer(params, layer)


def _check_layers(layers, cfg: ModelConfig):
    if isinstance(layers, list):
        layers = tuple(layers)
    n = len(layers) if isinstance(layers, tuple) else next(iter(layers.values())).shape[0]
    if n != cfg.n_layers:
        raise ConfigError(f"params hold {n} layers but cfg.n_layers is {cfg.n_layers}")
    return layers


def _check_layout(layers, cfg: ModelConfig):
    """Refuse a layer layout that does not match ``cfg.layer_loop`` (it would run a slow
    path: see the module docstring)."""
    per_layer = isinstance(layers, tuple)
    if per_layer != (cfg.layer_loop == "unroll"):
        have, want = ("per-layer", "stacked") if per_layer else ("stacked", "per-layer")
        raise ConfigError(
            f"params hold {have} layers but cfg.layer_loop is {cfg.layer_loop!r}, which runs "
            f"{want} ones; lay them out with Model.with_layer_loop({cfg.layer_loop!r}) (or "
            f"arrange_layers(params, cfg) for a bare pytree)")
    return layers


def select_layers(params: dict, cfg: ModelConfig, layer_ids) -> tuple[dict, ModelConfig]:
    """The same model with only ``layer_ids`` of its layers (a layer-skip self-draft).
    Stacked layers are gathered; per-layer (unstacked) ones are shared without a copy.
    Everything else is shared."""
    ids = tuple(int(i) for i in layer_ids)
    if not ids:
        raise InvalidArgument("layer_ids must name at least one layer")
    if any(i < 0 or i >= cfg.n_layers for i in ids) or len(set(ids)) != len(ids):
        raise InvalidArgument(
            f"layer_ids must be distinct integers in [0, {cfg.n_layers - 1}], got {ids}")
    sub = dict(params)
    layers = _check_layers(params["layers"], cfg)
    if isinstance(layers, tuple):
        sub["layers"] = tuple(layers[i] for i in ids)
    else:
        sub["layers"] = _take_layers(layers, np.asarray(ids))
    return sub, cfg.replace(n_layers=len(ids), name=f"{cfg.name}-layers{len(ids)}")


# ---- building blocks -------------------------------------------------------------------
def _mm(x, w):
    """x [..., Din] @ w [Din, Dout]: a dense array as it is, a `QuantizedWeight`
    dequantised inside the matmul (`specsim.models.quantize.quantized_matmul`), a
    `_Kernel` weight by specsim's CPU kernel (`specsim.models.kernels`)."""
    if isinstance(w, _Kernel):
        if is_quantized(w.w):
            return kernels.small_matmul_quantized(x, w.w, w.layer)
        return kernels.small_matmul(x, w.w, w.layer)
    if is_quantized(w):
        return quantized_matmul(x, w)
    return x @ w


# The layer weights `_mm` multiplies (every other leaf is a norm scale or a bias).
_MATMUL_WEIGHTS = frozenset(("wq", "wk", "wv", "wo", "w_qkv", "w_gate", "w_up", "w_gate_up",
                             "w_down", "w_fc", "w_proj"))


def _matmul_weights(layers) -> list:
    """The matmul weights of ``layers`` (stacked, or the first of a per-layer list)."""
    first = layers if isinstance(layers, dict) else layers[0]
    return [w for name, w in first.items() if name in _MATMUL_WEIGHTS]


class _Kernel(NamedTuple):
    """A layer weight for the kernel (dense fp32, or a `QuantizedWeight`): stacked
    [L, Din, Dout] and the layer to use (the kernel reads it in place; under scan XLA
    would copy the slice first)."""
    w: jax.Array
    layer: Any


def _kernel_layer(layers, layer):
    """One layer's params for the kernel: its dense matmul weights as `_Kernel` views of
    ``layers`` (stacked [L, ...] when ``layer`` is given; one layer's dict, made [1, ...],
    when it is None), the other leaves as they are (sliced at ``layer``)."""
    out = {}
    for name, leaf in layers.items():
        if name in _MATMUL_WEIGHTS and (not is_quantized(leaf) or kernels.takes_quantized(leaf)):
            out[name] = (_Kernel(jax.tree.map(lambda a: a[None], leaf), 0) if layer is None
                         else _Kernel(leaf, layer))                      # [1 or L, ...]
        else:
            out[name] = leaf if layer is None else jax.tree.map(lambda a: a[layer], leaf)
    return out


def _norm(x, scale, bias, cfg: ModelConfig):
    """RMSNorm (llama) or LayerNorm (gpt2), computed in fp32."""
    xf = x.astype(jnp.float32)
    if cfg.arch == "llama":
        xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + cfg.norm_eps)
        return (xf * scale.astype(jnp.float32)).astype(x.dtype)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
    xf = (xf - mean) * jax.lax.rsqrt(var + cfg.norm_eps)
    return (xf * scale.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
    """Inverse frequencies [E/2], with the 'linear' and 'llama3' scalings of HF."""
    E = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, E, 2, dtype=np.float64) / E))
    scaling = cfg.rope_scaling_dict
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return inv
    if kind == "linear":
        return inv / float(scaling["factor"])
    if kind == "llama3":
        factor = float(scaling["factor"])
        low = float(scaling.get("low_freq_factor", 1.0))
        high = float(scaling.get("high_freq_factor", 4.0))
        old_ctx = float(scaling.get("original_max_position_embeddings", 8192))
        wavelen = 2 * math.pi / inv
        low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
        scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old_ctx / wavelen - low) / (high - low)
        mid = (1 - smooth) * scaled / factor + smooth * scaled
        is_mid = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return np.where(is_mid, mid, scaled)
    raise InvalidArgument(f"unsupported rope_scaling type {kind!r}; supported: default, linear, llama3")


def _rope(x, positions, inv_freq):
    """Rotary embedding in the Hugging Face (rotate-half) layout.
    x [B, T, N, E], positions [B, T] int32, inv_freq [E/2]."""
    angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, E/2]
    cos = jnp.cos(angles)[:, :, None, :]
    sin = jnp.sin(angles)[:, :, None, :]
    xf = x.astype(jnp.float32)
    x1, x2 = jnp.split(xf, 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


def _write_layer(cache_all, new, layer, positions):
    """Write new [B, T, G, E] into layer ``layer`` of cache_all [L, B, S, G, E] at each
    row's positions [B, T]: one scatter, in place when the cache is donated. Positions
    past the end are dropped (never clamped onto earlier slots); `check_headroom`
    guards that eagerly."""
    rows = jnp.arange(new.shape[0], dtype=jnp.int32)[:, None]          # [B, 1]
    return cache_all.at[layer, rows, positions].set(new.astype(cache_all.dtype), mode="drop")


def _layer(x, lp, k_all, v_all, layer, positions, inv_freq, cfg: ModelConfig,
           in_place: bool = False, slots=None, mask=None):
    """One transformer block. x [B, T, D]; lp this layer's params (no L axis);
    k_all, v_all [L, B, S, G, E] the whole cache; layer a Python or traced index;
    positions [B, T] the rotary positions; in_place: attention by the kernels
    (`attention.attention_in_place`, `attention.attention_tree_in_place`). slots [B, T] where the new
    keys/values go and mask the slots each token attends (a `BlockMask`: a token tree);
    by default ``positions`` and the causal rule.
    Returns (x, k_all, v_all) with this layer's new keys/values written."""
    B, T, _ = x.shape
    gpt2 = cfg.arch == "gpt2"
    h = _norm(x, lp["attn_norm_scale"], lp.get("attn_norm_bias"), cfg)
    if "w_qkv" in lp:                                                # fused: one matmul
        qkv = _mm(h, lp["w_qkv"])                                    # [B, T, (H+2G)*E]
        if "b_qkv" in lp:
            qkv = qkv + lp["b_qkv"]
        q, k, v = _split_columns(qkv, _part_sizes(cfg)["w_qkv"])
    else:
        q = _mm(h, lp["wq"])                                         # [B, T, H*E]
        k = _mm(h, lp["wk"])                                         # [B, T, G*E]
        v = _mm(h, lp["wv"])
    if "bq" in lp:
        q, k, v = q + lp["bq"], k + lp["bk"], v + lp["bv"]
    q = q.reshape(B, T, cfg.n_heads, cfg.head_dim)
    k = k.reshape(B, T, cfg.n_kv_heads, cfg.head_dim)
    v = v.reshape(B, T, cfg.n_kv_heads, cfg.head_dim)
    if not gpt2:
        q = _rope(q, positions, inv_freq)
        k = _rope(k, positions, inv_freq)
    slots = positions if slots is None else slots
    k_all = _write_layer(k_all, k, layer, slots)
    v_all = _write_layer(v_all, v, layer, slots)
    if mask is not None and in_place:
        attn = att.attention_tree_in_place(q, k_all, v_all, layer, mask.start, mask.rows, cfg)
    elif mask is not None:
        attn = att.attention_masked(q, k_all[layer], v_all[layer],
                                    mask.dense(k_all.shape[2]), cfg)
    elif in_place:
        attn = att.attention_in_place(q, k_all, v_all, layer, positions, cfg)
    else:
        attn = att.attention(q, k_all[layer], v_all[layer], positions, cfg)
    attn = _mm(attn, lp["wo"])                                       # [B, T, D]
    if gpt2:
        attn = attn + lp["bo"]
    x = x + attn
    h = _norm(x, lp["mlp_norm_scale"], lp.get("mlp_norm_bias"), cfg)
    if gpt2:
        h = jax.nn.gelu(_mm(h, lp["w_fc"]) + lp["b_fc"], approximate=True)
        x = x + (_mm(h, lp["w_proj"]) + lp["b_proj"])
    else:
        if "w_gate_up" in lp:                                        # fused: one matmul
            gate, up = jnp.split(_mm(h, lp["w_gate_up"]), 2, -1)     # [B, T, F] each
        else:
            gate, up = _mm(h, lp["w_gate"]), _mm(h, lp["w_up"])
        h = jax.nn.silu(gate) * up                                   # [B, T, F]
        x = x + _mm(h, lp["w_down"])
    return x, k_all, v_all


def forward(params: dict, cfg: ModelConfig, tokens: jax.Array, cache: KVCache,
            ) -> tuple[jax.Array, KVCache]:
    """Run T new tokens per row through the model.

    tokens [B, T] int32; cache holds each row's past. Returns logits [B, T, V] in fp32
    and the cache with the new keys/values written at slots length[b]..length[b]+T-1
    and ``length`` advanced by T. Callers guarantee ``length + T <= S`` (writes past the
    end are dropped, and those tokens could not attend to themselves); `check_headroom`
    checks that eagerly. ``params["layers"]`` may be stacked or per-layer (see above).
    """
    h, cache = forward_hidden(params, cfg, tokens, cache)
    return project(params, cfg, h), cache


def forward_hidden(params: dict, cfg: ModelConfig, tokens: jax.Array, cache: KVCache,
                   ) -> tuple[jax.Array, KVCache]:
    """`forward` up to the final norm: hidden states [B, T, D] (what the head reads;
    drafters that read the target's features take them from here) and the cache."""
    T = tokens.shape[1]
    start = cache.length                                              # [B]
    positions = start[:, None] + jnp.arange(T, dtype=jnp.int32)[None]  # [B, T]
    x, k_all, v_all = _run_layers(params, cfg, tokens, cache, positions)
    return x, KVCache(k_all, v_all, start + T)


def _run_layers(params: dict, cfg: ModelConfig, tokens, cache: KVCache, positions,
                slots=None, mask=None):
    """Embed tokens [B, T] at positions [B, T] and run them through every layer
    (`_layer`, with its ``slots`` and ``mask``). → (final-normed hidden states
    [B, T, D], k_all, v_all [L, B, S, G, E] with the new entries written)."""
    B, T = tokens.shape
    x = params["embed"][tokens]                                       # [B, T, D]
    if cfg.arch == "gpt2":
        x = x + params["pos_embed"][positions]
    inv_freq = jnp.asarray(rope_inv_freq(cfg), jnp.float32) if cfg.arch == "llama" else None
    layers = _check_layout(_check_layers(params["layers"], cfg), cfg)
    k_all, v_all = cache.k, cache.v                                   # [L, B, S, G, E]

    kernel = kernels.use_kernel(cfg.matmul, B * T, cfg.dtype, _matmul_weights(layers))
    in_place = (kernels.use_attention_kernel(cfg.matmul, T, cfg.dtype)
                and k_all.dtype == jnp.float32 and x.dtype == jnp.float32)
    step = partial(_layer, positions=positions, inv_freq=inv_freq, cfg=cfg,
                   in_place=in_place, slots=slots, mask=mask)
    if cfg.layer_loop == "unroll":
        for i, lp in enumerate(layers):
            lp = _kernel_layer(lp, None) if kernel else lp
            x, k_all, v_all = step(x, lp, k_all, v_all, i)
    elif kernel:                              # scan over the layer index, weights in place
        def body(carry, i):
            x, k_all, v_all = carry
            return step(x, _kernel_layer(layers, i), k_all, v_all, i), None

        idx = jnp.arange(cfg.n_layers, dtype=jnp.int32)
        (x, k_all, v_all), _ = jax.lax.scan(body, (x, k_all, v_all), idx)
    else:
        def body(carry, lp_i):
            x, k_all, v_all = carry
            lp, i = lp_i
            return step(x, lp, k_all, v_all, i), None

        idx = jnp.arange(cfg.n_layers, dtype=jnp.int32)
        (x, k_all, v_all), _ = jax.lax.scan(body, (x, k_all, v_all), (layers, idx))

    x = _norm(x, params["final_norm_scale"], params.get("final_norm_bias"), cfg)
    return x, k_all, v_all


def project(params: dict, cfg: ModelConfig, x: jax.Array) -> jax.Array:
    """The output head: final-normed hidden states [B, T, D] → logits [B, T, V] fp32."""
    # a quantised head (`quantize_params(head=True)`) is an lm_head even when tied
    rows = x.shape[0] * x.shape[1]
    if cfg.tie_embeddings and "lm_head" not in params:
        if not is_quantized(params["embed"]) and kernels.use_kernel(cfg.matmul, rows,
                                                                    cfg.dtype):
            return kernels.small_matmul(x, params["embed"], transposed=True)
        # the embedding [V, D] contracted along D as it lies: ``x @ embed.T`` compiled
        # to a slow loop fusion over a transposed embedding on XLA:CPU
        return jax.lax.dot_general(x, params["embed"], (((2,), (1,)), ((), ())),
                                   preferred_element_type=jnp.float32)
    head = params["lm_head"]                                          # [D, V]
    if kernels.use_kernel(cfg.matmul, rows, cfg.dtype, [head]):
        if not is_quantized(head):
            return kernels.small_matmul(x, head)
        if kernels.takes_quantized(head):
            return kernels.small_matmul_quantized(x, head)
    if is_quantized(head):
        return quantized_matmul(x, head, preferred_element_type=jnp.float32)
    return jnp.einsum("btd,dv->btv", x, head, preferred_element_type=jnp.float32)


def check_headroom(cache: KVCache, n_new: int, what: str = "tokens") -> None:
    """Raise if writing ``n_new`` more tokens would run past the cache (eager check)."""
    longest = int(np.max(np.asarray(cache.length))) + int(n_new)
    if longest > cache.cache_len:
        raise InvalidArgument(
            f"{what}: {longest} positions needed but the KV cache holds {cache.cache_len}; "
            f"allocate a larger cache (cache_len)")


def check_tokens(tokens, cfg: ModelConfig, name: str = "tokens") -> np.ndarray:
    """Validate token ids eagerly: integers in [0, vocab_size)."""
    arr = np.asarray(tokens)
    if arr.dtype.kind not in "iu":
        raise InvalidArgument(f"{name} must be integer token ids, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() >= cfg.vocab_size):
        raise InvalidArgument(
            f"{name} must lie in [0, {cfg.vocab_size - 1}] (vocab_size={cfg.vocab_size}); "
            f"got min {arr.min()}, max {arr.max()}")
    return arr


def prefill(params: dict, cfg: ModelConfig, tokens, cache: KVCache, chunk: int | None = None
            ) -> tuple[jax.Array, KVCache]:
    """Run a prompt [B, T] through the model, in one pass or in chunks of ``chunk``
    tokens. Returns the logits of every prompt position [B, T, V] and the cache."""
    arr = check_tokens(tokens, cfg)
    if arr.ndim != 2 or arr.shape[1] < 1:
        raise InvalidArgument(f"tokens must have shape [batch, n_tokens>=1], got {arr.shape}")
    if arr.shape[0] != cache.batch:
        raise InvalidArgument(f"tokens batch {arr.shape[0]} != cache batch {cache.batch}")
    check_headroom(cache, arr.shape[1], "prefill")
    tokens = jnp.asarray(arr, jnp.int32)
    step = _forward_jit
    if chunk is None:
        return step(params, cfg, tokens, cache)
    chunk = positive_int("chunk", chunk)
    outs = []
    for s in range(0, tokens.shape[1], chunk):
        logits, cache = step(params, cfg, tokens[:, s:s + chunk], cache)
        outs.append(logits)
    return jnp.concatenate(outs, axis=1), cache


_forward_jit = compiler.jit(forward, static_argnums=1)
