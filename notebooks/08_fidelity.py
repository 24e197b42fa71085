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
# # 08 · Fidelity: the measured speedup surface and where predictions miss
#
# **Question:** over the space the theory describes (acceptance α, draft length K, draft
# cost c, batch), how close does the closed-form speedup, fed with pass times measured
# under the run's own conditions, come to the speedup the engine measures, and which
# part of the model (acceptance, cost, loop overhead) accounts for each miss?
#
# The instrument drafter (`specsim.drafters.instrument_drafter`) sets α and the draft
# cost instead of hoping for them: it proposes the target's own greedy continuation and
# spoils each position with probability 1 − α, so the real target does the real verify
# work. `specsim demo` (parts `instrument`, `fidelity`, `batch`) times every run, its
# autoregressive baseline and the pass programs of `specsim.pass_costs` in the same
# interleaved rounds and writes `results/demo/runs.csv` and `fidelity.json`. This
# notebook reads that folder when it holds in-run predictions; otherwise it runs the
# instrument part now (in the headless test run, `SPECSIM_QUICK=1`, on a tiny random
# model, whose numbers only exercise the pipeline).

# %%
# %matplotlib inline
import json
import tempfile
from pathlib import Path

import numpy as np
from IPython.display import display

import specsim
from specsim import analytic, experiment, report
from specsim import schema as S
from specsim.plots import experiment as run_plots
from specsim.plots.notebook import setup

QUICK = setup()   # display options; True in the headless test run (smaller grids)
ROOT = Path(specsim.__file__).resolve().parents[1]
DEMO = ROOT / "results" / "demo"

# %%
runs = None
if not QUICK and (DEMO / "runs.csv").exists():
    runs = S.read_runs(DEMO / "runs.csv")
    if S.PREDICTED_SPEEDUP not in runs:
        runs = None          # an older demo without the in-run predictions
if runs is not None:
    print(f"read {DEMO}: {len(S.speculative(runs))} speculative runs")
else:
    settings = (experiment.DemoSettings.demo(
        quick=True, target="tiny-llama", parts=("instrument",), instrument_alphas=(0.5, 0.9),
        instrument_ks=(2, 4), instrument_costs=(0.0, 0.5), max_new_tokens=12, repeats=1,
        out_dir=tempfile.mkdtemp(prefix="specsim-08-"))
        if QUICK else experiment.DemoSettings.demo(quick=True, parts=("instrument",)))
    print(f"no in-run demo output: running the instrument part now ({settings.target}) ...")
    runs = experiment.run_demo(settings, progress=False).runs

# %% [markdown]
# ## How good is the prediction?
#
# The headline score: mean and worst absolute percentage error of `predicted_speedup`
# against `measured_speedup`, overall, per kind of drafter and per batch.

# %%
print(json.dumps(report.fidelity_summary(runs), indent=1))
run_plots.predicted_vs_measured_band(runs)

# %% [markdown]
# ## The measured surface over (α, K) beside the closed form
#
# Points: measured speedups of the instrument at batch 1; crosses: the in-run
# prediction; lines: Leviathan et al.'s closed form S = (1 − α^(K+1)) / ((1 − α)(Kc + 1))
# with the measured cost ratio c. Where the lines miss the points at c ≈ 0 the verify
# pass is not as cheap as one target step (t_verify(K+1) > t_target(1)); the in-run
# prediction knows that.

# %%
run_plots.speedup_surface(runs)

# %%
inst = S.speculative(runs)
inst = inst[(inst[S.DRAFTER_KIND] == "instrument") & (inst[S.BATCH] == 1)]
surface = inst.pivot_table(index=[S.DRAFT_LAYERS, S.ALPHA_SET], columns=S.K,
                           values=S.MEASURED_SPEEDUP)
display(surface.round(2))
verify_ratio = (inst[S.T_VERIFY] / inst[S.T_TARGET_1]).groupby(inst[S.K]).median()
print("t_verify(K+1) / t_target(1) by K:", verify_ratio.round(2).to_dict())

# %% [markdown]
# ## The error decomposition
#
# The in-run prediction takes the acceptance the run had (E_eff = n / I), so
# predicted / measured = (t_target_1 / t1_run) · (t_iter_run / t_iter): the cost model and
# the residual loop overhead. In log-percent (100 · ln ratio) the two terms add up to the
# total, so the largest source of error is the largest term. The acceptance model
# (E_model against E_eff) is the next section.

# %%
display(report.decomposition_summary(runs).round(2))
dec = report.decomposition_table(runs)
terms = dec[list(S.DECOMPOSITION)].sum(axis=1)
print("largest |total - sum of terms| over the runs:",
      float(np.nanmax(np.abs(terms - dec[S.ERR_TOTAL]))))
display(dec.round(3).head(12))

# %% [markdown]
# ## Acceptance model: i.i.d. vs per-position vs the run's own tokens per iteration
#
# For the instrument the set α is exact, so what remains is the finite run (the last
# iteration overshoots n, and the slowest batch row ends the batched loop), which
# `E_model` models (`finite_run.expected_iterations`).

# %%
acc = S.speculative(runs)[[S.DRAFTER, S.K, S.BATCH, S.ALPHA_SET, S.ALPHA, S.E_MODEL,
                           S.E_EFFECTIVE, S.ERR_ACCEPTANCE, S.ERR_ACCEPT_IID,
                           S.ERR_ACCEPT_POSITIONAL, S.ERR_ACCEPT_TPI]]
display(acc.round(3).head(12))
print("closed-form E at the set α, K = 4:",
      {a: round(float(analytic.expected_tokens(a, 4)), 3)
       for a in sorted(inst[S.ALPHA_SET].dropna().unique())})
