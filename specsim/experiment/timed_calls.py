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
timed calls; ``call``: "ar" (the plain-decoding baseline), "spec" (a run's loop),
"target_1", "verify", "iteration" (a pass program's call of ``pass_steps`` passes);
``drafter``: the run, for "spec"; ``kind``: the block's kind of work; ``k``: the
block's K; ``cost_key``: the draft program an "iteration" call times; ``wall_s``,
``cpu_s``: the call's seconds."""


def rows(group, blocks, timing) -> list[dict]:
    """One row per timed call of ``group``'s rounds (`paired.PairedTiming` ``timing``
    over ``blocks``, `inrun.Block`), in the order the calls ran: every column but
    ``group``, which the demo adds."""
    taken: dict[tuple, int] = {}
    out = []
    for place, (u, j) in enumerate(timing.order):
        r = taken.get((u, j), 0)
        taken[(u, j)] = r + 1
        key, first = blocks[u].keys[j], group.runs[blocks[u].runs[0]]
        wall, cpu = np.ravel(timing.samples[u][j][r])[:2]
        out.append({S.BATCH: group.batch, S.TEMPERATURE: group.temperature, "block": u,
                    "round": r, "order": place, "call": key[0],
                    S.DRAFTER: group.runs[key[1]].name if key[0] == "spec" else "",
                    S.KIND: first.kind, S.K: first.k,
                    "cost_key": key[1] if key[0] == "iteration" else "",
                    "wall_s": float(wall), "cpu_s": float(cpu)})
    return out


def read(path) -> pd.DataFrame:
    """A demo's ``timed_calls.csv`` (``path``: the file or its folder)."""
    from pathlib import Path

    path = Path(path)
    if path.is_dir():
        path = path / f"{S.TIMED_CALLS}.csv"
    return _checked(pd.read_csv(path))


def _checked(calls: pd.DataFrame) -> pd.DataFrame:
    """``calls`` with every column of `COLUMNS` (else a named error) and the text columns
    that may be empty as "" (a CSV reads them as NaN)."""
    S.require(calls, COLUMNS, "timed calls")
    out = calls.copy()
    for col in (S.DRAFTER, "cost_key"):
        out[col] = out[col].astype(object).where(out[col].notna(), "")
    return out


def _clock_column(clock: str) -> str:
    col = {"wall": "wall_s", "cpu": "cpu_s"}.get(clock)
    if col is None:
        raise InvalidArgument(f"clock must be 'wall' or 'cpu', got {clock!r}")
    return col


def measured_speedups(calls: pd.DataFrame, clock: str = "cpu") -> pd.DataFrame:
    """Each run's measured speedup recomputed from its calls: the median over its rounds
    of its baseline's time over its loop's, both of that round (times in baseline units,
    `inrun.in_baseline_units`). Columns batch, temperature, drafter, kind, k,
    measured_speedup; ``clock``: "wall" or "cpu"."""
    calls, col = _checked(calls), _clock_column(clock)
    out = []
    for _, c in calls.groupby(["group", "block"], sort=False):
        ar, first = c[c["call"] == "ar"].set_index("round")[col], c.iloc[0]
        for drafter, spec in c[c["call"] == "spec"].groupby(S.DRAFTER, sort=False):
            spec = spec.set_index("round")[col]
            spec_over_ar = (spec / ar.reindex(spec.index)).to_numpy(float)
            out.append({S.BATCH: first[S.BATCH], S.TEMPERATURE: first[S.TEMPERATURE],
                        S.DRAFTER: drafter, S.KIND: first[S.KIND], S.K: first[S.K],
                        S.MEASURED_SPEEDUP: float(1 / np.median(spec_over_ar))})
    return pd.DataFrame(out)


def speed_correlation(calls: pd.DataFrame, clock: str = "cpu",
                      edges=(0, 1, 2, 4, 8, 16, 64)) -> pd.DataFrame:
    """How far apart two calls can run and still share the machine's speed, which is
    what pairing needs. Each call's log time less its program's median (a program: one
    call key of one block), and over the pairs of calls of one group that started
    between ``edges[i]`` and ``edges[i + 1]`` seconds apart, their correlation. A call
    starts where the group's timed wall seconds before it end (the untimed preparation
    between calls is left out). Columns group, batch, from_s, to_s, pairs, correlation
    (NaN under three pairs or where the times do not vary); ``clock``: the times
    correlated, "wall" or "cpu"."""
    calls, col = _checked(calls), _clock_column(clock)
    edges = np.asarray(edges, float)
    if edges.ndim != 1 or len(edges) < 2 or not (np.diff(edges) > 0).all() or edges[0] < 0:
        raise InvalidArgument(f"edges must be at least two increasing seconds >= 0, got "
                              f"{edges.tolist()}")
    out = []
    for g, c in calls.groupby("group", sort=True):
        c = c.sort_values("order")
        log_t = np.log(c[col])
        x = (log_t - log_t.groupby([c["block"], c["call"], c[S.DRAFTER], c["cost_key"]])
             .transform("median")).to_numpy()
        start = (c["wall_s"].cumsum() - c["wall_s"]).to_numpy()
        i, j = np.triu_indices(len(c), 1)
        apart = np.abs(start[j] - start[i])
        for lo, hi in zip(edges[:-1], edges[1:]):
            m = (apart > lo) & (apart <= hi)
            with np.errstate(invalid="ignore", divide="ignore"):    # constant: NaN
                r = float(np.corrcoef(x[i[m]], x[j[m]])[0, 1]) if m.sum() >= 3 else np.nan
            out.append({"group": g, S.BATCH: c[S.BATCH].iloc[0], "from_s": lo, "to_s": hi,
                        "pairs": int(m.sum()), "correlation": r})
    return pd.DataFrame(out)
