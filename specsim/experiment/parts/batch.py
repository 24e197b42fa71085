"""Part ``batch``: autoregressive and speculative generation (the instrument drafter, a
subset of α × K at no draft cost) at several batch sizes, rows of different prompts,
each predicted from pass times measured at that batch in the same rounds (rows of
``batch_max_new_tokens`` at batch > 1: the slowest row ends a batched run, and that
maximum is a noisier draw than one row's count); the measured
break-even batch (where speculation stops paying) beside the predicted one, and, when
the roofline part ran, the fitted roofline's (`specsim.batching`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from specsim import schema
from specsim.experiment import inrun
from specsim.experiment.part import Part
from specsim.experiment.parts.instrument import instrument_group
from specsim.experiment.state import DemoState


def crossing(batches, speedups) -> float:
    """The batch at which the speedup first falls to 1 (log-linear interpolation between
    the grid points around it); inf when it pays on the whole grid, the first batch when
    it never pays."""
    x, y = np.asarray(batches, float), np.asarray(speedups, float)
    order = np.argsort(x)
    x, y = x[order], y[order]
    losing = np.flatnonzero(y <= 1.0)
    if losing.size == 0:
        return math.inf
    i = int(losing[0])
    if i == 0:
        return float(x[0])
    frac = (y[i - 1] - 1.0) / (y[i - 1] - y[i])
    return float(np.exp(np.log(x[i - 1]) + frac * (np.log(x[i]) - np.log(x[i - 1]))))


def _subset(state: DemoState) -> pd.DataFrame:
    s, runs = state.settings, state.tables.get(schema.RUNS, pd.DataFrame())
    if runs.empty or schema.DRAFTER_KIND not in runs:
        return runs
    return runs[(runs[schema.DRAFTER_KIND] == "instrument") & (runs[schema.DRAFT_LAYERS] == 0)
                & runs[schema.ALPHA_SET].isin(s.batch_alphas) & runs[schema.K].isin(s.batch_ks)
                & (runs[schema.TEMPERATURE] == 0)]


def roofline_break_even(state: DemoState, alpha: float, k: int) -> float:
    """The break-even batch the fitted roofline predicts (NaN without a fit)."""
    from specsim import analytic, batching

    fit = state.fits.get(state.target.cfg.name)
    if fit is None:
        return math.nan
    tm = batching.fit_time_model(fit)
    cfg, S = state.target.cfg, state.cache_len
    bs = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    sp = [float(analytic.speedup_from_costs(analytic.expected_tokens(alpha, k), k, 0.0,
                                            tm(cfg, 1, b, S), tm(cfg, k + 1, b, S))) for b in bs]
    return crossing(bs, sp)


def break_even_table(state: DemoState) -> pd.DataFrame:
    """Per (α, K) of the batch subset: measured and predicted break-even batch."""
    d = _subset(state)
    rows = []
    for (a, k), g in d.groupby([schema.ALPHA_SET, schema.K]):
        g = g.groupby(schema.BATCH)[[schema.MEASURED_SPEEDUP, schema.PREDICTED_SPEEDUP]].mean()
        rows.append({schema.ALPHA_SET: a, schema.K: k, "batches": " ".join(map(str, g.index)),
                     "break_even_measured": crossing(g.index, g[schema.MEASURED_SPEEDUP]),
                     "break_even_predicted": crossing(g.index, g[schema.PREDICTED_SPEEDUP]),
                     "break_even_roofline": roofline_break_even(state, a, int(k))})
    return pd.DataFrame(rows)


def run(state: DemoState) -> None:
    s = state.settings
    have = _subset(state)
    todo = []
    for b in s.batches:
        done = have[have[schema.BATCH] == b] if not have.empty else have
        if len(done) >= len(s.batch_alphas) * len(s.batch_ks):
            state.log(f"    batch {b}: reusing the instrument part's runs")
            continue
        todo.append(b)
    for i, b in enumerate(todo):
        n = s.batch_max_new_tokens if b > 1 else 0
        group = instrument_group(state, b, s.batch_alphas, s.batch_ks, (0.0,), n or None)
        inrun.add_runs(state, inrun.measure(state, group,
                                            state.timing_budget("batch", len(todo) - i)))
    state.tables[schema.BREAK_EVEN] = break_even_table(state)


PART = Part(name="batch", summary="autoregressive and speculative generation at batch "
            "1, 4, 16 and the break-even batch, predicted from in-run pass times", run=run,
            produces=(schema.RUNS, schema.BREAK_EVEN))
