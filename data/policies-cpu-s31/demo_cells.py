"""The demo's evaluation prompts (one per kind of work; session 24's exact position tables)
replayed at the pass costs session 31's grid measured at batch 1 (t(n)/t(1) = 1, 1.082,
1.110, 1.234, 1.241; the feature head's step 0.029): Goodput's default and single-setting
variants against each prompt's best fixed K of 1-4.

    PYTHONPATH=. python data/policies-cpu-s31/demo_cells.py
"""
import sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
from goodput_positions import OFF_DRAFTS, load
from specsim import policies as P
from specsim.simulate import replay_positions
variants = {"default": {}, "recover off": {"recover": None}, "overdraft .5": {"overdraft": 0.5},
            "prior .6": {"prior_alpha": 0.6}, "p_min 0": {"p_min": 0.0}, "budget .02": {"budget": 0.02}}
print("| drafter | kind | tokens | best K (speedup) | " + " | ".join(variants) + " |")
for d in ("ngram", "feature-head"):
    names, tables, _ = load(f"data/goodput-positions-s24/{d}_160.npz")
    costs = P.Costs(t_draft=0.029 if d == "feature-head" else 0.0, t_target=(1, 1.082, 1.110, 1.234, 1.241))
    for kind in ("code", "extraction", "json", "prose"):
        tb = tables[names.index(f"{kind}/eval")]
        for n in (40, 80):
            fx = {k: replay_positions(P.FixedK(k=k), tb, costs, new_tokens=n).speedup for k in range(1, 5)}
            kb = max(fx, key=fx.get); best = fx[kb]
            r = [replay_positions(P.Goodput(k_max=4, costs=costs, **kw), tb, costs, new_tokens=n, off_draft=OFF_DRAFTS[d]).speedup / best for kw in variants.values()]
            print(f"| {d} | {kind} | {n} | {kb} ({best:.2f}) | " + " | ".join(f"{x:.2f}" for x in r) + " |", flush=True)
