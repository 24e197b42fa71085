"""The replay loop the session-27 studies share: each variant of Goodput replayed on
session 24's position tables (`specsim.simulate.replay_positions`, batch 1, greedy)
against plain decoding and each prompt's best fixed K of 1-4, one markdown row per
(drafter, costs, tokens, variant)."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import goodput_positions as gp  # noqa: E402

from specsim import policies as P  # noqa: E402
from specsim.simulate import replay_positions  # noqa: E402

RATIOS = {"demo-s29": (1, 1.25, 1.30, 1.31, 1.31), "kernel": (1, 1.01, 1.06, 1.16, 1.17), "demo-s27": (1, 1.056, 1.107, 1.182, 1.189),
          "xla": (1, 1.65, 1.76, 1.94, 1.94), "demo-s31": (1, 1.082, 1.110, 1.234, 1.241)}
"""t(n)/t(1), n = 1..5: demo-s29, the policies part's pass times in session 29
(data/policies-cpu-s29/full/policies.csv: t(3)/t(1) 1.30 and t(5)/t(1) 1.31 as measured;
t(2) 1.25 and t(4) 1.31 set between, that file holding only the fixed-K widths); the
kernel's pass (data/kernel-cpu-s26/), what the policies part measured before its rounds
(data/policies-cpu-s27/), XLA's dots (the goals bench's); demo-s31, the policies part's
at batch 1 with the CPU attention kernel (data/policies-cpu-s31/)."""


def print_table(label: str, variants: dict, drafters, ratios, tokens) -> None:
    """``variants``: name -> (Goodput subclass, keyword arguments) for K_max 4."""
    print(f"| drafter | costs | tokens | {label} | geomean vs plain | vs best fixed K | "
          "goal-1 misses (worst) | goal-2 misses (worst) |")
    print("|---|---|---|---|---|---|---|---|")
    for d in drafters:
        names, tables, drafter = gp.load(f"data/goodput-positions-s24/{d}_160.npz")
        for cname in ratios:
            costs = P.Costs(t_draft=gp.DRAFT_RATIOS[drafter], t_target=RATIOS[cname])
            for n in tokens:
                best = np.asarray([max(replay_positions(P.FixedK(k=k), tb, costs,
                                                        new_tokens=n).speedup
                                       for k in range(1, 5)) for tb in tables])
                for vname, (cls, kw) in variants.items():
                    pol = cls(k_max=4, costs=costs, **kw)
                    s = np.asarray([replay_positions(pol, tb, costs, new_tokens=n,
                                                     off_draft=gp.OFF_DRAFTS[drafter]).speedup
                                    for tb in tables])
                    rel = s / best
                    gm = np.exp(np.log([s, rel]).mean(1))
                    print(f"| {d} | {cname} | {n} | {vname} | {gm[0]:.3f} | {gm[1]:.3f} | "
                          f"{int((s < 0.98).sum())} ({s.min():.3f}) | "
                          f"{int((rel < 0.97).sum())} ({rel.min():.3f}) |", flush=True)
