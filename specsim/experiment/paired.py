"""Paired, adaptive timing rounds: each unit (speculative runs with the plain-decoding
baseline they share and the pass programs their predictions read) is timed as one
block in every round, so a drift of the machine falls on all of a unit's calls alike
(and, with its calls reversed every second round, a drift linear over two rounds and
any cost of a call's place in the unit fall on them evenly); rounds go on for the units
whose interval is still wider than asked, the widest first, until the part's time
budget is spent (see docs/measurement.md)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from specsim import validation
from specsim.errors import InvalidArgument

CONVERGED = "converged"
BUDGET = "time budget spent"
MAX_ROUNDS = "max rounds reached"


@dataclass
class PairedTiming:
    """What `paired_rounds` measured. ``samples[u][j]``: the clock readings of call j of
    unit u, one per round the unit took part in; ``prepared[u][j]``: the same for the
    call's untimed ``prepare`` (empty for a call without one); ``outputs[u][j]``: its
    last result; ``rounds[u]``: rounds unit u was timed in; ``stopped[u]``: why its
    rounds ended (`CONVERGED`, `BUDGET`, `MAX_ROUNDS`); ``elapsed_s``: the timer's
    seconds over all rounds; ``order``: (unit, call) in the order they ran."""
    samples: list[list[list]]
    prepared: list[list[list]]
    outputs: list[list]
    rounds: list[int]
    stopped: list[str]
    elapsed_s: float
    order: list[tuple[int, int]]


def _block(out):
    """``out`` once every array in it is computed (JAX dispatches asynchronously)."""
    import jax
    return jax.block_until_ready(out)


def _affordable(active: list[int], cost: list[float], left_s: float,
                rank: Callable[[int], float]) -> list[int]:
    """The active units the next round runs: all of them while the time left affords
    their last round's cost, else the highest-ranked first, each that still fits."""
    if sum(cost[u] for u in active) <= left_s:
        return list(active)
    chosen, spent = [], 0.0
    for u in sorted(active, key=lambda u: -rank(u)):
        if spent + cost[u] <= left_s:
            chosen.append(u)
            spent += cost[u]
    return sorted(chosen)


def paired_rounds(units: Sequence[Sequence[Callable[[], object]]], rng, *, min_rounds: int,
                  max_rounds: int, budget_s: float,
                  converged: Callable[[int, list[list]], bool],
                  priority: Callable[[int, list[list]], float] | None = None,
                  clock: Callable[[], object] = time.perf_counter,
                  timer: Callable[[], float] = time.perf_counter,
                  on_round: Callable[[int, int], None] | None = None,
                  alternate: bool = False) -> PairedTiming:
    """Time ``units`` (each a sequence of compiled zero-argument calls, e.g. a baseline,
    runs, passes) in rounds. A round runs units in a fresh order drawn from ``rng``, each
    unit's calls back to back in their given order. The first ``min_rounds`` rounds run
    every unit whatever the budget. After them a unit for which ``converged(u,
    samples[u])`` holds leaves, and so does one that had ``max_rounds``; a round runs
    every unit left while the time spent by ``timer`` plus each unit's last round stays
    within ``budget_s``, else the units of highest ``priority(u, samples[u])`` (e.g. the
    widest interval; default: unit order) that still fit; rounds end when no unit is left
    or none fits. ``clock`` reads what each sample records (may return an array: several
    clocks at once). A call with a ``prepare`` method (`specsim.decode.StagedCall`) has
    it run untimed just before it (its own clock readings go to ``prepared``).
    ``on_round(round, units run)`` runs after every round. With ``alternate`` a unit runs
    its calls in reverse order in every second round it takes part in (A B C, C B A, …):
    a call placed first in one round is placed last in the next, so what a call's place
    costs (the program run before it, a drift through the unit) falls on the unit's
    calls alike over each pair of rounds."""
    min_rounds = validation.positive_int("min_rounds", min_rounds)
    max_rounds = validation.positive_int("max_rounds", max_rounds)
    if max_rounds < min_rounds:
        raise InvalidArgument(f"max_rounds must be >= min_rounds ({min_rounds}), got "
                              f"{max_rounds}")
    if not budget_s >= 0:
        raise InvalidArgument(f"budget_s must be a number of seconds >= 0, got {budget_s!r}")
    samples = [[[] for _ in calls] for calls in units]
    prepared = [[[] for _ in calls] for calls in units]
    outputs = [[None] * len(calls) for calls in units]
    rounds, stopped = [0] * len(units), [""] * len(units)
    cost = [0.0] * len(units)                  # timer seconds of each unit's last round
    active = list(range(len(units)))
    order: list[tuple[int, int]] = []
    rank = (lambda u: -u) if priority is None else (lambda u: _finite(priority(u, samples[u])))
    t_start = timer()
    r = 0
    while active:
        run = active if r < min_rounds else _affordable(
            active, cost, budget_s - (timer() - t_start), rank)
        if not run:
            break
        for u in (run[i] for i in rng.permutation(len(run))):
            t_unit = timer()
            calls = list(enumerate(units[u]))
            for j, call in (calls[::-1] if alternate and rounds[u] % 2 else calls):
                prepare = getattr(call, "prepare", None)
                if prepare is not None:
                    p0 = clock()
                    prepare()
                    prepared[u][j].append(clock() - p0)
                t0 = clock()
                outputs[u][j] = _block(call())
                samples[u][j].append(clock() - t0)
                order.append((u, j))
            rounds[u] += 1
            cost[u] = timer() - t_unit
        r += 1
        if on_round is not None:
            on_round(r, len(run))
        if r >= min_rounds:
            for u in run:
                if converged(u, samples[u]):
                    stopped[u] = CONVERGED
                elif rounds[u] >= max_rounds:
                    stopped[u] = MAX_ROUNDS
            active = [u for u in active if not stopped[u]]
    for u in active:
        stopped[u] = BUDGET
    return PairedTiming(samples, prepared, outputs, rounds, stopped, timer() - t_start, order)


def _finite(x: float) -> float:
    """A priority with NaN ranked first (a unit with no interval yet is the widest)."""
    return math.inf if not np.isfinite(x) else float(x)


def as_array(samples: list) -> np.ndarray:
    """One call's samples as an array [rounds, clocks] (a clock of one reading: [rounds, 1])."""
    a = np.asarray(samples, float)
    return a.reshape(len(samples), -1)
