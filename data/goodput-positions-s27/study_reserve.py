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
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_table import print_table  # noqa: E402

from specsim import policies as P  # noqa: E402


@dataclasses.dataclass(frozen=True, kw_only=True)
class Reserve(P.Goodput):
    reserve: float = 0.0

    def margin(self, state, xp=np):
        t = self.costs.iteration_time(xp.arange(self.k_max + 1), xp)           # [K+1]
        worst = t - float(self.costs.t_target[0])                               # [K+1]
        bank = state[-1][:, None]                                               # [B, 1]
        keep = xp.clip(xp.minimum(self.reserve * worst[1], bank - worst[1]), 0.0, None)
        return bank - worst[None] - keep


RESERVES = (0.0, 2.0, 4.0, 8.0)


if __name__ == "__main__":
    print_table("reserve", {f"{m:g}": (Reserve, dict(reserve=m)) for m in RESERVES},
                sys.argv[1:] or ("ngram", "feature-head"), ("kernel", "demo-s27", "xla"),
                (40, 80, 160))
