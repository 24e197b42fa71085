"""Why Goodput(budget=0.01) keeps n-gram lookup's win on the goals bench and loses it in
`sim_goodput_explore.py --study budget` (session 23). Recorded FixedK(4) traces (the
evaluation prompts, batch 1) replayed with the goals bench's fixed pass-time ratios and
with the ratios the budget study measured.

- default (80 tokens, code and extraction): Goodput with and without the budget, and
  `LowerBound`, whose budget reads a lower confidence bound z standard errors below the
  estimate (Goodput's reads ``explore`` of them: 0 by default, the estimate itself),
  each with the plan's K per iteration (output: diag_budget.txt).
- ``--horizon`` (160 tokens, four kinds): `Horizon`, a candidate not built, whose debt
  is repaid over h iterations at the lower bound instead of one (margin = bank +
  h·((1 + ε)·t(1)·E_lcb(K) − t(K)); h = 1 is Goodput's budget), which no longer bounds
  the loss by (1 + ε) plain decoding plus one iteration (output: diag_budget_horizon.txt).

    PYTHONPATH=. python data/goodput-goals-s22/diag_budget.py [--horizon]   # 2-3 min
"""
import argparse
import dataclasses

import numpy as np

from specsim import decode, models, simulate
from specsim import policies as P
from specsim.drafters import NGramDrafter
from specsim.experiment.pipeline import encode_prompts
from specsim.experiment.policy_runs import trace_from_stats

COSTS = {"measured": P.Costs(t_draft=0.0, t_target=(1.0, 1.418, 1.761, 1.688, 1.904)),
         "fixed": P.Costs(t_draft=0.0, t_target=(1.0, 1.65, 1.76, 1.94, 1.94))}


@dataclasses.dataclass(frozen=True, kw_only=True)
class LowerBound(P.Goodput):
    z: float = 1.0

    def safe_alpha(self, state, xp=np):
        a = self.alpha_estimate(state, xp)
        return xp.maximum(a - self.z * self._standard_error(a, state, xp), 0.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Horizon(P.Goodput):
    h: float = 4.0

    def margin(self, state, xp=np):
        bank = state[-1][:, None]
        return bank + self.h * (super().margin(state, xp) - bank)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--horizon", action="store_true")
    args = ap.parse_args(argv)
    kinds, new_tokens = ((["code", "extraction", "json", "prose"], 160) if args.horizon
                         else (["code", "extraction"], 80))
    target = models.load("smollm2-135m").with_layer_loop("scan")
    prompts = encode_prompts(target, kinds)
    drafter = NGramDrafter(target.cfg.vocab_size, n=3)
    for kind in kinds:
        trace = trace_from_stats(decode.generate_speculative(
            target, drafter, [prompts[kind]], new_tokens, policy=P.FixedK(k=4),
            cache_len=384).stats)
        for name, costs in COSTS.items():
            plain = {"no budget": P.Goodput(k_max=4, costs=costs),
                     "budget 0.01": P.Goodput(k_max=4, costs=costs, budget=0.01)}
            more = ({"h 4": Horizon(k_max=4, costs=costs, budget=0.01, h=4),
                     "h 8": Horizon(k_max=4, costs=costs, budget=0.01, h=8),
                     "fixed K 4": P.FixedK(k=4)} if args.horizon else
                    {"budget 0.01, z 1": LowerBound(k_max=4, costs=costs, budget=0.01),
                     "budget 0.01, z 2": LowerBound(k_max=4, costs=costs, budget=0.01,
                                                    z=2.0)})
            row = []
            for label, g in {**plain, **more}.items():
                r = simulate.simulate_policy(g, trace, costs=costs, cost_model="engine",
                                             off_draft="free")
                if args.horizon:
                    row.append(f"{label} {r.speedup:.3f}")
                    continue
                ks = "".join(str(int(k)) for k in r.k_plan[:, 0][r.present[:, 0]])
                print(f"{kind:10s} {name:8s} {label:16s} {r.speedup:.3f}x  "
                      f"K per iteration: {ks}", flush=True)
            if row:
                print(f"{kind:10s} {name:8s} " + " | ".join(row), flush=True)


if __name__ == "__main__":
    main()
