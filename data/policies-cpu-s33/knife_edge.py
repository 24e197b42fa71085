"""Goodput on extraction at 40 tokens, replayed exactly on session 24's position tables of the
demo's evaluation prompt, as t(2)/t(1) moves from 1.08 to 1.15 (the rest of t40-r2's batch-1
costs fixed): drafter, t(2)/t(1), the best fixed K's speedup, Goodput over it.

    PYTHONPATH=. python data/policies-cpu-s33/knife_edge.py
"""
import sys
sys.path.insert(0, "benchmarks")
from goodput_positions import OFF_DRAFTS, load
from specsim import policies as P
from specsim.simulate import replay_positions
for d, draft in (("feature-head", 0.028), ("ngram", 0.0)):
    names, tables, _ = load(f"data/goodput-positions-s24/{d}_160.npz")
    tb = tables[names.index("extraction/eval")]
    for t2 in (1.08, 1.09, 1.10, 1.11, 1.12, 1.13, 1.15):
        costs = P.Costs(t_draft=draft, t_target=(1, t2, 1.223, 1.337, 1.396))
        best = max(replay_positions(P.FixedK(k=k), tb, costs, new_tokens=40).speedup for k in range(1, 5))
        g = replay_positions(P.Goodput(k_max=4, costs=costs), tb, costs, new_tokens=40, off_draft=OFF_DRAFTS[d])
        print(d, t2, round(best, 3), round(g.speedup / best, 3), flush=True)
