"""Why Goodput(budget=0.01) keeps n-gram lookup's win on the goals bench and loses it in
`sim_goodput_explore.py --study budget`: the same recorded FixedK(4) trace (evaluation
prompt, batch 1, 80 tokens) replayed with the goals bench's fixed pass-time ratios and
with ratios measured by the budget study (session 23), each with the plan's K sequence.
`LowerBound` reads the budget's lower confidence bound z standard errors below the
estimate (Goodput's reads ``explore`` of them: 0 by default, the estimate itself).

    PYTHONPATH=. python data/goodput-goals-s22/diag_budget.py     # ~2 min on 2 cores
"""
import dataclasses

import numpy as np

from specsim import decode, models, simulate
from specsim import policies as P
from specsim.drafters import NGramDrafter
from specsim.experiment.pipeline import encode_prompts
from specsim.experiment.policy_runs import trace_from_stats


@dataclasses.dataclass(frozen=True, kw_only=True)
class LowerBound(P.Goodput):
    z: float = 1.0

    def safe_alpha(self, state, xp=np):
        a = self.alpha_estimate(state, xp)
        return xp.maximum(a - self.z * self._standard_error(a, state, xp), 0.0)


COSTS = {"measured": P.Costs(t_draft=0.0, t_target=(1.0, 1.418, 1.761, 1.688, 1.904)),
         "fixed": P.Costs(t_draft=0.0, t_target=(1.0, 1.65, 1.76, 1.94, 1.94))}
target = models.load("smollm2-135m").with_layer_loop("scan")
prompts = encode_prompts(target, ["code", "extraction"])
drafter = NGramDrafter(target.cfg.vocab_size, n=3)
for kind in ("code", "extraction"):
    stats = decode.generate_speculative(target, drafter, [prompts[kind]], 80,
                                        policy=P.FixedK(k=4), cache_len=384).stats
    trace = trace_from_stats(stats)
    for name, costs in COSTS.items():
        for label, g in (("no budget", P.Goodput(k_max=4, costs=costs)),
                         ("budget 0.01", P.Goodput(k_max=4, costs=costs, budget=0.01)),
                         ("budget 0.01, z 1", LowerBound(k_max=4, costs=costs, budget=0.01)),
                         ("budget 0.01, z 2", LowerBound(k_max=4, costs=costs, budget=0.01,
                                                         z=2.0))):
            r = simulate.simulate_policy(g, trace, costs=costs, cost_model="engine",
                                         off_draft="free")
            ks = "".join(str(int(k)) for k in r.k_plan[:, 0][r.present[:, 0]])
            print(f"{kind:10s} {name:8s} {label:16s} {r.speedup:.3f}x  K per iteration: {ks}",
                  flush=True)
