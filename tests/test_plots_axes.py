"""specsim.plots.axes, and every log or integer axis of the theory figures: tick labels
are plain numbers ("40", "4096"), never "4×10¹" or "10⁰"."""

import numpy as np
import pytest

from specsim import batching
from specsim.models import config
from specsim.plots import batching as batching_plots
from specsim.plots import explore, papers
from specsim.plots.axes import plain_number, tick_labels


@pytest.mark.parametrize("value, text", [(40.0, "40"), (4096.0, "4096"), (0.5, "0.5"),
                                         (1.0, "1"), (0.025, "0.025"), (2e6, "2e+06"),
                                         (0.0, "0")])
def test_plain_number(value, text):
    assert plain_number(value) == text


def _all_plain(ax, which):
    labels = tick_labels(ax, which)
    assert labels
    for label in labels:
        float(label)                          # raises on "$\\mathdefault{10^{0}}$" or "4×10¹"
    return labels


def test_batching_figure_axes():
    tm = batching.hardware_time_model("h100-sxm", dtype="bfloat16")
    grid = batching.speedup_grid(config.LLAMA31_8B, config.LLAMA32_1B, tm, [0.6, 0.8],
                                 range(1, 9), 2 ** np.arange(0, 13), [128])
    fig = batching_plots.speedup_vs_load(grid, batching.best_k(grid), "batch")
    for ax in fig.axes:
        assert set(_all_plain(ax, "x")) <= {str(2 ** j) for j in range(13)}
    assert all(lbl.isdigit() for lbl in _all_plain(fig.axes[1], "y"))     # best K
    fig = batching_plots.speedup_vs_k(grid[grid["batch"] == 1])
    assert all(lbl.isdigit() for lbl in _all_plain(fig.axes[0], "x"))


def test_optimal_k_axes():
    fig = papers.leviathan_optimal_gamma(n=41)
    assert _all_plain(fig.axes[0], "y")[:3] == ["1", "2", "5"]
    fig = explore.explorer_figure(0.7, 4, 0.05, n=41)
    _all_plain(fig.axes[2], "y")
    assert all(lbl.isdigit() for lbl in _all_plain(fig.axes[0], "x"))
