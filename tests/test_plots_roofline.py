"""specsim.plots.roofline: figures build from a sweep and a fit, without pyplot."""

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from specsim import fit
from specsim.models.config import TINY_LLAMA
from specsim.plots import latency_vs_tokens, roofline_plot
from specsim.roofline import forward_costs, load_hardware


@pytest.fixture(scope="module")
def sweep():
    pts = [(n, b, 64) for n in (1, 2, 4, 8, 16, 32) for b in (1, 2)]
    n, b, c = (np.array(x) for x in zip(*pts))
    fl, by = forward_costs(TINY_LLAMA, n, b, c)
    t = fit.roofline_time(fl, by, 2e-5, 2e9, 5e8)
    return pd.DataFrame({"n_tokens": n, "batch": b, "context": c, "time_s": t,
                         "time_q25": 0.95 * t, "time_q75": 1.05 * t, "flops": fl, "bytes": by})


def test_figures(sweep):
    f = fit.fit_sweep(sweep)
    fig = roofline_plot(sweep, f, hardware=[load_hardware("l4")], dtype="float32")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and len(ax.lines) >= 2
    fig2 = latency_vs_tokens(sweep, f, TINY_LLAMA, batch=1, context=64)
    line = fig2.axes[0].lines[-1]
    assert len(line.get_xdata()) == 32                       # continuous curve over n = 1..32
    np.testing.assert_allclose(line.get_ydata()[0], 1e3 * f.predict_forward(TINY_LLAMA, 1, 1, 64))
    with pytest.raises(ValueError, match="no rows"):
        latency_vs_tokens(sweep, f, batch=7, context=64)
    with pytest.raises(ValueError, match="columns"):
        roofline_plot(sweep.drop(columns="flops"))


def _legend_groups(ax) -> dict[str, list[str]]:
    """The roofline legend as {section title: entries} (seaborn writes each title as an
    entry of its own; the fit and ceiling lines come after the last section)."""
    groups, current = {}, None
    for text in (t.get_text() for t in ax.get_legend().get_texts()):
        if text in ("tokens per pass", "batch", "context"):
            current = groups.setdefault(text, [])
        elif current is not None and text.replace(".", "").isdigit():
            current.append(text)
        else:
            current = None
            groups.setdefault("lines", []).append(text)
    return groups


def _mixed_sweep():
    """Batches 1, 2, 4, 8 and tokens 1–64: seaborn's numeric legend would bin these into
    1, 3, 4, 6, 7 and 15–60; the legends list the values measured."""
    pts = [(n, b, c) for n in (1, 2, 4, 8, 16, 32, 64) for b in (1, 2, 4, 8) for c in (64, 128)]
    n, b, c = (np.array(x) for x in zip(*pts))
    fl, by = forward_costs(TINY_LLAMA, n, b, c)
    t = fit.roofline_time(fl, by, 2e-5, 2e9, 5e8)
    return pd.DataFrame({"n_tokens": n, "batch": b, "context": c, "time_s": t,
                         "flops": fl, "bytes": by})


def test_roofline_legend_lists_the_measured_values():
    df = _mixed_sweep()
    fig = roofline_plot(df, fit.fit_sweep(df))
    groups = _legend_groups(fig.axes[0])
    assert groups["tokens per pass"] == ["1", "2", "4", "8", "16", "32", "64"]
    assert groups["batch"] == ["1", "2", "4", "8"]
    assert groups["context"] == ["64", "128"]


def test_fit_markers_sit_behind_the_points_and_measured_ceilings_are_drawn(sweep):
    f = fit.fit_sweep(sweep)
    ceilings = pd.DataFrame({"matmul_flops_per_s": [3e9, 4e9], "copy_bytes_per_s": [6e8, 5e8]})
    ax = roofline_plot(sweep, f, ceilings=ceilings).axes[0]
    points, rings = ax.collections[0], ax.collections[-1]
    assert len(points.get_offsets()) == len(rings.get_offsets()) == len(sweep)
    assert rings.get_zorder() < points.get_zorder()
    assert np.all(rings.get_facecolors()[:, 3] == 0)          # open rings: the point shows
    line = next(ln for ln in ax.lines if ln.get_label().startswith("measured ceilings"))
    x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
    np.testing.assert_allclose(y, np.minimum(4e9, x * 6e8) / 1e9)   # the highest measured
    assert "4 GFLOP/s" in line.get_label() and "0.6 GB/s" in line.get_label()


def test_tick_labels_are_plain_numbers(sweep):
    from specsim.plots.axes import tick_labels
    f = fit.fit_sweep(sweep)
    axes = [roofline_plot(sweep, f).axes[0],
            latency_vs_tokens(sweep, f, batch=1, context=64).axes[0]]
    for ax in axes:
        for which in ("x", "y"):
            labels = tick_labels(ax, which)
            assert labels, (ax.get_title(), which)
            for label in labels:                          # no "4×10¹", "$10^{0}$"
                float(label)
    assert tick_labels(axes[1], "x") == ["1", "2", "4", "8", "16", "32"]   # the measured n
    assert axes[1].get_ylabel() == "latency of one pass (ms)"
