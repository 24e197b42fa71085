"""A candidate not built (session 24): Goodput drafts only where drafting pays at the
lower confidence bound (each rate less z standard errors), and picks K on the estimate.
Replayed exactly on the tables here against the defaults (p_min 0.2); output: caution.txt.

    for d in feature-head ngram; do for r in 1,1.65,1.76,1.94,1.94 1,1.23,1.42,1.64,1.75 \
        1,1.418,1.761,1.688,1.904; do for n in 80 160; do PYTHONPATH=. python \
        data/goodput-positions-s24/diag_caution.py $d $n $r; done; done; done
"""
import dataclasses
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))
from goodput_positions import load  # noqa: E402
from specsim import policies as P  # noqa: E402
from specsim.simulate import replay_positions  # noqa: E402

@dataclasses.dataclass(frozen=True, kw_only=True)
class Caution(P.Goodput):
    z: float = 1.0
    def plan(self, state, batch, xp=np, active=None):
        a = self.alpha_estimate(state, xp)
        lo = xp.maximum(a - self.z * self._standard_error(a, state, xp), 0.0)
        t = self.costs.iteration_time(xp.arange(self.k_max + 1), xp)
        g = xp.min(P._expected_tokens(a, xp), axis=0) / t
        g_lo = xp.min(P._expected_tokens(lo, xp), axis=0) / t
        k = int(xp.argmax(g))
        if k > 0 and g_lo[1:].max() <= g_lo[0]:
            k = 0
        return xp.full((batch,), k, xp.int32)

which, N = sys.argv[1], int(sys.argv[2])
r = tuple(map(float, sys.argv[3].split(","))) if len(sys.argv) > 3 else (1, 1.65, 1.76, 1.94, 1.94)
names, tables, drafter = load(HERE / f"{which}_160.npz")
c = 0.035 if drafter == "feature-head" else 0.0
off = "paid" if drafter == "feature-head" else "free"
C = P.Costs(t_draft=c, t_target=r)
best = np.asarray([max(replay_positions(P.FixedK(k=k), tb, C, new_tokens=N).speedup for k in range(1, 5)) for tb in tables])
for name, pol in [("default", P.Goodput(k_max=4, costs=C)), ("z0.5", Caution(k_max=4, costs=C, z=0.5)), ("z1", Caution(k_max=4, costs=C, z=1.0)), ("z1.5", Caution(k_max=4, costs=C, z=1.5))]:
    s = np.asarray([replay_positions(pol, tb, C, new_tokens=N, off_draft=off).speedup for tb in tables])
    rel = s / best
    gm = np.exp(np.log([s, rel]).mean(1))
    print(f"{drafter} N={N} r={r[1]} {name}: geo {gm[0]:.3f}/{gm[1]:.3f} g1 {int((s<.98).sum())} ({s.min():.3f}) g2 {int((rel<.97).sum())} ({rel.min():.3f})", flush=True)
