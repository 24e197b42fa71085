"""A forward pass with an explicit attention mask, for token trees.

    forward_masked(params, cfg, tokens, cache, slots, positions, mask) -> (hidden, cache)

`specsim.models.transformer.forward` writes T new tokens at consecutive slots, gives
each the position of its slot and lets it attend every slot up to it: a chain. A tree
verify pass (and a draft model drafting a tree level by level) needs three things apart:
where each token's keys and values are written (``slots``), the position its rotary
embedding (or gpt2's learned position) uses (``positions``: the root's plus the node's
depth, so siblings share a position), and which slots it attends (``mask``: the context
before the tree, and within the tree only its ancestors and itself).

The attention is XLA's, with the mask given: the CPU cache-attention kernel
(`specsim.models.kernels.cache_attention`) knows only the causal rule "slots up to my
position", so a tree pass runs the grouped einsum over the whole cache instead (see
docs/trees.md, "The engine"). The layer body is `transformer._layer`'s, built from the
same building blocks; matmuls use specsim's CPU kernel where `forward` would.

Shapes: B batch, T new tokens, S cache slots, D model, L layers.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from specsim.models import kernels
from specsim.models.config import ModelConfig
from specsim.models.transformer import (KVCache, _check_layers, _check_layout, _kernel_layer,
                                        _mm, _norm, _part_sizes, _rope, _split_columns,
                                        _write_layer, rope_inv_freq)

__all__ = ["forward_masked", "block_mask"]


def block_mask(start, S: int, rows) -> jax.Array:
    """The attention mask [B, T, S] of T queries that see every slot before ``start``
    [B] and, of the W slots from ``start`` on, those where ``rows`` (bool [T, W], the
    same for every row, or [B, T, W]) is True; nothing after ``start + W``."""
    rows = jnp.asarray(rows)
    if rows.ndim == 2:
        rows = jnp.broadcast_to(rows, (start.shape[0],) + rows.shape)
    B, T, W = rows.shape
    rel = jnp.arange(S, dtype=jnp.int32)[None, :] - start[:, None]             # [B, S]
    inside = (rel >= 0) & (rel < W)
    idx = jnp.broadcast_to(jnp.clip(rel, 0, W - 1)[:, None, :], (B, T, S))
    block = jnp.take_along_axis(rows, idx, 2) & inside[:, None, :]             # [B, T, S]
    return (rel < 0)[:, None, :] | block


def _masked_attention(q, k_all, v_all, mask, cfg: ModelConfig):
    """q [B, T, H, E]; k_all, v_all [B, S, G, E]; mask [B, T, S] → [B, T, H*E]."""
    B, T = q.shape[:2]
    G, R, E = cfg.n_kv_heads, cfg.group_size, cfg.head_dim
    qg = q.reshape(B, T, G, R, E)
    scores = jnp.einsum("btgre,bsge->btgrs", qg, k_all,
                        preferred_element_type=jnp.float32) / math.sqrt(E)
    scores = jnp.where(mask[:, :, None, None], scores, -jnp.inf)
    weights = jax.nn.softmax(scores, axis=-1).astype(v_all.dtype)              # [B,T,G,R,S]
    out = jnp.einsum("btgrs,bsge->btgre", weights, v_all)
    return out.reshape(B, T, G * R * E)


def _masked_layer(x, lp, k_all, v_all, layer, slots, positions, mask, inv_freq,
                  cfg: ModelConfig):
    """`transformer._layer` with writes at ``slots``, rotary angles at ``positions`` and
    attention by ``mask``. → (x, k_all, v_all)."""
    B, T, _ = x.shape
    gpt2 = cfg.arch == "gpt2"
    h = _norm(x, lp["attn_norm_scale"], lp.get("attn_norm_bias"), cfg)
    if "w_qkv" in lp:
        qkv = _mm(h, lp["w_qkv"])
        if "b_qkv" in lp:
            qkv = qkv + lp["b_qkv"]
        q, k, v = _split_columns(qkv, _part_sizes(cfg)["w_qkv"])
    else:
        q, k, v = _mm(h, lp["wq"]), _mm(h, lp["wk"]), _mm(h, lp["wv"])
    if "bq" in lp:
        q, k, v = q + lp["bq"], k + lp["bk"], v + lp["bv"]
    q = q.reshape(B, T, cfg.n_heads, cfg.head_dim)
    k = k.reshape(B, T, cfg.n_kv_heads, cfg.head_dim)
    v = v.reshape(B, T, cfg.n_kv_heads, cfg.head_dim)
    if not gpt2:
        q = _rope(q, positions, inv_freq)
        k = _rope(k, positions, inv_freq)
    k_all = _write_layer(k_all, k, layer, slots)
    v_all = _write_layer(v_all, v, layer, slots)
    attn = _mm(_masked_attention(q, k_all[layer], v_all[layer], mask, cfg), lp["wo"])
    if gpt2:
        attn = attn + lp["bo"]
    x = x + attn
    h = _norm(x, lp["mlp_norm_scale"], lp.get("mlp_norm_bias"), cfg)
    if gpt2:
        h = jax.nn.gelu(_mm(h, lp["w_fc"]) + lp["b_fc"], approximate=True)
        return x + (_mm(h, lp["w_proj"]) + lp["b_proj"]), k_all, v_all
    if "w_gate_up" in lp:
        gate, up = jnp.split(_mm(h, lp["w_gate_up"]), 2, -1)
    else:
        gate, up = _mm(h, lp["w_gate"]), _mm(h, lp["w_up"])
    return x + _mm(jax.nn.silu(gate) * up, lp["w_down"]), k_all, v_all


def forward_masked(params: dict, cfg: ModelConfig, tokens, cache: KVCache, slots, positions,
                   mask) -> tuple[jax.Array, KVCache]:
    """Run tokens [B, T] through the model, writing their keys and values at ``slots``
    [B, T] int32, with positions [B, T] int32 and attention mask [B, T, S] bool (see
    `block_mask`; every row must allow at least one slot). → (final-normed hidden
    states [B, T, D], the cache with the new entries written and ``length``
    unchanged: the caller decides what to keep)."""
    x = params["embed"][tokens]                                                # [B, T, D]
    if cfg.arch == "gpt2":
        x = x + params["pos_embed"][positions]
    inv_freq = jnp.asarray(rope_inv_freq(cfg), jnp.float32) if cfg.arch == "llama" else None
    layers = _check_layout(_check_layers(params["layers"], cfg), cfg)
    k_all, v_all = cache.k, cache.v
    B, T = tokens.shape
    kernel = kernels.use_kernel(cfg.matmul, B * T, cfg.dtype)
    args = (slots, positions, mask, inv_freq, cfg)
    if cfg.layer_loop == "unroll":
        for i, lp in enumerate(layers):
            lp = _kernel_layer(lp, None) if kernel else lp
            x, k_all, v_all = _masked_layer(x, lp, k_all, v_all, i, *args)
    else:
        def body(carry, i):
            x, k_all, v_all = carry
            lp = _kernel_layer(layers, i) if kernel else jax.tree.map(lambda a: a[i], layers)
            return _masked_layer(x, lp, k_all, v_all, i, *args), None

        idx = jnp.arange(cfg.n_layers, dtype=jnp.int32)
        (x, k_all, v_all), _ = jax.lax.scan(body, (x, k_all, v_all), idx)
    x = _norm(x, params["final_norm_scale"], params.get("final_norm_bias"), cfg)
    return x, KVCache(k_all, v_all, cache.length)
