"""The in-run parts' raw timings: one row per timed call of the paired rounds
(`timed_calls.csv`), in the order the calls ran, read by both clocks. Every measured
speedup, pass time and interval of the runs table is a statistic of these rows, so a
reader can recompute them, or look at how the machine's speed moved through a round
(docs/measurement.md, "Rounds")."""

from __future__ import annotations

import numpy as np
import pandas as pd

from specsim import schema as S
from specsim.errors import InvalidArgument

COLUMNS = ("group", S.BATCH, S.TEMPERATURE, "block", "round", "order", "call", S.DRAFTER,
           S.KIND, S.K, "cost_key", "wall_s", "cpu_s")
"""``group``: the group's index among the demo's timed groups (one batch, temperature
and cache length each); ``block``: the block's index in its group; ``round``: the
block's own round (0, 1, …); ``order``: the call's place among all of its group's
timed calls; ``call``: "ar" (the
plain-decoding baseline), "spec" (a run's loop), "target_1", "verify", "iteration" (a
pass program's call of ``pass_steps`` passes); ``drafter``: the run, for "spec";
``kind``: the block's kind of work; ``k``: the block's K; ``cost_key``: the draft
program an "iteration" call times; ``wall_s``, ``cpu_s``: the call's seconds."""


def rows(group, blocks, timing) -> list[dict]:
    """One row per timed call of ``group``'s rounds (`paired.PairedTiming` ``timing``
    over ``blocks``, `inrun.Block`), in the order the calls ran: every column but
    ``group``, which the demo adds."""
    from specsim.experiment.paired import as_array

    taken: dict[tuple, int] = {}
    out = []
    for place, (u, j) in enumerate(timing.order):
        r = taken.get((u, j), 0)
        taken[(u, j)] = r + 1
        key, first = blocks[u].keys[j], group.runs[blocks[u].runs[0]]
        wall, cpu = as_array(timing.samples[u][j])[r][:2]
        out.append({S.BATCH: group.batch, S.TEMPERATURE: group.temperature, "block": u,
                    "round": r, "order": place, "call": key[0],
                    S.DRAFTER: group.runs[key[1]].name if key[0] == "spec" else "",
                    S.KIND: first.kind, S.K: first.k,
                    "cost_key": key[1] if key[0] == "iteration" else "",
                    "wall_s": float(wall), "cpu_s": float(cpu)})
    return out


def measured_speedups(calls: pd.DataFrame, clock: str = "cpu") -> pd.DataFrame:
    """Each run's measured speedup recomputed from its calls: the median over its rounds
    of its baseline's time over its loop's, both of that round (times in baseline units,
    `inrun.in_baseline_units`). Columns batch, temperature, drafter, kind, k,
    measured_speedup; ``clock``: "wall" or "cpu"."""
    S.require(calls, COLUMNS, "timed calls")
    col = {"wall": "wall_s", "cpu": "cpu_s"}.get(clock)
    if col is None:
        raise InvalidArgument(f"clock must be 'wall' or 'cpu', got {clock!r}")
    block = ["group", "block"]
    out = []
    for _, c in calls.groupby(block, sort=False):
        ar = c[c["call"] == "ar"].set_index("round")[col]
        for drafter, spec in c[c["call"] == "spec"].groupby(S.DRAFTER, sort=False):
            spec = spec.set_index("round")[col]
            spec_over_ar = (spec / ar.reindex(spec.index)).to_numpy(float)
            first = c.iloc[0]
            out.append({S.BATCH: first[S.BATCH], S.TEMPERATURE: first[S.TEMPERATURE],
                        S.DRAFTER: drafter, S.KIND: first[S.KIND], S.K: first[S.K],
                        S.MEASURED_SPEEDUP: float(1 / np.median(spec_over_ar))})
    return pd.DataFrame(out)
