"""Tree speculative decoding: one compiled `lax.while_loop` that drafts a static token
tree, verifies all its nodes in one target pass and keeps the accepted path.

    generate_tree(target, drafter, prompts, max_new_tokens, tree, temperature, top_k,
                  top_p, seed)

Each iteration

1. drafts the tree's C nodes (`propose_tree` of a tree drafter, `specsim.drafters.tree`),
2. runs the target once over C + 1 tokens, the last kept token (the root) and the
   nodes, written at slots length .. length + C, at positions length + depth, each
   attending to the context, its ancestors and itself (`forward_masked`),
3. finds the accepted path on the device (`tree_verify.greedy_path` at temperature 0,
   `tree_verify.sampled_path` otherwise) and the extra token (the target's at the end
   of the path, or the residual after the last rejection),
4. moves the path's keys and values to consecutive slots (`tree_verify.move_path`) so
   the cache reads like a chain, sets its length, and appends n_acc + 1 tokens.

A chain (``TokenTree.chain(K)``) is the one-child tree: the same tokens and statistics
as `generate_speculative` with K (tests/test_tree_decode.py). Statistics are
`SpeculativeStats` with k = C (drafted: nodes proposed; overlap per node against the
target's distribution at its parent; path_end: where each accepted path ended, which
`specsim.trees.measured_acceptance` turns into per-(depth, rank) rates).
Shapes: B batch, C nodes, V vocab, I iterations.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specsim.decode.accounting import TRACE_COUNTS, timed
from specsim.decode.calls import (LoopCall, _cache_caps, _check_on_nonfinite, _finish, _seed_key,
                                  as_drafter, meta_fields)
from specsim.decode.loop_state import DONATED, advance, running
from specsim.decode.prefill import drafter_prefill_program, prefill_program
from specsim.decode.shapes import encode_prompts, pad_prompts, plan_shapes, resolve_eos
from specsim.decode.speculative import SpecStatsBuffer, empty_stats
from specsim.decode.tree_verify import (dynamic_tables, greedy_path, move_path, path_nodes,
                                        sampled_path, tree_nonfinite, tree_tables)
from specsim.drafters.base import Context, reads_target_hidden
from specsim.drafters.tree import as_tree_drafter
from specsim.errors import InvalidArgument
from specsim.models.compiler import jit
from specsim.models.config import ModelConfig
from specsim.models.masked_forward import block_mask, forward_masked
from specsim.models.transformer import project
from specsim.results import SpeculativeStats
from specsim.sampling import SamplingParams, overlap
from specsim.trees.tree import TokenTree
from specsim.validation import positive_int

__all__ = ["tree_program", "tree_iteration", "TreeStep", "generate_tree", "tree_loop", "as_tree",
           "tree_size"]


def _record(stats: SpecStatsBuffer, it, ok, n_acc, q, p_parent) -> SpecStatsBuffer:
    proposed = jnp.sum(q, -1) > 0                                              # [B, C]
    beta = jnp.where(proposed, overlap(p_parent, q), jnp.nan)
    return SpecStatsBuffer(
        stats.accepted.at[it].set(jnp.where(ok, n_acc, -1)),
        stats.drafted.at[it].set(jnp.where(ok, jnp.sum(proposed, 1), -1)),
        stats.overlap.at[it].set(jnp.where(ok[:, None], beta, jnp.nan)))


class TreeStep(NamedTuple):
    """What one iteration of the tree loop leaves (`tree_iteration`)."""
    cache: Any             # the target's cache, the path moved, length advanced where ok
    dstate: Any            # the drafter's state after observe and commit
    stats: SpecStatsBuffer
    path_end: jax.Array    # [I, B] int32, this iteration's row written
    new: jax.Array         # [B, D+1] int32: the accepted path's tokens, then the extra one
    n_valid: jax.Array     # [B] int32: how many of ``new`` are valid
    finite: jax.Array      # [B] bool


def tree_iteration(params, drafter, sp: SamplingParams, static, tokens, length, cache, dstate,
                   active, it, stats, path_end, k_draft, k_accept, *, cfg: ModelConfig
                   ) -> TreeStep:
    """Steps 1-4 of the module for one iteration, with the drafter's observe and commit
    and the iteration's statistics (row ``it``): what the loop's body runs, and what
    `specsim.experiment.parts.trees_costs` times as one iteration. ``static``: the static
    tree's `tree_verify.tree_tables`, None for a dynamic tree (tables from its parents);
    tokens [B, N] and length [B] the kept tokens, the root at length − 1; active [B]
    the rows still running; k_draft and k_accept the drafter's and the acceptance's keys."""
    B = tokens.shape[0]
    C = tree_size(drafter)
    # 1. draft the tree
    dstate, draft = drafter.propose_tree(dstate, Context(tokens, length), k_draft, sp)
    t = static if static is not None else dynamic_tables(
        draft.parents, drafter.max_depth, drafter.max_children)
    # 2. one target pass over the root and the nodes, with the tree mask
    last = jnp.take_along_axis(tokens, (length - 1)[:, None], axis=1)             # [B, 1]
    start = cache.length                                                         # [B]
    slots = start[:, None] + jnp.arange(C + 1, dtype=jnp.int32)[None]            # [B, C+1]
    positions = start[:, None] + t.positions
    mask = block_mask(start, t.verify_mask)
    h, cache = forward_masked(params, cfg, jnp.concatenate([last, draft.tokens], 1),
                              cache, slots, positions, mask)
    p = sp.probs(project(params, cfg, h))                                        # [B, C+1, V]
    # 3. the accepted path and the extra token
    if sp.greedy:
        best, n_acc, extra = greedy_path(t, draft.tokens, draft.probs, p)
    else:
        best, n_acc, extra = sampled_path(k_accept, t, draft.tokens, draft.probs, p)
    path = path_nodes(t, best)                                                   # [B, D]
    finite, n_valid = tree_nonfinite(t, draft.probs, p, path, n_acc)
    # 4. the path's keys and values into consecutive slots; keep n_acc + 1 tokens
    ok = active & finite
    cache = move_path(cache, start, path)
    cache = cache._replace(length=start + jnp.where(ok, n_acc + 1, 0))
    if reads_target_hidden(drafter):  # the feature at the path's end produced the extra token
        dstate = drafter.observe(dstate, h, best, ok)
    dstate = drafter.commit_tree(dstate, path, n_acc, ok)
    stats = _record(stats, it, ok, n_acc, draft.probs,
                    jnp.take_along_axis(p, t.parent_index[:, :, None], 1))
    path_end = path_end.at[it].set(jnp.where(ok, best, -1))
    D = path.shape[1]
    path_tokens = jnp.take_along_axis(draft.tokens, path, 1)                      # [B, D]
    pos = jnp.arange(D + 1, dtype=jnp.int32)[None]
    new = jnp.where(pos < n_acc[:, None],
                    jnp.concatenate([path_tokens, jnp.zeros((B, 1), jnp.int32)], 1),
                    extra[:, None])                                              # [B, D+1]
    return TreeStep(cache, dstate, stats, path_end, new, n_valid, finite)


@jit(static_argnames=("cfg", "tree", "I"), donate_argnames=DONATED)
def tree_program(params, drafter, sp: SamplingParams, prompt_lens, max_new, eos, start,
                 dstate, *, cfg: ModelConfig, tree: TokenTree, I: int):
    """The tree loop from ``start`` = `prefill_program`'s (LoopState, cache) and
    ``dstate`` = the drafter's prefill state, both donated. → (LoopState,
    SpecStatsBuffer, cache, drafter state, path ends [I, B]: the verify index where each
    iteration's accepted path ended, −1 where the row took no part)."""
    TRACE_COUNTS["tree"] += 1
    B = prompt_lens.shape[0]
    C = tree_size(drafter)
    static = tree_tables(tree, B) if tree is not None else None
    common, cache = start
    stats = empty_stats(I, B, C)
    path_end = jnp.full((I, B), -1, jnp.int32)

    def body(carry):
        c, cache, dstate, stats, path_end = carry
        key, k_draft, k_accept = jax.random.split(c.key, 3)
        step = tree_iteration(params, drafter, sp, static, c.tokens, c.length, cache, dstate,
                              ~c.done, c.it, stats, path_end, k_draft, k_accept, cfg=cfg)
        c = advance(c, step.new, step.n_valid, step.finite, prompt_lens, max_new, eos, key)
        return c, step.cache, step.dstate, step.stats, step.path_end

    common, cache, dstate, stats, path_end = jax.lax.while_loop(
        lambda carry: running(carry[0], I), body, (common, cache, dstate, stats, path_end))
    return common, stats, cache, dstate, path_end


def tree_size(drafter) -> int:
    """The nodes a tree drafter proposes per iteration (C)."""
    return drafter.tree.n_nodes if drafter.tree is not None else drafter.n_nodes


def as_tree(tree) -> TokenTree | None:
    """``tree`` as a `TokenTree`: a TokenTree as it is, an int K as the chain of K,
    None as None (a tree drafter's own tree)."""
    if tree is None or isinstance(tree, TokenTree):
        return tree
    if isinstance(tree, (int, np.integer)) and not isinstance(tree, bool):
        return TokenTree.chain(positive_int("tree", tree))
    raise InvalidArgument(f"tree must be a specsim.trees.TokenTree, an int K (the chain of "
                          f"K) or None (a tree drafter's own); got {tree!r}")


def _setup(target, drafter, prompts, max_new_tokens, tree, temperature, top_k, top_p, seed,
           eos_token_id, cache_len, on_nonfinite):
    cfg = target.cfg
    max_new = positive_int("max_new_tokens", max_new_tokens)
    sp = SamplingParams.make(temperature, top_k, top_p, vocab_size=cfg.vocab_size)
    _check_on_nonfinite(on_nonfinite)
    tree = as_tree(tree)
    if not hasattr(drafter, "propose_tree"):
        drafter = as_drafter(drafter, target)
    elif int(drafter.vocab_size) != cfg.vocab_size:
        raise InvalidArgument(f"drafter vocabulary ({drafter.vocab_size} tokens) does not "
                              f"match the target's ({cfg.vocab_size})")
    drafter = as_tree_drafter(drafter, tree)
    tree, C = drafter.tree, tree_size(drafter)
    slots = max(C, int(getattr(drafter, "draft_slots", 0)))     # a draft model's tree slots
    key = _seed_key(seed)
    eos = resolve_eos(eos_token_id, cfg)
    encoded = encode_prompts(prompts, target, cfg)
    caps = _cache_caps(cfg, drafter)
    longest = max(len(p) for p in encoded)
    cap, what = min(caps if cache_len is None else caps + [(int(cache_len), "cache_len")])
    if longest + max_new + slots + 1 > cap:
        raise InvalidArgument(
            f"tree has {slots} nodes: longest prompt ({longest}) + max_new_tokens "
            f"({max_new}) + the tree's nodes + 1 = {longest + max_new + slots + 1} "
            f"cache slots, but {what} allows {cap}; use a smaller tree or fewer tokens")
    plan = plan_shapes(encoded, max_new, slots, caps, cache_len)
    arr, lens = pad_prompts(encoded, plan.padded_prompt)
    params = target.params
    arr, lens = jnp.asarray(arr), jnp.asarray(lens)
    max_new_a, eos_a = jnp.int32(max_new), jnp.int32(eos)
    S = plan.cache_len
    start, feature = prefill_program(params, sp, arr, lens, max_new_a, eos_a, key, cfg=cfg,
                                     S=S)
    dstate = drafter_prefill_program(drafter, arr, lens,
                                     feature if reads_target_hidden(drafter) else None,
                                     ~start[0].done, S=S)
    loop = LoopCall(tree_program, (params, drafter, sp, lens, max_new_a, eos_a, start, dstate),
                    dict(cfg=cfg, tree=tree, I=plan.iterations))
    meta = meta_fields(plan, temperature, top_k, top_p, seed, k=C, drafter=drafter.name,
                       tree=repr(tree) if tree is not None else "dynamic")
    return loop, encoded, plan, drafter, meta


def tree_loop(target, drafter, prompts, max_new_tokens: int, tree=None, **kwargs) -> LoopCall:
    """The loop program `generate_tree` (same arguments) would run, with its arguments,
    not run (the prefill programs run)."""
    kw = dict(temperature=0.0, top_k=0, top_p=1.0, seed=0, eos_token_id="auto",
              cache_len=None, on_nonfinite="raise") | kwargs
    return _setup(target, drafter, prompts, max_new_tokens, tree, **kw)[0]


@timed
def generate_tree(target, drafter, prompts, max_new_tokens: int, tree=None,
                  temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                  seed: int = 0, *, eos_token_id="auto", cache_len: int | None = None,
                  on_nonfinite: str = "raise"):
    """Speculative decoding with a token tree: ``drafter`` proposes ``tree``'s nodes
    every iteration, the target verifies them in one pass and keeps the longest accepted
    path (greedy at temperature 0, multi-candidate rejection sampling otherwise; exact
    either way). ``tree``: a `specsim.trees.TokenTree`, an int K (the chain of K, which
    any drafter drafts), or None for a tree drafter's own (`specsim.drafters.tree`); a
    model drafter drafts any tree, n-gram lookup chains below the root
    (`specsim.drafters.tree.branches_tree`); a dynamic tree drafter
    (`specsim.drafters.dynamic_tree_drafter`, EAGLE-2's rule) grows one tree per row
    every iteration (``tree`` None). Other arguments as `generate_speculative`;
    the result carries `SpeculativeStats` with k = the tree's node count."""
    loop, encoded, plan, drafter, meta = _setup(
        target, drafter, prompts, max_new_tokens, tree, temperature, top_k, top_p, seed,
        eos_token_id, cache_len, on_nonfinite)
    common, stats, _, _, path_end = loop.program(*loop.args, **loop.static)
    n_it = int(common.it)
    st = SpeculativeStats(tree_size(drafter), np.asarray(stats.accepted)[:n_it],
                          np.asarray(stats.drafted)[:n_it], np.asarray(stats.overlap)[:n_it],
                          path_end=np.asarray(path_end)[:n_it])
    dp = drafter.passes_per_iteration()
    return _finish(common, encoded, target, on_nonfinite, n_iterations=n_it,
                   target_passes=n_it + 1, draft_passes=n_it * dp + (1 if dp else 0),
                   stats=st, plan=plan, meta=meta)
