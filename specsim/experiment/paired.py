"""Paired, adaptive timing rounds: each unit (a speculative run with its own
plain-decoding baseline and the pass programs its prediction reads) is timed as one
block, in a fixed order, in every round, so a drift of the machine falls on all of a
run's calls alike; rounds go on for the units whose interval is still wider than asked
until the part's time budget is spent (see docs/measurement.md)."""

from __future__ import annotations

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
    unit u, one per round the unit took part in; ``outputs[u][j]``: its last result;
    ``rounds[u]``: rounds unit u was timed in; ``stopped[u]``: why its rounds ended
    (`CONVERGED`, `BUDGET`, `MAX_ROUNDS`); ``elapsed_s``: the timer's seconds over all
    rounds; ``order``: (unit, call) in the order they ran."""
    samples: list[list[list]]
    outputs: list[list]
    rounds: list[int]
    stopped: list[str]
    elapsed_s: float
    order: list[tuple[int, int]]


def _block(out):
    """``out`` once every array in it is computed (JAX dispatches asynchronously)."""
    import jax
    return jax.block_until_ready(out)


def paired_rounds(units: Sequence[Sequence[Callable[[], object]]], rng, *, min_rounds: int,
                  max_rounds: int, budget_s: float,
                  converged: Callable[[int, list[list]], bool],
                  clock: Callable[[], object] = time.perf_counter,
                  timer: Callable[[], float] = time.perf_counter,
                  on_round: Callable[[int, int], None] | None = None) -> PairedTiming:
    """Time ``units`` (each a sequence of compiled zero-argument calls, e.g. baseline,
    run, passes) in rounds. A round runs every active unit once, units in a fresh order
    drawn from ``rng``, each unit's calls back to back in their given order. After
    ``min_rounds``, a unit for which ``converged(u, samples[u])`` holds leaves; rounds
    end when no unit is active, at ``max_rounds``, or when the next round (estimated
    from the last one's time per unit) would take the time spent by ``timer`` past
    ``budget_s`` — at least ``min_rounds`` are always run. ``clock`` reads what each
    sample records (may return an array: several clocks at once). A call with a
    ``prepare`` method (`specsim.decode.StagedCall`) has it run untimed just before it.
    ``on_round(round, active units)`` runs after every round."""
    min_rounds = validation.positive_int("min_rounds", min_rounds)
    max_rounds = validation.positive_int("max_rounds", max_rounds)
    if max_rounds < min_rounds:
        raise InvalidArgument(f"max_rounds must be >= min_rounds ({min_rounds}), got "
                              f"{max_rounds}")
    if not budget_s >= 0:
        raise InvalidArgument(f"budget_s must be a number of seconds >= 0, got {budget_s!r}")
    samples = [[[] for _ in calls] for calls in units]
    outputs = [[None] * len(calls) for calls in units]
    rounds, stopped = [0] * len(units), [""] * len(units)
    active = list(range(len(units)))
    order: list[tuple[int, int]] = []
    t_start = timer()
    per_unit = 0.0
    r = 0
    while active:
        if r >= min_rounds and timer() - t_start + per_unit * len(active) > budget_s:
            for u in active:
                stopped[u] = BUDGET
            break
        t_round = timer()
        for u in (active[i] for i in rng.permutation(len(active))):
            for j, call in enumerate(units[u]):
                prepare = getattr(call, "prepare", None)
                if prepare is not None:
                    prepare()
                t0 = clock()
                outputs[u][j] = _block(call())
                samples[u][j].append(clock() - t0)
                order.append((u, j))
            rounds[u] += 1
        per_unit = (timer() - t_round) / len(active)
        r += 1
        if on_round is not None:
            on_round(r, len(active))
        if r >= min_rounds:
            for u in [u for u in active if converged(u, samples[u])]:
                stopped[u] = CONVERGED
                active.remove(u)
        if active and r >= max_rounds:
            for u in active:
                stopped[u] = MAX_ROUNDS
            break
    return PairedTiming(samples, outputs, rounds, stopped, timer() - t_start, order)


def as_array(samples: list) -> np.ndarray:
    """One call's samples as an array [rounds, clocks] (a clock of one reading: [rounds, 1])."""
    a = np.asarray(samples, float)
    return a.reshape(len(samples), -1)
