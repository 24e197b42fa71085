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
    # mean of 0.1 / 1.7 and 0.1 / 1.3
    assert fig.axes[0].get_title() == "one α for every draft position\nmean abs. error 7%"
    fig = plots.speedup_predicted_vs_measured(runs)
    assert len(fig.axes) == 4                              # (drafter, temperature) panels


@pytest.mark.parametrize("legacy", [False, True])
def test_acceptance_by_position_draws_the_rates_of_the_largest_k(legacy):
    fig = plots.acceptance_by_position(_runs(legacy))
    lines = [c.lines[0] for c in fig.axes[0].containers]   # each errorbar's data line
    ys = sorted({round(float(y), 6) for line in lines
                 for y in np.asarray(line.get_ydata(), float) if np.isfinite(y)})
    assert ys == [0.3, 0.7]                               # α_j of code and prose at K = 4
    xs = {float(x) for line in lines for x in line.get_xdata()}
    assert xs >= {1.0, 2.0, 3.0, 4.0}


def test_bad_tables():
    with pytest.raises(ValueError, match="lacks columns"):
        plots.alpha_by_kind(pd.DataFrame({"drafter": ["x"]}))
    with pytest.raises(ValueError, match="no speculative rows"):
        plots.speculative_runs(_runs().assign(drafter="autoregressive"))


def test_acceptance_by_position_shows_intervals_and_sample_counts():
    """A rate from a handful of samples must not read as a trend: each α_j carries its
    Wilson interval and the panel below gives the samples that reached j."""
    from specsim.results import binomial_interval
    runs = _runs()
    fig = plots.acceptance_by_position(runs)
    top, bottom = fig.axes[0], fig.axes[2]                   # drafter 1: rates, counts
    assert "samples" in bottom.get_ylabel() and "interval" in top.get_ylabel()
    name = top.get_title()
    assert len(top.containers) == 4                          # 2 kinds x 2 temperatures
    for container in top.containers:
        label = container.get_label()                        # "code, T = 0"
        kind, temp = label.split(", ")
        row = runs[(runs.drafter == name) & (runs.kind == kind) & (runs.k == 4)
                   & (runs.temperature == float(temp.split("= ")[1]))].iloc[0]
        rates, counts = schema.position_rates(row), schema.position_counts(row)
        low, high = binomial_interval(rates * counts, counts)
        segments = container.lines[2][0].get_segments()       # one vertical bar per position
        np.testing.assert_allclose([s[0][1] for s in segments], low)
        np.testing.assert_allclose([s[1][1] for s in segments], high)
    drawn = sorted({round(float(y), 6) for ln in bottom.get_lines() for y in ln.get_ydata()})
    want = sorted({round(100 * a ** j, 6) for a in (0.7, 0.3) for j in range(4)})
    assert drawn == want


def test_predicted_vs_measured_panels_are_told_apart():
    fig = plots.predicted_vs_measured(_runs())
    titles = [ax.get_title() for ax in fig.axes]
    assert len(set(titles)) == 2 and "one α" in titles[0] and "per-position" in titles[1]
    for ax in fig.axes:
        assert ax.get_xlabel().startswith("predicted speedup") and "_" not in ax.get_xlabel()
        assert "measured speedup" in ax.get_ylabel() and "_" not in ax.get_ylabel()
    assert fig.axes[0].get_xlabel() != fig.axes[1].get_xlabel()


def test_integer_axes_have_whole_number_labels():
    from specsim.plots.axes import tick_labels
    fig = plots.speedup_predicted_vs_measured(_runs())
    labels = tick_labels(fig.axes[0], "x")
    assert labels and all(lbl.isdigit() for lbl in labels), labels
    fig = plots.acceptance_by_position(_runs())
    labels = tick_labels(fig.axes[2], "x") + tick_labels(fig.axes[2], "y")
    assert labels and all(lbl.isdigit() for lbl in labels), labels
