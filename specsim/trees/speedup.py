"""Speedup of a token tree and the best tree size per hardware: width against depth.

One tree iteration drafts the tree, verifies root + N nodes in one target pass and
yields E(tree) tokens (`specsim.trees.acceptance`), so over autoregressive decoding

    S(tree) = E(tree) · t_target(1) / (t_draft(tree) + t_target(N + 1)),

with t_target(n) one target pass over n new tokens per row. How the tree is drafted
(``drafting``):

- "per_depth": a drafter model proposes depth by depth, one pass per depth d = 1..D over
  the nodes at depth d - 1 that get children: t_draft(tree) = Σ_d t_draft(w_{d-1}),
  w = `TokenTree.expanded_per_depth` (a chain of K costs K · t_draft(1), Leviathan's
  model, `specsim.analytic.speedup_from_costs`);
- "one_pass": every depth from one drafter pass over the root (Medusa heads on the
  target's last hidden state): t_draft(tree) = t_draft(1);
- t_draft None: drafting is free (n-gram lookup).

A wider tree raises E but widens the verify pass; on a memory-bound chip t_target(N + 1)
stays near t_target(1) until N + 1 tokens of arithmetic reach the ridge point, then grows
with N. `plan_tree` searches, for every budget N, the E-optimal trees of each depth limit
(Sequoia's hardware-aware search) and the chain, and reports the best (shape, N), the
best chain, and the break-even N past which the best tree is slower than the best chain.
Pass times come from any callable n -> seconds, e.g. `roofline_pass_time` over a
datasheet row of ``data/hardware.csv`` or a fitted roofline (`specsim.fit.RooflineFit`).
NumPy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from specsim import roofline
from specsim.errors import InvalidArgument
from specsim.trees.acceptance import PositionalAcceptance, expected_tokens
from specsim.trees.optimal import optimal_trees, tree_capacity
from specsim.trees.tree import TokenTree
from specsim.validation import choice, nonnegative_int, positive_int

__all__ = ["PassTime", "DRAFTING", "roofline_pass_time", "draft_time", "tree_speedup",
           "TreePlan", "plan_tree", "plan_per_hardware", "format_plans"]

PassTime = Callable[[int], float]
"""``t(n) -> seconds`` of one forward pass over n new tokens per row."""

DRAFTING = ("per_depth", "one_pass")


def roofline_pass_time(hardware, cfg, *, batch: int = 1, context: int = 512, dtype=None,
                       overhead: float = 0.0, mode: str = "max") -> PassTime:
    """Pass time t(n) of ``cfg`` from a roofline: ``hardware`` is a `roofline.Hardware`,
    a row name of ``data/hardware.csv`` (`roofline.predict_time` of `forward_cost`, plus
    ``overhead`` seconds), or a fitted roofline (anything with ``predict_forward(cfg,
    n_tokens, batch, context, dtype)``, which has its own t0). ``context``: tokens already
    in the cache; a pass over n tokens reads context + n slots."""
    batch = positive_int("batch", batch)
    context = nonnegative_int("context", context)
    if isinstance(hardware, str):
        choice("hardware", hardware, tuple(roofline.hardware_names()))
        hardware = roofline.load_hardware(hardware)
    if hasattr(hardware, "predict_forward"):
        def t(n: int) -> float:
            return float(hardware.predict_forward(cfg, int(n), batch, context + int(n), dtype))
        t.description = f"fitted roofline, batch {batch}, context {context}"
        return t
    if not isinstance(hardware, roofline.Hardware):
        raise InvalidArgument(f"hardware must be a roofline.Hardware, a data/hardware.csv "
                              f"row name or a fitted roofline (got {type(hardware).__name__})")

    def t(n: int) -> float:
        cost = roofline.forward_cost(cfg, batch=batch, n_tokens=int(n),
                                     context=context + int(n), dtype=dtype)
        return float(roofline.predict_time(hardware, cost, overhead=overhead, mode=mode))
    t.description = f"{hardware.name} datasheet, batch {batch}, context {context}"
    return t


def _times(name: str, t, n_max: int, *, allow_zero: bool = False) -> np.ndarray:
    """float64 [n_max]: entry n - 1 = the pass time over n tokens, from a callable or a
    sequence of times (entry n - 1 for n tokens)."""
    if callable(t):
        values = np.array([t(n) for n in range(1, n_max + 1)], dtype=np.float64)
    else:
        values = np.asarray(t, dtype=np.float64).reshape(-1)
        if values.size < n_max:
            raise InvalidArgument(f"{name} must give pass times for 1..{n_max} tokens "
                                  f"(got {values.size})")
        values = values[:n_max]
    bad = ~(np.isfinite(values) & ((values >= 0) if allow_zero else (values > 0)))
    if bad.any():
        n = int(np.flatnonzero(bad)[0]) + 1
        what = ">= 0" if allow_zero else "> 0"
        raise InvalidArgument(f"{name} must be finite and {what} seconds (got "
                              f"{float(values[n - 1])!r} for {n} tokens)")
    return values


def _draft_seconds(tree: TokenTree, draft: np.ndarray | None, drafting: str) -> float:
    if draft is None:
        return 0.0
    if drafting == "one_pass":
        return float(draft[0])
    widths = tree.expanded_per_depth()
    return float(draft[widths - 1].sum())


def draft_time(tree: TokenTree, t_draft, *, drafting: str = "per_depth") -> float:
    """Seconds to draft ``tree`` (module docstring); ``t_draft`` a `PassTime`, a
    sequence of pass times, or None (free)."""
    choice("drafting", drafting, DRAFTING)
    if not isinstance(tree, TokenTree):
        raise InvalidArgument(f"tree must be a TokenTree (got {type(tree).__name__})")
    if t_draft is None:
        return 0.0
    need = 1 if drafting == "one_pass" else int(tree.expanded_per_depth().max())
    return _draft_seconds(tree, _times("t_draft", t_draft, need, allow_zero=True), drafting)


def tree_speedup(tree: TokenTree, acceptance: PositionalAcceptance, t_target, t_draft=None,
                 *, drafting: str = "per_depth") -> float:
    """S = E(tree) t_target(1) / (t_draft(tree) + t_target(N + 1)). ``t_target`` and
    ``t_draft``: `PassTime` callables or sequences of pass times (entry n - 1 for n
    tokens); t_draft None for a free drafter."""
    e = expected_tokens(tree, acceptance)
    target = _times("t_target", t_target, tree.n_nodes + 1)
    return e * target[0] / (draft_time(tree, t_draft, drafting=drafting) + target[-1])


@dataclass(frozen=True, eq=False)
class TreePlan:
    """What `plan_tree` found, for budgets n = 1..M (arrays [M], entry n - 1):

    trees: the fastest candidate of exactly n nodes; expected_tokens, speedup, depth:
    its E, S and depth. chain_speedup [min(M, D)]: the chain of K = 1, 2, ... drafts.
    best_n: the budget of the fastest tree; break_even_n: the largest n whose fastest
    tree is still at least as fast as the best chain (None if that holds up to M: the
    search did not reach it). At best_n + 1 (if <= M): next_tokens_gain = E(n+1)/E(n) - 1,
    next_verify_cost and next_draft_cost = the verify and draft time it adds over
    best_n's iteration time; limited_by names the larger cost ("verify width", "draft
    cost"), or "node budget" when best_n = M.
    """

    description: str
    trees: tuple[TokenTree, ...]
    expected_tokens: np.ndarray
    speedup: np.ndarray
    depth: np.ndarray
    chain_speedup: np.ndarray
    break_even_n: int | None
    next_tokens_gain: float
    next_verify_cost: float
    next_draft_cost: float
    limited_by: str

    @property
    def best_n(self) -> int:
        return int(np.argmax(self.speedup)) + 1

    @property
    def best_tree(self) -> TokenTree:
        return self.trees[self.best_n - 1]

    @property
    def best_speedup(self) -> float:
        return float(self.speedup[self.best_n - 1])

    @property
    def best_chain_k(self) -> int:
        return int(np.argmax(self.chain_speedup)) + 1

    @property
    def best_chain_speedup(self) -> float:
        return float(self.chain_speedup.max())

    @property
    def width_gain(self) -> float:
        """Best tree over best chain (>= 1: a chain is one of the candidates)."""
        return self.best_speedup / self.best_chain_speedup

    def summary(self) -> dict:
        tree = self.best_tree
        return dict(description=self.description, best_n=self.best_n,
                    depth=tree.max_depth, widths=tree.nodes_per_depth().tolist(),
                    expected_tokens=float(self.expected_tokens[self.best_n - 1]),
                    speedup=self.best_speedup, best_chain_k=self.best_chain_k,
                    best_chain_speedup=self.best_chain_speedup, width_gain=self.width_gain,
                    break_even_n=self.break_even_n, limited_by=self.limited_by)


def plan_tree(acceptance: PositionalAcceptance, t_target, t_draft=None, *, max_nodes: int,
              drafting: str = "per_depth", max_depth: int | None = None,
              description: str = "") -> TreePlan:
    """The fastest tree for each budget 1..max_nodes: among the E-optimal trees of every
    depth limit 1..max_depth (`optimal_trees`) and the chain of that size, the one with
    the largest `tree_speedup`. ``t_target``/``t_draft`` as in `tree_speedup`."""
    if not isinstance(acceptance, PositionalAcceptance):
        raise InvalidArgument(f"acceptance must be a PositionalAcceptance "
                              f"(got {type(acceptance).__name__})")
    choice("drafting", drafting, DRAFTING)
    n_max = positive_int("max_nodes", max_nodes)
    depth_max = acceptance.depth if max_depth is None else positive_int("max_depth", max_depth)
    if depth_max > acceptance.depth:
        raise InvalidArgument(f"max_depth must be at most the depths the rates cover, "
                              f"{acceptance.depth} (got {depth_max})")
    capacity = tree_capacity(depth_max, acceptance.width)
    if n_max > capacity:
        raise InvalidArgument(f"max_nodes must be at most {capacity}, the nodes a tree of "
                              f"depth {depth_max} and {acceptance.width} ranks holds "
                              f"(got {n_max})")
    target = _times("t_target", t_target, n_max + 1)
    draft = None if t_draft is None else _times("t_draft", t_draft, max(n_max, 1),
                                                allow_zero=True)
    candidates: list[list[TokenTree]] = [[] for _ in range(n_max)]
    for d in range(1, depth_max + 1):
        top = min(n_max, tree_capacity(d, acceptance.width))
        for n, tree in enumerate(optimal_trees(acceptance, top, max_depth=d).trees, 1):
            candidates[n - 1].append(tree)
    for k in range(1, min(n_max, depth_max) + 1):
        candidates[k - 1].append(TokenTree.chain(k))

    def timed(tree: TokenTree) -> tuple[float, float, float]:
        e = expected_tokens(tree, acceptance)
        return e, _draft_seconds(tree, draft, drafting), float(target[tree.n_nodes])

    best, rows = [], []
    for group in candidates:
        scored = []
        for tree in group:
            e, td, tv = timed(tree)
            scored.append((e * target[0] / (td + tv), -tree.max_depth, tree, e, td, tv))
        s, _, tree, e, td, tv = max(scored, key=lambda x: (x[0], x[1]))
        best.append(tree)
        rows.append((e, s, tree.max_depth, td, tv))
    e_arr = np.array([r[0] for r in rows])
    s_arr = np.array([r[1] for r in rows])
    chain = np.array([expected_tokens(TokenTree.chain(k), acceptance) * target[0]
                      / (_draft_seconds(TokenTree.chain(k), draft, drafting) + target[k])
                      for k in range(1, min(n_max, depth_max) + 1)])
    paying = np.flatnonzero(s_arr >= chain.max() * (1 - 1e-12))
    break_even = int(paying[-1]) + 1 if paying[-1] + 1 < n_max else None
    n = int(np.argmax(s_arr)) + 1
    if n < n_max:
        e0, _, _, td0, tv0 = rows[n - 1]
        e1, _, _, td1, tv1 = rows[n]
        total = td0 + tv0
        gain, verify, drafted = e1 / e0 - 1.0, (tv1 - tv0) / total, (td1 - td0) / total
        limited = "verify width" if verify >= drafted else "draft cost"
    else:
        gain = verify = drafted = math.nan
        limited = "node budget"
    desc = description or getattr(t_target, "description", "")
    return TreePlan(description=desc, trees=tuple(best), expected_tokens=e_arr,
                    speedup=s_arr, depth=np.array([r[2] for r in rows], np.int64),
                    chain_speedup=chain, break_even_n=break_even, next_tokens_gain=gain,
                    next_verify_cost=verify, next_draft_cost=drafted, limited_by=limited)


def plan_per_hardware(acceptance: PositionalAcceptance, target_cfg, draft_cfg=None,
                      hardware: Sequence | None = None, *, max_nodes: int = 32,
                      batch: int = 1, context: int = 512, dtype="bfloat16",
                      overhead: float = 0.0, drafting: str = "per_depth",
                      max_depth: int | None = None,
                      draft_cost_ratio: float | None = None) -> dict[str, TreePlan]:
    """`plan_tree` on each hardware (default: every row of ``data/hardware.csv``; items
    may be row names, `roofline.Hardware` or fitted rooflines), with target and draft
    pass times from `roofline_pass_time`. ``draft_cfg`` None: a free drafter, unless
    ``draft_cost_ratio`` c is given: a drafter without a model config of its own (the
    feature head), whose pass over n tokens costs c times the target's."""
    rows = roofline.hardware_names() if hardware is None else list(hardware)
    if not rows:
        raise InvalidArgument("hardware must name at least one row (or be None for all)")
    max_nodes = positive_int("max_nodes", max_nodes)
    if draft_cost_ratio is not None:
        if draft_cfg is not None:
            raise InvalidArgument("give draft_cfg or draft_cost_ratio, not both")
        if not (isinstance(draft_cost_ratio, (int, float, np.number))
                and not isinstance(draft_cost_ratio, bool)
                and math.isfinite(draft_cost_ratio) and draft_cost_ratio >= 0):
            raise InvalidArgument(f"draft_cost_ratio must be a finite number >= 0 (the "
                                  f"draft pass's cost over the target's), got "
                                  f"{draft_cost_ratio!r}")
    plans = {}
    for hw in rows:
        if isinstance(hw, str):
            name = hw
        elif isinstance(hw, roofline.Hardware):
            name = hw.name
        else:
            name = f"fitted roofline ({getattr(hw, 'kind', type(hw).__name__)})"
        kw = dict(batch=batch, context=context, dtype=dtype, overhead=overhead)
        t_target = roofline_pass_time(hw, target_cfg, **kw)
        t_draft = None if draft_cfg is None else roofline_pass_time(hw, draft_cfg, **kw)
        if draft_cost_ratio is not None:
            t_draft = [float(draft_cost_ratio) * t_target(n) for n in range(1, max_nodes + 1)]
        plans[str(name)] = plan_tree(acceptance, t_target, t_draft, max_nodes=max_nodes,
                                     drafting=drafting, max_depth=max_depth,
                                     description=str(name))
    return plans


def format_plans(plans: dict[str, TreePlan]) -> str:
    """One text line per plan: best N, its depth and widths, speedup, the best chain and
    the break-even N."""
    lines = [f"{'hardware':<14} {'N':>3} {'depth':>5} {'widths':<18} {'E':>6} {'S':>6} "
             f"{'chain K':>7} {'S chain':>7} {'gain':>5} {'break-even N':>12}  limited by"]
    for name, plan in plans.items():
        s = plan.summary()
        be = "-" if s["break_even_n"] is None else str(s["break_even_n"])
        lines.append(f"{name:<14} {s['best_n']:>3} {s['depth']:>5} {str(s['widths']):<18} "
                     f"{s['expected_tokens']:>6.3f} {s['speedup']:>6.3f} "
                     f"{s['best_chain_k']:>7} {s['best_chain_speedup']:>7.3f} "
                     f"{s['width_gain']:>5.2f} {be:>12}  {s['limited_by']}")
    return "\n".join(lines)
