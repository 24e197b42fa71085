"""The policies that plan from nothing or from the last iteration alone:

- `FixedK(k)`: K drafts every iteration.
- `ConfidenceThreshold(p_min, k_max, k_min)`: draft j is kept when j < k_min or its
  confidence s_j > p_min (llama.cpp's ``--draft-p-min/--draft-min/--draft-max``; llama.cpp
  stops on s < p_min, which differs only at s = p_min; the strict test makes p_min = 1
  never draft, even with a one-hot drafter, and p_min = 0 keep every draft).
- `Heuristic(k_init, k_max)`: transformers' ``num_assistant_tokens_schedule="heuristic"``:
  K + 2 after an iteration whose K drafts were all accepted, K − 1 otherwise, floor 1,
  capped at k_max.

None of them plans K = 0 (``plans_off`` False).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import InvalidArgument
from specsim.policies.protocol import set_fields
from specsim.validation import nonnegative_int, positive_int, probability

__all__ = ["FixedK", "ConfidenceThreshold", "Heuristic"]


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
        set_fields(self, k=positive_int("k", self.k))

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
        set_fields(self, p_min=probability("p_min", self.p_min), k_max=k_max, k_min=k_min)

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
        set_fields(self, k_init=k_init, k_max=k_max)

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
