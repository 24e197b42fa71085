"""What one iteration of the tree loop costs, timed apart: the verify pass over a tree's
root and nodes, and the tree drafter's proposal (`specsim.decode.tree_loop`'s steps 1-4).

Each is a jitted program running ``steps`` of its piece in a `lax.fori_loop`, with its
state (token buffer, KV cache or drafter state) donated and fed back call after call
(`specsim.pass_costs.Chained`), at context S/2, as `specsim.pass_costs` times the chain's
pieces. The verify program runs the loop body's own functions: the masked target pass
(`forward_masked`, XLA's attention with the tree mask), the sampling distribution, the
greedy path, the path's key/value move; the draft program runs ``propose_tree`` and
``commit_tree``. Shapes: B batch, S cache slots, C tree nodes.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specsim.decode.prefill import drafter_prefill_program
from specsim.decode.tree_verify import (greedy_path, move_path, path_nodes, tree_nonfinite,
                                        tree_tables)
from specsim.drafters.base import Context, reads_target_hidden
from specsim.errors import InvalidArgument
from specsim.models.compiler import jit
from specsim.models.config import ModelConfig
from specsim.models.masked_forward import block_mask, forward_masked
from specsim.models.transformer import init_cache, project
from specsim.pass_costs import Chained, gather_window
from specsim.sampling import SamplingParams, overlap
from specsim.trees.tree import TokenTree

__all__ = ["TreePassCalls", "tree_pass_calls"]


@jit(static_argnames=("cfg", "tree", "steps"), donate_argnums=0)
def _tree_verify_program(state, params, sp: SamplingParams, length, *, cfg: ModelConfig,
                         tree: TokenTree, steps: int):
    """``steps`` verify passes over root + C nodes: the masked pass, the distribution,
    the greedy path, the non-finite check, the overlap per node and the path's move.
    state = (tokens [B, S], cache at length − 1), donated and returned. → (state, (the last path ends [B] (−1: non-finite), the
    overlaps summed over nodes and steps [B]))."""
    tokens, cache = state
    B, C, S = tokens.shape[0], tree.n_nodes, tokens.shape[1]
    t = tree_tables(tree, B)
    start = cache.length

    def body(i, carry):
        tokens, cache, _, total = carry
        window = gather_window(tokens, length - 1, C + 1)                        # [B, C+1]
        slots = start[:, None] + jnp.arange(C + 1, dtype=jnp.int32)[None]
        h, cache = forward_masked(params, cfg, window, cache, slots,
                                  start[:, None] + t.positions,
                                  block_mask(start, S, t.verify_mask))
        p = sp.probs(project(params, cfg, h))                                     # [B, C+1, V]
        q = jax.nn.one_hot(window[:, 1:], cfg.vocab_size, dtype=jnp.float32)
        best, n_acc, extra = greedy_path(t, window[:, 1:], q, p)
        path = path_nodes(t, best)
        # the loop's non-finite check and its statistics' overlap per node
        finite, _ = tree_nonfinite(t, q, p, path, n_acc)
        beta = overlap(jnp.take_along_axis(p, t.parent_index[:, :, None], 1), q)   # [B, C]
        cache = move_path(cache, start, path)
        # the extra token is the next pass's root: each pass reads the previous one's output
        tokens = jax.vmap(lambda row, x, s: row.at[s].set(x))(tokens, extra, length - 1)
        return (tokens, cache._replace(length=start), jnp.where(finite, best, -1),
                total + jnp.nansum(beta, 1))

    tokens, cache, best, total = jax.lax.fori_loop(
        0, steps, body, (tokens, cache, jnp.zeros((B,), jnp.int32), jnp.zeros((B,), jnp.float32)))
    return (tokens, cache), (best, total)


@jit(static_argnames=("steps",), donate_argnums=0)
def _tree_draft_program(state, drafter, sp: SamplingParams, length, key, *, steps: int):
    """``steps`` proposals of the tree drafter's tree and commits of the root alone.
    state = (tokens [B, S], drafter state), donated. → (state, the last proposal [B, C])."""
    tokens, dstate = state
    B, D = tokens.shape[0], drafter.tree.max_depth
    active = jnp.ones((B,), bool)

    def body(i, carry):
        tokens, dstate, key, _ = carry
        key, k_draft = jax.random.split(key)
        dstate, draft = drafter.propose_tree(dstate, Context(tokens, length), k_draft, sp)
        dstate = drafter.commit_tree(dstate, jnp.zeros((B, D), jnp.int32),
                                     jnp.zeros((B,), jnp.int32), active)
        tokens = jax.vmap(lambda row, x, s: row.at[s].set(x))(tokens, draft.tokens[:, 0],
                                                              length - 1)
        return tokens, dstate, key, draft.tokens

    out = jnp.zeros((B, drafter.tree.n_nodes), jnp.int32)
    tokens, dstate, _, out = jax.lax.fori_loop(0, steps, body, (tokens, dstate, key, out))
    return (tokens, dstate), out


class TreePassCalls(NamedTuple):
    """Zero-argument timed calls, each running ``steps`` of its piece (compiled)."""
    verify: Chained
    draft: Chained | None
    steps: int
    n_nodes: int


def tree_pass_calls(target, tree_drafter, tree: TokenTree, *, batch: int, cache_len: int,
                    steps: int = 4, seed: int = 0) -> TreePassCalls:
    """Compiled calls timing the tree loop's verify over ``tree`` and ``tree_drafter``'s
    proposal of it (None: free or no drafter), for ``target`` at ``batch`` rows and
    ``cache_len`` slots, at context S/2, greedy."""
    if not isinstance(tree, TokenTree):
        raise InvalidArgument(f"tree must be a specsim.trees.TokenTree (got "
                              f"{type(tree).__name__})")
    for name, v in (("batch", batch), ("cache_len", cache_len), ("steps", steps)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InvalidArgument(f"{name} must be an integer >= 1, got {v!r}")
    cfg, S, C = target.cfg, int(cache_len), tree.n_nodes
    ctx = S // 2
    if ctx + C + 1 > S or ctx < 2:
        raise InvalidArgument(f"cache_len ({S}) too small for a tree of {C} nodes: need "
                              f"S/2 + C + 1 <= S")
    sp = SamplingParams.make(0.0, 0, 1.0, vocab_size=cfg.vocab_size)
    rng = np.random.default_rng(seed)
    tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (batch, S)), jnp.int32)
    length = jnp.full((batch,), ctx, jnp.int32)
    cache = init_cache(cfg, batch, S)._replace(length=length - 1)
    verify = Chained(_tree_verify_program, (jnp.copy(tokens), cache), target.params, sp, length,
                     cfg=cfg, tree=tree, steps=int(steps))
    draft = None
    if tree_drafter is not None and tree_drafter.passes_per_iteration():
        P = ctx - 1                     # a prefill of P tokens, a zero feature observed
        feature = (jnp.zeros((batch, cfg.d_model), jnp.float32)
                   if reads_target_hidden(tree_drafter) else None)
        dstate = drafter_prefill_program(tree_drafter, tokens[:, :P],
                                         jnp.full((batch,), P, jnp.int32), feature,
                                         jnp.ones((batch,), bool), S=S)
        draft = Chained(_tree_draft_program, (jnp.copy(tokens), dstate), tree_drafter, sp,
                        length, jax.random.PRNGKey(seed), steps=int(steps))
    for call in (verify, draft):
        if call is not None:
            jax.block_until_ready(call())
    return TreePassCalls(verify, draft, int(steps), C)
