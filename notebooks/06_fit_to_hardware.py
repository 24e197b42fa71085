# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
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
# context), written by `specsim bench` (with a JSON sidecar of versions, devices, dtype,
# seed and commit). `specsim.fit.fit_sweep` fits
# t = t₀ + max(FLOPs/P, bytes/W) to it, FLOPs and bytes from `specsim.roofline.forward_cost`.

# %%
# %matplotlib inline
import warnings

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
# ## Choose a sweep
#
# `bench.choose_sweep()` chooses on purpose: your own newest sweep under `results/` first
# (`specsim bench --model smollm2-135m --out results/measurements` records one), else the
# reference sweep shipped with specsim (`specsim/data/measurements/cpu-smollm2-135m.csv`);
# set `SWEEP_NAME` to a file stem or path to fit another. The ceilings measured with the
# sweep (large matmul, large copy) bound the fit through `fit.ceiling_bounds`: no fitted
# bandwidth above the measured copy ceiling.

# %%
SWEEP_NAME = None   # None: choose on purpose; or a file stem / path, e.g. "cpu-smollm2-135m"
FORM = None         # the fit's form: None picks the one with the lower held-out MAPE (as
                    # the demo does); "max" = t0 + max(FLOPs/P, bytes/W); "smooth" (p-norm)

print("sweeps in the order chosen:", [f"{src}: {p.name}" for src, p in bench.sweep_candidates()])
try:
    chosen = bench.choose_sweep(name=SWEEP_NAME)
except ValueError as err:       # no sweep anywhere: measure a small one now, and say so
    print(err)
    quick_model = "tiny-llama" if QUICK else "smollm2-360m"
    print(f"measuring {quick_model} (random weights) now")
    chosen = None
    df, name = bench.sweep_forward(models.load(quick_model), quick=True, repeats=3, warmup=1,
                                   progress=False), quick_model
    ceilings, bounds = None, {}
if chosen is not None:
    print("using", chosen.describe())
    df, name, ceilings = chosen.df, chosen.model, chosen.ceilings
    bounds = fitting.ceiling_bounds(ceilings) if ceilings is not None else {}
    if bounds:
        print(f"measured ceilings: matmul {bounds['max_peak_flops'] / 1e9:.0f} GFLOP/s, "
              f"copy {bounds['max_bandwidth'] / 1e9:.1f} GB/s (the fit's upper bounds)")
    else:
        print("no ceilings were measured with this sweep: the fit is unbounded")
    display(pd.DataFrame(df.attrs.get("runs", [])).T)
cfg = models.get_preset(name) if name in models.PRESETS else None
df[["n_tokens", "batch", "context", "time_s", "flops", "bytes"]].head(10)

# %% [markdown]
# ## Fit and plot
#
# The summary gives each parameter with its standard error (or says it could not be
# identified), R² and the MAPE on held-out points (a quarter of the sweep, not used by the
# fit); a fit below `fit.MIN_R2` warns that it does not describe the measurements.

# %%
with warnings.catch_warnings():     # the chosen fit's summary repeats any warning of its own
    warnings.simplefilter("ignore", fitting.PoorFitWarning)
    fits = {kind: fitting.fit_sweep(df, kind=kind, **bounds)
            for kind in ([FORM] if FORM else fitting.KINDS)}
rf = min(fits.values(), key=lambda f: f.mape_heldout)
print("held-out MAPE by form:", {k: round(f.mape_heldout, 1) for k, f in fits.items()},
      "-> using", rf.kind)
print(rf.summary())
roofline_plots.roofline_plot(df, rf, ceilings=ceilings,
                             title=f"{name}: measured passes, fitted and measured ceilings")

# %%
roofline_plots.latency_vs_tokens(df, rf, cfg)

# %% [markdown]
# ### Explore: another sweep, another form
#
# With `ipywidgets` (the `notebooks` extra): pick any sweep — yours, the reference, or a
# historical run — and the fit's form; the fit, its summary and the roofline redraw. The
# rest of the notebook keeps the sweep chosen above.

# %%
try:
    import ipywidgets as widgets
except ImportError:          # static fallback: set SWEEP_NAME and FORM above
    widgets = None
    print("ipywidgets is not installed; set SWEEP_NAME and FORM above instead.")


def show_fit(sweep, form):
    ch = bench.choose_sweep(name=sweep)
    b = fitting.ceiling_bounds(ch.ceilings) if ch.ceilings is not None else {}
    f = fitting.fit_sweep(ch.df, kind=form, **b)
    print(ch.describe())
    print(f.summary())
    display(roofline_plots.roofline_plot(ch.df, f, ceilings=ch.ceilings))


sweep_options = [(f"{src}: {p.name}", str(p)) for src, p in bench.sweep_candidates()]
if widgets is not None and sweep_options:
    widgets.interact(show_fit,
                     sweep=widgets.Dropdown(options=sweep_options, description="sweep"),
                     form=widgets.ToggleButtons(options=list(fitting.KINDS), value=rf.kind,
                                                description="form"))

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
