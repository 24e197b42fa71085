"""The tree of N nodes with the largest expected accepted length (NumPy only).

Sequoia's dynamic programme (Chen et al. 2024, "Sequoia: Scalable, Robust, and
Hardware-aware Speculative Decoding"), over the positional model of
`specsim.trees.acceptance` with rates that may depend on depth. Under that model a
subtree's contribution to E - 1 = Σ_v P(v accepted) factorises: the subtree below an
accepted node at depth d, given n nodes, contributes at most

    V(d, n) = H(d, 0, n),
    H(d, r, n) = max( H(d, r + 1, n),                                 rank r left out
                      max_{1<=j<=n} q[d+1, r] (1 + V(d + 1, j - 1))    rank r's child
                                    + H(d, r + 1, n - j) ),            with j - 1 below it
    H(d, R, 0) = 0,  H(d, R, n > 0) = -inf,   V(D, 0) = 0,  V(D, n > 0) = -inf,

where q is the marginal rate (row d of ``acceptance.marginal`` for depth d + 1) and D
the depth limit. The best tree of exactly n nodes has E = 1 + V(0, n). Each (d, r) step
is one max-plus convolution over n, so all budgets 1..N cost O(D R N^2) together.
Any rank may be left out (rates need not fall with rank), so the optimum is over every
tree with depth <= D and ranks < R, which tests/test_tree_theory.py checks against brute
enumeration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import InvalidArgument
from specsim.trees.acceptance import PositionalAcceptance
from specsim.trees.tree import MAX_NODES, TokenTree
from specsim.validation import positive_int

__all__ = ["OptimalTrees", "optimal_trees", "optimal_tree", "tree_capacity"]


def tree_capacity(depth: int, width: int) -> int:
    """Nodes of the full tree with ``width`` children per node down to ``depth``."""
    depth, width = positive_int("depth", depth), positive_int("width", width)
    return sum(width ** d for d in range(1, depth + 1))


@dataclass(frozen=True, eq=False)
class OptimalTrees:
    """The best tree for every budget 1..max_nodes: trees[n - 1] has exactly n nodes and
    expected_tokens float64 [max_nodes], entry n - 1 = its E (non-decreasing in n)."""

    trees: tuple[TokenTree, ...]
    expected_tokens: np.ndarray
    max_depth: int

    def __getitem__(self, n_nodes: int) -> tuple[TokenTree, float]:
        """(tree, E) of the best tree with ``n_nodes`` nodes."""
        n = positive_int("n_nodes", n_nodes)
        if n > len(self.trees):
            raise InvalidArgument(f"n_nodes must be at most {len(self.trees)} here (got {n})")
        return self.trees[n - 1], float(self.expected_tokens[n - 1])


def _max_plus(a: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """out[n] = max_{0<=j<=n} a[j] + h[n - j], and the smallest maximising j."""
    m = a.size
    n_idx = np.arange(m)[:, None] - np.arange(m)[None, :]            # [n, j] = n - j
    hpad = np.concatenate([h, [-np.inf]])
    table = a[None, :] + hpad[np.where(n_idx >= 0, n_idx, m)]
    j = np.argmax(table, axis=1)
    return table[np.arange(m), j], j


def optimal_trees(acceptance: PositionalAcceptance, max_nodes: int, *,
                  max_depth: int | None = None) -> OptimalTrees:
    """Sequoia's dynamic programme: the tree maximising E for each budget 1..max_nodes,
    with depth <= ``max_depth`` (default: the depths the rates cover) and ranks < R."""
    if not isinstance(acceptance, PositionalAcceptance):
        raise InvalidArgument(f"acceptance must be a PositionalAcceptance "
                              f"(got {type(acceptance).__name__})")
    n_max = positive_int("max_nodes", max_nodes)
    depth = acceptance.depth if max_depth is None else positive_int("max_depth", max_depth)
    if depth > acceptance.depth:
        raise InvalidArgument(f"max_depth must be at most the depths the rates cover, "
                              f"{acceptance.depth} (got {depth})")
    width = acceptance.width
    cap = min(tree_capacity(depth, width), MAX_NODES)
    if n_max > cap:
        raise InvalidArgument(f"max_nodes must be at most {cap}, the nodes a tree of depth "
                              f"{depth} and {width} ranks holds (got {n_max})")
    q = acceptance.marginal
    m = n_max + 1
    empty = np.full(m, -np.inf)
    empty[0] = 0.0
    value = empty.copy()                                  # V(depth, .)
    choice = np.zeros((depth, width, m), np.int64)        # [d, r, n] -> j
    for d in range(depth - 1, -1, -1):
        below = np.full(m, -np.inf)                       # q (1 + V(d + 1, j - 1)), j >= 1
        ok = np.isfinite(value[:-1])
        h = empty.copy()                                  # H(d, R, .)
        for r in range(width - 1, -1, -1):
            a = below.copy()
            a[1:][ok] = q[d, r] * (1.0 + value[:-1][ok])
            a[0] = 0.0
            h, choice[d, r] = _max_plus(a, h)
        value = h
    trees = []
    for n in range(1, m):
        paths: list[tuple[int, ...]] = []
        _rebuild(choice, 0, n, (), paths)
        trees.append(TokenTree.from_paths(paths))
    return OptimalTrees(trees=tuple(trees), expected_tokens=1.0 + value[1:], max_depth=depth)


def _rebuild(choice: np.ndarray, d: int, n: int, prefix: tuple[int, ...],
             paths: list[tuple[int, ...]]) -> None:
    """Append the rank paths of the optimal subtree of ``n`` nodes below ``prefix``."""
    for r in range(choice.shape[1]):
        if n == 0:
            return
        j = int(choice[d, r, n])
        if j:
            paths.append(prefix + (r,))
            _rebuild(choice, d + 1, j - 1, prefix + (r,), paths)
            n -= j


def optimal_tree(acceptance: PositionalAcceptance, n_nodes: int, *,
                 max_depth: int | None = None) -> tuple[TokenTree, float]:
    """(tree, E): the tree of exactly ``n_nodes`` nodes with the largest expected tokens
    per iteration (`optimal_trees` for one budget)."""
    n = positive_int("n_nodes", n_nodes)
    return optimal_trees(acceptance, n, max_depth=max_depth)[n]
