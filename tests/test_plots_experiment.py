"""specsim.plots.experiment on a synthetic runs table (schema columns, and the old
JSON form of per-position rates, which is upgraded on read)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from specsim import schema
from specsim.plots import experiment as plots


def _runs(legacy: bool = False):
    rows = []
    for drafter in ("ngram-3", "layer-skip:24/30"):
        for t in (0.0, 1.0):
            rows.append(dict(drafter="autoregressive", k=0, kind="code", temperature=t,
                             alpha=float("nan")))
            for kind, a in (("code", 0.7), ("prose", 0.3)):
                for k in (2, 4):
                    row = dict(drafter=drafter, k=k, kind=kind, temperature=t, alpha=a - 0.1 * t,
                               measured_speedup=1 + a, pred_speedup_iid=1 + a + 0.1,
                               pred_speedup_positional=1 + a - 0.05)
                    if legacy:
                        row["per_position"] = json.dumps([a] * k)
                    else:
                        row.update(schema.position_fields([a] * k, [100 * a ** j for j in range(k)]))
                    rows.append(row)
    return pd.DataFrame(rows)


def test_speculative_runs_drops_autoregressive_rows():
    d = plots.speculative_runs(_runs())
    assert (d["drafter"] != "autoregressive").all() and len(d) == 16
    assert set(d["T"]) == {"T = 0", "T = 1"}


def test_figures_build():
    runs = _runs()
    fig = plots.alpha_by_kind(runs)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    # one bar per (kind, temperature) per drafter, at the mean α over K
    heights = sorted(round(p.get_height(), 6) for p in fig.axes[0].patches if p.get_height() > 0)
    assert heights == [0.2, 0.3, 0.6, 0.7]
    fig = plots.predicted_vs_measured(runs)
    assert len(fig.axes) == 2 and all(ax.has_data() for ax in fig.axes)
    assert fig.axes[0].get_title() == "MAPE 7 %"          # mean of 0.1 / 1.7 and 0.1 / 1.3
    fig = plots.speedup_predicted_vs_measured(runs)
    assert len(fig.axes) == 4                              # (drafter, temperature) panels


@pytest.mark.parametrize("legacy", [False, True])
def test_acceptance_by_position_draws_the_rates_of_the_largest_k(legacy):
    fig = plots.acceptance_by_position(_runs(legacy))
    ys = sorted({round(float(y), 6) for line in fig.axes[0].get_lines()
                 for y in np.asarray(line.get_ydata(), float) if np.isfinite(y)})
    assert ys == [0.3, 0.7]                               # α_j of code and prose at K = 4
    xs = {float(x) for line in fig.axes[0].get_lines() for x in line.get_xdata()}
    assert xs >= {1.0, 2.0, 3.0, 4.0}


def test_bad_tables():
    with pytest.raises(ValueError, match="lacks columns"):
        plots.alpha_by_kind(pd.DataFrame({"drafter": ["x"]}))
    with pytest.raises(ValueError, match="no speculative rows"):
        plots.speculative_runs(_runs().assign(drafter="autoregressive"))
