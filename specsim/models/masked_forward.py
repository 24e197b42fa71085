"""A forward pass with an explicit attention mask, for token trees.

    forward_masked(params, cfg, tokens, cache, slots, positions, mask) -> (hidden, cache)

`specsim.models.transformer.forward` writes T new tokens at consecutive slots, gives
each the position of its slot and lets it attend every slot up to it: a chain. A tree
verify pass (and a draft model drafting a tree level by level) needs three things apart:
where each token's keys and values are written (``slots``), the position its rotary
embedding (or gpt2's learned position) uses (``positions``: the root's plus the node's
depth, so siblings share a position), and which slots it attends (``mask``: the context
before the tree, and within the tree only its ancestors and itself).

Where the CPU kernels run, the attention is `specsim.models.kernels.tree_attention`:
each query attends the list of its own slots (the context and its ancestors), read in
place and summed as that many contiguous slots would be, so a node's output equals a
decode step's over its path bit for bit. Elsewhere it is XLA's grouped einsum with the
mask over the whole cache (`BlockMask.dense`). The layers are `transformer._layer`'s,
given the slots and the mask; matmuls use specsim's CPU kernel where `forward` would.

Shapes: B batch, T new tokens, S cache slots, D model, L layers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specsim.models.config import ModelConfig
from specsim.models.attention import BlockMask
from specsim.models.transformer import KVCache, _run_layers

__all__ = ["forward_masked", "block_mask", "BlockMask"]


def block_mask(start, rows) -> BlockMask:
    """The `BlockMask` of T queries that see every slot before ``start`` [B] and, of the
    W slots from ``start`` on, those where ``rows`` (bool [T, W], the same for every
    row, or [B, T, W]) is True; nothing after ``start + W``."""
    start = jnp.asarray(start, jnp.int32)
    rows = jnp.asarray(rows, bool)
    if rows.ndim == 2:
        rows = jnp.broadcast_to(rows, (start.shape[0],) + rows.shape)
    return BlockMask(start, rows)


def forward_masked(params: dict, cfg: ModelConfig, tokens, cache: KVCache, slots, positions,
                   mask) -> tuple[jax.Array, KVCache]:
    """Run tokens [B, T] through the model, writing their keys and values at ``slots``
    [B, T] int32, with positions [B, T] int32 and the `BlockMask` of the slots each
    attends (`block_mask`; every query must allow at least one slot). → (final-normed hidden
    states [B, T, D], the cache with the new entries written and ``length``
    unchanged: the caller decides what to keep)."""
    x, k_all, v_all = _run_layers(params, cfg, tokens, cache, positions, slots, mask)
    return x, KVCache(k_all, v_all, cache.length)
