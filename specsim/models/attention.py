"""Attention of new tokens over the KV cache, as `specsim.models.transformer`'s layers
run it: XLA's forms (`attention`: the kv-head pairs form for few kv heads and new tokens,
else one grouped einsum; `attention_masked` for an explicit mask) and the CPU kernels'
(`attention_in_place`, `attention_tree_in_place`: `specsim.models.kernels`, read in
place, derivatives XLA's). `BlockMask` is the mask of a token tree's pass.

Shapes: q [B, T, H, E]; k_all, v_all [B, S, G, E] for one layer, or [L, B, S, G, E] for
the kernels (the layer read in place); positions [B, T]; out [B, T, H*E].
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from specsim.models import kernels
from specsim.models.config import ModelConfig

__all__ = ["attention", "attention_pairs", "attention_grouped", "attention_masked",
           "attention_in_place", "attention_tree_in_place", "slot_mask", "BlockMask",
           "PAIRS_MAX_G", "PAIRS_MAX_T"]


# The pairs form below computes every (kv head, kv head) pair and keeps the diagonal:
# G x the attention flops, so only for few kv heads and few new tokens (decode, verify).
PAIRS_MAX_G = 4
PAIRS_MAX_T = 16


def attention(q, k_all, v_all, positions, cfg: ModelConfig):
    """q [B, T, H, E]; k_all, v_all [B, S, G, E]; positions [B, T] (query positions).
    Query at position p attends cache slots 0..p. Returns [B, T, H*E].

    XLA:CPU's dots want the batch (kv head) axis in front, so the grouped einsum copies
    each layer's keys and values into a [G, S, E] / [G, E, S] layout first (a transpose
    per layer and step: 17% of a SmolLM2 decode step in XLA's per-op profile). For few
    kv heads and new tokens the pairs form reads the cache in place instead."""
    if cfg.n_kv_heads <= PAIRS_MAX_G and q.shape[1] <= PAIRS_MAX_T:
        return attention_pairs(q, k_all, v_all, positions, cfg)
    return attention_grouped(q, k_all, v_all, positions, cfg)


def slot_mask(positions, S):
    """[B, T, S]: query t of row b (at positions[b, t]) may attend slot s <= its position."""
    return jnp.arange(S, dtype=jnp.int32)[None, None, :] <= positions[:, :, None]


def attention_pairs(q, k_all, v_all, positions, cfg: ModelConfig):
    """`attention` with the cache read in its own layout: keys and values [B, S, G, E]
    against every kv head's queries (dots whose free axes (S, G) / (G, E) are the cache's
    own, so XLA views them as [S*G, E] / [S, G*E] without a copy, and a sharded G stays
    sharded), then the matching-head diagonal of the scores and of the outputs."""
    B, T = q.shape[:2]
    G, R, E = cfg.n_kv_heads, cfg.group_size, cfg.head_dim
    S = k_all.shape[1]
    qg = q.reshape(B, T, G, R, E)
    scores = jax.lax.dot_general(k_all, qg, (((3,), (4,)), ((0,), (0,))),
                                 preferred_element_type=jnp.float32)  # [B, S, G, T, G, R]
    scores = jnp.diagonal(scores, axis1=2, axis2=4) / math.sqrt(E)   # [B, S, T, R, G]
    scores = jnp.moveaxis(scores, 1, 2)                               # [B, T, S, R, G]
    scores = jnp.where(slot_mask(positions, S)[..., None, None], scores, -jnp.inf)
    weights = jax.nn.softmax(scores, axis=2).astype(v_all.dtype)
    out = jax.lax.dot_general(weights, v_all, (((2,), (1,)), ((0,), (0,))))  # [B,T,R,G,G,E]
    out = jnp.diagonal(out, axis1=3, axis2=4)                         # [B, T, R, E, G]
    return jnp.moveaxis(out, -1, 2).reshape(B, T, G * R * E)         # (g, r, e) order


def attention_grouped(q, k_all, v_all, positions, cfg: ModelConfig):
    """`attention` as one grouped einsum per side (flops as written)."""
    return attention_masked(q, k_all, v_all, slot_mask(positions, k_all.shape[1]), cfg)


def attention_masked(q, k_all, v_all, mask, cfg: ModelConfig):
    """q [B, T, H, E]; k_all, v_all [B, S, G, E]; mask [B, T, S] bool, the slots each
    query attends (every row allows at least one) → [B, T, H*E], by grouped einsums."""
    B, T = q.shape[:2]
    G, R, E = cfg.n_kv_heads, cfg.group_size, cfg.head_dim
    qg = q.reshape(B, T, G, R, E)
    scores = jnp.einsum("btgre,bsge->btgrs", qg, k_all,
                        preferred_element_type=jnp.float32) / math.sqrt(E)
    scores = jnp.where(mask[:, :, None, None], scores, -jnp.inf)
    weights = jax.nn.softmax(scores, axis=-1).astype(v_all.dtype)    # [B, T, G, R, S]
    out = jnp.einsum("btgrs,bsge->btgre", weights, v_all)
    return out.reshape(B, T, G * R * E)


class BlockMask(NamedTuple):
    """The slots each of T new tokens attends, as a token tree needs: every slot before
    ``start`` [B] int32 and, of the W slots from ``start`` on, those where ``rows``
    [B, T, W] bool is True (its ancestors and itself); nothing after ``start + W``.
    `specsim.models.masked_forward.block_mask` makes one."""
    start: jax.Array
    rows: jax.Array

    def dense(self, S: int) -> jax.Array:
        """The mask as [B, T, S] bool over the cache's S slots."""
        B, T, W = self.rows.shape
        rel = jnp.arange(S, dtype=jnp.int32)[None, :] - self.start[:, None]    # [B, S]
        inside = (rel >= 0) & (rel < W)
        idx = jnp.broadcast_to(jnp.clip(rel, 0, W - 1)[:, None, :], (B, T, S))
        block = jnp.take_along_axis(self.rows, idx, 2) & inside[:, None, :]   # [B, T, S]
        return (rel < 0)[:, None, :] | block


@partial(jax.custom_jvp, nondiff_argnums=(6,))
def attention_tree_in_place(q, k_all, v_all, layer, start, rows, cfg: ModelConfig):
    """`attention_masked` with a `BlockMask` (``start``, ``rows``) over layer ``layer``
    of the whole cache, by `kernels.tree_attention`: in place, each query over its own
    slots only, a node bit for bit a decode step over its path. Derivatives are
    `attention_masked`'s."""
    return kernels.tree_attention(q, k_all, v_all, layer, start, rows)


@attention_tree_in_place.defjvp
def _tree_in_place_jvp(cfg, primals, tangents):
    q, k_all, v_all, layer, start, rows = primals
    dq, dk, dv = tangents[:3]
    out = attention_tree_in_place(q, k_all, v_all, layer, start, rows, cfg)
    mask = BlockMask(start, rows).dense(k_all.shape[2])
    _, dout = jax.jvp(lambda q, k, v: attention_masked(q, k[layer], v[layer], mask, cfg),
                      (q, k_all, v_all), (dq, dk, dv))
    return out, dout


@partial(jax.custom_jvp, nondiff_argnums=(5,))
def attention_in_place(q, k_all, v_all, layer, positions, cfg: ModelConfig):
    """`attention` over layer ``layer`` of the whole cache k_all, v_all [L, B, S, G, E]
    by `kernels.cache_attention`: the layer's keys and values read where they lie (XLA
    copies ``k_all[layer]`` out first under scan) and only the slots up to each row's
    position (XLA's dots attend all S). Derivatives are `attention`'s."""
    return kernels.cache_attention(q, k_all, v_all, layer, positions)


@attention_in_place.defjvp
def _in_place_jvp(cfg, primals, tangents):
    q, k_all, v_all, layer, positions = primals
    dq, dk, dv = tangents[:3]
    out = attention_in_place(q, k_all, v_all, layer, positions, cfg)
    _, dout = jax.jvp(lambda q, k, v: attention(q, k[layer], v[layer], positions, cfg),
                      (q, k_all, v_all), (dq, dk, dv))
    return out, dout
