"""Session 27: Goodput's loss budget spent in smaller probes. ``share`` s: a K > 0 is
planned only where its worst outcome (every draft rejected: one token for t(K)) costs at
most s of the row's bank, s·bank − t(K) + t(1) >= 0 (s = 1 is the budget as it is). So a
row whose first probes fail keeps probing with cheaper K instead of spending its
allowance on a few wide ones. Exact replays of session 24's tables at batch 1 (309
prompts), at the kernel's pass-time ratios and at XLA's, 40, 80 and 160 new tokens.

    PYTHONPATH=. python data/goodput-positions-s27/study_share.py [ngram|feature-head]
"""
import dataclasses
import sys

import numpy as np

sys.path.insert(0, "benchmarks")
import goodput_positions as gp  # noqa: E402

from specsim import policies as P  # noqa: E402
from specsim.simulate import replay_positions  # noqa: E402


@dataclasses.dataclass(frozen=True, kw_only=True)
class Shared(P.Goodput):
    share: float = 1.0

    def margin(self, state, xp=np):
        t = self.costs.iteration_time(xp.arange(self.k_max + 1), xp)           # [K+1]
        return self.share * state[-1][:, None] - t[None] + float(self.costs.t_target[0])


RATIOS = {"kernel": (1, 1.01, 1.06, 1.16, 1.17), "demo-s27": (1, 1.056, 1.107, 1.182, 1.189),
          "xla": (1, 1.65, 1.76, 1.94, 1.94)}
SHARES = (1.0, 0.5, 0.33, 0.25)

print("| drafter | costs | tokens | share | geomean vs plain | vs best fixed K | goal-1 misses "
      "(worst) | goal-2 misses (worst) |")
print("|---|---|---|---|---|---|---|---|")
for d in sys.argv[1:] or ("ngram", "feature-head"):
    names, tables, drafter = gp.load(f"data/goodput-positions-s24/{d}_160.npz")
    for cname, r in RATIOS.items():
        costs = P.Costs(t_draft=gp.DRAFT_RATIOS[drafter], t_target=r)
        for n in (40, 80, 160):
            best = np.asarray([max(replay_positions(P.FixedK(k=k), tb, costs, new_tokens=n).speedup
                                   for k in range(1, 5)) for tb in tables])
            for share in SHARES:
                pol = Shared(k_max=4, costs=costs, share=share)
                s = np.asarray([replay_positions(pol, tb, costs, new_tokens=n,
                                                 off_draft=gp.OFF_DRAFTS[drafter]).speedup
                                for tb in tables])
                rel = s / best
                gm = np.exp(np.log([s, rel]).mean(1))
                print(f"| {d} | {cname} | {n} | {share:g} | {gm[0]:.3f} | {gm[1]:.3f} | "
                      f"{int((s < 0.98).sum())} ({s.min():.3f}) | {int((rel < 0.97).sum())} "
                      f"({rel.min():.3f}) |", flush=True)
