"""Token trees: the shape of a tree of drafted tokens, as static arrays (NumPy only).

A tree drafts several continuations of the last accepted token (the *root*) at once;
the target verifies root and nodes in one pass and keeps the longest accepted path.
A `TokenTree` of N nodes (the drafted tokens; the root is implicit) is stored as

- ``parents`` int64 [N]: the parent of node i, or -1 for a child of the root. Nodes come
  in topological order, ``parents[i] < i``, so one forward sweep visits parents first.
- ``ranks`` int64 [N]: which of its parent's candidates node i is, by the drafter's
  order (0 = the drafter's most probable token, 1 = the second, ...). Siblings have
  distinct ranks. Acceptance models look rates up by (depth, rank).
- ``depths`` int64 [N]: 1 for a child of the root, depth(parent) + 1 below.

What the verify pass needs (`verify_mask`, `verify_positions`) puts the root first, at
index 0, and node i at index i + 1: the target reads N + 1 tokens, each attending to
itself and its ancestors only, at position offset = its depth (root at offset 0).
`PaddedTree` is the same at a static capacity C >= N, for a compiled loop.

A chain of K drafts is the tree whose nodes all have rank 0: ``TokenTree.chain(K)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from specsim.errors import InvalidArgument
from specsim.validation import positive_int, reject_fractions

__all__ = ["MAX_NODES", "TokenTree", "PaddedTree"]

MAX_NODES = 4096
"""Largest tree a constructor builds; a verify pass over more tokens is not a draft."""


def _int_vector(name: str, values) -> np.ndarray:
    """``values`` as a 1-D int64 array: integers only (no bools, no fractional floats)."""
    arr = np.asarray(values)
    if arr.dtype == bool or (arr.dtype.kind not in "iuf" and arr.size):
        raise InvalidArgument(f"{name} must be a sequence of integers (got dtype {arr.dtype})")
    if arr.ndim != 1:
        raise InvalidArgument(f"{name} must be one-dimensional (got shape {arr.shape})")
    reject_fractions(name, arr, "hold integers")
    return arr.astype(np.int64)


def _find_cycle(parents: np.ndarray, start: int) -> list[int] | None:
    """The cycle reached by following parents from ``start``, or None if -1 is reached."""
    seen: dict[int, int] = {}
    node, order = start, []
    while node != -1 and 0 <= node < parents.size:
        if node in seen:
            return order[seen[node]:]
        seen[node] = len(order)
        order.append(node)
        node = int(parents[node])
    return None


def _check_parents(parents) -> np.ndarray:
    p = _int_vector("parents", parents)
    n = p.size
    if n == 0:
        raise InvalidArgument("parents must list at least one node (a tree of 0 nodes "
                              "drafts nothing; the node budget must be >= 1)")
    if n > MAX_NODES:
        raise InvalidArgument(f"parents must list at most MAX_NODES = {MAX_NODES} nodes "
                              f"(got {n})")
    for i, q in enumerate(p.tolist()):
        if q < -1 or q >= n:
            raise InvalidArgument(f"parents[{i}] must be -1 (a child of the root) or a node "
                                  f"index in [0, {n - 1}] (got {q})")
    for i, q in enumerate(p.tolist()):
        if q >= i:
            cycle = _find_cycle(p, i)
            if cycle is not None:
                raise InvalidArgument(f"parents must describe a tree: nodes {cycle} form a "
                                      f"cycle (parents[{i}] = {q})")
            raise InvalidArgument(f"parents must list every parent before its child "
                                  f"(parents[{i}] = {q} >= {i}); number the nodes in "
                                  f"breadth- or depth-first order")
    return p


def _check_ranks(ranks, parents: np.ndarray) -> np.ndarray:
    if ranks is None:                       # sibling order: 0, 1, 2, ... per parent
        count: dict[int, int] = {}
        out = np.empty(parents.size, np.int64)
        for i, q in enumerate(parents.tolist()):
            out[i] = count.get(q, 0)
            count[q] = out[i] + 1
        return out
    r = _int_vector("ranks", ranks)
    if r.size != parents.size:
        raise InvalidArgument(f"ranks must give one rank per node ({parents.size}; "
                              f"got {r.size})")
    if (r < 0).any():
        i = int(np.flatnonzero(r < 0)[0])
        raise InvalidArgument(f"ranks must be integers >= 0 (got ranks[{i}] = {r[i]})")
    seen: dict[tuple[int, int], int] = {}
    for i, (q, k) in enumerate(zip(parents.tolist(), r.tolist())):
        if (q, k) in seen:
            raise InvalidArgument(f"ranks must differ between siblings: nodes "
                                  f"{seen[(q, k)]} and {i} (children of {q}) both have "
                                  f"rank {k}")
        seen[(q, k)] = i
    return r


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False, init=False)
class TokenTree:
    """A validated tree of N >= 1 drafted tokens below an implicit root (see module).

    Build one with `chain`, `from_top_k`, `from_paths` or `from_parents`; the arrays are
    read-only. Two trees are equal when their parents and ranks are.
    """

    parents: np.ndarray   # int64 [N], -1 = child of the root, parents[i] < i
    ranks: np.ndarray     # int64 [N], distinct among siblings
    depths: np.ndarray    # int64 [N], >= 1

    def __init__(self, parents, ranks=None):
        p = _check_parents(parents)
        r = _check_ranks(ranks, p)
        d = np.empty(p.size, np.int64)
        for i, q in enumerate(p.tolist()):
            d[i] = 1 if q < 0 else d[q] + 1
        object.__setattr__(self, "parents", _readonly(p))
        object.__setattr__(self, "ranks", _readonly(r))
        object.__setattr__(self, "depths", _readonly(d))

    # ---- constructors -----------------------------------------------------------------
    @classmethod
    def from_parents(cls, parents: Sequence[int], ranks: Sequence[int] | None = None
                     ) -> "TokenTree":
        """A tree from explicit parent indices (-1 = root) and, optionally, ranks
        (default: each node's order among its siblings)."""
        return cls(parents, ranks)

    @classmethod
    def chain(cls, k: int) -> "TokenTree":
        """K drafts in a row, each the drafter's top token: the chain of today's loop."""
        k = positive_int("k", k)
        if k > MAX_NODES:
            raise InvalidArgument(f"k must be at most MAX_NODES = {MAX_NODES} (got {k})")
        return cls(np.arange(k) - 1, np.zeros(k, np.int64))

    @classmethod
    def from_top_k(cls, top_k: Sequence[int]) -> "TokenTree":
        """The full tree whose every node at depth d - 1 has ``top_k[d - 1]`` children,
        the drafter's top candidates (ranks 0..top_k[d-1]-1); depth len(top_k).
        ``from_top_k([1] * K)`` is the chain; ``[4, 2, 1]`` gives 4 + 8 + 8 = 20 nodes.
        Nodes are numbered breadth-first, siblings by rank."""
        ks = _int_vector("top_k", top_k)
        if ks.size == 0 or (ks < 1).any():
            raise InvalidArgument(f"top_k must list one integer >= 1 per depth "
                                  f"(got {ks.tolist()})")
        sizes = np.cumprod(ks.astype(float))
        if sizes.sum() > MAX_NODES:
            raise InvalidArgument(f"top_k {ks.tolist()} gives {int(sizes.sum())} nodes; "
                                  f"at most MAX_NODES = {MAX_NODES}")
        parents, ranks, level = [], [], [-1]
        for k in ks.tolist():
            nxt = []
            for q in level:
                for r in range(k):
                    nxt.append(len(parents))
                    parents.append(q)
                    ranks.append(r)
            level = nxt
        return cls(parents, ranks)

    @classmethod
    def from_paths(cls, paths: Iterable[Sequence[int]]) -> "TokenTree":
        """A tree from rank paths, Medusa's format: ``(0,)`` is the root's top child,
        ``(0, 1)`` that node's second candidate. The set must be prefix-closed (every
        path's parent path listed) and free of repeats; nodes are numbered by (depth,
        path), i.e. breadth-first."""
        items = []
        for j, path in enumerate(paths):
            if not isinstance(path, Iterable) or isinstance(path, (str, bytes)):
                raise InvalidArgument(f"paths[{j}] must be a sequence of ranks, e.g. (0, 1) "
                                      f"(got {path!r})")
            t = tuple(_int_vector(f"paths[{j}]", list(path)).tolist())
            if not t:
                raise InvalidArgument(f"paths[{j}] is empty; every path names at least "
                                      f"one rank (the root is implicit)")
            if min(t) < 0:
                raise InvalidArgument(f"paths[{j}] must hold ranks >= 0 (got {t})")
            items.append(t)
        if len(set(items)) != len(items):
            dup = next(t for t in items if items.count(t) > 1)
            raise InvalidArgument(f"paths must not repeat a path (got {dup} twice)")
        order = sorted(items, key=lambda t: (len(t), t))
        index = {t: i for i, t in enumerate(order)}
        parents = []
        for t in order:
            if len(t) > 1 and t[:-1] not in index:
                raise InvalidArgument(f"paths must be prefix-closed: {t} needs its parent "
                                      f"path {t[:-1]}")
            parents.append(index[t[:-1]] if len(t) > 1 else -1)
        if not order:
            raise InvalidArgument("paths must list at least one path (the node budget "
                                  "must be >= 1)")
        return cls(parents, [t[-1] for t in order])

    # ---- structure ----------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return int(self.parents.size)

    @property
    def max_depth(self) -> int:
        return int(self.depths.max())

    @property
    def max_rank(self) -> int:
        return int(self.ranks.max())

    @property
    def is_chain(self) -> bool:
        return bool((self.parents == np.arange(self.n_nodes) - 1).all()
                    and (self.ranks == 0).all())

    def nodes_per_depth(self) -> np.ndarray:
        """int64 [max_depth]: entry d - 1 = the nodes at depth d (the tree's widths)."""
        return np.bincount(self.depths - 1, minlength=self.max_depth)

    def expanded_per_depth(self) -> np.ndarray:
        """int64 [max_depth]: entry d = the nodes at depth d (the root at 0) that have
        children, i.e. the tokens a drafter that drafts depth by depth feeds to the pass
        proposing depth d + 1."""
        has_child = np.unique(self.parents)
        depth_of = np.where(has_child < 0, 0, self.depths[np.maximum(has_child, 0)])
        return np.bincount(depth_of, minlength=self.max_depth)

    def children(self, node: int) -> np.ndarray:
        """Indices of the children of ``node`` (-1: of the root), in node order."""
        return np.flatnonzero(self.parents == node)

    def paths(self) -> tuple[tuple[int, ...], ...]:
        """Each node's rank path from the root (`from_paths`' format), in node order."""
        out: list[tuple[int, ...]] = []
        for q, r in zip(self.parents.tolist(), self.ranks.tolist()):
            out.append((out[q] if q >= 0 else ()) + (r,))
        return tuple(out)

    def path_to(self, node: int) -> np.ndarray:
        """Node indices from the root's child down to ``node`` (inclusive)."""
        node = int(node)
        if not 0 <= node < self.n_nodes:
            raise InvalidArgument(f"node must be in [0, {self.n_nodes - 1}] (got {node})")
        path = []
        while node >= 0:
            path.append(node)
            node = int(self.parents[node])
        return np.array(path[::-1], np.int64)

    def subtree(self, keep) -> "TokenTree":
        """The tree of the nodes ``keep`` (indices, or a bool mask [N]); every kept
        node's parent must be kept too. Order and ranks are preserved."""
        keep = np.asarray(keep)
        mask = np.zeros(self.n_nodes, bool)
        if keep.dtype == bool:
            if keep.shape != (self.n_nodes,):
                raise InvalidArgument(f"keep as a mask must have shape ({self.n_nodes},) "
                                      f"(got {keep.shape})")
            mask = keep.copy()
        else:
            idx = _int_vector("keep", keep)
            if ((idx < 0) | (idx >= self.n_nodes)).any():
                raise InvalidArgument(f"keep must hold node indices in "
                                      f"[0, {self.n_nodes - 1}] (got {idx.tolist()})")
            mask[idx] = True
        if not mask.any():
            raise InvalidArgument("keep must name at least one node")
        orphans = mask & (self.parents >= 0) & ~mask[np.maximum(self.parents, 0)]
        if orphans.any():
            i = int(np.flatnonzero(orphans)[0])
            raise InvalidArgument(f"keep must contain each kept node's parent (node {i} "
                                  f"is kept, its parent {int(self.parents[i])} is not)")
        old = np.flatnonzero(mask)
        new_of = np.full(self.n_nodes, -1, np.int64)
        new_of[old] = np.arange(old.size)
        parents = np.where(self.parents[old] >= 0, new_of[np.maximum(self.parents[old], 0)], -1)
        return TokenTree(parents, self.ranks[old])

    # ---- what a verify pass consumes ------------------------------------------------------
    def ancestor_mask(self) -> np.ndarray:
        """bool [N, N]: entry [i, j] is True when node j is node i or one of its
        ancestors (the root excluded), i.e. when token i may attend to token j."""
        n = self.n_nodes
        m = np.zeros((n, n), bool)
        for i, q in enumerate(self.parents.tolist()):
            if q >= 0:
                m[i] = m[q]
            m[i, i] = True
        return m

    def verify_mask(self) -> np.ndarray:
        """bool [N + 1, N + 1] over (root, node 0, ..., node N - 1): the ancestor mask
        with the root prepended, which every token attends to (causal within the tree)."""
        n = self.n_nodes
        m = np.zeros((n + 1, n + 1), bool)
        m[:, 0] = True
        m[1:, 1:] = self.ancestor_mask()
        return m

    def verify_positions(self) -> np.ndarray:
        """int64 [N + 1]: position offsets of (root, nodes) from the root's position, i.e.
        (0, depths...). A chain gives 0, 1, ..., K: today's verify positions."""
        return np.concatenate([[0], self.depths]).astype(np.int64)

    def padded(self, capacity: int) -> "PaddedTree":
        """The tree at a static capacity C >= N (see `PaddedTree`)."""
        c = positive_int("capacity", capacity)
        n = self.n_nodes
        if c < n:
            raise InvalidArgument(f"capacity must be at least the tree's n_nodes = {n} "
                                  f"(got {c})")
        pad = c - n
        mask = np.zeros((c + 1, c + 1), bool)
        mask[: n + 1, : n + 1] = self.verify_mask()
        mask[n + 1:, 0] = True
        mask[np.arange(n + 1, c + 1), np.arange(n + 1, c + 1)] = True
        return PaddedTree(
            parents=_readonly(np.concatenate([self.parents, np.full(pad, -1)]).astype(np.int64)),
            depths=_readonly(np.concatenate([self.depths, np.zeros(pad, np.int64)])),
            ranks=_readonly(np.concatenate([self.ranks, np.full(pad, -1)]).astype(np.int64)),
            valid=_readonly(np.arange(c) < n),
            mask=_readonly(mask), n_nodes=n)

    # ---- identity --------------------------------------------------------------------------
    def __eq__(self, other) -> bool:
        if not isinstance(other, TokenTree):
            return NotImplemented
        return (np.array_equal(self.parents, other.parents)
                and np.array_equal(self.ranks, other.ranks))

    def __hash__(self) -> int:
        return hash((self.parents.tobytes(), self.ranks.tobytes()))

    def __repr__(self) -> str:
        if self.is_chain:
            return f"TokenTree.chain({self.n_nodes})"
        return (f"TokenTree(n_nodes={self.n_nodes}, depth={self.max_depth}, "
                f"widths={self.nodes_per_depth().tolist()})")


@dataclass(frozen=True, eq=False)
class PaddedTree:
    """A `TokenTree` at a static capacity C (node slots), for a compiled verify loop.

    parents int64 [C]: -1 for the root's children and for padding;
    depths int64 [C]: 0 for padding; ranks int64 [C]: -1 for padding;
    valid bool [C]: True for the tree's n_nodes real nodes (the first ones);
    mask bool [C + 1, C + 1]: the verify mask over (root, slots): a real node attends to
    the root, its ancestors and itself; a padding slot to the root and itself (so no row
    of the attention is empty); no real node attends to padding.
    """

    parents: np.ndarray
    depths: np.ndarray
    ranks: np.ndarray
    valid: np.ndarray
    mask: np.ndarray
    n_nodes: int

    @property
    def capacity(self) -> int:
        return int(self.parents.size)

    @property
    def positions(self) -> np.ndarray:
        """int64 [C + 1]: offsets of (root, slots) from the root's position."""
        return np.concatenate([[0], self.depths]).astype(np.int64)

    def tree(self) -> TokenTree:
        """The real nodes as a `TokenTree`."""
        n = self.n_nodes
        return TokenTree(self.parents[:n], self.ranks[:n])

