"""The demo's evaluation prompts (one per kind of work), replayed exactly at the pass
costs the policies part measured before its rounds in session 30 (t(n)/t(1) = 1, 1.067,
1.159, 1.318, 1.318; the feature head's step 0.037, `../policies-cpu-s30/`): Goodput with
and without the recovery probe, against each prompt's best fixed K of 1-4.

    PYTHONPATH=. python data/goodput-positions-s30/demo_cells.py [T1,T2,T3,T4,T5 DRAFT]

Session 33 added the optional costs (t(n)/t(1) for n = 1..5 and the feature head's
step), to replay at another host's pass costs (`../policies-cpu-s33/`).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from goodput_positions import OFF_DRAFTS, load  # noqa: E402

from specsim import policies as P  # noqa: E402
from specsim.simulate import replay_positions  # noqa: E402

print("| drafter | kind | tokens | best fixed K (speedup) | recover off / best | recover on / best |")
print("|---|---|---|---|---|---|")
T = (1, 1.067, 1.159, 1.318, 1.318)
DRAFT = 0.037
if len(sys.argv) > 2:
    T, DRAFT = tuple(float(x) for x in sys.argv[1].split(",")), float(sys.argv[2])
for d in ("ngram", "feature-head"):
    names, tables, _ = load(f"data/goodput-positions-s24/{d}_160.npz")
    costs = P.Costs(t_draft=DRAFT if d == "feature-head" else 0.0, t_target=T)
    for kind in ("code", "extraction", "json", "prose"):
        tb = tables[names.index(f"{kind}/eval")]
        for n in (40, 80):
            best = max(replay_positions(P.FixedK(k=k), tb, costs, new_tokens=n).speedup
                       for k in range(1, 5))
            off, on = (replay_positions(P.Goodput(k_max=4, costs=costs, **kw), tb, costs,
                                        new_tokens=n, off_draft=OFF_DRAFTS[d]).speedup
                       for kw in ({"recover": None}, {}))
            print(f"| {d} | {kind} | {n} | {best:.2f} | {off / best:.2f} | {on / best:.2f} |")
