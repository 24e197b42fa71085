"""Writing the demo's results: a table for the terminal, and ``results/demo/`` with
report.md, CSV/JSON files and the figures the command line hands in (this package draws
nothing and imports no plotting code).

- `tables`: the demo's tables (speedups and their predictions, α, hardware, drafters);
- `fidelity`: prediction against measurement, the terminal summary;
- `overview`: report.md's headline; `policies`: the policies part's section;
- `sections`: report.md, one function per section (``SECTIONS``);
- `files`: the folder, written beside the target and swapped in whole."""

from specsim.report.fidelity import (PREDICTION_LABELS, decomposition_summary,
                                     decomposition_table, fidelity_headline, fidelity_summary,
                                     machine_summary, mape_table, summary_table)
from specsim.report.files import write_demo
from specsim.report.overview import INSTRUMENT, headline
from specsim.report.policies import policies_table, policy_goals
from specsim.report.sections import SECTIONS, report_md
from specsim.report.tables import (acceptance_table, alpha_by_kind, drafter_alpha_table,
                                   drafter_speedup_table, error_summary, hardware_table,
                                   markdown_table, read_demo_tables, speedup_table, worst_runs)

__all__ = ["PREDICTION_LABELS", "decomposition_summary", "decomposition_table",
           "fidelity_headline", "fidelity_summary", "machine_summary", "mape_table",
           "summary_table", "write_demo", "INSTRUMENT", "headline", "policies_table",
           "policy_goals", "SECTIONS", "report_md", "acceptance_table", "alpha_by_kind",
           "drafter_alpha_table", "drafter_speedup_table", "error_summary", "hardware_table",
           "markdown_table", "read_demo_tables", "speedup_table", "worst_runs"]
