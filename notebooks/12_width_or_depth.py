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
# # 12 · Width or depth: token trees against chains
#
# **Question:** a chain drafts K tokens in a row; a tree drafts several candidates per
# position and verifies all of them in one pass. With the feature head and Medusa heads on
# SmolLM2-135M, how many more tokens per iteration does a tree of the same depth accept,
# what limits it, does it pay on this CPU, and on which hardware would it?
#
# The measured points are the demo's `trees` part (`specsim demo --parts trees`), stored
# in `data/trees-cpu/`; the theory is `specsim.trees` (docs/trees.md): E(tree) from the
# measured per-(depth, rank) acceptance, S = E · t_target(1) / (t_draft + t_target(N + 1)),
# the best tree per node budget N by Sequoia's programme.

# %%
# %matplotlib inline
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from specsim.plots.notebook import setup

QUICK = setup()   # display options; True in the headless test run (smaller grids)

from specsim.models import config
from specsim.experiment.parts import trees as part
from specsim.trees import format_plans, plan_per_hardware, plan_tree

DATA = Path("..") / "data" / "trees-cpu"
tables = {name: pd.read_csv(DATA / f"{name}.csv") for name in
          (part.TREE_RUNS, part.TREE_PLAN, part.TREE_HARDWARE, part.TREE_ACCEPTANCE)}
runs, plan = tables[part.TREE_RUNS], tables[part.TREE_PLAN]

# %% [markdown]
# ## Tokens per iteration at equal depth
#
# The feature head's chain of 4 drafts against Sequoia's best trees of depth <= 4 for the
# measured acceptance, on code and JSON prompts. `tokens_per_iteration_vs_chain` is the gain that
# width buys; the speedups are measured over plain decoding with 95% intervals.

# %%
display(runs[["kind", "tree", "widths", "tokens_per_iteration", "tokens_per_iteration_vs_chain",
              "E_model", "measured_speedup", "measured_speedup_ci_lo", "measured_speedup_ci_hi",
              "predicted_speedup"]])

# %% [markdown]
# ## Each head against its own chain, over several prompts
#
# The feature head (a recurrent cell on the target's features, rolled along each path)
# and Medusa heads (head d guesses depth d from the root's feature alone) at the same
# depth of 4, and the feature head also 5 deep (EAGLE-2's evaluation depth; each tree is
# held against the chain of its own depth): each head's chain, the feature head's static trees and each head's dynamic
# tree of 64 nodes (the best paths by the head's own scores; the feature head's also with its
# scores at the temperature chosen on other prompts, T). The bars are 95% intervals
# over prompts; the dashed line is the 1.3× aimed for; the crosses and triangles are what
# any tree whose nodes are among their parents' top 8 or top 32 candidates could reach
# (`tree_ceiling`, replayed from where the target's tokens rank among the head's
# candidates).

# %%
tokens = pd.read_csv(DATA / f"{part.TREE_TOKENS}.csv")
ceiling = pd.read_csv(DATA / f"{part.TREE_CEILING}.csv").set_index(["head", "kind"])
display(tokens)
trees = tokens[tokens["tree"] != part.CHAIN].reset_index(drop=True)
y = trees["tokens_per_iteration_vs_chain"]
fig, ax = plt.subplots(figsize=(9, 4))
ax.errorbar(trees.index, y, yerr=[y - trees["vs_chain_ci_lo"], trees["vs_chain_ci_hi"] - y],
            fmt="o", label="measured")
for column, marker, label in (("top8_vs_chain", "x", "any tree of the top 8"),
                              ("ceiling_vs_chain", "^", "any tree of the top 32")):
    ax.plot(trees.index, [ceiling.loc[(r.head, r.kind), column] if r.depth == part.DEPTH
                          else np.nan for r in trees.itertuples()],
            marker, color="grey", ls="", label=label)
ax.axhline(part.TOKENS_GOAL, ls="--", color="grey")
ax.set_xticks(trees.index, [f"{r.head} {r.kind} depth {r.depth}\n{r.tree}"
                            for r in trees.itertuples()], rotation=60, ha="right", fontsize=7)
ax.set(ylabel="tokens per iteration / the chain's of equal depth", title="trees, greedy")
ax.legend()
plt.show()

# %% [markdown]
# ## The feature head's score temperature and larger trees
#
# The temperature of the feature head's path scores is chosen on calibration prompts that
# are not the ones above (`tree_temperature`); larger dynamic trees at that temperature are
# replayed along the target's continuation (`tree_sizes`), with what their verify pass
# costs over the chain's on this CPU and on an H100 in bfloat16 (roofline).

# %%
display(pd.read_csv(DATA / f"{part.TREE_TEMPERATURE}.csv"))
display(pd.read_csv(DATA / f"{part.TREE_SIZES}.csv"))

# %% [markdown]
# ## Where the target's token ranks among each head's candidates
#
# Per depth, the share of positions of the target's greedy continuation at which its
# token is the head's first choice, its second (the first wrong, the second right: what
# one extra branch adds), third or fourth, fifth to eighth. The feature head's first
# choice is right more often and its lower ranks rarely, so its chain leaves a tree little
# to add; Medusa's heads are less sure and their second to eighth choices hold the
# target's token about twice as often at depth 1.

# %%
ranks = pd.read_csv(DATA / f"{part.TREE_RANKS}.csv")
display(ranks.set_index(["head", "kind", "depth"])[
    ["rank_0", "rank_1", "rank_2_3", "rank_4_7", "below_8", "below_32"]].style.format("{:.2f}"))
display(ceiling)

# %% [markdown]
# ## The measured acceptance
#
# Conditional rates p[depth, rank]: the chance the rank-r candidate is accepted once the
# ones ranked above it were rejected. Rank 0 is the chain's α per position; the ranks
# below it are what a tree adds.

# %%
acc_table = tables[part.TREE_ACCEPTANCE]
display(acc_table.pivot_table(index=["kind", "depth"], columns="rank", values="rate"))
rates = {kind: part.acceptance_table(acc_table, [kind]) for kind in part.KINDS}
pooled = part.acceptance_table(acc_table)

# %% [markdown]
# ## This CPU: the theory's curve and the measured points
#
# The pass times are the part's own: the autoregressive step t_target(1), the verify pass
# over root + N nodes at each width measured (linear in between), and the drafting line
# a + b·w per level. The curve is the fastest tree of each size; the markers are the runs.

# %%
t_verify = {int(r.n_nodes) + 1: r.t_verify for r in runs.drop_duplicates("tree").itertuples()}
t_target = part.verify_times(float(runs["t_target_1"].iloc[0]), t_verify, max(t_verify))
n_max = t_target.size - 1
a, b = float(plan["draft_a_s"].iloc[0]), float(plan["draft_b_s"].iloc[0])
t_draft = a + b * np.arange(1, n_max + 1)
fig, ax = plt.subplots(figsize=(7, 4))
for kind, acc in rates.items():
    p = plan_tree(acc, t_target, t_draft, max_nodes=n_max, max_depth=part.DEPTH)
    line, = ax.plot(np.arange(1, n_max + 1), p.speedup, label=f"{kind}: theory")
    g = runs[runs["kind"] == kind]
    ax.errorbar(g["n_nodes"], g["measured_speedup"],
                yerr=[g["measured_speedup"] - g["measured_speedup_ci_lo"],
                      g["measured_speedup_ci_hi"] - g["measured_speedup"]],
                fmt="o", color=line.get_color(), label=f"{kind}: measured")
ax.axhline(1.0, color="grey", lw=0.8)
ax.set(xlabel="nodes N", ylabel="speedup over plain decoding",
       title="feature head on SmolLM2-135M, this CPU")
ax.legend()
plt.show()
display(plan[["kind", "planned_n", "planned_widths", "planned_speedup", "measured_best",
              "measured_best_speedup", "planned_within_one_size", "tree_pays_here",
              "stopped_by", "largest_tree_tokens_vs_chain"]])

# %% [markdown]
# ## The other hardware rows
#
# The same acceptance (pooled over the kinds) on every datasheet row of
# `specsim/data/hardware.csv`, with pass times from the roofline and the feature head's
# draft pass at its byte ratio to the target's. On a memory-bound chip the verify of
# N + 1 tokens costs about one step until its arithmetic reaches the ridge point, so a
# tree pays; the batch moves that point. `width_gain` is the best tree over the best chain.

# %%
target_cfg = config.SMOLLM2_135M.replace(dtype="bfloat16")
c_bytes = float(plan["c_bytes"].iloc[0])
batches = [1, 64] if QUICK else [1, 16, 64, 256]
gain = {}
for batch in batches:
    plans = plan_per_hardware(pooled, target_cfg, None, max_nodes=n_max, batch=batch,
                              context=256, draft_cost_ratio=c_bytes, max_depth=part.DEPTH)
    gain[batch] = {name: p.width_gain for name, p in plans.items()}
    if batch == batches[-1]:
        print(f"batch {batch}:")
        print(format_plans(plans))
surface = pd.DataFrame(gain)
surface.columns.name = "batch"
display(surface.style.format("{:.2f}").background_gradient(axis=None))
