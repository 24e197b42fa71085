"""The pass-program sweep's rooflines: one per side of the CPU kernel's row split, and
the time model that prices a pass by the side its rows fall on."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from specsim import fit as fitting
from specsim import schema as S
from specsim.experiment import pass_sweep
from specsim.models import get_preset, kernels
from specsim.roofline import forward_costs

# two implementations, each a max-form roofline: the kernel reads weights faster at a
# lower fixed cost, XLA's dots compute faster past the split
BELOW = dict(t0=2e-3, peak_flops=60e9, bandwidth=20e9)
ABOVE = dict(t0=9e-3, peak_flops=150e9, bandwidth=12e9)
POINTS = [(n, b) for b in (1, 4, 16) for n in (1, 2, 3, 5, 9)]


def _sweep(cfg, context=64):
    rows = []
    for n, b in POINTS:
        fl, by = forward_costs(cfg, n, b, context)
        side = BELOW if n * b <= kernels.MAX_ROWS else ABOVE
        rows.append({S.MODEL: pass_sweep.fit_key(cfg.name), S.N_TOKENS: n, S.BATCH: b,
                     S.CONTEXT: context, S.TIME_S: float(fitting.roofline_time(fl, by, **side)),
                     S.CLOCK: "cpu"})
    return pd.DataFrame(rows)


@pytest.fixture
def kernel_up_to_max_rows(monkeypatch):
    monkeypatch.setattr(kernels, "use_kernel", lambda matmul, rows, dtype:
                        matmul in ("auto", "kernel") and rows <= kernels.MAX_ROWS)


def test_each_side_of_the_kernel_split_gets_its_roofline(kernel_up_to_max_rows):
    cfg = get_preset("smollm2-135m")
    assert pass_sweep.kernel_rows(cfg) == kernels.MAX_ROWS
    state = SimpleNamespace(target=SimpleNamespace(cfg=cfg), settings=SimpleNamespace(seed=0),
                            log=lambda m: None)
    df = _sweep(cfg)
    fits = pass_sweep.fit(state, df)
    assert set(fits) == {pass_sweep.fit_key(cfg.name),
                         pass_sweep.above_key(cfg.name, kernels.MAX_ROWS)}
    tm = pass_sweep.time_model(fits, cfg)
    for n, b in [(1, 1), (4, 1), (2, 4), (9, 1), (3, 4), (5, 16), (7, 1), (2, 16)]:
        fl, by = forward_costs(cfg, n, b, 64)
        side = BELOW if n * b <= kernels.MAX_ROWS else ABOVE
        assert tm(cfg, n, b, 64) == pytest.approx(float(fitting.roofline_time(fl, by, **side)),
                                                  rel=1e-3)
    # one roofline through both sides misses the points of the bend
    one, _ = fitting.fit_sweep_best(df, cfg, holdout=0.25, seed=0)
    pred = one.predict_forward(cfg, df[S.N_TOKENS].to_numpy(), df[S.BATCH].to_numpy(), 64)
    assert np.max(np.abs(pred / df[S.TIME_S].to_numpy() - 1)) > 0.05


@pytest.mark.filterwarnings("ignore::specsim.fit.PoorFitWarning")
def test_one_roofline_without_a_split_or_with_too_few_points(kernel_up_to_max_rows,
                                                              monkeypatch):
    cfg = get_preset("smollm2-135m")
    state = SimpleNamespace(target=SimpleNamespace(cfg=cfg), settings=SimpleNamespace(seed=0),
                            log=lambda m: None)
    df = _sweep(cfg)
    few = df[(df[S.N_TOKENS] * df[S.BATCH] <= kernels.MAX_ROWS) | (df[S.BATCH] == 16)
             & (df[S.N_TOKENS] <= 2)]       # three points above the split
    assert set(pass_sweep.fit(state, few)) == {pass_sweep.fit_key(cfg.name)}
    monkeypatch.setattr(kernels, "use_kernel", lambda matmul, rows, dtype: False)
    assert pass_sweep.kernel_rows(cfg) is None
    fits = pass_sweep.fit(state, df)
    assert set(fits) == {pass_sweep.fit_key(cfg.name)}
    tm = pass_sweep.time_model(fits, cfg)
    f = fits[pass_sweep.fit_key(cfg.name)]
    assert tm(cfg, 5, 16, 64) == pytest.approx(f.predict_forward(cfg, 5, 16, 64))
    assert pass_sweep.time_model({}, cfg) is None


def test_a_cells_points_are_paired_with_its_decode_step_round_by_round():
    """A point is its median over rounds in units of the round's decode step (call 0):
    in a round where the machine ran at half speed the ratio still counts as the others
    do, where the raw median would take the verify pass from a slow round."""
    got = pass_sweep.paired_medians([[1.0, 2.0, 1.0], [1.2, 2.4, 1.8]])
    assert got == pytest.approx([1.0, 1.2])                    # raw medians: 1.0 and 1.8
    # the decode step's own samples give back its raw median
    assert pass_sweep.paired_medians([[3.0, 1.0, 2.0]]) == pytest.approx([2.0])


def test_the_sweep_runs_each_cell_back_to_back_and_reversed_every_second_round(monkeypatch):
    """The recording of `sweep`: every round runs each cell's calls together (its decode
    step and verify widths), in the given order one round and reversed the next; one
    row per point, its median over the rounds divided by the program's steps."""
    ran = []

    def call(name):
        def f():
            ran.append(name)
            sum(range(20000))                                  # some CPU time to read
        return f

    cells = [[call("a1"), call("a2"), call("a3")], [call("b1"), call("b5")]]
    points = [[(1, 1, 30), (2, 1, 30), (3, 1, 30)], [(1, 4, 30), (5, 4, 30)]]
    monkeypatch.setattr(pass_sweep, "sweep_calls", lambda state: (cells, points))
    state = SimpleNamespace(
        settings=SimpleNamespace(sweep_repeats=4, seed=0, clock="cpu", pass_steps=4),
        target=SimpleNamespace(cfg=SimpleNamespace(name="m")))
    df = pass_sweep.sweep(state)
    assert len(ran) == 4 * 5
    rounds, seen = [], 0
    for r in range(4):
        block = []
        while len(block) < 5:
            block.append(ran[seen])
            seen += 1
        rounds.append(block)
    for r, block in enumerate(rounds):
        a = [x for x in block if x.startswith("a")]
        b = [x for x in block if x.startswith("b")]
        assert block in (a + b, b + a)                          # cells back to back
        assert a == (["a1", "a2", "a3"] if r % 2 == 0 else ["a3", "a2", "a1"])
        assert b == (["b1", "b5"] if r % 2 == 0 else ["b5", "b1"])
    assert list(zip(df[S.N_TOKENS], df[S.BATCH])) == [(1, 1), (2, 1), (3, 1), (1, 4), (5, 4)]
    assert (df[S.MODEL] == pass_sweep.fit_key("m")).all() and (df[S.TIME_S] > 0).all()
    assert (df[S.CONTEXT] == 30).all() and (df[S.CLOCK] == "cpu").all()
