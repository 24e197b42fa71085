"""Session 27: Goodput's per-position estimate with later slots pooled apart from the
first ("tiered", defined here: it did not earn a place in `specsim.policies`) against the
default, and a lighter prior (prior_weight 2) and a higher one (prior_alpha 0.6), on the
exact replays of session 24's tables, at the kernel's pass-time ratios and at XLA's.

    PYTHONPATH=. python data/goodput-positions-s27/study_pooling.py
"""
import dataclasses
import sys

import numpy as np

sys.path.insert(0, "benchmarks")
import goodput_positions as gp  # noqa: E402

from specsim import policies as P  # noqa: E402
from specsim.simulate import replay_positions  # noqa: E402


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tiered(P.Goodput):
    """Goodput whose later positions (j >= 1) shrink towards the rate pooled over the
    later positions (itself shrunk towards the all-position pool), the first position
    towards the all-position pool: n-gram lookup's acceptance is bursty (a match either
    fails at once or runs on), so its later slots' conditional rates sit far above the
    first slot's, which dominates the all-position pool."""

    def alpha_estimate(self, state, xp=np):
        acc, reached = state[0], state[1]
        w = self.prior_weight
        pooled = (xp.sum(acc, 1, keepdims=True) + w * self.prior_alpha) / \
            (xp.sum(reached, 1, keepdims=True) + w)                              # [B, 1]
        later = (xp.sum(acc[:, 1:], 1, keepdims=True) + w * pooled) / \
            (xp.sum(reached[:, 1:], 1, keepdims=True) + w)                       # [B, 1]
        first = xp.arange(self.k_max)[None] == 0                                 # [1, K]
        return (acc + w * xp.where(first, pooled, later)) / (reached + w)      # [B, K]


RATIOS = {"kernel": (1, 1.01, 1.06, 1.16, 1.17), "xla": (1, 1.65, 1.76, 1.94, 1.94)}
VARIANTS = {"default": (P.Goodput, {}), "tiered": (Tiered, {}),
            "prior_weight 2": (P.Goodput, dict(prior_weight=2.0)),
            "prior_alpha 0.6": (P.Goodput, dict(prior_alpha=0.6)),
            "tiered, prior_alpha 0.6": (Tiered, dict(prior_alpha=0.6))}

print("| drafter | costs | tokens | variant | geomean vs plain | vs best fixed K | goal-1 misses "
      "(worst) | goal-2 misses (worst) |")
print("|---|---|---|---|---|---|---|---|")
for d in sys.argv[1:] or ("ngram", "feature-head"):
    names, tables, drafter = gp.load(f"data/goodput-positions-s24/{d}_160.npz")
    for cname, r in RATIOS.items():
        costs = P.Costs(t_draft=gp.DRAFT_RATIOS[drafter], t_target=r)
        for n in (80, 160):
            best = np.asarray([max(replay_positions(P.FixedK(k=k), tb, costs, new_tokens=n).speedup
                                   for k in range(1, 5)) for tb in tables])
            for vname, (cls, kw) in VARIANTS.items():
                pol = cls(k_max=4, costs=costs, **kw)
                s = np.asarray([replay_positions(pol, tb, costs, new_tokens=n,
                                                 off_draft=gp.OFF_DRAFTS[drafter]).speedup
                                for tb in tables])
                rel = s / best
                gm = np.exp(np.log([s, rel]).mean(1))
                print(f"| {d} | {cname} | {n} | {vname} | {gm[0]:.3f} | {gm[1]:.3f} | "
                      f"{int((s < 0.98).sum())} ({s.min():.3f}) | {int((rel < 0.97).sum())} "
                      f"({rel.min():.3f}) |", flush=True)
