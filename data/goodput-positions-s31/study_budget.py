"""Three ways to spend issue 12's 2% (by the cost model: (1 + overdraft)·ε), judged by exact
replays of session 24's position tables (`../goodput-positions-s24/`: batch-1 greedy runs
of 309 prompts) against plain decoding and each prompt's best fixed K of 1-4
(`../goodput-positions-s27/replay_table.py`), at the pass costs of session 31's policies
grid (demo-s31: the CPU attention kernel).

    PYTHONPATH=. python data/goodput-positions-s31/study_budget.py ngram demo-s31 40,80
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "goodput-positions-s27"))
import replay_table as rt  # noqa: E402

from specsim import policies as P  # noqa: E402

VARIANTS = {
    "ε 0.015, overdraft 1/3 (default)": (P.Goodput, {}),
    "ε 0.0175, overdraft 1/7": (P.Goodput, {"budget": 0.0175, "overdraft": 1 / 7}),
    "ε 0.02, overdraft 0": (P.Goodput, {"budget": 0.02, "overdraft": 0.0}),
}

if __name__ == "__main__":
    drafters, costs, tokens = sys.argv[1:4]
    rt.print_table("Goodput", VARIANTS, drafters.split(","), costs.split(","),
                   [int(n) for n in tokens.split(",")])
