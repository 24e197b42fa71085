"""What the ``policies`` part runs and how each run turns into a row: the grid
(drafter × kind of work × batch; the large batch mixes kinds of work), the policies of
one cell (fixed K for every swept K, the recording FixedK(K_max) run under the policy
loop, ConfidenceThreshold, Heuristic, Goodput, Goodput with ConfidenceThreshold's
p_min), the pass-cost calls timed beside them, and a policy's speedup replayed on the
recorded trace (`specsim.simulate.simulate_policy`).

Costs come from `specsim.pass_costs` under the run's conditions (same model, layer loop,
batch, cache slots): t_target(1), t_verify(K + 1) for every K up to K_max, and t_draft.
The policy loop verifies as many positions as the widest proposal of the batch needs
(`specsim.decode._policy_verify_pass`), so the cost model the Goodput policy plans with,
and the simulation replays with (its widest row), is

    t(0) = t_target(1),   t(K) = K · t_draft + t_verify(K + 1)   for K >= 1

(`costs_from_passes`); the plain fixed-K program costs the same at its K
(`fixed_costs`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim import policies as P
from specsim import simulate
from specsim.errors import InvalidArgument

AUTOREGRESSIVE = "autoregressive"
FIXED = "fixed"
RECORD = "fixed-kmax-policy-loop"
THRESHOLD = "threshold"
HEURISTIC = "heuristic"
GOODPUT = "goodput"
GOODPUT_P_MIN = "goodput-p_min"
POLICY_NAMES = (RECORD, THRESHOLD, HEURISTIC, GOODPUT, GOODPUT_P_MIN)
P_MIN = 0.4
"""The confidence threshold the part runs (llama.cpp's --draft-p-min family), alone
and under Goodput's plan (GOODPUT_P_MIN)."""
LARGE_BATCH = {True: 4, False: 8}
"""The large batch (quick, full) the part adds, its rows of mixed kinds of work."""


@dataclass(frozen=True, kw_only=True)
class PolicyJob:
    """One timed generation: ``label`` is AUTOREGRESSIVE, FIXED (then ``k``) or a name
    of POLICY_NAMES (then ``k`` is K_max)."""
    drafter: str
    kind: str
    batch: int
    label: str
    k: int

    @property
    def program(self) -> tuple:
        """Jobs sharing one compiled program (the kind of work changes only the data)."""
        return (self.drafter, self.batch, self.label, self.k)


MIXED = "mixed"
"""The large batch's kind of work: rows of different prompts (`mixed_kinds`)."""


def grid(settings) -> list[tuple[str, int]]:
    """(kind, batch) cells: every kind at batch 1, and a MIXED batch at a large batch
    (rows of different kinds of work, so they accept differently and Goodput's one K
    for the batch is a real compromise, as in a server's batch)."""
    return [(kind, 1) for kind in settings.kinds] + [(MIXED, LARGE_BATCH[bool(settings.quick)])]


def mixed_kinds(settings, batch: int) -> list[str]:
    """The kind of work of each row of a MIXED batch: the run's kinds, then the other
    kinds of `specsim.workloads`, cycled."""
    from specsim.workloads import KINDS
    order = list(dict.fromkeys((*settings.kinds, *KINDS)))
    return [order[b % len(order)] for b in range(batch)]


def costs_from_passes(t_target_1: float, t_verify_by_k: dict, t_draft: float,
                      k_max: int) -> P.Costs:
    """The engine's cost of one iteration at each planned K (see the module docstring):
    ``t_verify_by_k[k]`` is one target pass over k + 1 tokens, for k = 1 .. k_max."""
    missing = [k for k in range(1, int(k_max) + 1) if k not in t_verify_by_k]
    if missing:
        raise InvalidArgument(f"t_verify_by_k must time every K in 1..{k_max} "
                              f"(missing {missing})")
    return P.Costs(t_draft=float(t_draft), t_target=(float(t_target_1),) + tuple(
        float(t_verify_by_k[k]) for k in range(1, int(k_max) + 1)))


def make_policy(label: str, k_max: int, costs: P.Costs | None):
    """The policy behind a label of POLICY_NAMES."""
    if label == RECORD:
        return P.FixedK(k=k_max)
    if label == THRESHOLD:
        return P.ConfidenceThreshold(p_min=P_MIN, k_max=k_max, k_min=0)
    if label == HEURISTIC:
        return P.Heuristic(k_init=min(2, k_max), k_max=k_max)
    if label in (GOODPUT, GOODPUT_P_MIN):
        if costs is None:
            raise InvalidArgument("the goodput policy needs measured costs")
        return P.Goodput(k_max=k_max, costs=costs, p_min=P_MIN if label == GOODPUT_P_MIN
                         else 0.0)
    raise InvalidArgument(f"label must be one of {POLICY_NAMES} (got {label!r})")


def jobs(drafters, settings) -> list[PolicyJob]:
    """Every timed run: per cell the baseline, each swept fixed K per drafter and each
    policy at K_max = max(settings.ks)."""
    k_max = max(settings.ks)
    out = []
    for kind, batch in grid(settings):
        out.append(PolicyJob(drafter=AUTOREGRESSIVE, kind=kind, batch=batch,
                             label=AUTOREGRESSIVE, k=0))
        for name in drafters:
            out += [PolicyJob(drafter=name, kind=kind, batch=batch, label=FIXED, k=k)
                    for k in sorted(settings.ks)]
            out += [PolicyJob(drafter=name, kind=kind, batch=batch, label=lab, k=k_max)
                    for lab in POLICY_NAMES]
    return out


def trace_from_stats(stats) -> simulate.AcceptanceTrace:
    """The trace of a FixedK run under the policy loop. A model drafter proposes every
    slot (`AcceptanceTrace.from_stats`); an n-gram lookup leaves slots empty where its
    match runs out: those hold confidence 0 (what its one-hot draft reports), which no
    replayed policy proposes (`policies.n_proposed`, as the engine). Iterations with
    speculation off whose first draft was judged (``stats.off_judged``, see
    `policy_engine.judge_off`) hold it in slot 0: confidence 1 (only > 0 is read), accepted
    where it passed, so a replay with the drafter's ``off_draft`` sees what the engine saw."""
    present = np.asarray(stats.drafted) >= 0
    conf = np.clip(np.nan_to_num(np.asarray(stats.confidence, float), nan=0.0), 0.0, 1.0)
    accept = np.asarray(stats.accept_mask, bool).copy()
    judged = getattr(stats, "off_judged", None)
    if judged is not None:
        judged = np.asarray(judged)
        conf[..., 0] = np.where(judged >= 0, 1.0, conf[..., 0])
        accept[..., 0] |= judged == 1
    return simulate.AcceptanceTrace(accept, conf, present)


def fixed_costs(t_target_1: float, t_verify_by_k: dict, t_draft: float, k: int) -> P.Costs:
    """Costs of the plain fixed-K program: verify over K + 1 tokens (t_verify_by_k[k])."""
    return P.Costs(t_draft=float(t_draft),
                   t_target=(float(t_target_1),) + (float(t_verify_by_k[k]),) * int(k))


def simulated_speedup(policy, trace, costs: P.Costs, off_draft: str = "none",
                      new_tokens: int | None = None) -> tuple[float, float]:
    """(speedup against autoregressive decoding, fraction of row-iterations at K = 0) of
    ``policy`` replayed on ``trace`` with the engine's cost model (``off_draft``,
    ``new_tokens``: see `simulate.simulate_policy`; the drafter's
    `specsim.drafters.off_draft`, the run's max_new_tokens − 1)."""
    run = simulate.simulate_policy(policy, trace, costs=costs, cost_model="engine",
                                   off_draft=off_draft, new_tokens=new_tokens)
    off = float(np.mean(run.k_plan[run.present] == 0)) if run.present.any() else float("nan")
    return float(run.speedup), off
