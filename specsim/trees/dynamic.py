"""Dynamic trees: keep the drafted nodes with the best path scores (EAGLE-2's rule).

EAGLE-2 (Li et al. 2024, "EAGLE-2: Faster Inference of Language Models with Dynamic
Draft Trees") drafts a candidate tree by expanding its most probable frontier nodes, then
*reranks*: it keeps the N candidates with the largest path score, the product of the
drafter's probabilities along the path from the root,

    s(v) = Π_{u ∈ path(v)} π(u),      π(u) = drafter's probability of u's token given
                                      its parent's context.

Because every π <= 1, a node's path score never exceeds its parent's; with ties broken
towards smaller depth (then node order), the top N are therefore ancestor-closed (a kept
node's parent is kept) and form a tree. Among all ancestor-closed sets of N candidates
they maximise Σ_v s(v) (the top N of any set maximise its sum), which is E - 1 of
`specsim.trees.acceptance` when the drafter is calibrated (s(v) = P(v accepted)).
"""

from __future__ import annotations

import numpy as np

from specsim.errors import InvalidArgument
from specsim.trees.tree import TokenTree
from specsim.validation import check_probability, positive_int

__all__ = ["path_scores", "nodes_to_expand", "select_best_nodes"]


def _per_node(name: str, tree: TokenTree, values) -> np.ndarray:
    if not isinstance(tree, TokenTree):
        raise InvalidArgument(f"tree must be a TokenTree (got {type(tree).__name__})")
    v = check_probability(name, values)
    if v.shape != (tree.n_nodes,):
        raise InvalidArgument(f"{name} must give one value per node, shape "
                              f"({tree.n_nodes},) (got {v.shape})")
    return v


def path_scores(tree: TokenTree, scores) -> np.ndarray:
    """float64 [N]: the product of ``scores`` (float [N] in [0, 1], each node's drafter
    probability given its parent) along each node's path from the root."""
    s = _per_node("scores", tree, scores)
    out = np.empty(tree.n_nodes)
    for i, q in enumerate(tree.parents.tolist()):
        out[i] = s[i] * (out[q] if q >= 0 else 1.0)
    return out


def nodes_to_expand(tree: TokenTree, path_scores, top_k: int) -> np.ndarray:
    """EAGLE-2's expansion step: the (at most) ``top_k`` nodes of the deepest depth of
    ``tree`` with the largest ``path_scores`` (float [N]), ties to the earlier node; the
    drafter proposes the next depth's candidates below them. int64 indices, best first."""
    s = _per_node("path_scores", tree, path_scores)
    k = positive_int("top_k", top_k)
    frontier = np.flatnonzero(tree.depths == tree.max_depth)
    return frontier[np.lexsort((frontier, -s[frontier]))][:k].astype(np.int64)


def select_best_nodes(tree: TokenTree, path_scores, n_nodes: int
                      ) -> tuple[TokenTree, np.ndarray]:
    """EAGLE-2's rerank: the ``n_nodes`` candidates of ``tree`` with the largest
    ``path_scores`` (float [N] in [0, 1], non-increasing from a node to its children,
    e.g. from `path_scores`), ties to the shallower node, then the earlier one.

    Returns (subtree, kept): the kept nodes as a `TokenTree` (candidate order kept) and
    kept int64 [n_nodes], their indices in ``tree``, ascending.
    """
    s = _per_node("path_scores", tree, path_scores)
    n = positive_int("n_nodes", n_nodes)
    if n > tree.n_nodes:
        raise InvalidArgument(f"n_nodes must be at most the candidates' n_nodes = "
                              f"{tree.n_nodes} (got {n})")
    has_parent = tree.parents >= 0
    parent_score = np.where(has_parent, s[np.maximum(tree.parents, 0)], 1.0)
    rising = s > parent_score
    if rising.any():
        i = int(np.flatnonzero(rising)[0])
        raise InvalidArgument(f"path_scores must not increase from a node to its child "
                              f"(node {i}: {float(s[i])!r} > its parent's "
                              f"{float(parent_score[i])!r}); pass products along the path, "
                              f"e.g. from path_scores(tree, scores)")
    order = np.lexsort((np.arange(tree.n_nodes), tree.depths, -s))
    kept = np.sort(order[:n])
    return tree.subtree(kept), kept
