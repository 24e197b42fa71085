"""How far a run's length limits Goodput against the best fixed K (session 34).

Exact replays (`specsim.simulate.replay_positions`, batch 1, greedy) of session 24's position
tables (`../goodput-positions-s24/`: 309 prompts in four kinds of work, 160 tokens each) at
session 33's batch-1 pass costs on the Intel host, t(n)/t(1) = 1, 1.119, 1.223, 1.337,
1.396 (`../policies-cpu-s33/`, t40-r2), judged two ways:

- against each prompt's own best fixed K of 1-4, found with hindsight (what the policies
  part compares with, one prompt per cell);
- against the one fixed K of 1-4 with the highest geometric-mean speedup over the kind's
  prompts (what a sweep over a workload picks, the K a user would deploy).

    PYTHONPATH=. python data/policies-cpu-s34/horizon.py 40,80,160 > data/policies-cpu-s34/horizon.md
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import goodput_positions as gp  # noqa: E402

from specsim import policies as P  # noqa: E402
from specsim.simulate import replay_positions  # noqa: E402

T_TARGET = (1, 1.119, 1.223, 1.337, 1.396)


def main(tokens) -> None:
    print("| drafter | tokens | kind | prompts | kind's best K | Goodput vs plain | vs kind's K "
          "| prompts < 0.97× kind's K | vs own best K | prompts < 0.97× own best K | "
          "prompts < 0.98× plain |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for d in ("ngram", "feature-head"):
        names, tables, drafter = gp.load(f"data/goodput-positions-s24/{d}_160.npz")
        kind = np.asarray([n.split("/")[0] for n in names])
        costs = P.Costs(t_draft=gp.DRAFT_RATIOS[drafter], t_target=T_TARGET)
        for n in tokens:
            fixed = np.asarray([[replay_positions(P.FixedK(k=k), tb, costs, new_tokens=n).speedup
                                 for k in range(1, 5)] for tb in tables])             # [P, 4]
            good = np.asarray([replay_positions(P.Goodput(k_max=4, costs=costs), tb, costs,
                                                new_tokens=n,
                                                off_draft=gp.OFF_DRAFTS[drafter]).speedup
                               for tb in tables])                                      # [P]
            for kd in sorted(set(kind)) + ["all"]:
                m = (kind == kd) if kd != "all" else np.ones(len(kind), bool)
                gm = np.exp(np.log(fixed[m]).mean(0))                                  # [4]
                kb = int(gm.argmax())
                own = good[m] / fixed[m].max(1)
                dep = good[m] / fixed[m][:, kb]
                g = lambda x: float(np.exp(np.log(x).mean()))                        # noqa: E731
                print(f"| {d} | {n} | {kd} | {int(m.sum())} | {kb + 1} | {g(good[m]):.3f} | "
                      f"{g(dep):.3f} | {int((dep < 0.97).sum())} | {g(own):.3f} | "
                      f"{int((own < 0.97).sum())} | {int((good[m] < 0.98).sum())} |", flush=True)


if __name__ == "__main__":
    main([int(x) for x in sys.argv[1].split(",")])
