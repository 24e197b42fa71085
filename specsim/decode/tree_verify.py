"""Verifying a token tree on the device: the tree's static tables, the accepted path
(greedy and sampled), and the accepted nodes' keys and values moved into consecutive
cache slots.

The verify pass reads C + 1 tokens, the root (the last kept token) at verify index 0
and node j at index j + 1 (`specsim.trees.TokenTree.verify_mask`). It yields the
target's distribution at every index, p [B, C+1, V]; node j's token was drafted from its
parent's distribution, so it is tested against p at ``parent_index[j]``.

- Greedy (`greedy_path`): a node is accepted when it was proposed, its token is the
  target's argmax at its parent and its parent is accepted; the deepest accepted node
  ends the path (ties: the lowest index), and the extra token is the argmax there.
- Sampled (`sampled_path`): multi-candidate rejection sampling down the tree. At a node
  with target distribution r (first p there), its children are tried in rank order;
  child j, drawn from its proposal distribution q_j (the drafter's distribution *given
  the siblings drawn before it*: the same q for independent draws, q with the earlier
  siblings removed and renormalised for draws without replacement, a one-hot for a
  lookup), is accepted with probability min(1, r(x)/q_j(x)); on a rejection r becomes
  the residual norm(max(0, r − q_j)) and the next child is tried. An accepted child
  becomes the node (r = p there); when every child is rejected the extra token is drawn
  from r. Each try is one exact speculative-sampling step of r with proposal q_j, so
  the token emitted at every depth follows p exactly (docs/trees.md).

Shapes: B batch, C tree nodes (static), V vocab, D the tree's depth, M the most children
of one node.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specsim.drafters.tree import move_path
from specsim.sampling import argmax, residual_probs, sample
from specsim.trees.tree import TokenTree

__all__ = ["TreeTables", "tree_tables", "dynamic_tables", "greedy_path", "sampled_path",
           "path_nodes",
           "path_indices", "move_path", "tree_nonfinite"]


class TreeTables(NamedTuple):
    """A tree's arrays as the compiled loop reads them, one tree per row (a static tree
    broadcast, or a dynamic tree's own per row)."""
    parent_index: jax.Array    # int32 [B, C]: verify index of node j's parent (0 = the root)
    depths: jax.Array          # int32 [B, C]
    ancestors: jax.Array       # bool [B, C, C]: node i's path from the root (i included)
    children: jax.Array        # int32 [B, C + 1, M]: children of each verify index in
    #                            drawing order (rank, then index), -1 pad
    verify_mask: jax.Array     # bool [B, C + 1, C + 1]
    positions: jax.Array       # int32 [B, C + 1]: depth offsets of (root, nodes)
    max_depth: int             # static: no row's tree is deeper


def tree_tables(tree: TokenTree, batch: int) -> TreeTables:
    """A static tree's tables, the same for each of ``batch`` rows."""
    C = tree.n_nodes
    kids = [[] for _ in range(C + 1)]
    for j in np.lexsort((np.arange(C), tree.ranks)):     # by rank, then index
        kids[int(tree.parents[j]) + 1].append(int(j))
    M = max(len(k) for k in kids)
    children = np.full((C + 1, M), -1, np.int32)
    for i, k in enumerate(kids):
        children[i, :len(k)] = k

    def rows(a):
        return jnp.broadcast_to(jnp.asarray(a), (batch,) + np.shape(a))

    return TreeTables(rows((tree.parents + 1).astype(np.int32)),
                      rows(tree.depths.astype(np.int32)), rows(tree.ancestor_mask()),
                      rows(children), rows(tree.verify_mask()),
                      rows(tree.verify_positions().astype(np.int32)), tree.max_depth)


def dynamic_tables(parents, max_depth: int, max_children: int) -> TreeTables:
    """The tables of one tree per row from parents [B, C] (node indices, −1 = a child
    of the root, parents first: parents[b, j] < j); siblings are drawn in index order.
    ``max_depth`` and ``max_children`` bound every row's tree (static)."""
    B, C = parents.shape
    pidx = (parents + 1).astype(jnp.int32)                                    # [B, C]
    eye = jnp.eye(C, dtype=bool)
    anc = jnp.broadcast_to(eye, (B, C, C))
    depths = jnp.ones((B, C), jnp.int32)
    for _ in range(max_depth - 1):            # a path is at most max_depth long
        anc_ext = jnp.concatenate([jnp.zeros((B, 1, C), bool), anc], 1)     # [B, C+1, C]
        anc = eye[None] | jnp.take_along_axis(anc_ext, pidx[:, :, None], 1)
        dep_ext = jnp.concatenate([jnp.zeros((B, 1), jnp.int32), depths], 1)
        depths = jnp.take_along_axis(dep_ext, pidx, 1) + 1
    is_child = pidx[:, None, :] == jnp.arange(C + 1)[None, :, None]           # [B, C+1, C]
    order = jnp.cumsum(is_child, -1) - 1
    slot = is_child[..., None] & (order[..., None] == jnp.arange(max_children))  # [B,C+1,C,M]
    children = jnp.where(jnp.any(slot, 2),
                         jnp.sum(jnp.where(slot, jnp.arange(C)[None, None, :, None], 0), 2), -1)
    vmask = jnp.zeros((B, C + 1, C + 1), bool).at[:, :, 0].set(True).at[:, 1:, 1:].set(anc)
    positions = jnp.concatenate([jnp.zeros((B, 1), jnp.int32), depths], 1)
    return TreeTables(pidx, depths, anc, children.astype(jnp.int32), vmask, positions,
                      max_depth)


def _proposed(q):
    return jnp.sum(q, -1) > 0


def _at(x, idx):
    """x [B, N, ...] at per-row indices idx [B, K] → [B, K, ...]."""
    return jnp.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), 1)


def greedy_path(t: TreeTables, tokens, q, p):
    """Greedy acceptance. tokens [B, C], q [B, C, V] (a zero row: no proposal), p
    [B, C+1, V]. → (best [B]: verify index ending the path, 0 = the root; n_acc [B];
    extra [B]: the target's argmax at ``best``)."""
    C = tokens.shape[1]
    top = argmax(p)                                                           # [B, C+1]
    match = _proposed(q) & (tokens == jnp.take_along_axis(top, t.parent_index, 1))
    acc = match
    for _ in range(t.max_depth - 1):          # a node's acceptance needs its parent's
        acc_ext = jnp.concatenate([jnp.ones_like(acc[:, :1]), acc], 1)
        acc = match & jnp.take_along_axis(acc_ext, t.parent_index, 1)
    score = jnp.where(acc, t.depths * (C + 1) + (C - jnp.arange(C))[None], -1)
    best = jnp.where(jnp.any(acc, 1), jnp.argmax(score, 1) + 1, 0).astype(jnp.int32)
    dep_ext = jnp.concatenate([jnp.zeros_like(t.depths[:, :1]), t.depths], 1)
    n_acc = jnp.take_along_axis(dep_ext, best[:, None], 1)[:, 0]
    extra = jnp.take_along_axis(top, best[:, None], 1)[:, 0]
    return best, n_acc, extra


def sampled_path(key, t: TreeTables, tokens, q, p, residual=residual_probs):
    """Multi-candidate rejection sampling down the tree (see the module). Arguments and
    result as `greedy_path`. ``residual(r, q_j)``: the distribution after a rejection
    (tests replace it to show the χ² test's power)."""
    B, C = tokens.shape
    rows = jnp.arange(B)
    M = t.children.shape[2]
    k_u, k_extra = jax.random.split(key)
    u = jax.random.uniform(k_u, (t.max_depth, M, B), jnp.float32)

    def level(d, carry):
        cur, alive, r, n_acc = carry
        moved = jnp.zeros((B,), bool)
        for m in range(M):
            child = t.children[rows, cur, m]                                  # [B]
            c = jnp.maximum(child, 0)
            x = tokens[rows, c]
            q_j = q[rows, c]                                                  # [B, V]
            try_ = alive & ~moved & (child >= 0) & _proposed(q_j)
            q_x = q_j[rows, x]
            ok = try_ & (q_x > 0) & (u[d, m] * q_x < r[rows, x])
            r = jnp.where((try_ & ~ok)[:, None], residual(r, q_j), r)
            cur = jnp.where(ok, c + 1, cur)
            moved = moved | ok
        r = jnp.where(moved[:, None], p[rows, cur], r)
        return cur, alive & moved, r, n_acc + moved.astype(jnp.int32)

    init = (jnp.zeros((B,), jnp.int32), jnp.ones((B,), bool), p[:, 0], jnp.zeros((B,), jnp.int32))
    best, _, r, n_acc = jax.lax.fori_loop(0, t.max_depth, level, init)
    return best, n_acc, sample(k_extra, r)


def path_nodes(t: TreeTables, best):
    """The node at each depth 1..D on the path to verify index ``best`` [B] → [B, D]
    node indices (entries past the path's length are 0: never read)."""
    B, C = t.depths.shape
    anc_ext = jnp.concatenate([jnp.zeros((B, 1, C), bool), t.ancestors], 1)  # [B, C+1, C]
    anc = _at(anc_ext, best[:, None])                                         # [B, 1, C]
    want = jnp.arange(1, t.max_depth + 1, dtype=jnp.int32)[None, :, None] == t.depths[:, None]
    return jnp.argmax(anc & want, -1).astype(jnp.int32)                       # [B, D]


def path_indices(path):
    """Verify indices of (root, path nodes) → [B, D + 1]."""
    return jnp.concatenate([jnp.zeros_like(path[:, :1]), path + 1], 1)


def tree_nonfinite(t: TreeTables, q, p, path, n_acc):
    """Which rows met non-finite values on their path, and how many new tokens each
    keeps. A row is flagged when the target's distribution at a path index up to n_acc,
    or the proposal of a child of one, is non-finite; it keeps the accepted tokens
    before the first such index and stops (the chain's rule, `nonfinite_rows`).
    → (finite [B] bool, n_valid [B] int32)."""
    C = q.shape[1]
    bad_q = ~jnp.all(jnp.isfinite(q), -1)                                     # [B, C]
    owner = t.parent_index[:, None, :] == jnp.arange(C + 1)[None, :, None]    # [B, C+1, C]
    bad = ~jnp.all(jnp.isfinite(p), -1) | jnp.any(bad_q[:, None, :] & owner, -1)
    idx = path_indices(path)                                                  # [B, D+1]
    bad_on_path = jnp.take_along_axis(bad, idx, 1)                            # [B, D+1]
    d = jnp.arange(idx.shape[1], dtype=jnp.int32)[None]
    first_bad = jnp.min(jnp.where(bad_on_path & (d <= n_acc[:, None]), d, idx.shape[1]), 1)
    finite = first_bad > n_acc
    return finite, jnp.where(finite, n_acc + 1, jnp.minimum(n_acc, first_bad))
