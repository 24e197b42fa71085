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
# # 01 · Speedup explorer
#
# **Question:** for an acceptance rate α, a draft length K and a draft/target cost ratio c,
# how many tokens does one iteration yield, how much faster is decoding, which K is best,
# below which α does speculation lose, and how much extra arithmetic does it cost?
#
# All numbers come from `specsim.analytic` (Leviathan et al. 2023, Thm 3.8 and 3.11):
# E(α, K) = (1 − α^(K+1)) / (1 − α), S = E / (Kc + 1), ops = (Kĉ + K + 1) / E.

# %%
# %matplotlib inline
import numpy as np
import pandas as pd
from IPython.display import display

from specsim.plots.notebook import setup

QUICK = setup()   # display options; True in the headless test run (smaller grids)

from specsim import analytic
from specsim.plots.explore import explorer_figure, explorer_summary

# %% [markdown]
# ## One point, all quantities (static view)
#
# This cell is the fallback when widgets are unavailable (and what a printed copy shows).
# Change the three numbers and re-run it.

# %%
alpha, k, c = 0.7, 4, 0.05
display(pd.Series(explorer_summary(alpha, k, c)).to_frame("value"))
explorer_figure(alpha, k, c, n=61 if QUICK else 181)

# %% [markdown]
# ## Sliders
#
# With `ipywidgets` installed (the `notebooks` extra) the sliders below redraw the same
# summary and figure.

# %%
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
    )

# %% [markdown]
# ## The best K and what it costs, over α
#
# For one c: the optimal K, its speedup, the expected tokens per iteration and the
# arithmetic growth at that K.

# %%
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
})

# %% [markdown]
# ## Break-even α
#
# The α at which speculation exactly pays for itself, for each K and c
# (`analytic.break_even_alpha`). At K = 1 it equals c (Leviathan et al. Cor. 3.9); longer
# drafts need a higher α to break even.

# %%
ks = np.array([1, 2, 3, 4, 5, 8]) if not QUICK else np.array([1, 4, 8])
cs = np.array([0.01, 0.02, 0.05, 0.1, 0.2, 0.3])
pd.DataFrame(analytic.break_even_alpha(ks[:, None], cs[None, :]),
             index=pd.Index(ks, name="K"), columns=pd.Index(cs, name="c"))
