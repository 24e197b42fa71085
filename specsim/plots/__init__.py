"""Seaborn figures, one module per topic; every function returns a matplotlib Figure and
none calls ``matplotlib.use``. Import a topic module directly
(``from specsim.plots import analytic``) or use the names re-exported here."""

from specsim.plots.analytic import (  # noqa: F401
    analytic_overview,
    analytic_report,
    ops_factor_vs_alpha,
    optimal_k_vs_alpha,
    speedup_vs_alpha,
)
from specsim.plots.roofline import latency_vs_tokens, roofline_plot  # noqa: F401,E402
