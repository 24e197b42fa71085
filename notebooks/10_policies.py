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
# # 10 · Draft-length policies on a recorded trace
#
# **Question:** what would a confidence threshold p_min = 0.4 (llama.cpp's
# `--draft-p-min`), the transformers heuristic, or the goodput policy have done on *my*
# run, without running the model again?
#
# One speculative run with a fixed K_max (`decode.generate_speculative(policy=FixedK)`)
# records, per iteration and draft slot, whether the target accepted the draft and how
# confident the draft was (`SpeculativeStats.accept_mask`, `.confidence`).
# `simulate.AcceptanceTrace.from_stats` turns that into a trace and
# `simulate.simulate_policy` replays any policy on it: plan, propose while kept, accept
# the leading accepted run, update. Costs come from `pass_costs`, timed here on the run's
# own programs. The closed forms of `analytic` (`speedup_threshold`,
# `optimal_fixed_vs_dynamic`) give the same answer for i.i.d. slots; the gap between them
# and the replay is how far the real trace is from i.i.d.
#
# In the headless test run (`SPECSIM_QUICK=1`) the trace comes from the tiny random
# model: its numbers only exercise the pipeline.

# %%
# %matplotlib inline
import numpy as np
import pandas as pd
from IPython.display import display

from specsim.plots.notebook import setup

QUICK = setup()   # display options; True in the headless test run (smaller grids)

from specsim import analytic, bench, decode, models, pass_costs, workloads
from specsim import policies as P
from specsim import simulate
from specsim.drafters import layer_skip_drafter, off_draft
from specsim.experiment import default_layer_skip
from specsim.experiment.policy_runs import costs_from_passes

K_MAX = 4 if QUICK else 6
NEW_TOKENS = 24 if QUICK else 96

# %% [markdown]
# ## Record a trace
#
# SmolLM2-135M with its layer-skip self-draft (all layers but the middle fifth) on a code
# prompt, greedy, FixedK(K_max) under the policy loop (the loop that records per-slot
# outcomes); the tiny random model in quick mode.

# %%
target = models.load("tiny-llama" if QUICK else "smollm2-135m").with_layer_loop("scan")
drafter = layer_skip_drafter(target, default_layer_skip(target.cfg.n_layers))
if target.tokenizer is not None:
    prompt = target.tokenizer.encode(workloads.prompt_text("code", target.tokenizer))
else:
    prompt = list(np.random.default_rng(0).integers(3, target.cfg.vocab_size, 48))
res = decode.generate_speculative(target, drafter, [prompt], NEW_TOKENS,
                                  policy=P.FixedK(k=K_MAX), eos_token_id=None)
trace = simulate.AcceptanceTrace.from_stats(res.stats)
print(f"recorded {trace.accept.shape[0]} iterations x {trace.k} slots with {drafter.name}; "
      f"alpha per slot {res.stats.alpha_per_slot:.3f}, "
      f"{res.stats.tokens_per_iteration:.2f} tokens per iteration")

# %% [markdown]
# ## What one iteration costs
#
# `pass_costs` times the loop's own per-iteration programs at the run's batch and cache:
# the autoregressive step t_target(1), the verify over K + 1 positions for each K up to
# K_max, and one draft step. The policy loop verifies as many positions as the widest
# proposal of the batch, so a shorter draft saves draft steps and verify width:
# t(K) = K·t_draft + t_verify(K + 1) for K >= 1, and t(0) = t_target(1)
# (`policy_runs.costs_from_passes`).

# %%
calls = pass_costs.pass_calls(target, drafter, batch=1, cache_len=res.plan.cache_len, k=K_MAX,
                              steps=4)
repeats = 3 if QUICK else 7
t1, tv, td = (bench.time_calls(c, repeats=repeats, warmup=1) for c in calls[:3])
pc = pass_costs.PassCosts.from_times(calls, t1.times, tv.times, td.times)
verify = {K_MAX: pc.t_verify.median}
for k in range(1, K_MAX):                          # the narrower verify passes
    ck = pass_costs.pass_calls(target, None, batch=1, cache_len=res.plan.cache_len, k=k, steps=4)
    verify[k] = bench.time_calls(ck.verify, repeats=repeats, warmup=1).median / ck.steps
costs = costs_from_passes(pc.t_target_1.median, verify, pc.draft_s, K_MAX)
print(f"t_target(1) {pc.t_target_1.median * 1e3:.2f} ms, t_verify(K + 1) for K = 1..{K_MAX} "
      + ", ".join(f"{verify[k] * 1e3:.2f}" for k in range(1, K_MAX + 1))
      + f" ms, t_draft {pc.draft_s * 1e3:.2f} ms: c = {pc.cost_ratio:.2f}")

# %% [markdown]
# ## What would p_min = 0.4 have done?
#
# Every threshold replayed on the trace (engine cost model), beside the closed form of
# `analytic.speedup_threshold` for the trace's own confidence law and accept outcomes
# taken as i.i.d. slots.

# %%
present = trace.present[..., None] & np.ones(trace.k, bool)
s_law, g_law = trace.confidence[present], trace.accept[present].astype(float)
rows = []
for p_min in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
    pol = P.ConfidenceThreshold(p_min=p_min, k_max=K_MAX)
    run = simulate.simulate_policy(pol, trace, costs=costs, cost_model="engine")
    closed = analytic.speedup_threshold(s_law, g_law, p_min=p_min, k_max=K_MAX,
                                        c=pc.cost_ratio, verify_cost=costs.t_target)
    rows.append(dict(p_min=p_min, tokens_per_iteration=run.tokens_per_iteration,
                     proposed=run.proposed[run.present].mean(),
                     draft_steps=run.draft_steps[run.present].mean(),
                     speedup_replay=run.speedup, speedup_closed_form=float(closed)))
thresholds = pd.DataFrame(rows)
display(thresholds)
at = thresholds.set_index("p_min").loc[0.4]
print(f"p_min = 0.4 would have drafted {at.proposed:.2f} tokens per iteration "
      f"({at.draft_steps:.2f} draft steps) for {at.tokens_per_iteration:.2f} tokens per "
      f"iteration: speedup {at.speedup_replay:.2f}x replayed, "
      f"{at.speedup_closed_form:.2f}x from the i.i.d. closed form")

# %%
ax = thresholds.plot(x="p_min", y=["speedup_replay", "speedup_closed_form"], marker="o")
ax.axhline(1.0, color="grey", lw=0.8)
ax.set_ylabel("speedup over autoregressive")
ax.set_title(f"confidence threshold on the recorded trace ({drafter.name}, c = {pc.cost_ratio:.2f})")

# %% [markdown]
# ## Every policy on the same trace
#
# Fixed K for each K up to K_max (verifying K + 1 positions, in the plain program as in the
# policy loop), the transformers heuristic, and goodput, which plans each iteration's K from its running
# per-position estimate and the costs above and turns itself off (K = 0) where no K pays;
# with p_min its plan is an upper bound and a draft of confidence <= p_min ends the row's
# proposal, as the threshold does. By default goodput also keeps a loss budget (1.5% of
# plain decoding's time): it drafts only where what it has won, plus that allowance,
# covers a draft's worst outcome; a row whose first probes failed may still take a K = 1
# probe that its judged first drafts back, from an overdraft of a third of the allowance.
# So it never falls more than 2% behind plain decoding by its cost model; "goodput budget
# off" is the same policy without either. (On a recorded trace the allowance is that of
# the trace's iterations, fewer than the run's tokens.)
# `analytic.optimal_fixed_vs_dynamic` is the i.i.d. bound on what a threshold can gain
# over the best fixed K.

# %%
policies = {f"fixed K={k}": P.FixedK(k=k) for k in range(1, K_MAX + 1)}
policies.update({"threshold p_min=0.4": P.ConfidenceThreshold(p_min=0.4, k_max=K_MAX),
                 "heuristic": P.Heuristic(k_init=2, k_max=K_MAX),
                 "goodput": P.Goodput(k_max=K_MAX, costs=costs),
                 "goodput p_min=0.4": P.Goodput(k_max=K_MAX, costs=costs, p_min=0.4),
                 "goodput budget off": P.Goodput(k_max=K_MAX, costs=costs, budget=None)})
rows = []
for name, pol in policies.items():
    c_pol = costs if pol.k_max == K_MAX else costs_from_passes(
        costs.t_target[0], dict(enumerate(costs.t_target)), costs.t_draft, pol.k_max)
    run = simulate.simulate_policy(pol, trace, costs=c_pol, cost_model="engine",
                                   off_draft=off_draft(drafter))
    rows.append(dict(policy=name, mean_k=run.k_plan[run.present].mean(),
                     k0_fraction=(run.k_plan[run.present] == 0).mean(),
                     tokens_per_iteration=run.tokens_per_iteration, speedup=run.speedup))
table = pd.DataFrame(rows)
display(table)
bound = analytic.optimal_fixed_vs_dynamic(s_law, g_law, c=pc.cost_ratio, k_max=K_MAX,
                                          verify_cost=costs.t_target)
print(f"i.i.d. closed form: best fixed K = {bound['fixed_k']} ({bound['fixed_speedup']:.2f}x), "
      f"best threshold p_min = {bound['p_min']:.2f}, K_max = {bound['k_max']} "
      f"({bound['dynamic_speedup']:.2f}x, gain {bound['gain']:.3f})")

# %% [markdown]
# ## Reading the answer
#
# - A threshold wins when the draft's confidence separates the drafts the target will
#   accept from those it will not *and* a stopped draft saves real time: here each
#   dropped draft saves one draft step (c of a target step), never verify time.
# - The heuristic never plans K = 0, so at a high c (a layer-skip draft costs most of a
#   target step) it can only lose against plain decoding; goodput's K = 0 is plain
#   decoding plus the loop's bookkeeping.
# - Replay assumption: iteration i meets the same accept/confidence slots whatever the
#   policy did before; the text a different policy would have produced is not
#   regenerated. `specsim demo --parts policies` measures the same policies for real,
#   beside this replay.
