"""Expected accepted length of a token tree under positional acceptance (NumPy only).

Model (positional acceptance; SpecInfer's multi-candidate verification, Sequoia's
"positional acceptance assumption", generalised to depend on depth). Verification walks
the tree from the root: at an accepted node (the root is accepted) it tries the node's
candidate tokens in the drafter's rank order r = 0, 1, 2, ...; the rank-r candidate at
depth d is accepted with probability

    p[d, r] = P(rank r accepted | parent accepted, ranks 0..r-1 rejected),

independently of everything else, and the walk moves to the first accepted candidate.
If that candidate is not a node of the tree, or every rank is rejected, the walk stops;
the target then adds one token of its own (correction or bonus). So at most one child
of a node is accepted, and the rank-r child is accepted with the *marginal* rate

    q[d, r] = p[d, r] · Π_{r' < r} (1 - p[d, r'])          (Σ_r q[d, r] <= 1).

q is what Sequoia calls the acceptance vector; p is what a trace measures directly
(accepted / tried at each rank). Greedy verification of a deterministic top-k drafter is
this model too: q[d, r] = P(the target's argmax is the drafter's r-th token).

Closed form. Node v is accepted iff every node on its path from the root is, so
P(v accepted) = Π_{u ∈ path(v)} q[depth(u), rank(u)], and with A = accepted nodes
(one path, so at most one accepted node per depth)

    E[tokens per iteration] = 1 + E[A] = 1 + Σ_v Π_{u ∈ path(v)} q[depth(u), rank(u)],
    P(A >= l) = Σ_{v : depth(v) = l} P(v accepted).

For a chain of K rank-0 nodes with p[d, 0] = α this is 1 + α + ... + α^K, the
`specsim.analytic.expected_tokens(α, K)` of Leviathan et al.; with p[d, 0] = α_d it is
`specsim.analytic.expected_tokens_positional`.

Arrays: rates are [D, R], row d - 1 = depth d (1..D), column r = rank r (0..R-1). A tree
evaluated against them must have depth <= D and ranks < R.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import InvalidArgument
from specsim.trees.tree import TokenTree
from specsim.validation import check_probability, nonnegative_int, positive_int

__all__ = ["PositionalAcceptance", "node_probabilities", "expected_tokens", "tokens_pmf",
           "TreeRun", "simulate_tree"]

_ROW_SUM_TOLERANCE = 1e-9
_CHUNK = 1 << 18          # iterations simulated at once (bounds memory)


def _table(name: str, x) -> np.ndarray:
    arr = check_probability(name, x)
    if arr.ndim != 2 or 0 in arr.shape:
        raise InvalidArgument(f"{name} must be a 2-D [depth, rank] array with at least one "
                              f"depth and one rank (got shape {arr.shape})")
    return arr


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.array(a, np.float64)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False, init=False)
class PositionalAcceptance:
    """Per-depth, per-rank acceptance rates of the positional model (module docstring).

    rates float64 [D, R]: conditional p[d - 1, r] in [0, 1] (rank r at depth d accepted
    given its parent was and ranks < r were not); marginal float64 [D, R]: q[d - 1, r].
    """

    rates: np.ndarray
    marginal: np.ndarray

    def __init__(self, rates):
        p = _table("rates", rates)
        survive = np.cumprod(1.0 - p, axis=1)
        before = np.concatenate([np.ones((p.shape[0], 1)), survive[:, :-1]], axis=1)
        object.__setattr__(self, "rates", _readonly(p))
        object.__setattr__(self, "marginal", _readonly(p * before))

    @classmethod
    def from_marginal(cls, marginal) -> "PositionalAcceptance":
        """From marginal rates q [D, R] (Sequoia's acceptance vector, one row per depth):
        q[d, r] = P(the rank-r child is the accepted one | parent accepted); each row must
        sum to at most 1. Ranks past a row's exhausted mass get conditional rate 0."""
        q = _table("marginal", marginal)
        total = q.sum(axis=1)
        if (total > 1.0 + _ROW_SUM_TOLERANCE).any():
            d = int(np.argmax(total))
            raise InvalidArgument(f"marginal must sum to at most 1 over the ranks of each "
                                  f"depth (at most one child is accepted); row {d} (depth "
                                  f"{d + 1}) sums to {float(total[d])!r}")
        left = 1.0 - np.concatenate([np.zeros((q.shape[0], 1)), np.cumsum(q, axis=1)[:, :-1]],
                                    axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(left > 0.0, q / np.where(left > 0.0, left, 1.0), 0.0)
        return cls(np.clip(p, 0.0, 1.0))

    @classmethod
    def same_at_every_depth(cls, rates_by_rank, depth: int) -> "PositionalAcceptance":
        """Conditional rates [R] repeated at depths 1..``depth`` (Sequoia's
        depth-independent assumption)."""
        r = check_probability("rates_by_rank", rates_by_rank)
        if r.ndim != 1 or r.size == 0:
            raise InvalidArgument(f"rates_by_rank must be a 1-D array of at least one rate "
                                  f"(got shape {r.shape})")
        return cls(np.tile(r, (positive_int("depth", depth), 1)))

    @classmethod
    def from_counts(cls, accepted, tried) -> "PositionalAcceptance":
        """Conditional rates measured from a trace: accepted[d, r] / tried[d, r], where
        tried counts the times the rank-r candidate at depth d + 1 was reached (parent
        accepted, ranks < r rejected). A (depth, rank) never tried gets rate 0."""
        a = np.asarray(accepted)
        t = np.asarray(tried)
        for name, x in (("accepted", a), ("tried", t)):
            if x.dtype == bool or x.dtype.kind not in "iu" or x.ndim != 2 or (x < 0).any():
                raise InvalidArgument(f"{name} must be a 2-D [depth, rank] array of counts "
                                      f">= 0 (got dtype {x.dtype}, shape {x.shape})")
        if a.shape != t.shape:
            raise InvalidArgument(f"accepted and tried must have the same shape "
                                  f"(got {a.shape} and {t.shape})")
        if (a > t).any():
            raise InvalidArgument("accepted must not exceed tried at any (depth, rank)")
        return cls(np.where(t > 0, a / np.maximum(t, 1), 0.0))

    @property
    def depth(self) -> int:
        """D: the deepest depth the rates cover."""
        return int(self.rates.shape[0])

    @property
    def width(self) -> int:
        """R: the ranks the rates cover (0..R-1)."""
        return int(self.rates.shape[1])

    def check_tree(self, tree: TokenTree, name: str = "tree") -> None:
        """Raise unless every node of ``tree`` has a rate (depth <= D, rank < R)."""
        if not isinstance(tree, TokenTree):
            raise InvalidArgument(f"{name} must be a TokenTree (got {type(tree).__name__})")
        if tree.max_depth > self.depth:
            raise InvalidArgument(f"{name} reaches depth {tree.max_depth} but the acceptance "
                                  f"rates cover depths 1..{self.depth}")
        if tree.max_rank >= self.width:
            raise InvalidArgument(f"{name} uses rank {tree.max_rank} but the acceptance "
                                  f"rates cover ranks 0..{self.width - 1}")

    def __repr__(self) -> str:
        return f"PositionalAcceptance(depth={self.depth}, width={self.width})"


def _check(tree, acceptance) -> None:
    if not isinstance(acceptance, PositionalAcceptance):
        raise InvalidArgument(f"acceptance must be a PositionalAcceptance "
                              f"(got {type(acceptance).__name__})")
    acceptance.check_tree(tree)


def node_probabilities(tree: TokenTree, acceptance: PositionalAcceptance) -> np.ndarray:
    """float64 [N]: P(node i accepted) = Π over its path of q[depth - 1, rank]."""
    _check(tree, acceptance)
    q = acceptance.marginal[tree.depths - 1, tree.ranks]
    out = np.empty(tree.n_nodes)
    for i, parent in enumerate(tree.parents.tolist()):
        out[i] = q[i] * (out[parent] if parent >= 0 else 1.0)
    return out


def expected_tokens(tree: TokenTree, acceptance: PositionalAcceptance) -> float:
    """Expected tokens per iteration, 1 + Σ_v P(v accepted) (module docstring)."""
    return float(1.0 + node_probabilities(tree, acceptance).sum())


def tokens_pmf(tree: TokenTree, acceptance: PositionalAcceptance) -> np.ndarray:
    """Exact law of tokens per iteration: float64 [max_depth + 1], entry j - 1 is
    P(T = j), from P(A >= l) = Σ_{depth(v) = l} P(v accepted) and T = A + 1."""
    prob = node_probabilities(tree, acceptance)
    at_least = np.concatenate([[1.0], np.bincount(tree.depths - 1, weights=prob,
                                                  minlength=tree.max_depth)])
    pmf = at_least.copy()
    pmf[:-1] -= at_least[1:]
    return np.clip(pmf, 0.0, 1.0)


@dataclass(frozen=True)
class TreeRun:
    """Simulated iterations: tokens int64 [n] (accepted nodes + 1) and last_node int64
    [n] (the deepest accepted node, -1 when none was)."""

    tokens: np.ndarray
    last_node: np.ndarray


def simulate_tree(tree: TokenTree, acceptance: PositionalAcceptance, n_iterations: int,
                  *, rng=None) -> TreeRun:
    """Monte-Carlo of the verification walk itself: at each accepted node, try ranks in
    order, accepting rank r with the conditional rate p[d - 1, r] (one uniform per try);
    move to the first accepted candidate if the tree has it, else stop. Independent of
    the closed form (it never uses the marginal rates). ``rng``: a Generator, a seed or
    None. Returns a `TreeRun`."""
    _check(tree, acceptance)
    n = positive_int("n_iterations", n_iterations)
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(
        None if rng is None else nonnegative_int("rng", rng))
    ranks = tree.max_rank + 1
    child = np.full((tree.n_nodes + 1, ranks), -1, np.int64)     # [node + 1, rank]
    child[tree.parents + 1, tree.ranks] = np.arange(tree.n_nodes)
    p = acceptance.rates
    tokens = np.empty(n, np.int64)
    last = np.empty(n, np.int64)
    for start in range(0, n, _CHUNK):
        m = min(n, start + _CHUNK) - start
        node = np.full(m, -1, np.int64)
        alive = np.ones(m, bool)
        for d in range(tree.max_depth):
            chosen = np.full(m, -1, np.int64)
            for r in range(ranks):
                hit = (chosen < 0) & (rng.random(m) < p[d, r])
                chosen[hit] = r
            nxt = np.where(chosen >= 0, child[node + 1, np.maximum(chosen, 0)], -1)
            alive &= nxt >= 0
            node = np.where(alive, nxt, node)
            if not alive.any():
                break
        last[start:start + m] = node
        tokens[start:start + m] = np.where(node >= 0, tree.depths[np.maximum(node, 0)], 0) + 1
    return TreeRun(tokens=tokens, last_node=last)
