"""Dynamic draft trees (EAGLE-2's rule) for drafters with scores: each row grows its own
tree every iteration from the drafter's probabilities.

With top-k k, depth D and a budget of N nodes, per row:

1. the root's k most probable tokens are depth 1; all k are expanded;
2. at each depth d < D, the expanded nodes propose their k most probable children
   (k² candidates at depth d + 1), scored by the path's log-probability under the
   drafter (the sum of its log q along the path, q the drafter's distribution at the
   score temperature T: softmax(logits / T), T = 1 by default); the k best of them are
   expanded next
   (EAGLE-2's rule; ``expand`` > k expands that many, e.g. N: then the kept set is the
   N best paths whose every token is among its parent's k best);
3. of all P candidates (k + (D − 1)k² with ``expand`` = k), the N with the best path
   scores form the tree
   (`specsim.trees.select_best_nodes` is the same rule on the host). A child's score is
   below its parent's, so the kept set contains every kept node's parent.

The score temperature changes which nodes are kept, never a node's token (top-k does
not depend on T): T > 1 flattens each node's distribution, so a parent's lower ranks
compete with deeper nodes below confident parents. It is chosen on prompts apart from
those a run is judged on (`specsim.experiment.parts.trees_replay`; docs/trees.md).

Candidates are deterministic given the context (top-k, not sampled), so each node's
proposal is the one-hot of its token: the verifier's multi-candidate rejection sampling
stays exact at any temperature (`specsim.decode.tree_verify`). The tree arrives as
``TreeDraft.parents`` [B, N] and the loop builds its tables on the device
(`tree_verify.dynamic_tables`).

Expanding uses the draft model with the tree mask (its expanded nodes written at slots
root + 1 + e, e = 0 .. k(D − 1) − 1, each attending to the context and its expanded
ancestors), the feature head's cell from each node's parent's state, or Medusa's heads
(`specsim.drafters.medusa`: head d's top-k below every node of depth d − 1, scored by its
log-probabilities, all heads in one step: the children depend on the depth only).
Shapes: B batch, N nodes, k top-k, D depth, P candidates (`n_candidates`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from specsim.drafters.base import Context, gather_last
from specsim.drafters.feature_head import FeatureHeadDrafter, cell
from specsim.drafters.medusa import MedusaDrafter, medusa_logits
from specsim.drafters.model import ModelDrafter
from specsim.drafters.tree import OverChainDrafter, TreeDraft, move_path
from specsim.errors import InvalidArgument
from specsim.models.masked_forward import block_mask, forward_masked
from specsim.models.transformer import forward, project
from specsim.sampling import SamplingParams
from specsim.validation import positive_float, positive_int

__all__ = ["DynamicTreeDrafter", "dynamic_tree_drafter"]

_DEPTH_TIE = 1e-5
"""Subtracted per depth from a path score when ranking, so a child ranks strictly below
its parent even where the drafter gave it probability 1 (the kept set stays a tree)."""


@partial(jax.tree_util.register_dataclass, data_fields=["base"],
         meta_fields=["top_k", "depth", "n_nodes", "name", "expand", "temperature"])
@dataclass(frozen=True)
class DynamicTreeDrafter(OverChainDrafter):
    """EAGLE-2's dynamic tree over ``base`` (a `ModelDrafter`, a `FeatureHeadDrafter`
    or a `MedusaDrafter`): top-k ``top_k``, ``depth`` levels, ``n_nodes`` kept, path
    scores at ``temperature`` (see the module). State: the base's, and for a draft model
    the expanded slot of each kept node (for `commit_tree`)."""
    base: Any
    top_k: int
    depth: int
    n_nodes: int
    name: str = "dynamic-tree"
    expand: int = 0                  # nodes expanded per depth; 0: top_k (EAGLE-2's)
    temperature: float = 1.0         # of the distribution the path scores read (1: EAGLE-2's)

    tree = None                      # no static tree: one per row, every iteration

    @property
    def chain_drafter(self):
        return self.base

    @property
    def draft_slots(self) -> int:
        """Cache slots past the context one iteration writes: the kept nodes in the
        target's cache, the expanded nodes in a draft model's."""
        return self.top_k * (self.depth - 1) if self._model else 0

    @property
    def frontier_widths(self) -> tuple[int, ...]:
        """Nodes expanded at depths 1 .. depth − 1: all k of depth 1, then the best
        ``expand`` (default k) of the candidates below them."""
        widths = [self.top_k]
        for _ in range(self.depth - 2):
            widths.append(min(self.expand or self.top_k, widths[-1] * self.top_k))
        return tuple(widths[:max(self.depth - 1, 0)])

    @property
    def n_candidates(self) -> int:
        """P: the k children of the root and k below every expanded node."""
        return self.top_k * (1 + sum(self.frontier_widths))

    @property
    def max_depth(self) -> int:
        return self.depth

    @property
    def max_children(self) -> int:
        return self.top_k

    @property
    def _model(self) -> bool:
        return isinstance(self.base, ModelDrafter)

    @property
    def _medusa(self) -> bool:
        return isinstance(self.base, MedusaDrafter)

    def passes_per_iteration(self) -> int:
        return 1 if self._medusa else self.depth

    def init_state(self, prompts, prompt_lens, cache_len: int):
        state = self.base.init_state(prompts, prompt_lens, cache_len)
        if self._model:
            return state, jnp.zeros((prompts.shape[0], self.n_nodes), jnp.int32)
        return state

    # ---- expanding, per base ------------------------------------------------------------
    def _start(self, state, context: Context):
        """→ (expander state, the root's logits [B, V'], token ids of V' or None)."""
        if self._model:
            cache = state[0]
            two = jnp.stack([gather_last(context.tokens, context.length, 2),
                             gather_last(context.tokens, context.length, 1)], axis=1)
            logits, cache = forward(self.base.params, self.base.cfg, two, cache)
            E = self.top_k * max(self.depth - 1, 1)
            return (cache, jnp.zeros((two.shape[0], self.top_k, E), bool)), logits[:, -1], None
        if self._medusa:                 # every head's logits: children depend on depth only
            lg = medusa_logits(self.base.params, self.base.head, state)          # [B, K, Vh]
            return lg, lg[:, 0], self.base.head_ids
        fh = self.base
        z = cell(fh.cell, fh.embed, state, gather_last(context.tokens, context.length, 1),
                 fh.eps)
        return z[:, None], (z @ fh.head.T), fh.head_ids

    def _expand(self, ex, d: int, tokens, parent_pos, base_slot):
        """Run depth d's k frontier nodes (tokens [B, k]; parent_pos [B, k] their
        parents' places in the previous frontier, None at depth 1) → (ex, logits
        [B, k, V'])."""
        k = self.top_k
        B = tokens.shape[0]
        if self._model:
            cache, rows = ex                                                  # [B, k, E]
            E = rows.shape[2]
            own = jax.nn.one_hot((d - 1) * k + jnp.arange(k), E, dtype=bool)  # [k, E]
            if parent_pos is None:
                rows = jnp.broadcast_to(own, (B, k, E))
            else:
                rows = jnp.take_along_axis(rows, parent_pos[:, :, None], 1) | own[None]
            slots = base_slot[:, None] + 1 + (d - 1) * k + jnp.arange(k)[None]
            positions = jnp.broadcast_to(base_slot[:, None] + d, slots.shape)
            mask = block_mask(base_slot + 1, rows)
            h, cache = forward_masked(self.base.params, self.base.cfg, tokens, cache, slots,
                                      positions, mask)
            return (cache, rows), project(self.base.params, self.base.cfg, h)
        if self._medusa:                 # head d + 1's candidates below every frontier node
            return ex, jnp.broadcast_to(ex[:, d:d + 1], tokens.shape + ex.shape[-1:])
        fh = self.base
        z_parent = ex if parent_pos is None else jnp.take_along_axis(ex, parent_pos[:, :, None], 1)
        z = cell(fh.cell, fh.embed, jnp.broadcast_to(z_parent, tokens.shape + z_parent.shape[-1:]),
                 tokens, fh.eps)
        return z, jnp.einsum("bkd,vd->bkv", z, fh.head)

    # ---- the tree -----------------------------------------------------------------------
    def candidates(self, state, context: Context):
        """Grow the candidate tree (steps 1–2 of the module). → (expander state, tokens
        [B, P], path log-scores [B, P], parents [B, P] (candidate indices, −1 = the
        root; depth by depth, so parents first), expanded slot [B, P] (−1: not
        expanded), depths int32 [P])."""
        k, D = self.top_k, self.depth
        B = context.length.shape[0]
        rows = jnp.arange(B)[:, None]
        base_slot = state[0].length + 1 if self._model else None
        ex, root_logits, ids = self._start(state, context)

        def best_k(logits):
            lq = jax.nn.log_softmax(logits.astype(jnp.float32) / self.temperature, -1)
            v, i = jax.lax.top_k(lq, k)
            return v, (i if ids is None else jnp.asarray(ids)[i]).astype(jnp.int32)

        s1, tok1 = best_k(root_logits)                                        # [B, k]
        pool_tok, pool_score, pool_parent = [tok1], [s1], [jnp.full((B, k), -1, jnp.int32)]
        depth_of = [np.ones(k, np.int32)]
        widths = self.frontier_widths
        slot = jnp.full((B, self.n_candidates), -1, jnp.int32)
        if D > 1:
            slot = slot.at[:, :k].set(jnp.arange(k, dtype=jnp.int32)[None])
        front_tok, front_score, front_pool, front_parent = tok1, s1, jnp.broadcast_to(
            jnp.arange(k, dtype=jnp.int32), (B, k)), None
        offset = k
        for d in range(1, D):
            f = widths[d - 1]                                                 # expanded nodes
            ex, logits = self._expand(ex, d, front_tok, front_parent, base_slot)
            v, tok = best_k(logits)                                           # [B, f, k]
            cand_tok = tok.reshape(B, f * k)
            cand_score = (front_score[:, :, None] + v).reshape(B, f * k)
            pool_tok.append(cand_tok)
            pool_score.append(cand_score)
            pool_parent.append(jnp.repeat(front_pool, k, axis=1))
            depth_of.append(np.full(f * k, d + 1, np.int32))
            if d < D - 1:                     # EAGLE-2's expansion: the best go on
                _, nxt = jax.lax.top_k(cand_score, widths[d])                 # [B, f']
                slot = slot.at[rows, offset + nxt].set(
                    d * k + jnp.arange(widths[d], dtype=jnp.int32)[None])
                front_tok = jnp.take_along_axis(cand_tok, nxt, 1)
                front_score = jnp.take_along_axis(cand_score, nxt, 1)
                front_pool, front_parent = offset + nxt, nxt // k
            offset += f * k
        return (ex, jnp.concatenate(pool_tok, 1), jnp.concatenate(pool_score, 1),
                jnp.concatenate(pool_parent, 1), slot, np.concatenate(depth_of))

    def propose_tree(self, state, context: Context, key, sampling: SamplingParams):
        ex, tok, score, parent, slot, depth = self.candidates(state, context)
        # EAGLE-2's rerank: the N best path scores, ties to the shallower node
        _, sel = jax.lax.top_k(score - _DEPTH_TIE * jnp.asarray(depth)[None], self.n_nodes)
        sel = jnp.sort(sel, 1)                                                # parents first
        sel_parent = jnp.take_along_axis(parent, sel, 1)
        eq = sel[:, None, :] == sel_parent[:, :, None]                        # [B, N, N]
        parents = jnp.where(jnp.any(eq, -1), jnp.argmax(eq, -1), -1).astype(jnp.int32)
        tokens = jnp.take_along_axis(tok, sel, 1)
        probs = jax.nn.one_hot(tokens, self.vocab_size, dtype=jnp.float32)
        draft = TreeDraft(tokens, probs, parents)
        if self._model:
            cache = ex[0]._replace(length=state[0].length)
            return (cache, jnp.take_along_axis(slot, sel, 1)), draft
        return state, draft

    def commit_tree(self, state, path, n_accepted, active):
        if not self._model:
            return state
        cache, sel_slot = state
        if path.shape[1] > 1:
            e = jnp.maximum(jnp.take_along_axis(sel_slot, path[:, :-1], 1), 0)
            cache = move_path(cache, cache.length + 1, e)
        return cache._replace(length=cache.length + jnp.where(active, n_accepted + 1, 0)), \
            sel_slot


def dynamic_tree_drafter(drafter, top_k: int, depth: int, n_nodes: int,
                         name: str | None = None, expand: int | None = None,
                         temperature: float = 1.0) -> DynamicTreeDrafter:
    """EAGLE-2's dynamic tree over a draft model (`ModelDrafter`: small model,
    layer-skip, quantised self-draft), the feature head or Medusa heads (``depth`` at
    most their K): ``top_k`` children per expanded node, ``expand`` (default top_k;
    at least top_k; a draft model expands top_k only) nodes expanded per depth,
    ``depth`` levels, the ``n_nodes`` best of the candidates kept, path scores read
    from the drafter's distribution at ``temperature`` (> 0; 1: EAGLE-2's rule)."""
    top_k, depth = positive_int("top_k", top_k), positive_int("depth", depth)
    temperature = positive_float("temperature", temperature)
    n_nodes = positive_int("n_nodes", n_nodes)
    expand = top_k if expand is None else positive_int("expand", expand)
    if expand < top_k or (type(drafter) is ModelDrafter and expand != top_k):
        raise InvalidArgument(f"expand must be at least top_k = {top_k}, and equal to it for "
                              f"a draft model (got {expand})")
    pool = DynamicTreeDrafter(None, top_k, depth, n_nodes, expand=expand).n_candidates
    if n_nodes > pool:
        raise InvalidArgument(f"n_nodes must be at most the candidates, {pool} for top_k "
                              f"{top_k}, depth {depth} and expand {expand} (got {n_nodes})")
    if type(drafter) is not ModelDrafter and not isinstance(drafter, (FeatureHeadDrafter,
                                                                      MedusaDrafter)):
        name = getattr(drafter, "name", drafter)
        raise InvalidArgument(f"drafter must be a draft model (ModelDrafter), the feature "
                              f"head or Medusa heads for a dynamic tree (got {name!r})")
    if isinstance(drafter, MedusaDrafter) and depth > drafter.heads:
        raise InvalidArgument(f"depth must be at most the Medusa heads' K = {drafter.heads} "
                              f"(got {depth})")
    label = (f"-e{expand}" if expand != top_k else "") + (
        f"-t{temperature:g}" if temperature != 1.0 else "")
    return DynamicTreeDrafter(drafter, top_k, depth, n_nodes,
                              name or f"{drafter.name}:dynamic-k{top_k}{label}-d{depth}-n{n_nodes}",
                              expand, temperature)
