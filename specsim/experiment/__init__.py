"""Measure → fit → predict → compare: the end-to-end check behind ``specsim demo``.

The demo is a sequence of named parts (`specsim.experiment.parts.PARTS`), each one
module; ``specsim demo --parts ...`` picks them, and the parts they need run first:

- ``roofline``: the machine's ceilings and a forward sweep of the target and of every
  model drafter (tokens per pass, batch, context), each fitted to a roofline
  (`specsim.bench`, `specsim.fit`);
- ``fidelity``: autoregressive and speculative generation (`specsim.decode`) for each
  drafter, K and temperature on prompts from four kinds of work (`specsim.workloads`),
  every program compiled first and then timed in interleaved rounds; each run's speedup
  predicted from its measured acceptance with the fitted costs
  (``S = E · t_T(1) / (K · t_D(1) + t_T(K+1))``, once with E from one α under the
  i.i.d. model, once from the per-position rates) beside the measured speedup (decode
  time per new token against one autoregressive baseline per temperature: the median
  over kinds of work and rounds);
- ``hardware``: the same acceptance on datasheet rows (roofline only);
- ``policies`` (not in the default parts): draft-length policies (`specsim.policies`)
  with the real drafters against the best swept fixed K and plain decoding, Goodput
  planning with in-run pass costs (`specsim.pass_costs`), each beside its replay on the
  recorded trace (`policy_runs`, `parts/policies.py`).

Modules: `settings` (DemoSettings), `drafters` (what runs and what its step costs),
`timing` (shared helpers), `prediction`, `part` and `parts/`,
`state` (DemoState, DemoResult), `pipeline` (run_demo). The report and figures are
written by `specsim.report`, which the command line composes with this package.

Acceptance counts: α is ``alpha_per_slot``, accepted drafts over the K draft *slots*
of every iteration (an empty n-gram slot is paid for by the verify pass like a rejected
draft, so it counts as a rejection); ``alpha_proposed`` is accepted over proposed.
"""

from specsim.experiment.drafters import DraftSetup, build_drafters, default_layer_skip
from specsim.experiment.jax_cache import enable_compilation_cache
from specsim.experiment.part import Part
from specsim.experiment.pipeline import prepare, run_demo
from specsim.experiment.settings import DEFAULT_HARDWARE, DRAFTER_KINDS, DemoSettings
from specsim.experiment.state import DemoResult, DemoState

__all__ = ["DemoSettings", "DemoResult", "DemoState", "DraftSetup", "Part",
           "run_demo", "prepare", "build_drafters", "default_layer_skip",
           "enable_compilation_cache", "DRAFTER_KINDS", "DEFAULT_HARDWARE"]
