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
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_table import print_table  # noqa: E402

from specsim import policies as P  # noqa: E402


@dataclasses.dataclass(frozen=True, kw_only=True)
class Shared(P.Goodput):
    share: float = 1.0

    def margin(self, state, xp=np):
        t = self.costs.iteration_time(xp.arange(self.k_max + 1), xp)           # [K+1]
        return self.share * state[-1][:, None] - t[None] + float(self.costs.t_target[0])


SHARES = (1.0, 0.5, 0.33, 0.25)


if __name__ == "__main__":
    print_table("share", {f"{s:g}": (Shared, dict(share=s)) for s in SHARES},
                sys.argv[1:] or ("ngram", "feature-head"), ("kernel", "demo-s27", "xla"),
                (40, 80, 160))
