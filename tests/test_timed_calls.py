"""The timed-calls table read back: each run's measured speedup recomputed from its
calls, and how far apart two calls still share the machine's speed (synthetic tables
with a known speed signal)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specsim import schema as S
from specsim.errors import InvalidArgument
from specsim.experiment import timed_calls


def _table(log_speed, seconds=0.25, rng=None):
    """One group, one block: a baseline and a run alternating, each call ``seconds``
    of wall time at speed 1 and the run half the baseline's; call i's time is that
    times exp(log_speed[i])."""
    rows = []
    for i, s in enumerate(log_speed):
        call = "ar" if i % 2 == 0 else "spec"
        base = seconds * (1.0 if call == "ar" else 0.5)
        t = base * np.exp(s)
        rows.append({"group": 0, S.BATCH: 1, S.TEMPERATURE: 0.0, "block": 0, "round": i // 2,
                     "order": i, "call": call, S.DRAFTER: "d" if call == "spec" else "",
                     S.KIND: "code", S.K: 4, "cost_key": "", "wall_s": t, "cpu_s": 2 * t})
    return pd.DataFrame(rows)


def test_a_run_twice_as_fast_as_its_baseline_in_every_round_measures_two():
    rng = np.random.default_rng(0)
    swing = np.repeat(rng.normal(0, 0.3, 40), 2)                # a round's calls share it
    got = timed_calls.measured_speedups(_table(swing))
    assert len(got) == 1 and got[S.MEASURED_SPEEDUP].iloc[0] == pytest.approx(2.0)


def test_the_table_reads_back_from_its_file(tmp_path):
    """Empty text columns (a loop's cost key) come back as "", not NaN, so grouping by
    them keeps every call."""
    table = _table(np.zeros(8))
    table.to_csv(tmp_path / "timed_calls.csv", index=False)
    back = timed_calls.read(tmp_path)
    assert (back["cost_key"] == "").all() and len(back) == 8
    got = timed_calls.measured_speedups(back, "wall")
    assert got[S.MEASURED_SPEEDUP].iloc[0] == pytest.approx(2.0)
    assert timed_calls.speed_correlation(back)["pairs"].sum() == 8 * 7 // 2


def test_speed_shared_over_seconds_shows_as_correlation_that_falls_with_separation():
    """A slow sine (period 60 s) under a little independent noise: calls a second apart
    correlate near 1, calls 16-64 s apart far less; without the sine, no correlation at
    any separation, although the two programs' times differ by a factor of two."""
    rng = np.random.default_rng(1)
    n = 800
    t = np.arange(n) * 0.19                                     # about the calls' starts
    slow = 0.3 * np.sin(2 * np.pi * t / 60) + rng.normal(0, 0.03, n)
    c = timed_calls.speed_correlation(_table(slow), clock="wall")
    assert list(c["from_s"]) == [0, 1, 2, 4, 8, 16]
    near, far = c["correlation"].iloc[0], c["correlation"].iloc[-1]
    assert near > 0.9 and far < 0.5 and (c["pairs"] > 0).all()
    assert (np.diff(c["correlation"].to_numpy()[:5]) < 0.02).all()  # falls, bin by bin
    flat = timed_calls.speed_correlation(_table(rng.normal(0, 0.1, n)), clock="cpu")
    assert (flat["correlation"].abs() < 0.1).all()


def test_bad_arguments_are_named():
    table = _table(np.zeros(8))
    with pytest.raises(InvalidArgument, match="clock"):
        timed_calls.speed_correlation(table, clock="gpu")
    with pytest.raises(InvalidArgument, match="edges"):
        timed_calls.speed_correlation(table, edges=(0, 2, 1))
    with pytest.raises(InvalidArgument, match="edges"):
        timed_calls.speed_correlation(table, edges=(1,))
    with pytest.raises(InvalidArgument, match="timed calls"):
        timed_calls.measured_speedups(table.drop(columns=["round"]))
