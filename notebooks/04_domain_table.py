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
# # 04 · The domain table examined
#
# **Question:** a widely circulated practitioner table gives, for K = 5, ranges of α and of
# speedup by kind of work (code and JSON; summarisation; conversation; creative writing).
# What draft/target cost ratio c does each row imply, can one c explain the whole table,
# and does its companion claim — *below α ≈ 35–40 % speculation is slower than plain
# decoding* — follow from Thm 3.8 at that c?

# %%
# %matplotlib inline
import numpy as np
import pandas as pd
from IPython.display import display

from specsim.plots.notebook import setup

QUICK = setup()   # display options; True in the headless test run (smaller grids)
# Figures go to results/figures/; True rewrites the committed ones under papers/.
REGENERATE_FIGURES = False

from specsim import analytic, papers
from specsim.plots import papers as paper_plots

# %% [markdown]
# ## The c each end of each row implies
#
# Pairing the low α with the low speedup and the high α with the high one,
# c = (E(α, 5) / S − 1) / 5 (`analytic.implied_cost_ratio`). `c_min`…`c_max` is the range of
# c that keeps that end within ±0.05 of its printed (one-decimal) speedup.

# %%
ends = papers.domain_table()
ends

# %% [markdown]
# ## One c for the whole table?
#
# Least squares over all eight ends; then whether every end comes within ±0.05, whether
# the per-end c ranges share a common value, and — reading each row only as a box of α
# range × speedup range — which c pass through every box (`box_c_min`…`box_c_max`).

# %%
fit = papers.domain_fit_c()
print(f"least-squares c = {fit['c']:.4f} ± {fit['c_stderr']:.4f}; RMSE {fit['rmse']:.3f}; "
      f"largest |residual| {fit['max_abs_residual']:.3f}")
print("one c explains every end within ±0.05:", fit["one_c_explains"])
print("per-end c ranges intersect:", fit["c_common_exists"], fit["c_common_interval"])
lo, hi = fit["box_c_interval"]
print(f"read loosely as boxes (α in its range, speedup in its range): every c from {lo:.3f} to {hi:.3f} "
      "passes through all four rows")
display(fit["table"])
fit["rows"]

# %% [markdown]
# ## The break-even claim
#
# The α at which K = 5 breaks even at the fitted c and at the extremes of the implied c,
# the α at which the best K (K = 1) breaks even, and the c the claim would need.

# %%
be = papers.domain_break_even()
display(be)
print("c needed for break-even at α = 0.35 / 0.40 with K = 5:",
      tuple(round(x, 4) for x in be.attrs["c_needed_for_claim"]))

# %%
fig = paper_plots.domain_table_figure(fit, be, n=61 if QUICK else 199)
papers.save_figure(fig, "domain-table", "domain_table.png", regenerate=REGENERATE_FIGURES)
fig
