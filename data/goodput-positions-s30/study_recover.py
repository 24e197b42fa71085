"""Goodput's recovery probe (session 30), judged by exact replays of session 24's position
tables (`../goodput-positions-s24/`: batch-1 greedy runs of 309 prompts) against plain
decoding and each prompt's best fixed K of 1-4 (`../goodput-positions-s27/replay_table.py`).

    PYTHONPATH=. python data/goodput-positions-s30/study_recover.py ngram demo-s29,xla,kernel 40,80,160

"recover off" is session 29's Goodput (recover=None); the other rows vary the recovery
probe's z (`Goodput.recover`) and overdraft (`Goodput.overdraft`), and the budget ε with it."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "goodput-positions-s27"))
import replay_table as rt  # noqa: E402

from specsim import policies as P  # noqa: E402

VARIANTS = {
    "recover off (session 29)": (P.Goodput, {"recover": None}),
    "z 1, overdraft 1/3 (default)": (P.Goodput, {}),
    "z 2, overdraft 1/3": (P.Goodput, {"recover": 2.0}),
    "z 1, overdraft 1/2": (P.Goodput, {"overdraft": 0.5}),
    "z 1, ε 0.0125, overdraft 0.6": (P.Goodput, {"budget": 0.0125, "overdraft": 0.6}),
}

if __name__ == "__main__":
    drafters, costs, tokens = sys.argv[1:4]
    rt.print_table("Goodput", VARIANTS, drafters.split(","), costs.split(","),
                   [int(n) for n in tokens.split(",")])
