# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Fit to hardware
#
# **Question:** what roofline does *this* machine follow — fixed cost t₀, effective compute
# ceiling P, effective bandwidth W — and what speedups does that fit predict for a chosen α?
#
# A sweep is a table of measured forward-pass latencies against (new tokens per pass, batch,
# context), written by `specsim bench` to `data/measurements/<name>.csv` (with a JSON sidecar
# of versions, devices, dtype, seed and commit). `specsim.fit.fit_sweep` fits
# t = t₀ + max(FLOPs/P, bytes/W) to it, FLOPs and bytes from `specsim.roofline.forward_cost`.

# %%
# %matplotlib inline
import numpy as np
import pandas as pd
from IPython.display import display

from specsim.plots.notebook import setup

QUICK = setup()   # display options; True in the headless test run (smaller grids)

from specsim import batching, bench, models
from specsim import fit as fitting
from specsim.plots import roofline as roofline_plots
from specsim.plots.batching import speedup_vs_k, speedup_vs_load

# %% [markdown]
# ## Load a sweep
#
# Every CSV in `data/measurements/` with the sweep columns is listed; the first is used
# (set `SWEEP` to pick another). Without one, the notebook measures a small sweep now — on a
# tiny random model in quick mode — and says so; `specsim bench --model smollm2-135m`
# records a real one.

# %%
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
df[["n_tokens", "batch", "context", "time_s", "flops", "bytes"]].head(10)

# %% [markdown]
# ## Fit and plot
#
# The summary gives each parameter with its standard error, R² and the MAPE on held-out
# points (a quarter of the sweep, not used by the fit).

# %%
rf = fitting.fit_sweep(df, kind="max")
print(rf.summary())
roofline_plots.roofline_plot(df, rf, title=f"{name}: measured passes and the fitted roofline")

# %%
roofline_plots.latency_vs_tokens(df, rf, cfg)

# %% [markdown]
# ## Predicted speedup for a chosen α
#
# With the fitted t(n), the speedup of K drafts is E(α, K)·t(1) / (K·t_draft + t(K+1)).
# Two drafters for the swept model as target: a layer-skip self-draft (a third of the
# layers, so its cost comes from the same fit) and a free drafter such as n-gram prompt
# lookup (t_draft = 0).

# %%
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
speedup_vs_k(grid, style="drafter", title=f"{target_cfg.name} on this machine (fitted), batch 1, context 256")

# %% [markdown]
# And against batch size on this machine (compare notebook 05 on datasheet rows):

# %%
batches = 2 ** np.arange(0, 9, 2 if QUICK else 1)
grid_b = batching.speedup_grid(target_cfg, skip_cfg, time_model, ALPHAS, range(1, 9), batches, [256])
best_b = batching.best_k(grid_b)
display(batching.break_even(best_b, "batch"))
speedup_vs_load(grid_b, best_b, "batch", title=f"{target_cfg.name} / layer-skip draft, fitted roofline")
