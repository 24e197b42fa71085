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
# # 09 · Distilling a draft
#
# **Question:** how do the acceptance rate α and the speedup of a draft distilled from the
# target (`specsim.train`: on-policy samples of the target, KL on its top-k, a head over
# the most frequent tokens) grow with training, and does the closed form
# S = E(α, K) / (K c + 1) (Leviathan et al. 2023, Thm 3.8) at the measured α and c
# predict the speedup measured?
#
# Each point is a separate training run of that many optimiser steps (the learning-rate
# schedule spans the run), evaluated at temperature 0 with K drafts per iteration. The
# draft's cost ratio c (draft step / target step) is measured from the loop's own
# programs (`specsim.pass_costs`); it does not change with training, so every gain comes
# from α. In quick mode (`SPECSIM_QUICK=1`, the headless test run) the target is a tiny
# random llama whose weights are scaled so its distributions are peaked and learnable;
# its timings only exercise the pipeline. Otherwise the target is SmolLM2-135M, and each
# run takes minutes (about 3–4 s per step on 2 quiet cores).

# %%
# %matplotlib inline
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from IPython.display import display

from specsim.plots.notebook import setup

QUICK = setup()   # display options; True in the headless test run (smaller grids)

import jax
from matplotlib.figure import Figure

from specsim import analytic, bench, drafters, models, pass_costs, train
from specsim.decode import generate_autoregressive, generate_speculative
from specsim.experiment.drafter_study import TARGET_SPEEDUP, alpha_for_speedup

K = 3 if QUICK else 4
STEPS = (0, 20, 80) if QUICK else (0, 40, 120, 300)

# %% [markdown]
# ## The target and the prompts

# %%
if QUICK:
    from specsim.models.config import TINY_LLAMA
    from specsim.models.transformer import init_params

    cfg = TINY_LLAMA.replace(name="tiny-target", n_layers=4, tie_embeddings=True,
                             eos_token_id=None)
    p = init_params(jax.random.PRNGKey(0), cfg)
    layers = {k: v * 3.0 if k in ("wo", "w_gate", "w_up", "w_down") else v
              for k, v in p["layers"].items()}
    target = models.Model(cfg, dict(p, layers=layers, embed=p["embed"] * 3.0))
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(3, cfg.vocab_size, rng.integers(4, 12))]
               for _ in range(96)]
    eval_prompts = [[int(t) for t in rng.integers(3, cfg.vocab_size, 8)] for _ in range(4)]
    base = dict(layers=1, head_vocab=97, minutes=None, batch=8, n_new=24, gen_batch=32,
                teacher_top_k=97, lr=1e-2, warmup=5)
    max_new = 24
else:
    from specsim import workloads

    target = models.load("smollm2-135m").with_layer_loop("scan")
    prompts = None                                   # the shipped prompt set (specsim/data/prompts.jsonl)
    eval_prompts = [workloads.prompt_text(kind, target.tokenizer) for kind in ("code", "json")]
    base = dict(layers=2, head_vocab=8192, minutes=None, n_prompts=96)
    max_new = 48
print(target.cfg.name, f"{target.cfg.n_params() / 1e6:.2f}M params")

# %% [markdown]
# ## Train drafts of increasing length
#
# Step 0 is the draft as initialised: the target's first layers, its embedding and final
# norm, the restricted head, before any training (an early exit).

# %%
from specsim.train import draft as draft_parts
from specsim.train.samples import encode_prompts, generate_samples, load_prompts

work = Path(tempfile.mkdtemp(prefix="specsim-09-"))
cfg0 = train.DistillConfig(**base)
encoded = encode_prompts(prompts if prompts is not None else load_prompts(), target.tokenizer)
encoded = encoded[:cfg0.n_prompts] if cfg0.n_prompts else encoded
samples = generate_samples(target, encoded, n_new=cfg0.n_new, batch=cfg0.gen_batch,
                           top_j=cfg0.teacher_top_k, seed=cfg0.seed)   # shared by every run
drafts = {}
for steps in [s for s in STEPS if s > 0]:
    out = work / f"d{steps}"
    train.checkpoint_dir(out).mkdir(parents=True)
    samples.save(train.checkpoint_dir(out) / "samples.npz")          # reused, not redrawn
    result = train.train_draft(target, out, train.DistillConfig(steps=steps, **base),
                               prompts=prompts, progress=False)
    drafts[steps] = (drafters.distilled_drafter(result.folder, target), result.losses)
    print(f"{steps:4d} steps: KL {result.losses[0]:.3f} -> {np.mean(result.losses[-5:]):.3f}")
if 0 in STEPS:       # the draft as initialised (same layers and head), no optimiser step
    ids = train.layer_ids(target.cfg.n_layers, cfg0.layers)
    trainable, frozen = draft_parts.init_draft(target, ids)
    model0 = models.Model(draft_parts.draft_config(target.cfg, len(ids)),
                          draft_parts.full_params(trainable, frozen))
    drafts[0] = (drafters.distilled_drafter(model0, target, head_ids=result.head_ids),
                 [np.nan])
drafts = dict(sorted(drafts.items()))

# %% [markdown]
# ## The draft's cost ratio c
#
# Timed from the loop's own per-iteration programs at the runs' cache size, in
# interleaved rounds: one autoregressive step of the target, one verify pass over K+1
# positions, one draft step.

# %%
d_any = drafts[STEPS[-1]][0]
cache_len = 128 if QUICK else 256
calls = pass_costs.pass_calls(target, d_any, batch=1, cache_len=cache_len, k=K)
samples, _ = bench.interleaved_rounds([calls.target_1, calls.verify, calls.draft],
                                      5 if QUICK else 9, np.random.default_rng(0))
costs = pass_costs.PassCosts.from_times(calls, *samples)
c = costs.cost_ratio
print(f"t_target(1) {costs.t_target_1.median * 1e3:.2f} ms, t_verify({K + 1}) "
      f"{costs.t_verify.median * 1e3:.2f} ms, t_draft {costs.draft_s * 1e3:.2f} ms -> c = {c:.3f}")

# %% [markdown]
# ## α and speedup against training steps
#
# α per draft slot at temperature 0 on the evaluation prompts; the measured speedup is the
# autoregressive time over the speculative time of the same prompts (compiled first,
# interleaved rounds); the prediction is the closed form at that α and the measured c,
# and, with the measured verify cost, S = E · t_T(1) / (K t_D + t_T(K+1)).

# %%
def run_pair(drafter):
    ar = lambda: generate_autoregressive(target, eval_prompts, max_new, eos_token_id=None,
                                         cache_len=cache_len)
    sp = lambda: generate_speculative(target, drafter, eval_prompts, max_new, K,
                                      eos_token_id=None, cache_len=cache_len)
    ar(), sp()                                           # compile
    (t_ar, t_sp), (_, res) = bench.interleaved_rounds([ar, sp], 3, np.random.default_rng(1))
    return res, float(np.median(t_ar) / np.median(t_sp))


rows = []
for steps, (drafter, losses) in drafts.items():
    res, measured = run_pair(drafter)
    alpha = res.stats.alpha_per_slot
    e = float(analytic.expected_tokens(alpha, K))
    rows.append({"steps": steps, "final KL": float(np.mean(losses[-5:])), "alpha_per_slot": alpha,
                 "measured speedup": measured,
                 "closed form S(α, K, c)": float(analytic.speedup(alpha, K, c)),
                 "with verify cost": float(pass_costs.predict_speedup(
                     e, K, costs.t_target_1.median, costs.t_verify.median, costs.draft_s)),
                 "best K (closed form)": int(analytic.optimal_k(alpha, c)[0]),
                 "best S (closed form)": float(analytic.optimal_k(alpha, c)[1])})
table = pd.DataFrame(rows)
display(table)
print(f"at c = {c:.3f} the closed form needs α >= {alpha_for_speedup(TARGET_SPEEDUP, c):.3f} for "
      f"{TARGET_SPEEDUP:g}x (best K <= 16)")

# %%
fig = Figure(figsize=(9, 3.6), layout="constrained")
ax1, ax2 = fig.subplots(1, 2)
ax1.plot(table["steps"], table["alpha_per_slot"], "o-")
ax1.axhline(alpha_for_speedup(TARGET_SPEEDUP, c), color="grey", ls="--", lw=1,
            label=f"α for {TARGET_SPEEDUP:g}x at c = {c:.2f}")
ax1.set(xlabel="training steps", ylabel="α per slot (T = 0)", ylim=(0, 1.02))
ax1.legend(fontsize=8)
ax2.plot(table["steps"], table["measured speedup"], "o", label="measured")
ax2.plot(table["steps"], table["closed form S(α, K, c)"], "-", label="closed form (Thm 3.8)")
ax2.plot(table["steps"], table["with verify cost"], "--", label="with measured verify cost")
ax2.axhline(1.0, color="grey", lw=0.8)
ax2.set(xlabel="training steps", ylabel=f"speedup at K = {K}")
ax2.legend(fontsize=8)
fig
