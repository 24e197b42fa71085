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
# # 05 · Width versus depth: speculation against batch size and context length
#
# **Question:** speculation spends *depth* (K drafted tokens verified in one pass) to save
# sequential steps; serving spends *width* (batch rows) for throughput. With the roofline of
# a target/draft pair on a hardware row, how do the speedup and the best K fall as the batch
# grows, beyond which batch does no K pay any more, and what does the context length do?
#
# Each forward pass takes t(n) = t₀ + max(FLOPs/peak, bytes/bandwidth) for n new tokens per
# row (`specsim.roofline`); the speedup is E(α, K)·t_target(1) / (K·t_draft(1) + t_target(K+1))
# (`analytic.speedup_from_costs`), evaluated by `specsim.batching`.

# %%
# %matplotlib inline
import numpy as np
import pandas as pd
from IPython.display import display

from specsim.plots.notebook import setup

QUICK = setup()   # display options; True in the headless test run (smaller grids)

from specsim import batching, roofline
from specsim.models import config
from specsim.plots.batching import speedup_vs_k, speedup_vs_load

# %% [markdown]
# ## The pair and the hardware row
#
# The shapes of Llama-3.1-8B (target; its own output head, 8.03 B parameters) and
# Llama-3.2-1B (draft; tied head, 1.24 B), the presets `config.LLAMA31_8B` and
# `config.LLAMA32_1B`, in bf16, on the `h100-sxm` row of `specsim/data/hardware.csv` (change
# `HARDWARE` to any row below, or use the widgets at the end). `OVERHEAD` is the fixed
# cost t₀ of a pass; notebook 06 fits it for this machine.

# %%
display(roofline.hardware_table()[["name", "bandwidth_GBps", "bf16_tflops", "ridge_bf16"]])
HARDWARE, DTYPE, OVERHEAD = "h100-sxm", "bfloat16", 0.0
target = config.LLAMA31_8B.replace(dtype=DTYPE)
draft = config.LLAMA32_1B.replace(dtype=DTYPE)
time_model = batching.hardware_time_model(HARDWARE, dtype=DTYPE, overhead=OVERHEAD)
print(f"target {target.n_params() / 1e9:.2f}B, draft {draft.n_params() / 1e9:.2f}B parameters; {time_model.description}")

# %% [markdown]
# ## Against batch size
#
# A short context (128 cache slots) so that the weights, not the KV cache, dominate the
# bytes: the verify pass over K + 1 tokens per row stays nearly free until the batch pushes
# it past the ridge point, then costs up to K + 1 steps.

# %%
alphas = [0.6, 0.8, 0.9]
ks = range(1, 9)
batches = 2 ** np.arange(0, 13, 2 if QUICK else 1)
grid = batching.speedup_grid(target, draft, time_model, alphas, ks, batches, [128])
best = batching.best_k(grid)
display(best.pivot_table(index="batch", columns="alpha", values=["speedup_opt", "k_opt"]))
speedup_vs_load(grid, best, "batch", title=f"{target.name} / {draft.name} on {HARDWARE}, context 128")

# %% [markdown]
# ### The batch size beyond which speculation stops paying
#
# `last_paying` and `first_losing` are grid values; `crossing` interpolates where the
# best-K speedup equals 1.

# %%
batching.break_even(best, "batch")

# %% [markdown]
# ## Against context length
#
# The implementation reads every cache slot in every pass, so the KV cache adds
# batch × context × (bytes per slot) to each pass — the same for one token as for K + 1.
# Long contexts keep the verify pass memory-bound, so speculation keeps paying at batch
# sizes where it would not with a short context; but the draft's own cache reads raise c.

# %%
contexts = 2 ** np.arange(7, 17, 3 if QUICK else 1)
grid_ctx = batching.speedup_grid(target, draft, time_model, alphas, ks, [1, 64, 512], contexts)
best_ctx = batching.best_k(grid_ctx)
display(best_ctx.pivot_table(index="context", columns=["batch", "alpha"], values="speedup_opt"))
speedup_vs_load(grid_ctx[grid_ctx["batch"] == 64], best_ctx[best_ctx["batch"] == 64], "context",
                title=f"batch 64: speedup against context length")

# %%
batching.break_even(best_ctx, "batch")

# %% [markdown]
# ## Explore: batch, context and hardware row
#
# One point of the grids above at a time: the predicted speedup against K at the chosen
# batch, context and hardware row, and the best K for each α. The static call below is
# what a printed copy shows; with `ipywidgets` (the `notebooks` extra) the controls redraw
# it.

# %%
def show_point(hardware=HARDWARE, batch=64, context=1024):
    tm = batching.hardware_time_model(hardware, dtype=DTYPE, overhead=OVERHEAD)
    g = batching.speedup_grid(target, draft, tm, alphas, ks, [batch], [context])
    display(batching.best_k(g)[["alpha", "k_opt", "speedup_opt"]])
    display(speedup_vs_k(g, title=f"{hardware}, batch {batch}, context {context}"))


show_point()

# %%
try:
    import ipywidgets as widgets
except ImportError:          # static fallback: call show_point(...) above
    widgets = None
    print("ipywidgets is not installed; call show_point(hardware, batch, context) instead.")

if widgets is not None:
    widgets.interact(
        show_point,
        hardware=widgets.Dropdown(options=list(roofline.hardware_table()["name"]),
                                  value=HARDWARE, description="hardware"),
        batch=widgets.SelectionSlider(options=[2 ** j for j in range(13)], value=64,
                                      description="batch"),
        context=widgets.SelectionSlider(options=[2 ** j for j in range(7, 18)], value=1024,
                                        description="context"))
