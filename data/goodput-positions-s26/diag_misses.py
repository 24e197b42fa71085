import sys, numpy as np
sys.path.insert(0, "benchmarks")
import goodput_positions as gp
from specsim import policies as P
from specsim.simulate import replay_positions
for d in ("ngram", "feature-head"):
    names, tables, drafter = gp.load(f"data/goodput-positions-s24/{d}_160.npz")
    costs = P.Costs(t_draft=gp.DRAFT_RATIOS[drafter], t_target=(1, 1.01, 1.06, 1.16, 1.17))
    n = 80
    pol = P.Goodput(k_max=4, costs=costs)
    rows = []
    for name, tb in zip(names, tables):
        fk = [replay_positions(P.FixedK(k=k), tb, costs, new_tokens=n).speedup for k in range(1, 5)]
        r = replay_positions(pol, tb, costs, new_tokens=n, off_draft=gp.OFF_DRAFTS[drafter])
        rel = r.speedup / max(fk)
        if rel < 0.97:
            ks = r.k_plan[:, 0]
            rows.append((name, rel, int(np.argmax(fk)) + 1, r.speedup, max(fk), ks[:12].tolist(), float((ks == 0).mean()), float(ks.mean())))
    print(d, len(rows), "misses; best K histogram:", np.bincount([r[2] for r in rows], minlength=5)[1:])
    print("  mean share of K=0 plans among misses:", np.mean([r[6] for r in rows]).round(3), " mean planned K:", np.mean([r[7] for r in rows]).round(2))
    for r in rows[:8]:
        print("  ", r[0], f"rel {r[1]:.3f} bestK {r[2]} goodput {r[3]:.2f} best {r[4]:.2f} first plans {r[5]} off-share {r[6]:.2f}")
