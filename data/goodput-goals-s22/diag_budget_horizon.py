"""A candidate for the budget's fragility (diag_budget.py): the debt repaid over h
iterations at the lower bound instead of one (margin = bank + h·((1 + ε)·t(1)·E_lcb(K) − t(K));
h = 1 is Goodput's budget). Four n-gram FixedK(4) traces (the evaluation prompts, batch 1,
160 tokens) replayed with the measured and the fixed pass-time ratios. h > 1 no longer
bounds the loss by (1 + ε) plain decoding plus one iteration: it is not built.

    PYTHONPATH=. python data/goodput-goals-s22/diag_budget_horizon.py    # ~3 min
"""
import dataclasses

import numpy as np

from specsim import decode, models, simulate
from specsim import policies as P
from specsim.drafters import NGramDrafter
from specsim.experiment.pipeline import encode_prompts
from specsim.experiment.policy_runs import trace_from_stats

@dataclasses.dataclass(frozen=True, kw_only=True)
class Horizon(P.Goodput):
    h: float = 4.0
    def margin(self, state, xp=np):
        e = P._expected_tokens(self.safe_alpha(state, xp), xp)
        t = self.costs.iteration_time(xp.arange(self.k_max + 1), xp)
        t1 = (1.0 + self.budget) * self.costs.t_target[0]
        return state[-1][:, None] + self.h * (t1 * e - t[None])


COSTS = {"measured": P.Costs(t_draft=0.0, t_target=(1.0, 1.418, 1.761, 1.688, 1.904)),
         "fixed": P.Costs(t_draft=0.0, t_target=(1.0, 1.65, 1.76, 1.94, 1.94))}
target = models.load("smollm2-135m").with_layer_loop("scan")
kinds = ["code", "extraction", "json", "prose"]
prompts = encode_prompts(target, kinds)
drafter = NGramDrafter(target.cfg.vocab_size, n=3)
traces = {k: trace_from_stats(decode.generate_speculative(
    target, drafter, [prompts[k]], 160, policy=P.FixedK(k=4), cache_len=384).stats)
    for k in kinds}
for kind, trace in traces.items():
    for name, costs in COSTS.items():
        row = []
        for label, g in (("no budget", P.Goodput(k_max=4, costs=costs)),
                         ("budget 0.01", P.Goodput(k_max=4, costs=costs, budget=0.01)),
                         ("h 4", Horizon(k_max=4, costs=costs, budget=0.01, h=4)),
                         ("h 8", Horizon(k_max=4, costs=costs, budget=0.01, h=8)),
                         ("fixed K 4", P.FixedK(k=4))):
            r = simulate.simulate_policy(g, trace, costs=costs, cost_model="engine",
                                         off_draft="free")
            row.append(f"{label} {r.speedup:.3f}")
        print(f"{kind:10s} {name:8s} " + " | ".join(row), flush=True)
