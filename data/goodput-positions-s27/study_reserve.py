"""Session 27: Goodput's loss budget with a reserve of cheap probes. ``reserve`` m: a K
> 0 is planned only where the bank, after its worst outcome (every draft rejected: one
token for t(K)), still holds m worst outcomes of K = 1, or as many as the bank allows
beyond one: margin(K) = bank − w(K) − clip(min(m·w(1), bank − w(1)), 0), w(K) = t(K) −
t(1). K = 1 stays affordable wherever the budget alone allows it; a wide K must leave
room for m cheap probes after it fails. Exact replays of session 24's tables at batch 1
(309 prompts), at the kernel's, the demo's and XLA's pass-time ratios, 40, 80 and 160
new tokens.

    PYTHONPATH=. python data/goodput-positions-s27/study_reserve.py [ngram|feature-head]
"""
import dataclasses
import sys

import numpy as np

sys.path.insert(0, "benchmarks")
import goodput_positions as gp  # noqa: E402

from specsim import policies as P  # noqa: E402
from specsim.simulate import replay_positions  # noqa: E402


@dataclasses.dataclass(frozen=True, kw_only=True)
class Reserve(P.Goodput):
    reserve: float = 0.0

    def margin(self, state, xp=np):
        t = self.costs.iteration_time(xp.arange(self.k_max + 1), xp)           # [K+1]
        worst = t - float(self.costs.t_target[0])                               # [K+1]
        bank = state[-1][:, None]                                               # [B, 1]
        keep = xp.clip(xp.minimum(self.reserve * worst[1], bank - worst[1]), 0.0, None)
        return bank - worst[None] - keep


RATIOS = {"kernel": (1, 1.01, 1.06, 1.16, 1.17), "demo-s27": (1, 1.056, 1.107, 1.182, 1.189),
          "xla": (1, 1.65, 1.76, 1.94, 1.94)}
RESERVES = (0.0, 2.0, 4.0, 8.0)

print("| drafter | costs | tokens | reserve | geomean vs plain | vs best fixed K | goal-1 misses "
      "(worst) | goal-2 misses (worst) |")
print("|---|---|---|---|---|---|---|---|")
for d in sys.argv[1:] or ("ngram", "feature-head"):
    names, tables, drafter = gp.load(f"data/goodput-positions-s24/{d}_160.npz")
    for cname, r in RATIOS.items():
        costs = P.Costs(t_draft=gp.DRAFT_RATIOS[drafter], t_target=r)
        for n in (40, 80, 160):
            best = np.asarray([max(replay_positions(P.FixedK(k=k), tb, costs, new_tokens=n).speedup
                                   for k in range(1, 5)) for tb in tables])
            for m in RESERVES:
                pol = Reserve(k_max=4, costs=costs, reserve=m)
                s = np.asarray([replay_positions(pol, tb, costs, new_tokens=n,
                                                 off_draft=gp.OFF_DRAFTS[drafter]).speedup
                                for tb in tables])
                rel = s / best
                gm = np.exp(np.log([s, rel]).mean(1))
                print(f"| {d} | {cname} | {n} | {m:g} | {gm[0]:.3f} | {gm[1]:.3f} | "
                      f"{int((s < 0.98).sum())} ({s.min():.3f}) | {int((rel < 0.97).sum())} "
                      f"({rel.min():.3f}) |", flush=True)
