"""Draft-length policies: how many tokens each row drafts in each iteration.

- `protocol`: the interface (`Policy`) and the helpers the engine and the replays call
  on any policy (`n_proposed`, `judge_period`, `begin`, `may_judge`);
- `simple`: `FixedK`, `ConfidenceThreshold`, `Heuristic`;
- `costs`: the cost model a policy plans with (`Costs`) and the verify widths a policy
  program compiles (`verify_widths`, `program_widths`);
- `goodput`: `Goodput`, expected tokens per unit time within a loss budget.

No JAX here: this package belongs to the theory side and is imported by the engine
(`specsim.policy_engine`, `specsim.decode.policy_loop`).
"""

from __future__ import annotations

import inspect

import numpy as np

from specsim.errors import InvalidArgument
from specsim.policies.costs import AUTO_WIDTH_TOLERANCE, Costs, program_widths, verify_widths
from specsim.policies.goodput import WIDTHS, Goodput
from specsim.policies.protocol import (OFF_DRAFTS, Policy, begin, draft_steps, judge_period,
                                       may_judge, n_proposed)
from specsim.policies.simple import ConfidenceThreshold, FixedK, Heuristic

__all__ = ["WIDTHS", "AUTO_WIDTH_TOLERANCE", "OFF_DRAFTS", "Policy", "FixedK",
           "ConfidenceThreshold", "Heuristic", "Goodput", "Costs", "n_proposed",
           "draft_steps", "as_policy", "verify_widths", "program_widths", "judge_period",
           "begin", "may_judge"]


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
