"""Goodput's cells of two policies grids side by side: speedup against plain decoding
and against the best fixed K (medians of the rounds, their range), the replay's, and the
share of iterations with K = 0.

    python data/policies-cpu-s32/compare.py data/policies-cpu-s31/t40 data/policies-cpu-s32/t40
"""
import sys
import pandas as pd

old, new = (pd.read_csv(f"{d}/policies.csv") for d in sys.argv[1:3])
key = ["drafter", "kind", "batch"]


def goodput(df):
    return df[df["policy"] == "goodput"].set_index(key)


a, b = goodput(old), goodput(new)
print("| drafter | kind | batch | vs plain | vs best K | replay vs best K | K = 0 share |")
print("|---|---|---|---|---|---|---|")
for idx, r in b.iterrows():
    o = a.loc[idx] if idx in a.index else None
    f = lambda c: f"{o[c]:.2f} → " if o is not None else ""
    print(f"| {idx[0].split(':')[0]} | {idx[1]} | {idx[2]} | "
          f"{f('speedup_vs_autoregressive')}{r.speedup_vs_autoregressive:.2f} "
          f"({r.speedup_vs_autoregressive_low:.2f}–{r.speedup_vs_autoregressive_high:.2f}) | "
          f"{f('speedup_vs_best_fixed')}{r.speedup_vs_best_fixed:.2f} "
          f"({r.speedup_vs_best_fixed_low:.2f}–{r.speedup_vs_best_fixed_high:.2f}) | "
          f"{r.sim_speedup_vs_best_fixed:.2f} | {r.k0_fraction:.2f} |")
g1 = (b.speedup_vs_autoregressive >= 0.98).sum()
g2 = (b.speedup_vs_best_fixed >= 0.97).sum()
print(f"\ngoal 1 (>= 0.98x plain) by medians: {g1} of {len(b)}; "
      f"goal 2 (>= 0.97x best fixed K): {g2} of {len(b)}")
