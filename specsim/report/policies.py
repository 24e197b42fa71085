"""The policies part in report.md: measured beside replayed speedups of each draft-length
policy, and the goodput policy's goals."""

from __future__ import annotations

import pandas as pd

from specsim import schema as S
from specsim.report.tables import markdown_table


def policies_table(result) -> pd.DataFrame:
    """The policies table's headline columns (measured beside replayed speedups)."""
    t = getattr(result, "tables", {}).get(S.POLICIES, pd.DataFrame())
    cols = [S.DRAFTER, S.KIND, S.BATCH, S.POLICY, S.K, S.BEST_FIXED_K, S.SPEEDUP_VS_AR,
            S.VS_AR_LOW, S.VS_AR_HIGH, S.WITHIN_2PCT_OF_AR,
            S.SIM_SPEEDUP_VS_AR, S.SPEEDUP_VS_BEST_FIXED, S.VS_BEST_LOW, S.VS_BEST_HIGH,
            S.WITHIN_3PCT_OF_BEST, S.SIM_SPEEDUP_VS_BEST_FIXED, S.MEAN_K, S.K0_FRACTION,
            S.ALPHA_PROPOSED, S.COST_RATIO_PASSES]
    t = t[t[S.POLICY] != "autoregressive"] if len(t) else t
    out = t[[c for c in cols if c in t]].copy()
    return out.rename(columns={S.SPEEDUP_VS_AR: "vs_AR", S.SIM_SPEEDUP_VS_AR: "sim_vs_AR",
                               S.SPEEDUP_VS_BEST_FIXED: "vs_best", S.SIM_SPEEDUP_VS_BEST_FIXED:
                               "sim_vs_best", S.BEST_FIXED_K: "best_K",
                               S.VS_BEST_LOW: "vs_best_lo", S.VS_BEST_HIGH: "vs_best_hi",
                               S.WITHIN_3PCT_OF_BEST: "within_3%", S.VS_AR_LOW: "vs_AR_lo",
                               S.VS_AR_HIGH: "vs_AR_hi", S.WITHIN_2PCT_OF_AR: "within_2%_AR"})


def policy_goals(result) -> dict:
    """The goals of the goodput policy over every cell: its worst measured speedup against
    plain decoding (goal >= 0.98) and against the best fixed K (goal >= 0.97), and the
    mean |replayed − measured| / measured speedup of every policy row."""
    t = getattr(result, "tables", {}).get(S.POLICIES, pd.DataFrame())
    g = t[t[S.POLICY] == "goodput"]
    spec = t[t[S.POLICY] != "autoregressive"]
    err = ((spec[S.SIM_SPEEDUP_VS_AR] - spec[S.SPEEDUP_VS_AR]).abs() / spec[S.SPEEDUP_VS_AR])
    out = dict(goodput_min_vs_ar=float(g[S.SPEEDUP_VS_AR].min()),
               goodput_min_vs_best=float(g[S.SPEEDUP_VS_BEST_FIXED].min()),
               sim_error_pct=float(100 * err.mean()))
    if S.OWN_COST_SPEEDUP in spec:    # the replay's error in two parts: its decisions
        own = spec[S.OWN_COST_SPEEDUP]  # against the run's own, and the cost model on them
        out.update(decision_error_pct=float(100 * ((spec[S.SIM_SPEEDUP_VS_AR] - own).abs()
                                                   / own).mean()),
                   cost_error_pct=float(100 * ((own - spec[S.SPEEDUP_VS_AR]).abs()
                                               / spec[S.SPEEDUP_VS_AR]).mean()),
                   loop_overhead=float(spec[S.LOOP_OVERHEAD].median()))
    for name, col in (("vs_ar", S.WITHIN_2PCT_OF_AR), ("vs_best", S.WITHIN_3PCT_OF_BEST)):
        if col in g:          # the per-round verdicts: cells where the goal held in every
            counts = g[col].value_counts()      # round (yes), in none (no), in some (noise)
            out[f"goodput_rounds_{name}"] = {v: int(counts.get(v, 0))
                                             for v in ("yes", "noise", "no")}
    return out


def policies_section(result) -> list[str]:
    t = getattr(result, "tables", {}).get(S.POLICIES)
    if t is None or t.empty:
        return []
    goals = policy_goals(result)
    wins = []
    for pol, g in t[~t[S.POLICY].isin(("autoregressive", "fixed"))].groupby(S.POLICY):
        won = g[g[S.SPEEDUP_VS_BEST_FIXED] > 1.0]
        lost = g[g[S.SPEEDUP_VS_BEST_FIXED] < 0.97]
        wins.append(f"- **{pol}**: above the best fixed K in {len(won)}/{len(g)} cells "
                    f"({', '.join(f'{r[S.DRAFTER]}/{r[S.KIND]}/B{r[S.BATCH]}' for _, r in won.iterrows()) or 'none'}); "
                    f"more than 3% below in {len(lost)} (mean K {g[S.MEAN_K].mean():.2f}, "
                    f"K = 0 in {100 * g[S.K0_FRACTION].mean():.0f}% of row-iterations).")
    return ["## Draft-length policies", "",
            "Greedy decoding; speedup = autoregressive decode time per token over the run's "
            "(each call's loop program timed alone, its prefills run before it untimed, the "
            "fastest of a few runs a round; a draft model's prefill inside a policy loop "
            "removed), `vs_best` against the best fixed K of the same drafter, kind and "
            "batch (swept; `best_K` ranks the Ks on every round's medians, `vs_best` is the "
            "median over rounds of each round's ratio to the K the other rounds rank "
            "fastest, so the lucky draws that make a K look best do not also set the bar). `sim_*`: the same policy replayed (`simulate.simulate_policy`, "
            "engine cost model, charged as a static batch, which runs until its slowest row "
            "is done) on the trace of the cell's FixedK(K_max) run under the policy "
            "loop, with the pass times of `pass_costs` timed in the same rounds; the Goodput "
            "policy plans one K for the batch, at the pace of its slowest running row, with "
            "pass times measured in this run before it starts; `goodput-p_min` also ends a "
            "row's draft at a confidence <= 0.4. The large batch mixes kinds of work. Drafters that compute slot by slot stop when no row drafts. The policy "
            "loop verifies as many positions as the widest proposal of the batch (one compiled "
            "pass per width), so a shorter draft saves draft and verify work; with no row "
            "drafting it skips the drafter (the model drafter catches its cache up when "
            "drafting resumes). `vs_best_lo`, `vs_best_hi`: the "
            "lowest and highest `vs_best` over the paired timed rounds; `within_3%`: vs_best "
            ">= 0.97 in every round (yes), in none (no), in some (noise); `vs_AR_lo`, "
            "`vs_AR_hi`, `within_2%_AR`: the same against plain decoding (>= 0.98).", "",
            markdown_table(policies_table(result), ".2f"), "",
            f"Goodput goals: worst speedup against plain decoding "
            f"{goals['goodput_min_vs_ar']:.3f} (goal >= 0.98), worst against the best fixed K "
            f"{goals['goodput_min_vs_best']:.3f} (goal >= 0.97). Replayed against measured "
            f"speedup: mean error {goals['sim_error_pct']:.1f}%.{_replay_parts(goals)}",
            *_round_verdicts(goals),
            "", *wins, ""]


def _replay_parts(goals: dict) -> str:
    """The replay's error in its two parts, where the table has them."""
    if "cost_error_pct" not in goals:
        return ""
    return (f" Of it, the replay's decisions against each run's own (both by the pass costs "
            f"of the same rounds): {goals['decision_error_pct']:.1f}%; those pass costs on "
            f"each run's own passes against its measured speedup: "
            f"{goals['cost_error_pct']:.1f}% (median loop overhead, measured decode time over "
            f"the passes' time: {goals['loop_overhead']:.2f}).")


def _round_verdicts(goals: dict) -> list[str]:
    """The goals judged round by round (paired timed rounds), where the run has them."""
    lines = []
    for name, goal in (("vs_ar", ">= 0.98x plain decoding"), ("vs_best",
                                                             "within 3% of the best fixed K")):
        v = goals.get(f"goodput_rounds_{name}")
        if v:
            lines.append(f"Goodput {goal}: in every timed round in {v['yes']} cells, in some "
                         f"(noise) in {v['noise']}, in none in {v['no']}.")
    return ["", *lines] if lines else []
