"""Goodput's decisions in the engine, evaluated with fixed pass-time ratios: what judging the
free n-gram draft slot by slot while off (session 21) changes against judging its slot 0
only (the commit before). Greedy decoding, so a run's decisions are deterministic given the
costs; no timing: each run's passes by width (`meta["target_passes_by_width"]`) are charged
the ratios below, so the numbers carry no timing noise. Run it once per commit (the
package on PYTHONPATH) and compare:

    PYTHONPATH=. python data/goodput-chain-s21/ab_study.py 40
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from sim_goodput_explore import shipped_prompts                         # noqa: E402

from specsim import decode, models, workloads                             # noqa: E402
from specsim import policies as P                                         # noqa: E402
from specsim.drafters import NGramDrafter                                 # noqa: E402

# t(n)/t(1), n = 1..5, measured in session 20 (data/auto-widths-cpu/): n-gram at batch 1
# on code, and at batch 4 on extraction
RATIOS = {1: (1.0, 1.65, 1.76, 1.94, 1.94), 4: (1.0, 1.23, 1.42, 1.64, 1.75)}
new = int(sys.argv[1]) if len(sys.argv) > 1 else 40
t = models.load("smollm2-135m").with_layer_loop("scan")
d = NGramDrafter(t.cfg.vocab_size, n=3)
enc = {k: t.tokenizer.encode(workloads.prompt_text(k, t.tokenizer)) for k in workloads.KINDS}
cells = [(k, "eval", [enc[k]]) for k in workloads.KINDS]
for idx in (0, 1, 2):
    cells += [(k, f"shipped{idx}", [p]) for k, p in shipped_prompts(t, idx).items()]
cells.append(("mixed", "eval", [enc[k] for k in workloads.KINDS]))
kw = dict(eos_token_id=None, cache_len=512)
rows = []
for kind, src, prompts in cells:
    r = np.asarray(RATIOS[len(prompts)])
    ar = decode.generate_autoregressive(t, prompts, new, **kw)
    t_ar = ar.n_iterations * r[0]
    fixed = decode.generate_speculative(t, d, prompts, new, k=4, **kw)
    t_fixed = fixed.n_iterations * r[4]
    g = decode.generate_speculative(t, d, prompts, new, policy=P.Goodput(
        k_max=4, costs=P.Costs(t_draft=0.0, t_target=tuple(r))), **kw)
    assert g.tokens == ar.tokens == fixed.tokens
    t_g = float(np.dot(g.meta["target_passes_by_width"], r))
    k0 = float(np.mean(g.stats.k_used[g.stats.active] == 0))
    rows.append((kind, src, len(prompts), t_ar / t_fixed, t_ar / t_g, t_fixed / t_g, k0))
    print(f"{kind:10s} {src:9s} B{len(prompts)}  fixed K4 {t_ar / t_fixed:.3f}  goodput "
          f"{t_ar / t_g:.3f}  goodput/fixed {t_fixed / t_g:.3f}  K=0 {k0:.2f}", flush=True)
a = np.array([x[3:] for x in rows])
print(f"geometric means over {len(rows)} cells: fixed K4 {np.exp(np.log(a[:, 0]).mean()):.3f}  "
      f"goodput {np.exp(np.log(a[:, 1]).mean()):.3f}  goodput/fixed "
      f"{np.exp(np.log(a[:, 2]).mean()):.3f}; cells below 0.98x plain: "
      f"{int((a[:, 1] < 0.98).sum())}, below 0.97x fixed K4: {int((a[:, 2] < 0.97).sum())}")
