"""Drafters that propose a token tree (`specsim.trees.TokenTree`) instead of a chain.

A tree drafter carries its static ``tree`` (C nodes) and implements

    state = init_state(prompts [B, P], prompt_lens [B], cache_len S)
    state, draft = propose_tree(state, context, key, sampling)
    state = commit_tree(state, path [B, D], n_accepted [B], active [B])

plus `passes_per_iteration()` and `max_cache_len()` (and, for a drafter that reads the
target's features, ``observe`` as in `specsim.drafters`). ``draft`` is
``TreeDraft(tokens [B, C], probs [B, C, V])``: node j's token and the distribution it
was drawn from *given the siblings drawn before it* (a zero row: no proposal), which
the verifier's multi-candidate rejection sampling needs (`specsim.decode.tree_verify`).
``path`` holds the accepted nodes by depth (entries past ``n_accepted`` are garbage).

- `ChainTreeDrafter`: any `Drafter` with ``tree = TokenTree.chain(K)`` (the chain as a
  one-child tree; the same draws as `generate_speculative`).
- `ModelTreeDrafter`: a draft model (small model, layer-skip) drafting a static tree
  level by level: one pass over the nodes of a depth that have children, with the tree
  attention mask (`specsim.models.masked_forward`), children taken as the top ranks of
  its distribution (greedy) or drawn without replacement (sampled).
- `FeatureHeadTreeDrafter`: the feature head's cell rolled forward per node from its
  parent's state (one batched cell step per depth).
- `NGramTreeDrafter`: prompt lookup with several matches as branches (one chain per
  match, most recent of the longest n-gram first).

`as_tree_drafter` picks one for a drafter and a tree (the quantised self-draft is a
draft model; the distilled draft, whose head covers part of the vocabulary, and the
instrument draft chains only). Shapes: B batch, C nodes, V vocab,
D tree depth, R the most children one node draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specsim.drafters.base import Context, gather_last, reads_target_hidden
from specsim.drafters.feature_head import FeatureHeadDrafter, cell
from specsim.drafters.model import ModelDrafter
from specsim.drafters.ngram import NGramDrafter
from specsim.errors import InvalidArgument
from specsim.models.config import ModelConfig
from specsim.models.masked_forward import block_mask, forward_masked
from specsim.models.transformer import forward, project
from specsim.sampling import SamplingParams
from specsim.trees.tree import TokenTree
from specsim.validation import positive_int

__all__ = ["TreeDraft", "move_path", "ChainTreeDrafter", "ModelTreeDrafter",
           "FeatureHeadTreeDrafter", "NGramTreeDrafter",
           "as_tree_drafter", "branches_tree", "draw_children"]


class TreeDraft(NamedTuple):
    tokens: jax.Array  # [B, C] int32
    probs: jax.Array   # [B, C, V] fp32: each node's proposal distribution; zero = none
    parents: Any = None  # [B, C] int32 per-row parents (a dynamic tree); None: ``tree``


def move_path(cache, start, path):
    """Copy the keys and values of the path's nodes, written at slots start + 1 + node,
    to slots start + 1 .. start + D (each node at start + its depth), in every layer:
    after it the cache reads like a chain of the accepted tokens. cache k, v
    [L, B, S, G, E]; start [B]; path [B, D] node indices."""
    B, D = path.shape
    rows = jnp.arange(B)[:, None]
    src = start[:, None] + 1 + path
    dst = start[:, None] + 1 + jnp.arange(D, dtype=jnp.int32)[None]
    return cache._replace(k=cache.k.at[:, rows, dst].set(cache.k[:, rows, src]),
                          v=cache.v.at[:, rows, dst].set(cache.v[:, rows, src]))


class OverChainDrafter:
    """What a tree drafter built over a chain drafter (``self.chain_drafter``) takes from
    it unchanged: the vocabulary, whether it reads the target's features (and
    ``observe``), the cache bound and the initial state."""

    @property
    def vocab_size(self) -> int:
        return self.chain_drafter.vocab_size

    @property
    def reads_target_hidden(self) -> bool:
        return reads_target_hidden(self.chain_drafter)

    def observe(self, state, hidden, index, active):
        return self.chain_drafter.observe(state, hidden, index, active)

    def max_cache_len(self):
        return self.chain_drafter.max_cache_len()

    def init_state(self, prompts, prompt_lens, cache_len: int):
        return self.chain_drafter.init_state(prompts, prompt_lens, cache_len)


# ---- the chain -------------------------------------------------------------------------
@partial(jax.tree_util.register_dataclass, data_fields=["drafter"], meta_fields=["k"])
@dataclass(frozen=True)
class ChainTreeDrafter(OverChainDrafter):
    """A chain drafter (`specsim.drafters.Drafter`) seen as a tree drafter of
    ``TokenTree.chain(k)``: its ``propose`` and ``commit``, unchanged."""
    drafter: Any
    k: int

    @property
    def chain_drafter(self):
        return self.drafter

    @property
    def tree(self) -> TokenTree:
        return TokenTree.chain(self.k)

    @property
    def name(self) -> str:
        return self.drafter.name

    def passes_per_iteration(self) -> int:
        return self.drafter.passes_per_iteration(self.k)

    def propose_tree(self, state, context: Context, key, sampling: SamplingParams):
        state, draft = self.drafter.propose(state, context, self.k, key, sampling)
        return state, TreeDraft(draft.tokens, draft.probs)

    def commit_tree(self, state, path, n_accepted, active):
        return self.drafter.commit(state, n_accepted, active)


# ---- children of a node ----------------------------------------------------------------
def draw_children(key, logits, sampling: SamplingParams, r: int, head_ids=None,
                  vocab_size: int | None = None):
    """The first ``r`` candidates of each distribution: logits [B, n, V] (or over a head
    vocabulary [B, n, Vh] whose token ids in a vocabulary of ``vocab_size`` are
    ``head_ids`` [Vh]) → (tokens [B, n, r] int32, proposal distributions [B, n, r, V]).
    Greedy: the r best tokens by the logits (rank 0 = the argmax), each a one-hot.
    Sampled: r draws without replacement from the processed distribution q (Gumbel
    top-r); draw i's proposal is q with draws 0..i−1 removed and renormalised, a zero
    row once q has no mass left."""
    if sampling.greedy:
        _, toks = jax.lax.top_k(logits.astype(jnp.float32), r)
        if head_ids is not None:
            toks = jnp.asarray(head_ids)[toks]
        V = logits.shape[-1] if head_ids is None else vocab_size
        return toks.astype(jnp.int32), jax.nn.one_hot(toks, V, dtype=jnp.float32)
    q = sampling.probs(logits)                                                 # [B, n, V]
    if head_ids is not None:
        q = jnp.zeros(q.shape[:-1] + (vocab_size,), q.dtype).at[..., jnp.asarray(head_ids)].set(q)
    V = q.shape[-1]
    logq = jnp.where(q > 0, jnp.log(jnp.where(q > 0, q, 1.0)), -jnp.inf)
    g = logq + jax.random.gumbel(key, q.shape, jnp.float32)
    _, toks = jax.lax.top_k(g, r)                                             # [B, n, r]
    taken = jnp.cumsum(jax.nn.one_hot(toks, V, dtype=jnp.float32), axis=2) > 0   # [B,n,r,V]
    before = jnp.concatenate([jnp.zeros_like(taken[:, :, :1]), taken[:, :, :-1]], 2)
    rest = jnp.where(before, 0.0, q[:, :, None, :])
    mass = jnp.sum(rest, -1, keepdims=True)
    probs = jnp.where(mass > 1e-12, rest / jnp.where(mass > 1e-12, mass, 1.0), 0.0)
    return toks.astype(jnp.int32), probs


def _levels(tree: TokenTree):
    """Per depth d = 0..D−1: (verify indices at depth d that have children, their
    children (node indices), each child's position among those sources, each child's
    rank, the most children drawn = max rank + 1)."""
    out = []
    vidx_depth = np.concatenate([[0], tree.depths])
    for d in range(tree.max_depth):
        kids = np.flatnonzero(vidx_depth[tree.parents + 1] == d)
        srcs = np.unique(tree.parents[kids] + 1)
        pos = np.searchsorted(srcs, tree.parents[kids] + 1)
        out.append((srcs, kids, pos, tree.ranks[kids], int(tree.ranks[kids].max()) + 1))
    return out


def _level_passes(tree: TokenTree) -> int:
    """Draft passes a level-by-level drafter of ``tree`` runs: the depths whose nodes
    have children."""
    return sum(1 for lv in _levels(tree) if lv[0].size)


# ---- a draft model ---------------------------------------------------------------------
@partial(jax.tree_util.register_dataclass, data_fields=["params"],
         meta_fields=["cfg", "tree", "name"])
@dataclass(frozen=True)
class ModelTreeDrafter:
    """A draft model drafting a static ``tree``. The state is its KV cache, which holds
    all but the last two context tokens, as `ModelDrafter`'s. `propose_tree` runs the
    last two tokens (the root's distribution), then per depth one pass over that
    depth's nodes that have children, written at slots root + 1 + node with the tree
    mask; `commit_tree` moves the accepted path's entries to consecutive slots."""
    params: Any
    cfg: ModelConfig
    tree: TokenTree
    name: str = "model-tree"

    # the draft model's vocabulary, cache bound and prefill, as a chain drafter's
    vocab_size = ModelDrafter.vocab_size
    max_cache_len = ModelDrafter.max_cache_len
    init_state = ModelDrafter.init_state

    def passes_per_iteration(self) -> int:
        return _level_passes(self.tree)

    def propose_tree(self, state, context: Context, key, sampling: SamplingParams):
        tree = self.tree
        cache = state
        start = cache.length                                                  # [B]
        B, C, V = start.shape[0], tree.n_nodes, self.cfg.vocab_size
        two = jnp.stack([gather_last(context.tokens, context.length, 2),
                         gather_last(context.tokens, context.length, 1)], axis=1)
        logits, cache = forward(self.params, self.cfg, two, cache)           # [B, 2, V]
        base = start + 1                                                      # the root's slot
        tokens = jnp.zeros((B, C), jnp.int32)
        probs = jnp.zeros((B, C, V), jnp.float32)
        anc = tree.ancestor_mask()
        keys = jax.random.split(key, tree.max_depth)
        for d, (srcs, kids, pos, ranks, r) in enumerate(_levels(tree)):
            if d == 0:
                lg = logits[:, -1:]                                           # [B, 1, V]
            else:
                nodes = srcs - 1
                slots = base[:, None] + jnp.asarray(srcs, jnp.int32)[None]
                positions = jnp.broadcast_to(base[:, None] + d, slots.shape)
                mask = block_mask(base + 1, anc[nodes])
                h, cache = forward_masked(self.params, self.cfg, tokens[:, nodes], cache,
                                          slots, positions, mask)
                lg = project(self.params, self.cfg, h)                        # [B, n, V]
            toks, qs = draw_children(keys[d], lg, sampling, r)
            tokens = tokens.at[:, kids].set(toks[:, pos, ranks])
            probs = probs.at[:, kids].set(qs[:, pos, ranks])
        return cache._replace(length=start), TreeDraft(tokens, probs)

    def commit_tree(self, state, path, n_accepted, active):
        cache = move_path(state, state.length + 1, path[:, :-1]) if path.shape[1] > 1 else state
        return cache._replace(length=state.length + jnp.where(active, n_accepted + 1, 0))


# ---- the feature head ------------------------------------------------------------------
@partial(jax.tree_util.register_dataclass, data_fields=["head"], meta_fields=["tree", "name"])
@dataclass(frozen=True)
class FeatureHeadTreeDrafter(OverChainDrafter):
    """The feature head (`specsim.drafters.FeatureHeadDrafter`) drafting a static
    ``tree``: its cell rolled forward from each node's parent state with the node's
    token, one batched cell step per depth over the nodes that have children. The state
    is z₀ [B, D], handed over by ``observe`` as for the chain."""
    head: Any            # the FeatureHeadDrafter
    tree: TokenTree
    name: str = "feature-head-tree"

    @property
    def chain_drafter(self):
        return self.head

    def passes_per_iteration(self) -> int:
        return _level_passes(self.tree)

    def propose_tree(self, state, context: Context, key, sampling: SamplingParams):
        fh, tree = self.head, self.tree
        B, C, V = state.shape[0], tree.n_nodes, fh.vocab_size
        x = gather_last(context.tokens, context.length, 1)                    # [B]
        z = jnp.zeros((B, C + 1) + state.shape[1:], jnp.float32)               # per verify index
        z = z.at[:, 0].set(cell(fh.cell, fh.embed, state, x, fh.eps))
        tokens = jnp.zeros((B, C), jnp.int32)
        probs = jnp.zeros((B, C, V), jnp.float32)
        keys = jax.random.split(key, tree.max_depth)
        for d, (srcs, kids, pos, ranks, r) in enumerate(_levels(tree)):
            if d > 0:                      # the sources' states from their parents'
                parents = tree.parents[srcs - 1] + 1
                z = z.at[:, srcs].set(cell(fh.cell, fh.embed, z[:, parents],
                                           tokens[:, srcs - 1], fh.eps))
            lg = jnp.einsum("bnd,vd->bnv", z[:, srcs], fh.head)               # [B, n, Vh]
            toks, qs = draw_children(keys[d], lg, sampling, r, fh.head_ids, V)
            tokens = tokens.at[:, kids].set(toks[:, pos, ranks])
            probs = probs.at[:, kids].set(qs[:, pos, ranks])
        return state, TreeDraft(tokens, probs)

    def commit_tree(self, state, path, n_accepted, active):
        return state                          # the next feature arrives through `observe`


# ---- prompt lookup with several matches ------------------------------------------------
def branches_tree(branches: int, depth: int) -> TokenTree:
    """``branches`` chains of ``depth`` nodes below the root (the n-gram tree's shape)."""
    branches, depth = positive_int("branches", branches), positive_int("depth", depth)
    return TokenTree.from_paths([(i,) + (0,) * (d - 1) for i in range(branches)
                                 for d in range(1, depth + 1)])


def _branch_layout(tree: TokenTree) -> tuple[np.ndarray, np.ndarray] | None:
    """(branch [C], depth [C]) when ``tree`` is chains below the root, else None."""
    paths = tree.paths()
    if any(any(r != 0 for r in p[1:]) for p in paths):
        return None
    return np.asarray([p[0] for p in paths]), np.asarray([len(p) for p in paths])


@partial(jax.tree_util.register_dataclass, data_fields=[],
         meta_fields=["vocab_size", "tree", "n", "min_n", "name"])
@dataclass(frozen=True)
class NGramTreeDrafter:
    """Prompt lookup proposing one branch per match: branch i continues the i-th match
    by recency among the ends of the longest n-gram that matches (then shorter ones),
    each end counted once. ``tree`` must be chains below the root (`branches_tree`);
    one-hot proposals, no state, no model pass."""
    vocab_size: int
    tree: TokenTree
    n: int = 3
    min_n: int = 1
    name: str = "ngram-tree"

    def __post_init__(self):
        NGramDrafter(self.vocab_size, self.n, self.min_n)      # the same checks
        if _branch_layout(self.tree) is None:
            raise InvalidArgument(f"tree must be chains below the root for n-gram lookup "
                                  f"(branches_tree(branches, depth)); got {self.tree!r}")

    drafts_free = True

    def passes_per_iteration(self) -> int:
        return 0

    def max_cache_len(self):
        return None

    def init_state(self, prompts, prompt_lens, cache_len: int):
        return ()

    def commit_tree(self, state, path, n_accepted, active):
        return state

    def _hits(self, context: Context, size: int):
        """[B, N] bool: the last ``size`` tokens also end at position j (< length − 1)."""
        tokens, length = context.tokens, context.length
        N = tokens.shape[1]
        pos = jnp.arange(N, dtype=jnp.int32)[None]
        hit = (pos >= size - 1) & (pos <= length[:, None] - 2) & (length >= size + 1)[:, None]
        for s in range(size):
            want = gather_last(tokens, length, size - s)
            shifted = jnp.pad(tokens, ((0, 0), (size - 1 - s, 0)))[:, :N]
            hit &= shifted == want[:, None]
        return hit

    def propose_tree(self, state, context: Context, key, sampling: SamplingParams):
        tokens, length = context.tokens, context.length
        B, N = tokens.shape
        branch, depth = _branch_layout(self.tree)
        n_branches = int(branch.max()) + 1
        scores, longer = [], jnp.zeros((B, N), bool)
        for size in range(self.n, self.min_n - 1, -1):
            hit = self._hits(context, size)
            scores.append(jnp.where(hit & ~longer, size * N + jnp.arange(N)[None], -1))
            longer |= hit
        best, _ = jax.lax.top_k(jnp.concatenate(scores, 1), n_branches)     # [B, nb]
        end = jnp.where(best >= 0, best % N, -1)                              # [B, nb]
        e = end[:, branch]                                                    # [B, C]
        src = e + jnp.asarray(depth)[None]
        valid = (e >= 0) & (src <= length[:, None] - 1)
        draft = jnp.take_along_axis(tokens, jnp.clip(src, 0, N - 1), axis=1)
        draft = jnp.where(valid, draft, 0).astype(jnp.int32)
        probs = jax.nn.one_hot(draft, self.vocab_size, dtype=jnp.float32) * valid[..., None]
        return state, TreeDraft(draft, probs)


# ---- choosing one ----------------------------------------------------------------------
def as_tree_drafter(drafter, tree: TokenTree | None):
    """A tree drafter for ``drafter`` (already checked against the target) and ``tree``:
    a tree drafter as it is (``tree`` None or its own); a chain tree → `ChainTreeDrafter`
    for any drafter; a `ModelDrafter` → `ModelTreeDrafter`; an `NGramDrafter` →
    `NGramTreeDrafter` (the tree must be chains below the root)."""
    if hasattr(drafter, "propose_tree"):
        if tree is not None and drafter.tree is None:
            raise InvalidArgument(f"tree must be None for a dynamic tree drafter "
                                  f"({drafter.name} grows its own); got {tree!r}")
        if tree is not None and tree != drafter.tree:
            raise InvalidArgument(f"tree must be None or the tree drafter's own "
                                  f"({drafter.tree!r}); got {tree!r}")
        return drafter
    if tree is None:
        raise InvalidArgument("tree must be given (a specsim.trees.TokenTree, or an int K "
                              "for a chain of K) for a drafter that is not a tree drafter")
    if tree.is_chain:
        return ChainTreeDrafter(drafter, tree.n_nodes)
    if isinstance(drafter, FeatureHeadDrafter):
        return FeatureHeadTreeDrafter(drafter, tree, f"{drafter.name}:tree")
    if type(drafter) is ModelDrafter:          # not a subclass with its own head
        return ModelTreeDrafter(drafter.params, drafter.cfg, tree, f"{drafter.name}:tree")
    if isinstance(drafter, NGramDrafter):
        return NGramTreeDrafter(drafter.vocab_size, tree, drafter.n, drafter.min_n,
                                f"{drafter.name}:tree")
    raise InvalidArgument(f"drafter {getattr(drafter, 'name', drafter)!r} drafts chains "
                          f"only; tree must be TokenTree.chain(K) for it (got {tree!r})")
