"""specsim.plots.realmodels on a synthetic demo run table."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from matplotlib.figure import Figure

from specsim.plots import realmodels


def _runs():
    rows = []
    for drafter in ("ngram-3", "layer-skip:24/30"):
        for t in (0.0, 1.0):
            rows.append(dict(drafter="autoregressive", k=0, kind="code", temperature=t, alpha=float("nan")))
            for kind, a in (("code", 0.7), ("prose", 0.3)):
                for k in (2, 4):
                    rows.append(dict(drafter=drafter, k=k, kind=kind, temperature=t, alpha=a - 0.1 * t,
                                     per_position=json.dumps([a] * k), measured_speedup=1 + a,
                                     pred_speedup_iid=1 + a + 0.1, pred_speedup_positional=1 + a - 0.05))
    return pd.DataFrame(rows)


def test_speculative_runs_drops_autoregressive_rows():
    d = realmodels.speculative_runs(_runs())
    assert (d["drafter"] != "autoregressive").all() and len(d) == 16
    assert set(d["T"]) == {"T = 0", "T = 1"}


def test_figures_build():
    runs = _runs()
    fig = realmodels.alpha_by_kind(runs)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    # one bar per (kind, temperature) per drafter, at the mean α over K
    heights = sorted(round(p.get_height(), 6) for p in fig.axes[0].patches if p.get_height() > 0)
    assert heights == [0.2, 0.3, 0.6, 0.7]
    fig = realmodels.predicted_vs_measured(runs)
    assert len(fig.axes) == 2 and all(ax.has_data() for ax in fig.axes)
    assert fig.axes[0].get_title() == "MAPE 7 %"          # mean of 0.1 / 1.7 and 0.1 / 1.3


def test_bad_tables():
    with pytest.raises(ValueError, match="lacks columns"):
        realmodels.alpha_by_kind(pd.DataFrame({"drafter": ["x"]}))
    with pytest.raises(ValueError, match="no speculative rows"):
        realmodels.speculative_runs(_runs().assign(drafter="autoregressive"))
