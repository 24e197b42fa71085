"""Per-depth, per-rank acceptance rates measured from tree runs (NumPy only).

A tree run records, per iteration and row, where its accepted path ended
(``SpeculativeStats.path_end``: the verify index, 0 = the root, node j at j + 1; −1 where
the row had finished). With the static tree, that end fixes the whole walk of the
positional model (`specsim.trees.acceptance`): each node on the path was accepted after
its lower-ranked siblings were tried and rejected, and at the end every child was tried
and rejected. So

    tried[d - 1, r]    += 1  for each rank r tried at depth d,
    accepted[d - 1, r] += 1  for the rank accepted at depth d,

and ``PositionalAcceptance.from_counts(accepted, tried)`` gives the rates Sequoia's
programme (`specsim.trees.optimal`) plans a tree with. A rank a tree does not hold is
never observed (tried 0, rate 0).
"""

from __future__ import annotations

import numpy as np

from specsim.errors import InvalidArgument
from specsim.trees.acceptance import PositionalAcceptance
from specsim.trees.tree import TokenTree

__all__ = ["acceptance_counts", "measured_acceptance"]


def _per_end(tree: TokenTree) -> tuple[np.ndarray, np.ndarray]:
    """(accepted, tried) int64 [C + 1, D, R]: the counts one iteration ending at each
    verify index adds."""
    C, D, R = tree.n_nodes, tree.max_depth, tree.max_rank + 1
    acc = np.zeros((C + 1, D, R), np.int64)
    tried = np.zeros((C + 1, D, R), np.int64)
    kids = {q: tree.children(q) for q in range(-1, C)}
    for end in range(C + 1):
        path = tree.path_to(end - 1) if end else np.zeros(0, np.int64)
        for v in path:
            d, r = int(tree.depths[v]) - 1, int(tree.ranks[v])
            acc[end, d, r] += 1
            sib = kids[int(tree.parents[v])]
            tried[end, d, tree.ranks[sib][tree.ranks[sib] <= r]] += 1
        stop = kids[end - 1]
        if stop.size:
            tried[end, int(tree.depths[stop[0]]) - 1, tree.ranks[stop]] += 1
    return acc, tried


def acceptance_counts(tree: TokenTree, path_end) -> tuple[np.ndarray, np.ndarray]:
    """(accepted, tried) int64 [D, R] from the path ends (int [I, B] or any shape;
    −1 entries skipped) of a run with the static ``tree`` (see the module)."""
    if not isinstance(tree, TokenTree):
        raise InvalidArgument(f"tree must be a TokenTree (got {type(tree).__name__})")
    ends = np.asarray(path_end)
    if ends.dtype == bool or ends.dtype.kind not in "iu":
        raise InvalidArgument(f"path_end must hold integer verify indices (got dtype "
                              f"{ends.dtype})")
    ends = ends[ends >= 0].astype(np.int64)
    if (ends > tree.n_nodes).any():
        raise InvalidArgument(f"path_end must hold verify indices in [-1, {tree.n_nodes}] "
                              f"for a tree of {tree.n_nodes} nodes (got {int(ends.max())})")
    times = np.bincount(ends, minlength=tree.n_nodes + 1)                   # [C + 1]
    acc, tried = _per_end(tree)
    return np.tensordot(times, acc, 1), np.tensordot(times, tried, 1)


def measured_acceptance(tree: TokenTree, path_end) -> PositionalAcceptance:
    """The positional model's conditional rates measured from a tree run's path ends."""
    return PositionalAcceptance.from_counts(*acceptance_counts(tree, path_end))
