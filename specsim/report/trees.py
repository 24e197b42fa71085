"""The ``trees`` part's section of report.md: the feature head's trees against its
chain (tokens per iteration, measured and predicted speedup), the theory's planned size
against the measured best, what stops a tree on this CPU and where the theory says one
pays (`specsim.experiment.parts.trees` makes the tables)."""

from __future__ import annotations

import pandas as pd

from specsim import schema as S
from specsim.experiment.parts.trees import (DEPTH, TREE_ACCEPTANCE, TREE_CEILING,
                                            TREE_HARDWARE, TREE_PLAN, TREE_RANKS, TREE_RUNS,
                                            TREE_SIZES, TREE_TEMPERATURE, TREE_TOKENS,
                                            TOKENS_GOAL, VERIFY_DTYPE, VERIFY_ROW)
from specsim.experiment.parts.trees_ranks import CEILING_RANKS
from specsim.experiment.parts.trees_tokens import DYNAMIC_TOP_K
from specsim.report.tables import markdown_table

RUN_COLUMNS = [S.KIND, "tree", "widths", S.TOKENS_PER_ITERATION,
               "tokens_per_iteration_vs_chain", S.E_EFFECTIVE,
               S.MEASURED_SPEEDUP, S.MEASURED_CI_LO, S.MEASURED_CI_HI, S.PREDICTED_SPEEDUP,
               "pred_speedup_pooled", "pred_speedup_given_tokens", "speedup_vs_chain",
               S.ROUNDS]
TOKEN_COLUMNS = ["head", "depth", S.KIND, "tree", "n_nodes", S.TOKENS_PER_ITERATION,
                 "tokens_per_iteration_vs_chain", "vs_chain_ci_lo", "vs_chain_ci_hi", "prompts",
                 "iterations"]
HARDWARE_COLUMNS = ["hardware", "best_n", "depth", "widths", "expected_tokens", "speedup",
                    "best_chain_k", "best_chain_speedup", "width_gain", "break_even_n",
                    "limited_by"]


def plan_lines(plan: pd.DataFrame) -> list[str]:
    """One sentence per kind: planned against measured size, and why a tree does or
    does not pay here, and where it would."""
    out = []
    for _, r in plan.iterrows():
        close = "within one size of" if r["planned_within_one_size"] else "more than one size from"
        line = (f"- {r[S.KIND]}: the theory plans N = {r['planned_n']} (depth "
                f"{r['planned_depth']}, widths {r['planned_widths']}, predicted "
                f"{r['planned_speedup']:.2f}× against the best chain's "
                f"{r['planned_chain_speedup']:.2f}× at K = {r['planned_chain_k']}; growth "
                f"limited by {r['plan_limited_by']}), {close} the measured best, "
                f"{r['measured_best']} ({r['measured_best_speedup']:.2f}×). ")
        if r["tree_pays_here"]:
            line += "A tree pays on this CPU."
        else:
            rows = r["pays_on"] if isinstance(r["pays_on"], str) and r["pays_on"] else "no row"
            line += (f"A tree does not pay on this CPU: {r['stopped_by']} stops it; the "
                     f"theory says a tree pays on {rows}.")
        out.append(line)
    return out


PREDICTIONS = ((S.PREDICTED_SPEEDUP, "from the timed run's own acceptance (the headline)"),
               ("pred_speedup_pooled", "from the acceptance pooled over the kind's prompts"),
               ("pred_speedup_given_tokens", "given the timed run's own tokens per iteration"))


def prediction_lines(runs: pd.DataFrame) -> list[str]:
    """The mean and the worst absolute error, in per cent of the measured speedup, of
    each prediction over the timed runs (`PREDICTIONS` present in ``runs``)."""
    out = []
    for col, what in PREDICTIONS:
        if col not in runs:
            continue
        err = (100 * (runs[col] / runs[S.MEASURED_SPEEDUP] - 1)).abs()
        out.append(f"- {what}: mean absolute error {err.mean():.1f}%, worst {err.max():.1f}% "
                   f"over {len(runs)} runs")
    return out


def goal_lines(plan: pd.DataFrame) -> list[str]:
    """Whether the largest tree reaches `TOKENS_GOAL` times the chain's tokens per
    iteration at equal depth, per kind."""
    return [f"- {r[S.KIND]}: the feature head's largest static tree's tokens per iteration are "
            f"{r['largest_tree_tokens_vs_chain']:.2f}× the chain's "
            f"({'reaches' if r['largest_tree_tokens_vs_chain'] >= TOKENS_GOAL else 'below'} "
            f"{TOKENS_GOAL:g}×)" for _, r in plan.iterrows()]


def _spread(r) -> str:
    """A ratio's 95% interval over the prompts of row ``r``, or that one prompt has none."""
    return (f"95% interval over {r['prompts']} prompts {r['vs_chain_ci_lo']:.2f}-"
            f"{r['vs_chain_ci_hi']:.2f}" if r["prompts"] > 1 else "one prompt, no interval")


def best_tree_lines(tokens: pd.DataFrame) -> list[str]:
    """Per head, depth and kind, its tree with the most tokens per iteration over its
    chain's of that depth, with the interval over prompts, against `TOKENS_GOAL`."""
    out = []
    ratio = "tokens_per_iteration_vs_chain"
    if "depth" not in tokens:                     # a table from before the depth column
        tokens = tokens.assign(depth=DEPTH)
    trees = tokens[tokens[ratio].notna() & (tokens["n_nodes"] > tokens["depth"])]
    for (head, d, kind), g in trees.groupby(["head", "depth", S.KIND], sort=False):
        r = g.loc[g[ratio].idxmax()]
        verdict = "reaches" if r[ratio] >= TOKENS_GOAL else "below"
        out.append(f"- {head}, depth {d}, {kind}: {r['tree']} gives {r[ratio]:.2f}× the "
                   f"chain's tokens per iteration ({_spread(r)}; {verdict} {TOKENS_GOAL:g}×)")
    return out


def temperature_lines(temps: pd.DataFrame) -> list[str]:
    """The score temperatures tried on the calibration prompts, per kind, and the one
    chosen."""
    out = []
    for temp, g in temps.groupby("temperature", sort=False):
        ratios = ", ".join(f"{r[S.KIND]} {r['tokens_per_iteration_vs_chain']:.2f}×"
                           for _, r in g.iterrows())
        out.append(f"- T = {temp:g}: {ratios}" + (" (chosen)" if g["chosen"].all() else ""))
    return out


def size_lines(sizes: pd.DataFrame) -> list[str]:
    """Per kind and size: the replayed dynamic tree against its chain, with its
    interval, against `TOKENS_GOAL`, and what its verify pass costs."""
    out = []
    for _, r in sizes.iterrows():
        verdict = "reaches" if r["reaches_goal"] else "below"
        out.append(f"- {r['head']}, {r[S.KIND]}: dynamic N={r['n_nodes']} T="
                   f"{r['temperature']:g} gives {r['tokens_per_iteration_vs_chain']:.2f}× the "
                   f"chain's tokens per iteration ({_spread(r)}; {verdict} "
                   f"{TOKENS_GOAL:g}×); its verify pass costs "
                   f"{r['verify_vs_chain_cpu']:.1f}× the chain's on this CPU, "
                   f"{r[f'verify_vs_chain_{VERIFY_ROW}']:.2f}× on {VERIFY_ROW} in "
                   f"{VERIFY_DTYPE} (roofline)")
    return out


def ceiling_lines(ceiling: pd.DataFrame) -> list[str]:
    """Per head and kind: the most tokens per iteration over the chain's that any tree
    whose nodes are among their parents' top 8, or top `CEILING_RANKS`, can reach."""
    return [f"- {r['head']}, {r[S.KIND]}: chain {r['chain_tokens_per_iteration']:.2f} tokens "
            f"per iteration; every path of the top 8 {r['top8_tokens_per_iteration']:.2f} "
            f"({r['top8_vs_chain']:.2f}× the chain's), of the top {CEILING_RANKS} "
            f"{r['ceiling_tokens_per_iteration']:.2f} (at most {r['ceiling_vs_chain']:.2f}×)"
            for _, r in ceiling.iterrows()]


def rank_lines(acceptance: pd.DataFrame) -> list[str]:
    """Per kind, how often the head's first candidates were the target's token at depth
    1: what width can add to tokens per iteration."""
    out = []
    for kind, g in acceptance[acceptance["depth"] == 1].groupby(S.KIND):
        parts = [f"rank {int(r['rank'])} {int(r['accepted'])}/{int(r['tried'])}"
                 for _, r in g.sort_values("rank").iterrows()]
        out.append(f"- {kind}, depth 1, accepted/tried: " + ", ".join(parts))
    return out


def trees_section(result) -> list[str]:
    """report.md's section for the part (nothing when it did not run)."""
    t = getattr(result, "tables", {})
    runs = t.get(TREE_RUNS)
    if runs is None or runs.empty:
        return []
    plan, hw = t[TREE_PLAN], t.get(TREE_HARDWARE, pd.DataFrame())
    lines = ["## Token trees (part trees)", "",
             f"The feature head's chain of {DEPTH} drafts against trees of depth <= {DEPTH} "
             f"(Sequoia's optimal shapes for the measured per-(depth, rank) acceptance); "
             f"speedups over plain decoding, decode time per token, with 95% intervals "
             f"over paired rounds; predicted = E · t_target(1) / t_iteration, the "
             f"iteration timed as the loop body in the same rounds, E the acceptance "
             f"model's for a run of this length (`E_effective`, the timed run's decode "
             f"tokens per iteration, gives `pred_speedup_given_tokens`).", "",
             markdown_table(runs[[c for c in RUN_COLUMNS if c in runs]]), "",
             "Predicted against measured speedup:", "", *prediction_lines(runs), "",
             "Tokens per iteration at equal depth:", "", *goal_lines(plan), ""]
    tokens = t.get(TREE_TOKENS)
    if tokens is not None and not tokens.empty:
        lines += [f"Each head's trees against its own chain of the same depth ({DEPTH}; the "
                  f"feature head also deeper) over "
                  f"{int(tokens['prompts'].max())} prompts per kind (untimed; static: "
                  f"Sequoia's trees for the feature head's probed rates; dynamic N: per "
                  f"iteration the N best paths by the head's own scores among each node's "
                  f"top {DYNAMIC_TOP_K}, T: its scores at that temperature); the interval "
                  f"resamples prompts:", "",
                  markdown_table(tokens[[c for c in TOKEN_COLUMNS if c in tokens]]), "",
                  *best_tree_lines(tokens), ""]
    temps, sizes = t.get(TREE_TEMPERATURE), t.get(TREE_SIZES)
    if temps is not None and not temps.empty:
        lines += [f"The feature head's score temperature T (its dynamic tree's path scores "
                  f"read softmax(logits / T)), chosen on other prompts of each kind "
                  f"({int(temps['prompts'].max())} per kind): the dynamic N={int(temps['n_nodes'].iloc[0])} "
                  f"tree's tokens per iteration over the chain's there "
                  f"(`tree_temperature`):", "", *temperature_lines(temps), ""]
    if sizes is not None and not sizes.empty:
        lines += ["Larger dynamic trees of the feature head on the same prompts, replayed "
                  "along the target's continuation (untimed; `tree_sizes`):", "",
                  *size_lines(sizes), ""]
    ranks, ceiling = t.get(TREE_RANKS), t.get(TREE_CEILING)
    if ranks is not None and not ranks.empty:
        lines += ["Where the target's greedy token sits among each head's candidates at "
                  "each depth, along the target's own continuation of the same prompts "
                  "(the share of positions per rank; `tree_ranks`): a tree's extra branches "
                  "gain only where rank 0 is wrong and a lower rank right.", "",
                  markdown_table(ranks), "",
                  "What any tree of the head's top candidates can reach (greedy, replayed "
                  "from the ranks; `tree_ceiling`):", "", *ceiling_lines(ceiling), ""]
    lines += ["What width can add: each rank is tried after the ranks above it failed "
              "(`tree_acceptance`):", "",
              *rank_lines(t.get(TREE_ACCEPTANCE, pd.DataFrame(columns=[S.KIND, "depth"]))), "",
              "Planned against measured size:", "", *plan_lines(plan), ""]
    if not hw.empty:
        lines += ["Per datasheet row (acceptance pooled over the kinds; the feature head's "
                  "draft pass at its byte ratio to the target's):", "",
                  markdown_table(hw[[c for c in HARDWARE_COLUMNS if c in hw]]), ""]
    return lines
