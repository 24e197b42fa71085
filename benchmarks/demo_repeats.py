"""Collect repeated default demos into ``data/demo-cpu-repeats``: the tables the
ceiling prediction reads (`specsim.experiment.ceiling_prediction.write_repeats`), each
demo labelled by its commit and its place among that commit's demos.

    python benchmarks/demo_repeats.py OUT_FOLDER_1 OUT_FOLDER_2[=LABEL] ...

Each argument is a ``specsim demo --out`` folder, in the order the demos ran, labelled
"<commit> (i of n)" among the arguments of its commit ("<commit>" where it is the only
one) unless ``=LABEL`` names it."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "demo-cpu-repeats"


def labels(folders: list[Path], named: dict[int, str] | None = None) -> dict[str, Path]:
    """"<commit> (i of n)" for each folder, n the folders of that commit ("<commit>"
    where n is 1), or the label ``named`` gives its index."""
    named = named or {}
    commits = [str(json.loads((f / "environment.json").read_text()).get("git_commit", "?"))[:7]
               for f in folders]
    total, seen = Counter(commits), Counter()
    out = {}
    for i, (commit, folder) in enumerate(zip(commits, folders)):
        seen[commit] += 1
        auto = commit if total[commit] == 1 else f"{commit} ({seen[commit]} of {total[commit]})"
        out[named.get(i, auto)] = folder
    if len(out) != len(folders):
        sys.exit("each demo needs its own label")
    return out


def main(argv: list[str]) -> None:
    from specsim.experiment.ceiling_prediction import write_repeats

    if not argv:
        sys.exit(__doc__)
    parts = [a.partition("=") for a in argv]
    folders = [Path(p[0]) for p in parts]
    named = {i: p[2] for i, p in enumerate(parts) if p[2]}
    missing = [str(f) for f in folders if not (f / "environment.json").is_file()]
    if missing:
        sys.exit(f"not demo output folders (no environment.json): {', '.join(missing)}")
    print(f"wrote {write_repeats(labels(folders, named), OUT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
