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
# # 11 · Will speculation pay on my GPU?
#
# **Question:** for this target, this drafter, this GPU or TPU, this batch and
# tensor-parallel degree, what speedup does speculative decoding give, with which K, and
# from which batch on does it stop paying?
#
# The answer comes from `specsim.iteration_cost`: one iteration's time from datasheet
# ceilings (`specsim/data/hardware.csv`), model shapes (`specsim.presets`) and engine
# overheads fitted on published results (`specsim.published`). First, how well that model
# predicts the published results it was not fitted on; then a what-if for your setup.

# %%
# %matplotlib inline
from IPython.display import display

from specsim.plots.notebook import setup

QUICK = setup()   # display options; True in the headless test run

from specsim import published
from specsim.plots.published import observed_vs_predicted, speedup_vs_k_and_batch
from specsim.presets import shape_names
from specsim.roofline import hardware_names
from specsim.what_if import predict

# %% [markdown]
# ## Published rows against their predictions
#
# Every row of `specsim/data/papers/published/results.csv` predicted with engine overheads fitted on
# the *other* sources (leave-one-source-out), beside the cost model at its priors and
# today's closed form (c the parameter ratio, a verify pass one decode step).

# %%
rows = published.load_published()
pred, folds = published.leave_one_source_out(rows)
side = pred.merge(rows[["row_id", "hardware", "target", "drafter_kind", "verify_tokens",
                        "batch", "n_devices"]], on="row_id")
display(side[["row_id", "source_id", "hardware", "target", "drafter_kind", "verify_tokens",
              "batch", "n_devices", "tau", "observed", "predicted", "prior_only",
              "closed_form", "error"]].round(3))

# %%
display(published.summary(pred).round(3))
observed_vs_predicted(pred)

# %% [markdown]
# ## A what-if (static view)
#
# Change the setting and re-run. `alpha` is the per-token acceptance of a chain; pass
# `tau=` (mean tokens an iteration) instead, or neither to take the median α of that
# drafter kind's published chain rows (for a tree, `tree_tokens=`: the median τ of its
# tree rows).

# %%
setting = dict(target="llama-3.1-8b", hardware="h100-sxm", drafter="eagle", engine="vllm",
               batch=1, tp=1, alpha=0.7)
p = predict(setting.pop("target"), setting.pop("hardware"), **setting)
print(p.summary())
display({name: f"{1e3 * s:.3f} ms" for name, s in p.terms.items()})
overheads = published.fitted_overheads()["vllm"]
speedup_vs_k_and_batch("llama-3.1-8b", "h100-sxm", overheads, alpha=0.7,
                       batches=(1, 8, 64) if QUICK else (1, 2, 4, 8, 16, 32, 64, 128, 256))

# %% [markdown]
# ## Widgets
#
# With `ipywidgets` installed (the `notebooks` extra) the controls below rerun the same
# what-if.

# %%
try:
    import ipywidgets as widgets
except ImportError:          # static fallback: the cell above
    widgets = None
    print("ipywidgets is not installed; use the static cell above.")


def what_if(hardware="h100-sxm", target="llama-3.1-8b", drafter="eagle", draft="llama-3.2-1b",
            engine="vllm", batch=1, tp=1, alpha=0.7):
    try:
        pr = predict(target, hardware, drafter=drafter, engine=engine, batch=batch, tp=tp,
                     alpha=alpha, draft=draft if drafter == "draft_model" else None)
    except ValueError as err:
        print(err)
        return
    print(pr.summary())
    display({name: f"{1e3 * s:.3f} ms" for name, s in pr.terms.items()})


if widgets is not None and not QUICK:
    widgets.interact(
        what_if,
        hardware=widgets.Dropdown(options=list(hardware_names()), value="h100-sxm"),
        target=widgets.Dropdown(options=list(shape_names()), value="llama-3.1-8b"),
        drafter=widgets.Dropdown(options=["eagle", "draft_model", "medusa", "hydra", "ngram"],
                                 value="eagle"),
        draft=widgets.Dropdown(options=list(shape_names()), value="llama-3.2-1b"),
        engine=widgets.Dropdown(options=["vllm", "sglang", "trtllm", "hf-eager"], value="vllm"),
        batch=widgets.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64, 128, 256], value=1),
        tp=widgets.SelectionSlider(options=[1, 2, 4, 8], value=1),
        alpha=widgets.FloatSlider(value=0.7, min=0.05, max=0.95, step=0.05, description="α"),
    )
elif widgets is not None:
    what_if()

# %% [markdown]
# ## What to read from it
#
# - A drafter pays where the iteration's extra terms (draft calls, engine overhead, the
#   wider verify) cost less than the tokens it saves; the `bound` names the largest.
# - The break-even batch falls with the target's arithmetic per byte: a mixture of experts
#   reads more experts for a wider verify, and a large batch turns the verify compute-bound.
# - The interval is where published results have landed around this model (see
#   docs/studies/published-speedups.md for the misses and the goals not met).
