"""What one iteration of the tree loop costs, timed apart: the verify pass over a tree's
root and nodes, and the whole iteration (`specsim.decode.tree_loop`'s steps 1-4, run by
the loop's own body function `tree_loop.tree_iteration`).

Each is a jitted program running ``steps`` of its piece in a `lax.fori_loop`, with its
state (token buffer, KV cache or drafter state) donated and fed back call after call
(`specsim.pass_costs.Chained`), at context S/2, as `specsim.pass_costs` times the chain's
pieces. The verify program runs the loop body's own functions: the masked target pass
(`forward_masked`, XLA's attention with the tree mask), the sampling distribution, the
greedy path, the path's key/value move; the iteration program runs the loop body, so the
drafting is costed as the loop pays it, its draft weights evicted by the target's pass
between two draftings (iteration − verify; `specsim.pass_costs` does the same for the
chain). Shapes: B batch, S cache slots, C tree nodes.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specsim.decode.prefill import drafter_prefill_program
from specsim.decode.speculative import empty_stats
from specsim.decode.tree_loop import tree_iteration
from specsim.decode.tree_verify import (greedy_path, move_path, path_nodes, tree_nonfinite,
                                        tree_tables)
from specsim.drafters.base import reads_target_hidden
from specsim.errors import InvalidArgument
from specsim.models.compiler import jit
from specsim.models.config import ModelConfig
from specsim.models.masked_forward import block_mask, forward_masked
from specsim.models.transformer import forward, init_cache, project
from specsim.pass_costs import Chained, gather_window
from specsim.sampling import SamplingParams, overlap
from specsim.trees.tree import TokenTree

__all__ = ["TreePassCalls", "tree_pass_calls"]


@jit(static_argnames=("cfg", "tree", "steps"), donate_argnums=0)
def _tree_verify_program(state, params, sp: SamplingParams, length, *, cfg: ModelConfig,
                         tree: TokenTree, steps: int):
    """``steps`` verify passes over root + C nodes: the masked pass, the distribution,
    the greedy path, the non-finite check, the overlap per node and the path's move.
    state = (tokens [B, S], cache at length − 1), donated and returned. → (state, (the
    last path ends [B] (−1: non-finite), the overlaps summed over nodes and steps [B]))."""
    tokens, cache = state
    B, C = tokens.shape[0], tree.n_nodes
    t = tree_tables(tree, B)
    start = cache.length

    def body(i, carry):
        tokens, cache, _, total = carry
        window = gather_window(tokens, length - 1, C + 1)                        # [B, C+1]
        slots = start[:, None] + jnp.arange(C + 1, dtype=jnp.int32)[None]
        h, cache = forward_masked(params, cfg, window, cache, slots,
                                  start[:, None] + t.positions,
                                  block_mask(start, t.verify_mask))
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


@jit(static_argnames=("cfg", "tree", "steps"), donate_argnums=0)
def _tree_iteration_program(state, params, drafter, sp: SamplingParams, length, key, *,
                            cfg: ModelConfig, tree: TokenTree, steps: int):
    """``steps`` whole iterations of the tree loop (`tree_loop.tree_iteration`, the loop
    body itself: the drafting, the masked verify pass, the path, the key/value move, the
    drafter's observe and commit, the statistics). Timed back to back, a drafting pass
    finds the draft's weights in the CPU's caches; in the loop the target's pass runs
    between two draftings, so this program costs t_draft + t_verify as the loop pays
    them (`specsim.pass_costs`' iteration role). state = (tokens [B, S], cache at
    length − 1, drafter state), donated and returned. → (state, (statistics [steps, B(,
    C)], path ends [steps, B]))."""
    tokens, cache, dstate = state
    B = tokens.shape[0]
    static = tree_tables(tree, B)
    start = cache.length
    d_start = getattr(dstate, "length", None)        # a draft model's cache length
    active = jnp.ones((B,), bool)
    stats = empty_stats(steps, B, tree.n_nodes)
    path_end = jnp.full((steps, B), -1, jnp.int32)

    def body(i, carry):
        tokens, cache, dstate, key, stats, path_end = carry
        key, k_draft, k_accept = jax.random.split(key, 3)
        step = tree_iteration(params, drafter, sp, static, tokens, length, cache, dstate,
                              active, i, stats, path_end, k_draft, k_accept, cfg=cfg)
        # the kept tokens become the next iteration's root and context
        tokens = jax.vmap(lambda row, x, s: jax.lax.dynamic_update_slice(row, x, (s,)))(
            tokens, step.new, length - 1)
        # both caches set back, so every iteration runs at the same context
        dstate = step.dstate if d_start is None else step.dstate._replace(length=d_start)
        return tokens, step.cache._replace(length=start), dstate, key, step.stats, step.path_end

    tokens, cache, dstate, _, stats, path_end = jax.lax.fori_loop(
        0, steps, body, (tokens, cache, dstate, key, stats, path_end))
    return (tokens, cache, dstate), (stats, path_end)


class TreePassCalls(NamedTuple):
    """Zero-argument timed calls, each running ``steps`` of its piece (compiled): the
    verify pass alone, and the whole iteration (None without a tree drafter)."""
    verify: Chained
    iteration: Chained | None
    steps: int
    n_nodes: int


def tree_pass_calls(target, tree_drafter, tree: TokenTree, *, batch: int, cache_len: int,
                    steps: int = 4, seed: int = 0) -> TreePassCalls:
    """Compiled calls timing the tree loop's verify over ``tree`` and its whole iteration
    with ``tree_drafter`` drafting ``tree`` (None: no iteration call), for ``target`` at
    ``batch`` rows and ``cache_len`` slots, at context S/2, greedy. The drafting's cost
    as the loop pays it is iteration − verify."""
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
    iteration = None
    if tree_drafter is not None:
        P = ctx - 1                     # a prefill of P tokens, a zero feature observed
        feature = (jnp.zeros((batch, cfg.d_model), jnp.float32)
                   if reads_target_hidden(tree_drafter) else None)
        dstate = drafter_prefill_program(tree_drafter, tokens[:, :P],
                                         jnp.full((batch,), P, jnp.int32), feature,
                                         jnp.ones((batch,), bool), S=S)
        # the target's cache holds the same P tokens, so the drafts meet the target's
        # own context and its acceptance is the loop's (the verify program's need not)
        _, prefilled = forward(target.params, cfg, tokens[:, :P], init_cache(cfg, batch, S))
        iteration = Chained(_tree_iteration_program, (jnp.copy(tokens), prefilled, dstate),
                            target.params, tree_drafter, sp, length, jax.random.PRNGKey(seed),
                            cfg=cfg, tree=tree, steps=int(steps))
    for call in (verify, iteration):
        if call is not None:
            jax.block_until_ready(call())
    return TreePassCalls(verify, iteration, int(steps), C)
