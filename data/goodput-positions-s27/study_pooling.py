"""Session 27: Goodput's per-position estimate with later slots pooled apart from the
first ("tiered", defined here: it did not earn a place in `specsim.policies`) against the
default, and a lighter prior (prior_weight 2) and a higher one (prior_alpha 0.6), on the
exact replays of session 24's tables, at the kernel's pass-time ratios and at XLA's.

    PYTHONPATH=. python data/goodput-positions-s27/study_pooling.py
"""
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_table import print_table  # noqa: E402

from specsim import policies as P  # noqa: E402


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


VARIANTS = {"default": (P.Goodput, {}), "tiered": (Tiered, {}),
            "prior_weight 2": (P.Goodput, dict(prior_weight=2.0)),
            "prior_alpha 0.6": (P.Goodput, dict(prior_alpha=0.6)),
            "tiered, prior_alpha 0.6": (Tiered, dict(prior_alpha=0.6))}


if __name__ == "__main__":
    print_table("variant", VARIANTS,
                sys.argv[1:] or ("ngram", "feature-head"), ("kernel", "xla"), (80, 160))
