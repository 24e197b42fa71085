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
from specsim.plots.batching import speedup_vs_k, speedup_vs_load  # noqa: F401,E402
from specsim.plots.explore import explorer_figure, explorer_summary  # noqa: F401,E402
from specsim.plots.papers import (  # noqa: F401,E402
    chen_speedup_vs_k,
    domain_table_figure,
    leviathan_lenience,
    leviathan_optimal_gamma,
    leviathan_predicted_vs_measured,
    leviathan_speedup_ops,
)
from specsim.plots.experiment import (  # noqa: F401,E402
    acceptance_by_position,
    alpha_by_kind,
    demo_figures,
    predicted_vs_measured,
    speedup_predicted_vs_measured,
)
