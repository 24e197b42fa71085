"""The policy interface every draft-length policy implements, and the helpers the engine
and the NumPy replays (`specsim.simulate`) call on any policy.

A policy is a frozen, keyword-only, hashable dataclass (so the engine can pass it to
``jax.jit`` as a static argument), written against an array module ``xp`` (``numpy``
in the replays, ``jax.numpy`` inside the compiled loop), so both run the same
arithmetic:

    state = policy.init(B, xp)                     per-row state: a tuple of [B, ...] arrays
    k_plan = policy.plan(state, B, xp, active)     [B] int32: drafts a row may propose, 0..k_max
                                                   (active [B] bool or None: the rows running)
    keep = policy.keep(j, confidence, xp)          [B] bool: is draft j (0-based) kept, given
                                                   the draft's probability of its own token
    state = policy.update(state, k_plan, n_accepted, n_proposed, active, xp)
    state = policy.observe_off(state, proposed, matched, active, xp, paid)   optional

``observe_off`` (optional; `Goodput` has it) takes the evidence of an iteration in which
no row drafted, from a drafter whose first draft the loop can compute while speculation
is off (`specsim.drafters.off_draft`): proposed [B] bool (the row had a draft), matched
[B] bool (the draft passed the acceptance test against the step's distribution), paid
(a draft step judged it); it is called after ``update``, on the off iterations
`judge_period` names. ``plans_off`` (optional class attribute, True when absent):
whether ``plan`` may give a running row K = 0; only then does the engine compile the
loop of autoregressive "off" iterations. A policy that says False and plans K = 0 anyway
stays exact (that iteration drafts, proposes nothing and verifies one token).

A row drafts j = 0, 1, ... while ``j < k_plan`` and every draft so far was kept; the
first draft that is not kept is computed (its confidence is needed) but not proposed, and
drafting stops (`n_proposed`).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from specsim.errors import InvalidArgument
from specsim.validation import positive_float

__all__ = ["OFF_DRAFTS", "Policy", "n_proposed", "draft_steps", "judge_period", "begin",
           "may_judge"]

OFF_DRAFTS = ("none", "free", "paid")
"""What a drafter's first draft costs in an iteration with speculation off
(`specsim.drafters.off_draft`, `judge_period`)."""



def check_decay(value) -> float:
    d = positive_float("decay", value)
    if d > 1.0:
        raise InvalidArgument(f"decay must be a number in (0, 1] (got {d!r})")
    return d


def set_fields(obj, **values):
    """Set a frozen dataclass's checked fields in ``__post_init__``."""
    for name, v in values.items():
        object.__setattr__(obj, name, v)


@runtime_checkable
class Policy(Protocol):
    k_max: int

    def init(self, batch: int, xp=np) -> tuple: ...

    def plan(self, state: tuple, batch: int, xp=np, active=None): ...

    def keep(self, j: int, confidence, xp=np): ...

    def update(self, state: tuple, k_plan, n_accepted, n_proposed, active, xp=np) -> tuple: ...



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
