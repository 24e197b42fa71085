"""Prediction against measurement: the one table of prediction errors (`mape_table`),
the in-run cost model's summary and the decomposition of each miss, the state of the
machine while it ran, and the terminal summary (`summary_table`)."""

from __future__ import annotations

import pandas as pd

from specsim import schema as S
from specsim.report.tables import as_runs, markdown_table, speedup_table


PREDICTION_LABELS = {
    "prior": "before the run (fitted roofline, the drafter's α on this prompt)",
    "prior_other_prompts": "before the run, α from other prompts of the kind",
    "inrun": "in-run (the pass times timed beside the run, its own n/I)",
    "expected": "in-run costs with the expected acceptance at the run's α_j"}
"""The rows of the report's one table of prediction errors."""


def mape_table(result_or_runs) -> pd.DataFrame:
    """The report's one table of prediction errors: per prediction (`PREDICTION_LABELS`)
    and scope (all runs, each drafter kind, each batch), its runs, MAPE, worst error and
    coverage (the share of runs whose prediction lies inside the measured 95%
    interval) and, for the in-run prediction and the one with the expected acceptance,
    agreement (the
    share whose error's 95% interval holds 0), from `fidelity_summary`. Empty without in-run runs."""
    runs = as_runs(result_or_runs)
    if not has_inrun(runs):
        return pd.DataFrame()
    f = fidelity_summary(runs)
    rows = []

    def add(label, scope, sc):
        if sc and sc.get("n_runs"):
            rows.append({"prediction": label, "runs": scope, "n": sc["n_runs"],
                         "MAPE %": sc["mape_pct"], "worst %": sc["max_abs_error_pct"],
                         "coverage %": sc.get("coverage_pct"),
                         "agreement %": sc.get("agreement_pct")})

    for key in ("prior", "prior_other_prompts"):
        if key in f:
            add(PREDICTION_LABELS[key], "all", f[key])
            for k, v in f[key].get("by_drafter", {}).items():
                add(PREDICTION_LABELS[key], k, v)
    add(PREDICTION_LABELS["inrun"], "all", f)
    for k, v in f.get("by_drafter", {}).items():
        add(PREDICTION_LABELS["inrun"], k, v)
    for k, v in f.get("by_batch", {}).items():
        add(PREDICTION_LABELS["inrun"], f"batch {k}", v)
    for k, v in f.get("by_clock", {}).items():
        add(PREDICTION_LABELS["inrun"], f"{k} clock", v)
    add(PREDICTION_LABELS["expected"], "all", f.get("expected_acceptance"))
    return (pd.DataFrame(rows).astype({"coverage %": float, "agreement %": float}) if rows
            else pd.DataFrame())


def mape_lines(result) -> list[str]:
    t = mape_table(result)
    if t.empty:
        return []
    return ["", "Prediction against measurement (relative error of the speedup; coverage: "
            "runs whose prediction lies in the measured speedup's 95% interval; agreement: "
            "runs whose error's 95% interval, the pass programs' timing noise included, "
            "holds 0). The "
            "prediction before the run is the one to use; the in-run prediction is its "
            "decomposition, which says which term missed (section *Predicted against "
            "measured, in-run costs*):", "", markdown_table(t, ".1f")] + draw_lines(result)


def draw_lines(result) -> list[str]:
    """How far the runs' own draw of their acceptance reaches
    (`specsim.experiment.decomposition.draw_summary`): a short run strays from E_model by
    an integer number of iterations, which no timing interval holds, so the in-run
    prediction takes the run's own n / I and the acceptance model is scored apart."""
    d = fidelity_summary(result).get("acceptance_draw") or {}
    if not d.get("n_runs"):
        return []
    return ["", f"The runs' own draw: the acceptance term of {d['acceptance_in_range_pct']:.0f}% "
                f"of {d['n_runs']} runs lies in the 95% range of runs simulated at their "
                f"measured rates, length and batch. That range is ±"
                f"{d['draw_half_width_median_pct']:.1f}% (median) against a measured 95% "
                f"half-width of ±{d['measured_half_width_median_pct']:.1f}%; in "
                f"{d['draw_wider_than_measured_pct']:.0f}% of the runs the acceptance term "
                "alone can leave the measured interval, which is why the in-run prediction "
                "takes the run's own n/I (docs/measurement.md, \"Which acceptance the "
                "in-run prediction takes\")." + (
                    f" With the draw added to the error's timing interval, "
                    f"{d['agreement_with_draw_pct']:.0f}% of the runs agree with the "
                    "expected acceptance."
                              if "agreement_with_draw_pct" in d else "")]


def busy_lines(result) -> list[str]:
    m = machine_summary(result)
    if not m or not m["busy"]:
        return []
    return ["", f"**Warning: the machine was too busy to measure to ±"
                f"{100 * m['target_half_width']:g}%**: " + "; ".join(m["busy"]) +
            ". The errors above mix the machine's noise with the model's; rerun on a quiet "
            "machine (see *The machine while it ran*)."]


def machine_summary(result) -> dict:
    """`specsim.experiment.machine.machine_summary` of a result ({} without its runs)."""
    from specsim.experiment.machine import machine_summary as summary

    runs = as_runs(result)
    if runs.empty or S.STOPPED not in runs or not hasattr(result, "settings") \
            or not hasattr(result.settings, "target_half_width"):
        return {}
    return summary(getattr(result, "environment", {}), runs, result.settings)


def summary_table(result) -> str:
    """The terminal summary: the speedup table and the MAPE of each prediction."""
    if result.runs.empty:
        return "(no generation runs in this demo)"
    t = mape_table(result)
    return "\n".join([markdown_table(speedup_table(result), ".2f"), "",
                      *([markdown_table(t, ".1f")] if not t.empty else []), *busy_lines(result)])


def has_inrun(runs: pd.DataFrame) -> bool:
    return not runs.empty and S.PREDICTED_SPEEDUP in runs


def fidelity_summary(result_or_runs) -> dict:
    """``{"mape_pct", "max_abs_error_pct", "n_runs"}`` of the headline prediction, overall,
    per drafter kind and per batch (`specsim.experiment.decomposition.fidelity_summary`)."""
    from specsim.experiment.decomposition import fidelity_summary as summary
    return summary(as_runs(result_or_runs))


def decomposition_table(result_or_runs) -> pd.DataFrame:
    """Per run: measured and predicted speedup, the two log-percent terms of the in-run
    miss (cost model, residual loop overhead), which add up to the total, and the
    acceptance model's terms beside them."""
    spec = S.speculative(as_runs(result_or_runs))
    cols = [S.DRAFTER, S.KIND, S.K, S.BATCH, S.TEMPERATURE, S.ALPHA, S.COST_RATIO,
            S.MEASURED_SPEEDUP, S.MEASURED_CI_LO, S.MEASURED_CI_HI, S.ROUNDS, S.PRED_PRIOR,
            S.ERR_PRIOR, S.ERR_PRIOR_CI_LO, S.ERR_PRIOR_CI_HI, S.ERR_PRIOR_ALPHA,
            S.ERR_PRIOR_FIT, S.ERR_PRIOR_OTHER, S.PREDICTED_SPEEDUP, S.ERR_TOTAL, S.ERR_TOTAL_CI_LO,
            S.ERR_TOTAL_CI_HI, *S.DECOMPOSITION, S.ERR_ACCEPTANCE, S.ERR_ACCEPT_IID,
            S.ERR_ACCEPT_POSITIONAL]
    return spec[[c for c in cols if c in spec]]


def decomposition_summary(result_or_runs) -> pd.DataFrame:
    """Mean and mean absolute value of each error term per drafter kind and batch: the
    largest source of error at a glance. The prediction before the run's miss is its α
    term, its fitted costs' term and the in-run miss, which splits into cost and loop
    overhead; the acceptance model's term stands beside them."""
    spec = S.speculative(as_runs(result_or_runs))
    terms = [c for c in (S.ERR_PRIOR, S.ERR_PRIOR_ALPHA, S.ERR_PRIOR_FIT) if c in spec
             and spec[c].notna().any()] + [S.ERR_TOTAL, *S.DECOMPOSITION, S.ERR_ACCEPTANCE]
    g = spec.groupby([S.DRAFTER_KIND, S.BATCH])
    out = g[terms].mean().add_suffix(" mean")
    out = out.join(g[terms].agg(lambda x: x.abs().mean()).add_suffix(" |mean|"))
    out.insert(0, "runs", g.size())
    return out.reset_index()


def fidelity_headline(f: dict, bold: bool = False) -> str:
    """"MAPE x%, worst y%, coverage z%, agreement a% over n speculative runs" of a
    `fidelity_summary`
    (or of its ``prior`` part), or why it is not scored (no run with a finite measured
    and predicted speedup)."""
    b = "**" if bold else ""
    if not f["n_runs"]:
        return (f"{b}MAPE not scored: no speculative run has both a finite measured and a "
                f"finite predicted speedup{b} (a measured speedup is NaN where the run's decode "
                "time, its time less the prefill, was not positive: runs too short for this "
                "machine's timer; raise --max-new-tokens)")
    cov, agree = f.get("coverage_pct"), f.get("agreement_pct")
    cov = f", coverage {cov:.0f}%" if cov is not None else ""
    cov += f", agreement {agree:.0f}%" if agree is not None else ""
    return (f"{b}MAPE {f['mape_pct']:.1f}%, worst {f['max_abs_error_pct']:.1f}%{cov} over "
            f"{f['n_runs']} speculative runs{b}")
