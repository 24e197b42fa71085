import sys, numpy as np
sys.path.insert(0, "benchmarks")
import goodput_positions as gp
from specsim import policies as P
from specsim.simulate import replay_positions
names, tables, drafter = gp.load("data/goodput-positions-s24/feature-head_160.npz")
costs = P.Costs(t_draft=gp.DRAFT_RATIOS[drafter], t_target=(1, 1.01, 1.06, 1.16, 1.17))
for name in ("code/shipped2", "code/shipped28", "code/shipped29"):
    tb = tables[names.index(name)]
    for label, pol in (("goodput p0.2", P.Goodput(k_max=4, costs=costs)), ("goodput p0", P.Goodput(k_max=4, costs=costs, p_min=0.0)), ("fixed4", P.FixedK(k=4)), ("thr0.2", P.ConfidenceThreshold(p_min=0.2, k_max=4))):
        r = replay_positions(pol, tb, costs, new_tokens=80, off_draft="paid")
        print(name, label, f"speedup {r.speedup:.3f} iters {len(r.time)} planned {r.k_plan.mean():.2f} proposed {r.proposed.mean():.2f} accepted {r.accepted.mean():.2f} steps {r.draft_steps.mean():.2f} time {r.time.sum():.1f}")
