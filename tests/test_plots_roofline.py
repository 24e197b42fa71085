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
