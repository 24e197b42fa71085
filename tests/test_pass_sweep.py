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
