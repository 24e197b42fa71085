"""Draft-length policies: how many tokens each row drafts in each iteration.

A policy is a frozen, keyword-only, hashable dataclass (so the engine can pass it to
``jax.jit`` as a static argument) with one small interface, written against an array
module ``xp`` (``numpy`` here and in `specsim.simulate`; ``jax.numpy`` inside the compiled
loop), so the NumPy reference and the engine run the same arithmetic:

    state = policy.init(B, xp)                     per-row state: a tuple of [B, ...] arrays
    k_plan = policy.plan(state, B, xp, active)     [B] int32: drafts a row may propose, 0..k_max
                                                   (active [B] bool or None: the rows running)
    keep = policy.keep(j, confidence, xp)          [B] bool: is draft j (0-based) kept, given
                                                   the draft's probability of its own token
    state = policy.update(state, k_plan, n_accepted, n_proposed, active, xp)
    state = policy.observe_off(state, proposed, matched, active, xp, paid)   optional: below

``observe_off`` (optional; `Goodput` has it) takes the evidence of an iteration in which
no row drafted, from a drafter whose first draft the loop can compute while speculation
is off (`specsim.drafters.off_draft`: free for n-gram lookup, one draft step for the
feature head): proposed [B] bool (the row had a draft), matched [B] bool (the draft
passed the acceptance test against the step's distribution), paid (a draft step
judged it); the engine and
`specsim.simulate.simulate_policy(off_draft=...)` call it after ``update``, on the off
iterations `judge_period` names.

``plans_off`` (optional class attribute, True when absent): whether ``plan`` may give a
running row K = 0. `FixedK`, `ConfidenceThreshold` and `Heuristic` never do (False), so
the engine compiles their program without the loop of autoregressive "off" iterations
(`specsim.decode._policy_program`): one forward pass fewer to compile, three with a draft
model (the off step, its prefill inside the loop, its catch-up), whose prefill runs in a
program of its own shared with the fixed-K runs. `Goodput` does plan K = 0.
A policy that says False and plans K = 0 anyway stays exact: that iteration runs the
draft step, proposes nothing and verifies one token (the cost of a draft pass, no more).

A row drafts j = 0, 1, ... while ``j < k_plan`` and every draft so far was kept; the
first draft that is not kept is computed (its confidence is needed) but not proposed, and
drafting stops. `n_proposed` gives this count for a [B, K] array of confidences. In the
engine a row that stops proposes nothing in its remaining slots (a zero probs row).

Policies:

- `FixedK(k)`: K drafts every iteration (today's behaviour).
- `ConfidenceThreshold(p_min, k_max, k_min)`: draft j is kept when j < k_min or its
  confidence s_j > p_min (llama.cpp's ``--draft-p-min/--draft-min/--draft-max``; llama.cpp
  stops on s < p_min, which differs only at s = p_min; the strict test makes p_min = 1
  never draft, even with a one-hot drafter, and p_min = 0 keep every draft).
- `Heuristic(k_init, k_max)`: transformers' ``num_assistant_tokens_schedule="heuristic"``:
  K + 2 after an iteration whose K drafts were all accepted, K − 1 otherwise, floor 1,
  capped at k_max.
- `Goodput(k_max, costs, ...)`: within a loss budget, each iteration's K in
  {0, ..., k_max} maximising E(K) / t(K), with E(K) = 1 + Σ_{k≤K} Π_{j≤k} α̂_j from a
  running estimate of each row's per-position acceptance (each position shrunk towards
  the row's pooled rate, itself shrunk towards ``prior_alpha`` with weight
  ``prior_weight``) and t(K) = K·t_draft + t_target(K + 1) from `Costs` measured at the
  run's batch size. K = 0 (no speculation: E = 1, t = t_target(1)) wins wherever
  speculation cannot pay: disable-by-batch-size done by arithmetic. The settings:
  - ``decay`` (0.98): counts decay per iteration (memory ~ 1/(1 − decay) iterations), so
    a position the row stopped reaching relaxes to the pooled rate and a row that turned
    itself off relaxes to the prior and tries again.
  - ``explore`` (0: off): the plan reads each rate as its upper confidence bound
    α̂ + explore·sqrt(α̂(1 − α̂) / (n + w)), n the decayed count of reached slots and
    w = prior_weight. ``horizon`` (None: off): that bonus fades linearly with the row's
    tokens so far and is gone at the horizon.
  - ``width``: the engine drafts and verifies as wide as the widest row, so Goodput plans
    one K for the batch. "slowest" (default): the K maximising min_rows E_row(K) / t(K)
    over the running rows, the pace of a static batch, which runs until its slowest row
    is done; "shared": Σ_rows E_row(K) / t(K), a batch whose finished rows are replaced
    at once (continuous batching); "per-row": each row's own argmax (an engine that
    verifies each row at its own width).
  - ``p_min`` (0.2): the plan is an upper bound, and a draft of confidence <= p_min ends
    the row's proposal, as in `ConfidenceThreshold` (llama.cpp's --draft-max with
    --draft-p-min, plus K = 0). ``hurdle`` (0: off): a K > 0 is planned only where its
    E(K) / t(K) beats K = 0's by more than a factor 1 + hurdle.
  - A planned slot a row did not propose (cut by p_min, or an n-gram lookup without a
    match) counts as a rejection when another row's proposal made the batch verify it
    (paid for, no token), and not at all when no row proposed it (the verify is as wide
    as the widest proposal), so at batch 1 the estimates are of the drafts proposed.
  - ``judge_off`` (True): with a drafter whose first draft is free (n-gram lookup), an
    iteration in which no row drafts still judges each row's lookup against the token
    the step drew (`observe_off`, `specsim.policy_engine.judge_off`), so a row that
    turned itself off goes on learning at no cost. ``judge_share`` (0.01): a drafter
    whose first draft costs a draft step but can be computed while off (the feature
    head: `specsim.drafters.off_draft` "paid") is judged on every n-th off iteration,
    n = ceil(t_draft / (judge_share · t_target(1))), so judging costs at most that share
    of plain decoding's time; 0 never judges it. A draft model's cache is left behind
    while off: it is not judged.
  - ``budget`` ε (0.015; None: off) makes Goodput a conservative bandit over the run (Wu
    et al. 2016, "Conservative Bandits"): each row keeps a bank that starts at ε of the
    run's plain-decoding time (`begin`: ε · t_target(1) · (max_new_tokens − 1), paid in
    inside the compiled program), gains t_target(1) per token and pays each iteration's
    time by the cost model and each paid judgement's draft step. A K > 0 is planned only
    where the bank covers its worst outcome (every draft rejected: one token for t(K)),
    and a paid judgement runs only while the bank, less its step, could still buy a
    draft (`may_judge`). So by the cost model a run never loses more than ε against
    plain decoding, whatever the drafter does.
  - ``recover`` (1; None: off) and ``overdraft`` (1/3): a recovery probe
    (`Goodput.recovery`) is a K = 1 iteration the bank cannot cover, allowed where the
    first slot's rate less ``recover`` standard errors makes K = 1 beat plain decoding
    and its worst outcome leaves the bank at or above −``overdraft`` × the run's
    allowance: by the cost model a run loses at most (1 + overdraft)·ε, 2% by default.
    It is for a row whose first probes failed and whose later first drafts, judged while
    off, pass.
  - ``start`` (None: off), an `AcceptancePrior`: each row begins with these decayed
    counts of slots reached and accepted per position instead of none (a row continuing
    an earlier run, whose replay with it as one run is exact, or one template of
    prompts).

  Why each default is what it is (the replays on recorded traces and the exact replays
  of 309 prompts that chose them, and the variants not taken):
  data/goodput-studies-cpu/README.md, "Goodput's settings and the studies behind them".
  The bound of ``budget`` and ``recover`` is checked on 300 random position tables in
  `tests/test_policies.py`, and the engine's arithmetic against the exact replay in
  `tests/test_position_replay.py`.

No JAX here: this module belongs to the theory side and is imported by the engine.
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from specsim.errors import InvalidArgument
from specsim.validation import (nonnegative_float, nonnegative_int, positive_float,
                                positive_int, probability)

WIDTHS = ("slowest", "shared", "per-row")
"""Goodput's plan: one K for the batch (its iteration costs t(K) of its widest row, as in
`specsim.decode`) chosen for the pace of its slowest row ("slowest": a static batch runs
until its slowest row is done) or for the sum over its rows ("shared": a batch whose
finished rows are replaced at once), or each row's own K ("per-row": an engine verifying
each row at its own width)."""

AUTO_WIDTH_TOLERANCE = 0.05
"""``verify_widths="auto"`` (the default of `specsim.decode.generate_speculative`, with a
policy that carries `Costs`): a verify pass padded to a kept width may cost at most 5%
more than its own width (`Costs.fewest_widths`)."""

OFF_DRAFTS = ("none", "free", "paid")
"""What a drafter's first draft costs in an iteration with speculation off
(`specsim.drafters.off_draft`, `judge_period`)."""

__all__ = ["WIDTHS", "AUTO_WIDTH_TOLERANCE", "OFF_DRAFTS", "Policy", "FixedK",
           "ConfidenceThreshold", "Heuristic", "Goodput", "Costs", "n_proposed",
           "draft_steps", "as_policy", "verify_widths", "program_widths", "judge_period",
           "begin", "may_judge"]


# ---- validation ---------------------------------------------------------------------------
def _decay(value) -> float:
    d = positive_float("decay", value)
    if d > 1.0:
        raise InvalidArgument(f"decay must be a number in (0, 1] (got {d!r})")
    return d


def _set(obj, **values):
    for name, v in values.items():
        object.__setattr__(obj, name, v)


@runtime_checkable
class Policy(Protocol):
    k_max: int

    def init(self, batch: int, xp=np) -> tuple: ...

    def plan(self, state: tuple, batch: int, xp=np, active=None): ...

    def keep(self, j: int, confidence, xp=np): ...

    def update(self, state: tuple, k_plan, n_accepted, n_proposed, active, xp=np) -> tuple: ...


class _Stateless:
    """No per-row state; K = k_max every iteration unless `keep` stops earlier."""
    plans_off = False

    def init(self, batch: int, xp=np) -> tuple:
        return ()

    def plan(self, state, batch: int, xp=np, active=None):
        return xp.full((batch,), self.k_max, xp.int32)

    def update(self, state, k_plan, n_accepted, n_proposed, active, xp=np) -> tuple:
        return state


@dataclass(frozen=True, kw_only=True)
class FixedK(_Stateless):
    """K drafts in every iteration."""
    k: int

    def __post_init__(self):
        _set(self, k=positive_int("k", self.k))

    @property
    def k_max(self) -> int:
        return self.k

    def keep(self, j, confidence, xp=np):
        return xp.ones(confidence.shape, bool)


@dataclass(frozen=True, kw_only=True)
class ConfidenceThreshold(_Stateless):
    """Stop drafting at the first draft j >= k_min whose confidence s_j <= p_min."""
    p_min: float
    k_max: int
    k_min: int = 0

    def __post_init__(self):
        k_max = positive_int("k_max", self.k_max)
        k_min = nonnegative_int("k_min", self.k_min)
        if k_min > k_max:
            raise InvalidArgument(f"k_min must be <= k_max (got k_min={k_min}, k_max={k_max})")
        _set(self, p_min=probability("p_min", self.p_min), k_max=k_max, k_min=k_min)

    def keep(self, j, confidence, xp=np):
        return (confidence > self.p_min) | (j < self.k_min)


@dataclass(frozen=True, kw_only=True)
class Heuristic:
    """K + 2 after an all-accepted iteration, K − 1 otherwise (floor 1, cap k_max)."""
    k_init: int
    k_max: int
    plans_off = False        # a class attribute (no annotation): not a dataclass field

    def __post_init__(self):
        k_max = positive_int("k_max", self.k_max)
        k_init = positive_int("k_init", self.k_init)
        if k_init > k_max:
            raise InvalidArgument(f"k_init must lie in [1, k_max = {k_max}] (got {k_init})")
        _set(self, k_init=k_init, k_max=k_max)

    def init(self, batch: int, xp=np) -> tuple:
        return (xp.full((batch,), self.k_init, xp.int32),)

    def plan(self, state, batch: int, xp=np, active=None):
        return state[0]

    def keep(self, j, confidence, xp=np):
        return xp.ones(confidence.shape, bool)

    def update(self, state, k_plan, n_accepted, n_proposed, active, xp=np) -> tuple:
        k = state[0]
        nxt = xp.where(n_accepted >= k, xp.minimum(k + 2, self.k_max), xp.maximum(k - 1, 1))
        return (xp.where(active, nxt, k).astype(xp.int32),)


@dataclass(frozen=True, kw_only=True)
class Costs:
    """The cost model of one iteration at the run's batch size and context:
    t_draft = one draft step; t_target[n − 1] = one target pass over n new tokens,
    n = 1 .. k_max + 1 (t_target[0] is the autoregressive step). Any time unit."""
    t_draft: float
    t_target: tuple

    def __post_init__(self):
        t_target = tuple(positive_float(f"t_target[{i}]", float(t))
                         for i, t in enumerate(np.atleast_1d(np.asarray(self.t_target))))
        if not t_target:
            raise InvalidArgument("t_target must hold at least one pass time (got none)")
        _set(self, t_draft=nonnegative_float("t_draft", self.t_draft), t_target=t_target)

    @classmethod
    def from_ratio(cls, c: float, k_max: int, verify_slope: float = 0.0) -> "Costs":
        """Constant costs in target-step units: t_draft = c, t_target(n) = 1 +
        verify_slope·(n − 1) (slope 0: verifying K + 1 tokens costs one step)."""
        k_max = positive_int("k_max", k_max)
        slope = nonnegative_float("verify_slope", verify_slope)
        return cls(t_draft=c, t_target=tuple(1.0 + slope * n for n in range(k_max + 1)))

    def iteration_time(self, k, xp=np):
        """t(K) = K·t_draft + t_target(K + 1) for K = 0..k_max ([K+1] or broadcast)."""
        return k * self.t_draft + xp.asarray(self.t_target)[k]

    def nondecreasing(self) -> "Costs":
        """The closest pass times (least squares) that do not fall as a pass grows: a
        pass over more tokens reads the same weights and does more arithmetic, so a
        measured t(n + 1) < t(n) is noise (pool-adjacent-violators over t_target)."""
        return Costs(t_draft=self.t_draft, t_target=tuple(_nondecreasing(self.t_target)))

    def fitted(self) -> "Costs":
        """The verify passes (n = 2 .. k_max + 1 tokens) replaced by their least-squares
        line t(n) = a + b·n with b >= 0, t_target[0] (the autoregressive step, a program
        of its own in the policy loop) kept, then made non-decreasing (`nondecreasing`).
        Each pass time measured on a shared machine carries its own noise; a line pools
        them (two numbers from k_max), which is what a plan comparing E(K) / t(K) across
        K needs: the differences between widths, not each width's own draw. A verify
        pass reads the same weights at every width and adds arithmetic per token, so the
        line is flat where the pass is memory-bound and rises where it is compute-bound.
        With fewer than three verify widths it is `nondecreasing` alone. Replayed against
        `nondecreasing` (`benchmarks/sim_goodput_explore.py --study cost-noise`, session
        10) it wins only where the true curve is a line; the curves measured on a 2-core
        CPU step from t(1) to t(2) and then flatten, the misfit costs as much as the noise
        it removes, and the policies part does not use it."""
        t = np.asarray(self.t_target, float)
        if len(t) < 4:
            return self.nondecreasing()
        n = np.arange(2, len(t) + 1, dtype=float)
        slope = max(0.0, float(np.polyfit(n, t[1:], 1)[0]))
        line = np.mean(t[1:]) + slope * (n - n.mean())
        fit = Costs(t_draft=self.t_draft, t_target=(float(t[0]),) + tuple(map(float, line)))
        return fit.nondecreasing()

    def bucketed(self, widths) -> "Costs":
        """The costs of an engine that verifies only at ``widths`` (see `verify_widths`;
        k_max = len(t_target) − 1): a verify over n >= 2 tokens costs the pass at the
        narrowest width >= n, so a plan reads what the padded pass takes. t_target[0]
        stays the one-token pass: a plan of K = 0 runs the autoregressive step, which
        the policy program compiles apart from its verify widths (an iteration that
        planned drafts and proposed none pays the narrowest width instead, which the
        replay then undercharges unless 1 is among the widths)."""
        k_max = len(self.t_target) - 1
        ws = verify_widths(k_max, widths)
        pass_width = [1] + [ws[int(np.searchsorted(ws, n))] for n in range(2, k_max + 2)]
        return Costs(t_draft=self.t_draft, t_target=tuple(self.t_target[w - 1] for w in pass_width))

    def fewest_widths(self, tolerance: float = AUTO_WIDTH_TOLERANCE,
                      k_max: int | None = None) -> tuple:
        """The fewest verify widths (for `verify_widths`, `bucketed`) at which no pass
        of n = 2..k_max + 1 tokens, padded to the narrowest kept width >= n, costs more
        than (1 + ``tolerance``)·t(n). 1 and k_max + 1 are always kept (the
        autoregressive step, which the policy program compiles apart; the widest
        verify). ``k_max``: default len(t_target) − 1.

        Read on the `nondecreasing` costs (a measured dip is noise), where the rule kept
        from the widest pass down (keep n when the kept width above it costs more than
        the tolerance allows) is the smallest such set: each width it keeps opens an
        interval [n, kept above) in which any valid set must keep a width. Each width
        left out is one forward pass less for the policy program to compile. On a flat
        curve (a memory-bound pass) → (1, k_max + 1). On the 2-core CPU this project is
        measured on, a verify pass over 2 tokens costs 1.3-1.7 steps and over 5 tokens
        1.6-1.9, the curve flattening from 3 on, and 5% kept (1, 2, 3, 5), (1, 2, 4, 5)
        or (1, 2, 5) of K_max = 4 (`benchmarks/bench_auto_widths.py`, session 20)."""
        tol = nonnegative_float("tolerance", tolerance)
        top = len(self.t_target) - 1 if k_max is None else positive_int("k_max", k_max)
        if top + 1 > len(self.t_target):
            raise InvalidArgument(f"k_max must be at most len(t_target) - 1 = "
                                  f"{len(self.t_target) - 1} (got {k_max!r})")
        t = self.nondecreasing().t_target
        kept, above = [top + 1], top + 1
        for n in range(top, 1, -1):
            if t[above - 1] > (1.0 + tol) * t[n - 1]:
                kept.append(n)
                above = n
        return tuple(sorted(set(kept) | {1}))


def _nondecreasing(values) -> list:
    """Isotonic (non-decreasing) least-squares fit of ``values`` by pooling adjacent
    violators: each run that falls is replaced by its mean."""
    blocks = []                                          # [mean, count] per pooled run
    for v in map(float, values):
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, n2), (m1, n1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return [m for m, n in blocks for _ in range(n)]


def verify_widths(k_max: int, widths=None) -> tuple:
    """The widths at which a policy program compiles its verify pass, sorted: None is
    every width 1..k_max + 1 (a batch whose widest proposal is n − 1 drafts pays an
    n-token pass); a subset must hold k_max + 1 and pads a pass to the narrowest width
    that covers it. Each compiled width is one more forward pass in the program (≈ 0.4 s
    of compile each for SmolLM2-135M on a 2-core CPU), so a subset trades compile time
    for padded verify work."""
    k_max = positive_int("k_max", k_max)
    if widths is None:
        return tuple(range(1, k_max + 2))
    try:
        ws = sorted({operator.index(w) for w in widths})
    except TypeError:
        raise InvalidArgument(f"verify_widths must be None or a sequence of integers in "
                              f"1..k_max + 1 = {k_max + 1} (got {widths!r})") from None
    if not ws or ws[0] < 1 or ws[-1] != k_max + 1:
        raise InvalidArgument(f"verify_widths must be integers in 1..k_max + 1 = {k_max + 1} "
                              f"and include k_max + 1 (got {widths!r})")
    return tuple(ws)


def program_widths(policy, k_max: int, widths="auto") -> tuple:
    """(verify widths, policy) of a policy program: ``widths`` None or a sequence as
    `verify_widths`, the policy unchanged; ``"auto"`` (the default of
    `specsim.decode.generate_speculative`): for a policy that carries `Costs` (Goodput),
    the fewest widths within `AUTO_WIDTH_TOLERANCE` of the policy's own pass costs
    (`Costs.fewest_widths`), and the policy planning with its costs bucketed to them
    (`Costs.bucketed`), so its plan reads what the padded passes take; for any other
    policy (it has no costs to read) every width, as None."""
    if not isinstance(widths, str):
        return verify_widths(k_max, widths), policy
    if widths != "auto":
        raise InvalidArgument(
            f"verify_widths must be 'auto', None or a sequence of integers in 1..k_max + 1 "
            f"= {k_max + 1}; got {widths!r} with {type(policy).__name__}")
    costs = getattr(policy, "costs", None)
    if not isinstance(costs, Costs):
        return verify_widths(k_max, None), policy
    own = Costs(t_draft=costs.t_draft, t_target=costs.t_target[:k_max + 1])
    ws = own.fewest_widths()
    return ws, dataclasses.replace(policy, costs=own.bucketed(ws))


@dataclass(frozen=True, kw_only=True)
class AcceptancePrior:
    """What a `Goodput` row carries into a run from earlier runs of the same drafter on
    the same kind of work (``Goodput(start=...)``): per draft position j, the decayed
    counts of slots reached (``reached[j]``) and accepted (``accepted[j]``), the state
    a row ends a long run in. A row so starts from the rates it would have learned
    instead of from ``prior_alpha`` with nothing behind it: its first plans read them,
    its exploration bonus is small (much evidence), and its own evidence replaces the
    carried counts as they decay, at the rate they would have decayed in one run."""
    accepted: tuple
    reached: tuple

    def __post_init__(self):
        acc = tuple(nonnegative_float(f"accepted[{j}]", a) for j, a in enumerate(self.accepted))
        hit = tuple(nonnegative_float(f"reached[{j}]", r) for j, r in enumerate(self.reached))
        if not hit or len(acc) != len(hit):
            raise InvalidArgument(f"accepted and reached must hold one count per draft "
                                  f"position, the same number of them, at least one (got "
                                  f"{len(acc)} and {len(hit)})")
        bad = [j for j in range(len(hit)) if acc[j] > hit[j] * (1 + 1e-9)]
        if bad:
            raise InvalidArgument(f"accepted[j] must be <= reached[j]: a slot is accepted "
                                  f"only where it was reached (fails at j = {bad})")
        _set(self, accepted=acc, reached=hit)

    @classmethod
    def from_trace(cls, trace, k_max: int, decay: float = 0.98,
                   weight: float = 1.0) -> "AcceptancePrior":
        """From a recorded run (a `specsim.simulate.AcceptanceTrace`: accept [I, B, K],
        confidence [I, B, K], present [I, B]; record it with FixedK(K >= k_max), which
        drafts every slot): slot j of a present row-iteration is reached when it was
        proposed (confidence > 0; an n-gram lookup whose match ran out proposes nothing)
        and every slot before it was accepted. The counts per row-iteration, times
        ``weight`` / (1 − decay): the decayed counts of a row that drafted every slot at
        these rates for longer than its memory of 1 / (1 − decay) iterations. ``weight``
        1 carries a full memory's worth of evidence, 0.25 a quarter of it. Pass the
        ``decay`` of the Goodput that starts from it."""
        k = positive_int("k_max", k_max)
        d = _decay(decay)
        w = positive_float("weight", weight)
        accept = np.asarray(trace.accept, bool)
        conf = np.asarray(trace.confidence, float)
        present = np.asarray(trace.present, bool)
        if accept.ndim != 3 or accept.shape[2] < k:
            raise InvalidArgument(f"trace must hold at least k_max = {k} draft slots per "
                                  f"iteration (got accept of shape {accept.shape})")
        rows = present.sum()
        if rows == 0:
            raise InvalidArgument("trace holds no present row-iteration to learn from")
        proposed = np.cumprod(conf[..., :k] > 0, axis=2).astype(bool)             # [I, B, k]
        ok = np.cumprod(accept[..., :k] & proposed, axis=2).astype(bool)          # [I, B, k]
        before = np.concatenate([np.ones_like(ok[..., :1]), ok[..., :-1]], axis=2)
        reached = (before & proposed & present[..., None]).sum((0, 1))
        accepted = (ok & present[..., None]).sum((0, 1))
        scale = w / (1.0 - d) / rows
        return cls(accepted=tuple(float(a) * scale for a in accepted),
                   reached=tuple(float(r) * scale for r in reached))

    def rates(self) -> np.ndarray:
        """[K]: accepted / reached per position (NaN where no slot was reached)."""
        hit = np.asarray(self.reached)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(hit > 0, np.asarray(self.accepted) / hit, np.nan)

    def to_dict(self) -> dict:
        """A JSON-ready dict; `from_dict` reads it back."""
        return {"accepted": list(self.accepted), "reached": list(self.reached)}

    @classmethod
    def from_dict(cls, d) -> "AcceptancePrior":
        if not isinstance(d, dict) or set(d) != {"accepted", "reached"}:
            raise InvalidArgument(f"an acceptance prior is a dict with keys 'accepted' and "
                                  f"'reached' (got {d!r})")
        return cls(accepted=tuple(d["accepted"]), reached=tuple(d["reached"]))


@dataclass(frozen=True, kw_only=True)
class Goodput:
    """K maximising expected tokens per unit time from running per-position estimates."""
    k_max: int
    costs: Costs
    prior_alpha: float = 0.5
    prior_weight: float = 4.0
    decay: float = 0.98
    explore: float = 0.0
    width: str = "slowest"
    p_min: float = 0.2
    hurdle: float = 0.0
    horizon: int | None = None
    judge_off: bool = True
    judge_share: float = 0.01
    budget: float | None = 0.015
    recover: float | None = 1.0
    overdraft: float = 1 / 3
    start: AcceptancePrior | None = None
    plans_off = True         # K = 0 where speculation cannot pay

    def __post_init__(self):
        k_max = positive_int("k_max", self.k_max)
        if self.start is not None and (not isinstance(self.start, AcceptancePrior) or
                                       len(self.start.reached) < k_max):
            raise InvalidArgument(f"start must be None or an AcceptancePrior with at least "
                                  f"k_max = {k_max} positions (got {self.start!r})")
        if self.budget is not None:
            b = nonnegative_float("budget", self.budget)
            if b >= 1.0:
                raise InvalidArgument(f"budget must be None or a number in [0, 1) "
                                      f"(got {self.budget!r})")
            _set(self, budget=b)
        if self.recover is not None:
            _set(self, recover=nonnegative_float("recover", self.recover))
        _set(self, overdraft=nonnegative_float("overdraft", self.overdraft))
        if not isinstance(self.judge_off, (bool, np.bool_)):
            raise InvalidArgument(f"judge_off must be True or False (got {self.judge_off!r})")
        if self.horizon is not None:
            _set(self, horizon=positive_int("horizon", self.horizon))
        if not isinstance(self.costs, Costs):
            raise InvalidArgument(f"costs must be a specsim.policies.Costs (got {self.costs!r})")
        if len(self.costs.t_target) < k_max + 1:
            raise InvalidArgument(f"costs.t_target must give k_max + 1 = {k_max + 1} pass times "
                             f"(got {len(self.costs.t_target)})")
        _set(self, k_max=k_max,
             prior_alpha=probability("prior_alpha", self.prior_alpha),
             prior_weight=positive_float("prior_weight", self.prior_weight),
             decay=_decay(self.decay), explore=nonnegative_float("explore", self.explore),
             judge_share=nonnegative_float("judge_share", self.judge_share),
             p_min=probability("p_min", self.p_min),
             hurdle=nonnegative_float("hurdle", self.hurdle))
        if self.width not in WIDTHS:
            raise InvalidArgument(f"width must be one of {WIDTHS} (got {self.width!r})")

    def init(self, batch: int, xp=np) -> tuple:
        """(accepted [B, K], reached [B, K]), then tokens so far [B] with a ``horizon``,
        then, with a ``budget``, the floor [B] a recovery probe may overdraw the bank to
        (with ``recover``; `begin` sets it) and the bank [B] (empty until `begin` fills
        it with the run's allowance). With a ``start`` (`AcceptancePrior`) every row
        begins with its counts."""
        zeros = xp.zeros((batch, self.k_max), xp.float32)
        row = xp.zeros((batch,), xp.float32)
        acc, reached = zeros, zeros
        if self.start is not None:
            k = self.k_max
            acc = zeros + xp.asarray(self.start.accepted[:k], xp.float32)[None]
            reached = zeros + xp.asarray(self.start.reached[:k], xp.float32)[None]
        return (acc, reached) + ((row,) if self.horizon is not None else ()) + \
            ((row,) if self._recovers else ()) + ((row,) if self.budget is not None else ())

    @property
    def _recovers(self) -> bool:
        """Whether the plan may take a recovery probe (`recovery`): a ``budget`` and a
        ``recover`` z."""
        return self.budget is not None and self.recover is not None

    def begin(self, state, new_tokens, xp=np) -> tuple:
        """The run's start: with a ``budget`` ε each row's bank receives the run's
        allowance, ε · t_target(1) · ``new_tokens`` (the tokens the run decodes after the
        prefill's: [] or [B]), the time the run may lose against plain decoding by the
        cost model (`update`, `margin`); without one the state is returned unchanged.
        With ``recover`` the floor a recovery probe may overdraw the bank to is set to
        −``overdraft`` × the allowance. The engine calls it once, after `init`, inside
        the compiled program (runs of any length share one program), and so do
        `specsim.simulate.simulate_policy` (with the trace's iterations) and
        `replay_positions` (with ``new_tokens`` − 1)."""
        if self.budget is None:
            return state
        allowance = self.budget * float(self.costs.t_target[0]) * \
            xp.asarray(new_tokens, xp.float32)
        if self._recovers:        # the floor: ``overdraft`` × the allowance below zero
            return tuple(state[:-2]) + (state[-2] - self.overdraft * allowance,
                                        state[-1] + allowance)
        return tuple(state[:-1]) + (state[-1] + allowance,)

    def alpha_estimate(self, state, xp=np):
        """[B, K] per-position rates, each shrunk towards the row's pooled rate (itself
        shrunk towards prior_alpha) with prior_weight pseudo-observations, so a position
        the row stopped reaching follows the pooled rate instead of freezing."""
        acc, reached = state[0], state[1]
        w = self.prior_weight
        pooled = (xp.sum(acc, 1, keepdims=True) + w * self.prior_alpha) / \
            (xp.sum(reached, 1, keepdims=True) + w)                              # [B, 1]
        return (acc + w * pooled) / (reached + w)                              # [B, K]

    def planning_alpha(self, state, xp=np):
        """[B, K]: the rates the plan reads, each estimate raised by ``explore`` standard
        errors (capped at 1); with a ``horizon`` the bonus fades linearly with the row's
        tokens so far (state[2]) and is gone once they reach it."""
        a = self.alpha_estimate(state, xp)
        z = self.explore
        if self.horizon is not None and len(state) > 2:
            z = z * xp.clip(1.0 - state[2] / self.horizon, 0.0, 1.0)[:, None]   # [B, 1]
        return xp.minimum(a + z * self._standard_error(a, state, xp), 1.0)

    def _standard_error(self, a, state, xp=np):
        """[B, K]: sqrt(α̂(1 − α̂) / (n + w)), n the decayed count of reached slots."""
        return xp.sqrt(a * (1 - a) / (state[1] + self.prior_weight))

    def plan(self, state, batch: int, xp=np, active=None):
        """[B] K per row; with width "shared" the batch's K, summed over the ``active``
        rows ([B] bool; None: every row), so finished rows do not steer it. A K > 0
        counts E(K) / t(K) divided by 1 + ``hurdle``. With a ``budget`` only the K
        whose `margin` is >= 0 are candidates (K = 0 always is), and K = 1 where the
        row may take a `recovery` probe."""
        e = _expected_tokens(self.planning_alpha(state, xp), xp)               # [B, K+1]
        t = self.costs.iteration_time(xp.arange(self.k_max + 1), xp)           # [K+1]
        ok = None if self.budget is None else self._affordable(
            self._plan_margin(state, xp), batch, active, xp)
        if self.width == "per-row":
            g = e / t[None]                                                    # [B, K+1]
        else:   # one K for the batch: E over the running rows, their min ("slowest") or sum
            g = self._over_rows(e, batch, active, xp) / t                      # [K+1]
        drafts = xp.arange(self.k_max + 1) > 0                                 # [K+1]
        g = xp.where(drafts, g / (1.0 + self.hurdle), g)
        if ok is not None:
            g = xp.where(ok | ~drafts, g, -1.0)
        k = xp.argmax(g, axis=-1).astype(xp.int32)
        return k if self.width == "per-row" else xp.full((batch,), k, xp.int32)

    def _over_rows(self, x, batch, active, xp=np):
        """[K+1]: a [B, K+1] row quantity over the running rows as the batch plan reads
        it: their min ("slowest") or their sum ("shared")."""
        ignore, over_rows = (xp.inf, xp.min) if self.width == "slowest" else (0.0, xp.sum)
        on = (xp.ones((batch,), bool) if active is None else active)[:, None]
        return over_rows(xp.where(on, x, ignore), axis=0)

    def _affordable(self, m, batch, active, xp=np):
        """Which K the budget allows, from margins m [B, K+1]: [B, K+1] per row
        ("per-row"), else [K+1] read over the running rows as the plan reads them."""
        return m >= 0 if self.width == "per-row" else self._over_rows(m, batch, active, xp) >= 0

    def may_judge(self, state, active, xp=np):
        """[] bool: whether an off iteration's paid judgement (`observe_off` with paid:
        the feature head's draft step) is worth its step. Always without a ``budget``;
        with one, only while the banks, less that step, could still afford some K > 0 as
        `plan` reads them (``active`` [B] bool: the running rows), a recovery probe
        counted as affordable where its worst outcome would keep the bank above its
        floor (the evidence may yet allow it). A bank that cannot never drafts again
        (off iterations neither fill nor drain it), so judging would buy nothing, and
        with this gate the judging too stays inside the budget and its overdraft."""
        if self.budget is None:
            return xp.asarray(True)
        t_draft = float(self.costs.t_draft)
        m = self.margin(state, xp) - t_draft                                   # [B, K+1]
        if self._recovers:      # or a recovery probe, should the evidence come to allow it
            m = _lift_k1(m, self._worst_k1(state) - t_draft >= state[-2], xp)
        ok = self._affordable(m, state[0].shape[0], active, xp)[..., 1:]      # K > 0
        return xp.any(ok & active[:, None] if self.width == "per-row" else ok)

    def margin(self, state, xp=np):
        """[B, K+1]: the row's bank after an iteration at each K that yields the fewest
        tokens it can, one (every draft rejected): bank − t(K) + t_target(1). ``budget`` ε
        makes Goodput a conservative bandit (Wu et al. 2016) over the run: the bank
        starts at ε of the run's plain-decoding time (`begin`), gains t_target(1) per
        token, pays each iteration's time by the cost model (`update`) and each paid
        judgement's draft step (`observe_off`), so it is what the run may still lose
        against plain decoding; a K > 0 is planned only where even its worst outcome
        leaves the bank non-negative. So, by the cost model, a run of its max_new_tokens
        loses at most ε against plain decoding, judging included (a paid judgement runs
        only while the bank could pay for it and still buy a draft: `may_judge`): the
        bound holds whatever the drafter does, not on average. A row that stops early at
        EOS may lose up to the whole allowance, a larger share of its shorter run. What
        speculation wins refills the bank, so a row where drafting pays drafts on; a row
        whose first probes failed cannot draft again until it could afford another
        failure, except by a `recovery` probe its evidence backs, paid from an overdraft
        (with ``recover``, the default: the bound is then (1 + ``overdraft``)·ε)."""
        t = self.costs.iteration_time(xp.arange(self.k_max + 1), xp)           # [K+1]
        return state[-1][:, None] - t[None] + float(self.costs.t_target[0])

    def _worst_k1(self, state):
        """[B]: the bank after a K = 1 iteration whose draft is rejected."""
        return state[-1] - (self.costs.iteration_time(1) - float(self.costs.t_target[0]))

    def recovery(self, state, xp=np):
        """[B] bool: whether the row may take a recovery probe, a K = 1 iteration its
        bank cannot cover (`margin` < 0). ``recover`` z (default 1; None: never): where
        a first probe failed early and the bank can no longer cover another, the row
        would never draft again (off iterations neither fill nor drain it), though the
        evidence judged while off (`observe_off`) may show its first drafts passing
        since. A K = 1 probe risks exactly that first draft, so it is allowed where
        the first slot's rate less z standard errors, α̂₀ − z·sqrt(α̂₀(1 − α̂₀)/(n + w)),
        makes K = 1 beat plain decoding, t_target(1)·(1 + α) >= t(1), and its worst
        outcome leaves the bank at or above its floor, −``overdraft`` × the run's
        allowance (`begin`). So by the cost model a run loses at most
        (1 + ``overdraft``)·ε of plain decoding (ε 0.015, overdraft 1/3: 2%), judging
        included (`may_judge`), and the overdraft is spent only on probes the evidence
        backs; a probe that wins refills the bank, from which wider K follow."""
        if not self._recovers:
            return xp.zeros(state[0].shape[:1], bool)
        a = self.alpha_estimate(state, xp)                                     # [B, K]
        lcb = (a - self.recover * self._standard_error(a, state, xp))[:, 0]    # [B]
        t0 = float(self.costs.t_target[0])
        pays = t0 * (1.0 + lcb) >= self.costs.iteration_time(1)
        return pays & (self._worst_k1(state) >= state[-2])

    def _plan_margin(self, state, xp=np):
        """[B, K+1]: `margin`, with K = 1's lifted to 0 where `recovery` allows it."""
        m = self.margin(state, xp)
        return _lift_k1(m, self.recovery(state, xp), xp) if self._recovers else m

    def keep(self, j, confidence, xp=np):
        """A draft ends the row's proposal when its confidence is <= p_min (default 0.2;
        p_min 0: every draft of nonzero confidence is kept, as `FixedK`)."""
        return confidence > self.p_min

    def update(self, state, k_plan, n_accepted, n_proposed, active, xp=np) -> tuple:
        """Slot j of a row was reached when the row planned it, accepted every draft
        before it, and the batch paid for it: the verify covered it (j < n_wide, the
        widest proposal of the running rows). It counts as accepted when its draft was.
        A planned slot the row did not propose (an n-gram lookup without a match, a
        draft cut by p_min) while another row's proposal made the batch verify it is a
        rejection: paid for, no token. Where no row proposed it, it cost nothing (the
        verify is as wide as the widest proposal) and is not counted, so at batch 1 the
        estimates are of the drafts proposed, and E(K) / t(K) compares a proposal's
        tokens with its cost."""
        acc, reached = state[0], state[1]
        j = xp.arange(self.k_max)[None]                                        # [1, K]
        n_wide = xp.max(xp.where(active, n_proposed, 0))                       # []
        paid = j < xp.minimum(k_plan, n_wide)[:, None]                         # [B, K]
        was_reached = paid & (j <= n_accepted[:, None])                        # [B, K]
        was_acc = j < n_accepted[:, None]
        d = self.decay
        new_acc = d * acc + was_acc.astype(acc.dtype)
        new_reached = d * reached + was_reached.astype(reached.dtype)
        a = active[:, None]
        out = (xp.where(a, new_acc, acc), xp.where(a, new_reached, reached))
        if self.horizon is not None:    # tokens so far: the accepted drafts and one more
            out += (xp.where(active, state[2] + n_accepted + 1, state[2]),)
        if self._recovers:              # the floor: set once, in `begin`
            out += (state[-2],)
        if self.budget is not None:     # the bank: t(1) per token less what was paid
            paid = self._paid(k_plan, n_proposed, active, xp)
            earned = float(self.costs.t_target[0]) * (n_accepted + 1)
            out += (xp.where(active, state[-1] + earned - paid, state[-1]),)
        return out

    def _paid(self, k_plan, n_proposed, active, xp=np):
        """[]: the iteration's time by the cost model, as the engine runs it: the draft
        steps of the row that needed most (its proposals and the one that stopped it)
        and a verify over the widest proposal + 1 tokens; the autoregressive step when
        no running row planned a draft."""
        steps = xp.max(xp.where(active, draft_steps(k_plan, n_proposed, xp), 0))
        n_wide = xp.max(xp.where(active, n_proposed, 0))
        return steps * self.costs.t_draft + xp.asarray(self.costs.t_target)[n_wide]


    def off_judge_period(self, off_draft: str) -> int:
        """Every how many off iterations to judge a drafter whose first draft costs
        ``off_draft`` (`specsim.drafters.OFF_DRAFTS`): "free" every one, "paid" every
        ceil(t_draft / (judge_share · t_target(1))) (1 when a draft step is modelled as
        free), "none" never (0); 0 too without ``judge_off`` or, for "paid", with
        ``judge_share`` 0."""
        if off_draft not in OFF_DRAFTS:
            raise InvalidArgument(f"off_draft must be one of {OFF_DRAFTS} (got {off_draft!r})")
        if not self.judge_off or off_draft == "none":
            return 0
        t_draft = float(self.costs.t_draft)
        if off_draft == "free" or t_draft <= 0:
            return 1
        if self.judge_share == 0:
            return 0
        return max(1, int(np.ceil(t_draft / (self.judge_share * float(self.costs.t_target[0]))
                                  - 1e-9)))

    def observe_off(self, state, proposed, matched, active, xp=np, paid=False) -> tuple:
        """Evidence gathered in an iteration where no row drafted (`judge_period`;
        `specsim.policy_engine.judge_off`): slot 0 of each ``active`` row with a draft
        (``proposed`` [B] bool) was reached, and accepted where the draft passed the
        acceptance test against the step's distribution (``matched`` [B] bool). A row
        that turned itself off so goes on learning whether drafting would pay, at no
        cost or a draft step's, instead of waiting for its evidence to decay and
        re-probing at a verify's price (``judge_off`` False: the state is returned
        unchanged). Called after `update`, which has already decayed the counts. ``paid``
        (a draft step judged it: the feature head) charges that step, t_draft, to each
        active row's bank (with a ``budget``), so the budget covers the judging too."""
        if not self.judge_off:
            return state
        seen = (active & proposed).astype(state[1].dtype)                      # [B]
        hit = (active & proposed & matched).astype(state[0].dtype)
        first = (xp.arange(self.k_max) == 0)[None].astype(state[1].dtype)      # [1, K]
        out = (state[0] + hit[:, None] * first, state[1] + seen[:, None] * first) + \
            tuple(state[2:])
        if paid and self.budget is not None:
            bank = out[-1]
            out = out[:-1] + (xp.where(active, bank - float(self.costs.t_draft), bank),)
        return out


def judge_period(policy, off_draft: str) -> int:
    """Every how many iterations with speculation off the engine judges the drafter's
    first draft under ``policy`` (0: never), given what that draft costs there
    (`specsim.drafters.off_draft`): the iterations with index i % n == 0. Only a policy
    with ``observe_off`` takes the evidence; one without ``off_judge_period`` (a user's
    policy) takes it from free drafts only. `specsim.simulate.simulate_policy` replays
    the same iterations."""
    if off_draft not in OFF_DRAFTS:
        raise InvalidArgument(f"off_draft must be one of {OFF_DRAFTS} (got {off_draft!r})")
    if not callable(getattr(policy, "observe_off", None)):
        return 0
    period = getattr(policy, "off_judge_period", None)
    if callable(period):
        return int(period(off_draft))
    return 1 if off_draft == "free" else 0


def begin(policy, state, new_tokens, xp=np) -> tuple:
    """``policy.begin(state, new_tokens, xp)`` where the policy has one (`Goodput`: its
    budget's allowance for a run of ``new_tokens`` after the prefill's); the state
    unchanged otherwise. The engine and both replays call it once, after ``init``."""
    fn = getattr(policy, "begin", None)
    return fn(state, new_tokens, xp) if callable(fn) else state


def may_judge(policy, state, active, xp=np):
    """[] bool, or None where nothing gates it: whether an off iteration's paid
    judgement runs, beyond `judge_period` (`Goodput.may_judge`: only while its budget
    could still use the evidence). The engine and both replays ask it before a paid
    judgement, with the state after ``update``."""
    fn = getattr(policy, "may_judge", None)
    return fn(state, active, xp) if callable(fn) else None


def _lift_k1(m, allow, xp=np):
    """[B, K+1] margins ``m`` with K = 1's raised to at least 0 where ``allow`` [B]."""
    k1 = xp.where(allow, xp.maximum(m[:, 1], 0.0), m[:, 1])
    return xp.concatenate([m[:, :1], k1[:, None], m[:, 2:]], axis=1)


def _expected_tokens(alpha, xp=np):
    """[B, K+1]: E(K) = 1 + Σ_{k≤K} Π_{j≤k} α_j for K = 0..k_max, from [B, K] rates."""
    surv = xp.cumprod(alpha, axis=1)                                           # [B, K]
    return 1.0 + xp.concatenate([xp.zeros_like(surv[:, :1]), xp.cumsum(surv, 1)], 1)


def as_policy(policy, k: int | None = None):
    """None → FixedK(k); a policy is checked for the interface and returned."""
    if policy is None:
        return FixedK(k=k)
    if not isinstance(policy, (FixedK, ConfidenceThreshold, Heuristic, Goodput)) and \
            not isinstance(policy, Policy):
        raise InvalidArgument(f"policy must be None or a specsim.policies policy (got {policy!r})")
    for method, args, names in (("plan", (None, 1, np, None), "state, batch, xp, active"),
                                ("update", (None,) * 5 + (np,),
                                 "state, k_plan, n_accepted, n_proposed, active, xp")):
        fn = getattr(policy, method)
        try:
            inspect.signature(fn).bind(*args)
        except TypeError:
            raise InvalidArgument(f"policy.{method} must take ({names}) (got "
                                  f"{type(policy).__name__}.{method}{inspect.signature(fn)})"
                                  ) from None
    return policy


def n_proposed(policy, k_plan, confidence, xp=np):
    """[B]: drafts proposed, given the plan [B] and the confidence [B, K] of the drafts
    the row would draft (positions past k_plan are ignored). A draft of confidence 0
    (or NaN) is no proposal whatever the policy keeps, as in the engine
    (`policy_engine.slot`): an n-gram lookup whose match ran out."""
    K = confidence.shape[1]
    j = xp.arange(K)[None]                                                     # [1, K]
    kept = policy.keep(j, confidence, xp) & (confidence > 0) & (j < k_plan[:, None])
    return xp.sum(xp.cumprod(kept.astype(xp.int32), axis=1), axis=1)


def draft_steps(k_plan, proposed, xp=np):
    """[B]: draft steps a row needed: its proposals plus the one whose confidence
    stopped it (none when it proposed its whole plan or planned none)."""
    return xp.minimum(k_plan, proposed + 1)
