"""Writing the demo's results: a table for the terminal, and ``results/demo/`` with
report.md, CSV/JSON files and the figures the command line hands in (this module draws
nothing and imports no plotting code). The folder is built beside the target and
swapped in at the end, so an interrupted run never leaves a half-written report.

Each section of report.md comes from one function of ``SECTIONS`` and is written only
when the tables it reads are there (a demo run with ``--parts`` may leave some out)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import pandas as pd

from specsim import analytic
from specsim import schema as S
from specsim.experiment.prediction import baseline_rates, mape


def _fmt(df: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """A DataFrame as a GitHub markdown table (no extra dependency)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(str(c) for c in cols) + " |",
             "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):         # (iterrows would turn ints into floats)
        cells = []
        for v in row:
            if isinstance(v, (float, np.floating)):
                cells.append(format(v, floatfmt) if np.isfinite(v) else "nan")
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _runs(result_or_runs) -> pd.DataFrame:
    runs = result_or_runs if isinstance(result_or_runs, pd.DataFrame) else result_or_runs.runs
    return S.upgrade_runs(runs)


def speedup_table(result_or_runs) -> pd.DataFrame:
    """One row per (drafter, temperature, K, batch): mean α and speedups over the kinds of
    work (with the measured speedup's 95% interval where the runs have it), and the
    relative error of each prediction; a prediction no run has is left out. Takes a
    DemoResult or a runs table."""
    spec = S.speculative(_runs(result_or_runs))
    preds = {"prior": S.PRED_PRIOR, "iid": S.PRED_IID, "pos": S.PRED_POSITIONAL,
             "swept": S.PRED_SWEPT}
    extra = {f"pred_{k}": (c, "mean") for k, c in preds.items() if c in spec}
    if S.MEASURED_CI_LO in spec:
        extra.update(ci_lo=(S.MEASURED_CI_LO, "mean"), ci_hi=(S.MEASURED_CI_HI, "mean"))
    g = spec.groupby([S.DRAFTER, S.TEMPERATURE, S.K, S.BATCH], as_index=False).agg(
        alpha=(S.ALPHA, "mean"), tokens_per_iter=(S.TOKENS_PER_ITERATION, "mean"),
        measured=(S.MEASURED_SPEEDUP, "mean"), **extra,
        overhead=(S.LOOP_OVERHEAD, "mean"))
    for k in preds:
        col = f"pred_{k}"
        if col not in g:
            continue
        if g[col].isna().all():           # not measured in this demo (e.g. no sweep)
            g = g.drop(columns=[col])
            continue
        g[f"err_{k}_%"] = 100 * (g[col] - g["measured"]) / g["measured"]
    return g


def error_summary(result_or_runs, by=(S.DRAFTER, S.TEMPERATURE)) -> pd.DataFrame:
    """MAPE (per cent) of each prediction against the measured speedup, per group ``by``."""
    spec = S.speculative(_runs(result_or_runs))
    rows = [{**dict(zip(by, key if isinstance(key, tuple) else (key,))), "runs": len(g),
             **{f"MAPE {col}": mape(g, col) for col in S.PREDICTIONS}}
            for key, g in spec.groupby(list(by))]
    out = pd.DataFrame(rows)
    return out.dropna(axis=1, how="all")    # a prediction no run had (no roofline sweep)


def worst_runs(result_or_runs, n: int = 5) -> pd.DataFrame:
    """The ``n`` runs whose headline prediction (before the run where the runs have it,
    else the i.i.d. one) misses most, with the relative error and, for in-run runs, the
    three terms of the in-run prediction's miss."""
    spec = S.speculative(_runs(result_or_runs)).copy()
    pred = S.PRED_PRIOR if S.PRED_PRIOR in spec and spec[S.PRED_PRIOR].notna().any() \
        else S.PRED_IID
    spec["err_%"] = 100 * (spec[pred] - spec[S.MEASURED_SPEEDUP]) / spec[S.MEASURED_SPEEDUP]
    worst = spec.reindex(spec["err_%"].abs().sort_values(ascending=False).index).head(n)
    cols = [S.DRAFTER, S.TEMPERATURE, S.K, S.BATCH, S.KIND, S.ALPHA, S.MEASURED_SPEEDUP,
            S.MEASURED_CI_LO, S.MEASURED_CI_HI, pred, "err_%", S.PREDICTED_SPEEDUP,
            S.ERR_TOTAL, *S.DECOMPOSITION]
    return worst[[c for c in dict.fromkeys(cols) if c in worst]]


def alpha_by_kind(result_or_runs) -> pd.DataFrame:
    """Mean α per (drafter, temperature) by kind of work (one column per kind)."""
    spec = S.speculative(_runs(result_or_runs))
    return spec.pivot_table(index=[S.DRAFTER, S.TEMPERATURE], columns=S.KIND, values=S.ALPHA,
                            aggfunc="mean").reset_index()


def acceptance_table(result_or_runs) -> pd.DataFrame:
    """The runs at each drafter's largest K: α, E under the i.i.d. model, the measured
    tokens per iteration, and the per-position rates α_j with their sample counts."""
    spec = S.speculative(_runs(result_or_runs))
    top = spec[spec[S.K] == spec.groupby(S.DRAFTER)[S.K].transform("max")]
    out = top.assign(**{S.E_IID: analytic.expected_tokens(top[S.ALPHA].to_numpy(),
                                                          top[S.K].to_numpy())})
    positions = [c for j in S.position_columns(out) for c in (S.alpha_pos(j), S.alpha_pos_count(j))
                 if c in out]
    return out[[S.DRAFTER, S.KIND, S.TEMPERATURE, S.K, S.ALPHA, S.E_IID,
                S.TOKENS_PER_ITERATION, *positions]].dropna(axis=1, how="all")


def hardware_table(result_or_hardware) -> pd.DataFrame:
    """Datasheet predictions, one column per hardware row."""
    hw = (result_or_hardware if isinstance(result_or_hardware, pd.DataFrame)
          else result_or_hardware.hardware)
    return hw.pivot_table(index=[S.DRAFTER, S.TEMPERATURE, S.K, S.ALPHA],
                          columns=S.HARDWARE_NAME, values=S.PRED_SPEEDUP).reset_index()


def read_demo_tables(folder) -> dict[str, pd.DataFrame]:
    """Every table a demo wrote to ``folder`` (runs upgraded to today's schema)."""
    folder = Path(folder)
    tables = {name: pd.read_csv(folder / f"{name}.csv")
              for name in (S.RUNS, S.SWEEPS, S.CEILINGS, S.HARDWARE, S.ALPHA_BY_KIND,
                           S.DRAFTER_COSTS, S.DRAFTER_SPEEDUP, S.DRAFTER_LIMITS)
              if (folder / f"{name}.csv").exists()}
    if S.RUNS in tables:
        tables[S.RUNS] = S.upgrade_runs(tables[S.RUNS])
    return tables


PREDICTION_LABELS = {
    "prior": "before the run (fitted roofline, the drafter's α)",
    "inrun": "in-run (the run's own pass times and α_j)",
    "given": "cost model alone (in-run costs, the run's own n/I)"}
"""The rows of the report's one table of prediction errors."""


def mape_table(result_or_runs) -> pd.DataFrame:
    """The report's one table of prediction errors: per prediction (`PREDICTION_LABELS`)
    and scope (all runs, each drafter kind, each batch), its runs, MAPE, worst error and
    coverage (the share of runs whose prediction lies inside the measured 95%
    interval), from `fidelity_summary`. Empty without in-run runs."""
    runs = _runs(result_or_runs)
    if not _has_inrun(runs):
        return pd.DataFrame()
    f = fidelity_summary(runs)
    rows = []

    def add(label, scope, sc):
        if sc and sc.get("n_runs"):
            rows.append({"prediction": label, "runs": scope, "n": sc["n_runs"],
                         "MAPE %": sc["mape_pct"], "worst %": sc["max_abs_error_pct"],
                         "coverage %": sc.get("coverage_pct")})

    if "prior" in f:
        add(PREDICTION_LABELS["prior"], "all", f["prior"])
        for k, v in f["prior"].get("by_drafter", {}).items():
            add(PREDICTION_LABELS["prior"], k, v)
    add(PREDICTION_LABELS["inrun"], "all", f)
    for k, v in f.get("by_drafter", {}).items():
        add(PREDICTION_LABELS["inrun"], k, v)
    for k, v in f.get("by_batch", {}).items():
        add(PREDICTION_LABELS["inrun"], f"batch {k}", v)
    for k, v in f.get("by_clock", {}).items():
        add(PREDICTION_LABELS["inrun"], f"{k} clock", v)
    add(PREDICTION_LABELS["given"], "all", f.get("given_acceptance"))
    return pd.DataFrame(rows).astype({"coverage %": float}) if rows else pd.DataFrame()


def _mape_lines(result) -> list[str]:
    t = mape_table(result)
    if t.empty:
        return []
    return ["", "Prediction against measurement (relative error of the speedup; coverage: "
            "runs whose prediction lies in the measured speedup's 95% interval). The "
            "prediction before the run is the one to use; the in-run prediction is its "
            "decomposition, which says which term missed (section *Predicted against "
            "measured, in-run costs*):", "", _fmt(t, ".1f")]


def _busy_lines(result) -> list[str]:
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

    runs = _runs(result)
    if runs.empty or S.STOPPED not in runs or not hasattr(result, "settings") \
            or not hasattr(result.settings, "target_half_width"):
        return {}
    return summary(getattr(result, "environment", {}), runs, result.settings)


def summary_table(result) -> str:
    """The terminal summary: the speedup table and the MAPE of each prediction."""
    if result.runs.empty:
        return "(no generation runs in this demo)"
    t = mape_table(result)
    return "\n".join([_fmt(speedup_table(result), ".2f"), "",
                      *([_fmt(t, ".1f")] if not t.empty else []), *_busy_lines(result)])


# ---- report.md, one function per section ------------------------------------------------------
def _header(result) -> list[str]:
    s, env = result.settings, result.environment
    return [f"# specsim demo: {env.get('model')} on {', '.join(env['devices'])}", "",
            f"Command: `specsim demo{' --quick' if s.quick else ''}` · parts "
            f"{', '.join(s.parts)} · date {env['date']} · commit {env['git_commit']} · jax "
            f"{env['jax']} / jaxlib {env['jaxlib']} · CPU {env['cpu']} ({env['cpu_count']} "
            f"cores) · dtype {env['dtype']} · layer loop {env.get('layer_loop')} · matmul "
            f"{env.get('matmul', 'xla')} · {_compiler(env)} · seed {env['seed']} · wall "
            f"{env.get('wall_s')} s{_part_times(env)}", ""]


def _part_times(env) -> str:
    """" (roofline 80 s, instrument 200 s, ...)": each part's wall time, where recorded."""
    parts = env.get("part_wall_s") or {}
    return f" ({', '.join(f'{k} {v:.0f} s' for k, v in parts.items())})" if parts else ""


def _compiler(env) -> str:
    """The XLA options the programs compiled with (`specsim.models.compiler`), as the
    environment recorded them (older results did not)."""
    if "compiler_options" not in env:
        return "compiler options not recorded"
    opts = env["compiler_options"]
    return "compiler options " + (", ".join(f"{k}={v}" for k, v in opts.items()) or "XLA's defaults")


INSTRUMENT = "instrument"
"""The synthetic drafter whose α and draft cost are set (`specsim.drafters.instrument`):
it tests the theory over (α, c); a user cannot deploy it."""


def _is_instrument(spec: pd.DataFrame) -> pd.Series:
    if S.DRAFTER_KIND in spec:
        return spec[S.DRAFTER_KIND] == INSTRUMENT
    return spec[S.DRAFTER].astype(str).str.startswith(INSTRUMENT)


def _best(runs: pd.DataFrame, spec: pd.DataFrame, rates: dict) -> dict | None:
    """The (drafter, K, temperature, batch) of ``spec`` with the highest mean measured
    speedup over the kinds of work, with its range, predictions and decode speed."""
    if spec.empty or spec[S.MEASURED_SPEEDUP].isna().all():
        return None
    table = speedup_table(spec)
    best = table.loc[table["measured"].idxmax()]
    key = {c: best[c] for c in (S.DRAFTER, S.TEMPERATURE, S.K, S.BATCH)}
    same = spec[np.logical_and.reduce([spec[c] == v for c, v in key.items()])]
    rate = rates[(best[S.TEMPERATURE], best[S.BATCH])] / best["measured"]
    mean = lambda col: float(same[col].mean()) if col in same else float("nan")  # noqa: E731
    return {**{c: (v.item() if hasattr(v, "item") else v) for c, v in key.items()},
            "speedup": float(best["measured"]),
            "speedup_min": float(same[S.MEASURED_SPEEDUP].min()),
            "speedup_max": float(same[S.MEASURED_SPEEDUP].max()),
            "ci_lo": mean(S.MEASURED_CI_LO), "ci_hi": mean(S.MEASURED_CI_HI),
            "kinds": len(same), "pred_iid": float(best["pred_iid"]),
            "pred_prior": mean(S.PRED_PRIOR),
            # the in-run prediction (in-run costs, measured per-position acceptance)
            # where the runs have it, else E(α, K) from one α
            "predicted": mean(S.PREDICTED_SPEEDUP) if S.PREDICTED_SPEEDUP in same
            else float(best["pred_iid"]),
            "predicted_by": "in-run costs, per-position α" if S.PREDICTED_SPEEDUP in same
            else f"i.i.d. α per slot {float(best['alpha']):.2f}",
            "alpha": float(best["alpha"]), "ms_per_token": 1e3 * float(rate),
            "tokens_per_s": 1.0 / float(rate)}


def headline(result_or_runs) -> dict | None:
    """What report.md says first: plain (autoregressive) decode speed at the smallest
    batch, ms/token and tokens/s per temperature (decode time per new token, prefill
    excluded; median over the baseline runs, `prediction.baseline_rates`); ``best``: the
    setting (drafter, K, temperature, batch) of a drafter a user can deploy (every
    drafter but the instrument) with the highest mean measured speedup over the kinds of
    work, with its range over them and its decode speed; ``instrument``: the same for
    the instrument, which tests the theory. None when the runs hold no baseline."""
    runs = _runs(result_or_runs)
    ar = runs[runs[S.DRAFTER] == S.AUTOREGRESSIVE]
    if ar.empty:
        return None
    batch = ar[S.BATCH].min()
    rates = baseline_rates(runs)
    plain = [{S.TEMPERATURE: float(t), "ms_per_token": 1e3 * r, "tokens_per_s": 1.0 / r}
             for (t, b), r in sorted(rates.items()) if b == batch]
    spec = S.speculative(runs)
    inst = _is_instrument(spec) if not spec.empty else pd.Series(dtype=bool)
    return {"batch": int(batch), "plain": plain,
            "baseline_runs": int((ar[S.BATCH] == batch).sum()),
            "best": _best(runs, spec[~inst], rates) if not spec.empty else None,
            "instrument": _best(runs, spec[inst], rates) if not spec.empty else None}


def _setting(b: dict) -> str:
    return f"{b[S.DRAFTER]}, K = {b[S.K]}, T = {b[S.TEMPERATURE]:g}, batch {b[S.BATCH]}"


def _ci(b: dict) -> str:
    if np.isfinite(b.get("ci_lo", np.nan)):
        return f", 95% interval {b['ci_lo']:.2f}–{b['ci_hi']:.2f}×"
    return ""


def _headline_section(result) -> list[str]:
    h = headline(result) if not result.runs.empty else None
    if h is None:
        return []
    speeds = "; ".join(f"T = {p[S.TEMPERATURE]:g}: **{p['ms_per_token']:.1f} ms/token, "
                       f"{p['tokens_per_s']:.1f} tokens/s**" for p in h["plain"])
    clock = result.runs[S.CLOCK].iloc[0] if S.CLOCK in result.runs else "wall"
    # the CPU clock charges every thread: a step of a multi-threaded kernel (specsim's CPU
    # matmul kernel splits its columns over the cores) costs more CPU time than wall time
    clock_note = ", CPU time summed over threads" if clock == "cpu" else ""
    lines = ["## Headline", "",
             f"- Plain decode (autoregressive, batch {h['batch']}, prefill excluded, median "
             f"of {h['baseline_runs']} runs, clock: {clock}{clock_note}): {speeds}."]
    b = h["best"]
    if b is not None:
        verdict = "Best drafter you can deploy" if b["speedup"] > 1 else \
            "No deployable drafter beat plain decode; the closest"
        prior = (f"; predicted before the run {b['pred_prior']:.2f}×"
                 if np.isfinite(b["pred_prior"]) else "")
        lines.append(
            f"- {verdict}: **{_setting(b)}: {b['speedup']:.2f}× measured**{_ci(b)} (range "
            f"{b['speedup_min']:.2f}–{b['speedup_max']:.2f}× over {b['kinds']} kinds of "
            f"work{prior}; in-run prediction {b['predicted']:.2f}× from "
            f"{b['predicted_by']}) → {b['ms_per_token']:.1f} ms/token, "
            f"{b['tokens_per_s']:.1f} tokens/s.")
    i = h["instrument"]
    if i is not None:
        lines.append(
            f"- The instrument drafter is not one to deploy: it sets α and the draft cost c "
            f"to test the theory over (α, K, c). Its fastest setting here, {_setting(i)}, "
            f"ran {i['speedup']:.2f}×{_ci(i)}.")
    lines += _mape_lines(result) + _busy_lines(result)
    return lines + [""]


def _machine_section(result) -> list[str]:
    if result.ceilings.empty:
        return []
    c = result.ceilings[[S.DEVICE, "dtype", S.MATMUL_FLOPS_PER_S, S.COPY_BYTES_PER_S]].copy()
    c["matmul GFLOP/s"] = c.pop(S.MATMUL_FLOPS_PER_S) / 1e9
    c["copy GB/s"] = c.pop(S.COPY_BYTES_PER_S) / 1e9
    frows = [dict(model=name, t0_ms=f.t0 * 1e3, t0_se_ms=f.t0_se * 1e3,
                  P_GFLOPs=f.peak_flops / 1e9, W_GBs=f.bandwidth / 1e9,
                  W_se_GBs=f.bandwidth_se / 1e9, R2=f.r2, heldout_MAPE_pct=f.mape_heldout,
                  points=f.n_train + f.n_heldout) for name, f in result.fits.items()]
    return ["## 1. The machine and the fitted roofline", "",
            "Measured ceilings (large matmul, large copy counting read + write):", "",
            _fmt(c, ".1f"), "",
            "Roofline fits t(n) = t0 + max(FLOPs/P, bytes/W) to each model's forward sweep "
            "(FLOPs and bytes from `roofline.forward_cost`; 25% of points held out):", "",
            _fmt(pd.DataFrame(frows), ".3g"), "",
            "![roofline](roofline.png) ![latency](latency_vs_tokens.png)", ""]


def _fidelity_section(result) -> list[str]:
    if result.runs.empty:
        return []
    return ["## 2–3. Speculative decoding: predicted against measured", "",
            "α: accepted drafts per draft slot; measured speedup: autoregressive decode time "
            "per token over speculative decode time per token (prefill removed), mean over "
            f"the kinds of work {list(result.settings.kinds)}, with its 95% interval (`ci_lo`, "
            "`ci_hi`, mean over the kinds); `pred_prior`: the prediction before the run "
            "(fitted roofline, the drafter's α known beforehand); `pred_iid` uses E(α, K) for "
            "the run's one measured α, `pred_pos` its per-position rates, both with the pass "
            "times of the run's own rounds (in-run parts) or the fitted roofline's (older "
            "tables); `pred_swept` the per-position rates with the forward sweep's own median "
            "pass times; `overhead`: measured decode time over iterations × (K·t_draft + "
            "t_verify(K+1)); `err_*_%`: each prediction's relative error (the report's "
            "MAPEs are in the one table under the headline).",
            "",
            _fmt(speedup_table(result), ".2f"), "",
            "Largest misses:", "", _fmt(worst_runs(result), ".2f"), "",
            "![speedup](speedup_vs_k.png)", "", "![acceptance](acceptance_by_position.png)", "",
            "α by kind of work (mean over K):", "", _fmt(alpha_by_kind(result), ".2f"), ""]


def _hardware_section(result) -> list[str]:
    if result.hardware.empty:
        return []
    hw = hardware_table(result)
    return ["## 4. The same acceptance on other hardware", "",
            "Speedup from the roofline of the model's FLOPs and bytes in "
            f"{result.settings.hardware_dtype} on datasheet rows (no launch overhead, so small "
            "models look more memory-bound than they run), beside this machine's fitted "
            "roofline:", "", _fmt(hw, ".2f"), ""]


# ---- the in-run cost model -----------------------------------------------------------
def _has_inrun(runs: pd.DataFrame) -> bool:
    return not runs.empty and S.PREDICTED_SPEEDUP in runs


def fidelity_summary(result_or_runs) -> dict:
    """``{"mape_pct", "max_abs_error_pct", "n_runs"}`` of the headline prediction, overall,
    per drafter kind and per batch (`specsim.experiment.decomposition.fidelity_summary`)."""
    from specsim.experiment.decomposition import fidelity_summary as summary
    return summary(_runs(result_or_runs))


def decomposition_table(result_or_runs) -> pd.DataFrame:
    """Per run: measured and predicted speedup and the three log-percent terms of their
    miss (acceptance model, cost model, residual loop overhead), which add up to the total."""
    spec = S.speculative(_runs(result_or_runs))
    cols = [S.DRAFTER, S.KIND, S.K, S.BATCH, S.TEMPERATURE, S.ALPHA, S.COST_RATIO,
            S.MEASURED_SPEEDUP, S.MEASURED_CI_LO, S.MEASURED_CI_HI, S.ROUNDS, S.PRED_PRIOR,
            S.ERR_PRIOR, S.ERR_PRIOR_CI_LO, S.ERR_PRIOR_CI_HI, S.ERR_PRIOR_ALPHA,
            S.ERR_PRIOR_FIT, S.PREDICTED_SPEEDUP, S.ERR_TOTAL, S.ERR_TOTAL_CI_LO,
            S.ERR_TOTAL_CI_HI, *S.DECOMPOSITION, S.ERR_ACCEPT_IID, S.ERR_ACCEPT_POSITIONAL]
    return spec[[c for c in cols if c in spec]]


def decomposition_summary(result_or_runs) -> pd.DataFrame:
    """Mean and mean absolute value of each error term per drafter kind and batch: the
    largest source of error at a glance. The prediction before the run's miss is its α
    term, its fitted costs' term and the in-run miss, which splits into acceptance, cost
    and loop overhead."""
    spec = S.speculative(_runs(result_or_runs))
    terms = [c for c in (S.ERR_PRIOR, S.ERR_PRIOR_ALPHA, S.ERR_PRIOR_FIT) if c in spec
             and spec[c].notna().any()] + [S.ERR_TOTAL, *S.DECOMPOSITION]
    g = spec.groupby([S.DRAFTER_KIND, S.BATCH])
    out = g[terms].mean().add_suffix(" mean")
    out = out.join(g[terms].agg(lambda x: x.abs().mean()).add_suffix(" |mean|"))
    out.insert(0, "runs", g.size())
    return out.reset_index()


def fidelity_headline(f: dict, bold: bool = False) -> str:
    """"MAPE x%, worst y%, coverage z% over n speculative runs" of a `fidelity_summary`
    (or of its ``prior`` part), or why it is not scored (no run with a finite measured
    and predicted speedup)."""
    b = "**" if bold else ""
    if not f["n_runs"]:
        return (f"{b}MAPE not scored: no speculative run has both a finite measured and a "
                f"finite predicted speedup{b} (a measured speedup is NaN where the run's decode "
                "time, its time less the prefill, was not positive: runs too short for this "
                "machine's timer; raise --max-new-tokens)")
    cov = f.get("coverage_pct")
    cov = f", coverage {cov:.0f}%" if cov is not None else ""
    return (f"{b}MAPE {f['mape_pct']:.1f}%, worst {f['max_abs_error_pct']:.1f}%{cov} over "
            f"{f['n_runs']} speculative runs{b}")


def _inrun_section(result) -> list[str]:
    runs = result.runs
    if not _has_inrun(runs):
        return []
    clock = runs[S.CLOCK].iloc[0] if S.CLOCK in runs else "wall"
    lines = ["## Predicted against measured, in-run costs", "",
             f"Clock: {clock}. Timing: every speculative run is timed in paired rounds, "
             "each round its own plain-decoding baseline, the run, then the pass programs "
             "its prediction reads, back to back (`specsim.experiment.paired`); the "
             "measured speedup is the ratio of the medians over rounds, and its 95% "
             "interval (`measured_speedup_ci_lo`/`_hi`) a bootstrap over rounds "
             "(`specsim.experiment.intervals`). Rounds go on until that interval is within "
             "the target half-width or the part's time budget is spent (`rounds`, "
             "`stopped`). The prediction before the run (`pred_speedup_prior`, the headline) "
             "takes every pass time from the fitted roofline and the drafter's α known "
             "beforehand: set for the instrument, from untimed calibration runs on other "
             "prompts of the same kind for a real drafter (`acceptance_prior.csv`). The "
             "in-run prediction `predicted_speedup` = E_model · t_target_1 / (K · t_draft + "
             "t_verify) takes the pass times of the run's own rounds (`specsim.pass_costs`: "
             "same layer loop, cache length, batch, padded shapes) and E_model from the "
             "run's per-position rates α_j per slot, for a finite run whose slowest batch "
             "row ends it; its miss splits exactly into three terms (100·ln ratio) adding "
             "up to `err_total_pct`: acceptance model (E_model vs n/I), cost model (pass "
             "program vs the step inside the autoregressive run), residual loop overhead "
             "(the iteration inside the run vs K·t_draft + t_verify). Their errors are in "
             "the headline's table.", "",
             "Error decomposition by drafter and batch (log-percent; `err_prior_pct` = "
             "`err_prior_alpha_pct` (the α known before the run against the run's own "
             "α_j) + `err_prior_fit_pct` (the fitted roofline's pass times against the "
             "run's own) + `err_total_pct` (the in-run miss) = the three terms after it):",
             "",
             _fmt(decomposition_summary(runs), ".1f"), "",
             "![surface](speedup_surface.png)", "",
             "![predicted vs measured](predicted_vs_measured_band.png)", ""]
    be = getattr(result, "tables", {}).get(S.BREAK_EVEN)
    if be is not None and not be.empty:
        lines += ["Break-even batch (speculation stops paying; inf: pays on the whole grid):",
                  "", _fmt(be, ".1f"), ""]
    return lines + ["Every run:", "", _fmt(decomposition_table(runs), ".2f"), ""]


def _machine_state_section(result) -> list[str]:
    m = machine_summary(result)
    if not m:
        return []
    rows = []
    for name, key, scale, unit in (("matmul", "matmul_flops_per_s", 1e9, "GFLOP/s"),
                                   ("copy", "copy_bytes_per_s", 1e9, "GB/s")):
        a, b = m["start"].get(key, np.nan), m["end"].get(key, np.nan)
        rows.append({"ceiling": f"{name} ({unit})", "start": a / scale, "end": b / scale,
                     "change %": 100 * m["drift"][key]})
    load = (m["start"].get("load_1min", np.nan), m["end"].get("load_1min", np.nan))
    timing = pd.DataFrame(getattr(result, "environment", {}).get("timing", []))
    lines = ["## The machine while it ran", "",
             "Ceilings measured at the start and the end of the demo (1024² matmul, 128 MiB "
             f"copy); load average {load[0]:.1f} at the start, {load[1]:.1f} at the end "
             f"({m['start'].get('cpu_count')} cores):", "", _fmt(pd.DataFrame(rows), ".1f"), "",
             f"CPU time over wall time of the timed calls: median {m['cpu_over_wall']:.2f} "
             "over runs (above 1: the kernels use several threads; a drop from one run to "
             "the next means other processes took the cores). Spread of each run's own "
             f"baseline over its rounds, (max − min) / median: median "
             f"{m['baseline_spread_pct']:.1f}%. {m['converged']} of {m['runs']} runs reached "
             f"±{100 * m['target_half_width']:g}% on the measured speedup."]
    if not timing.empty:
        lines += ["", "Timed rounds per group:", "", _fmt(timing, ".2f")]
    if m["unconverged"]:
        lines += ["", "Runs that did not converge (and why their rounds stopped):", "",
                  _fmt(pd.DataFrame(m["unconverged"]), ".2f")]
    if m["busy"]:
        lines += ["", "**Too busy for the stated precision**: " + "; ".join(m["busy"]) + "."]
    return lines + [""]


def drafter_alpha_table(alpha_by_kind: pd.DataFrame) -> pd.DataFrame:
    """The drafters part's α per slot, one column per kind of work, one row per
    (target, drafter, temperature, K)."""
    return alpha_by_kind.pivot_table(index=[S.TARGET, S.DRAFTER, S.TEMPERATURE, S.K],
                                     columns=S.KIND, values=S.ALPHA,
                                     aggfunc="mean").reset_index()


def drafter_speedup_table(speedup: pd.DataFrame) -> pd.DataFrame:
    """The drafters part's speedups, mean over the kinds of work, per (target, drafter, K)."""
    removed = {"prefill_removed": ("prefill_removed", "all")} \
        if "prefill_removed" in speedup else {}          # tables written before the column
    return speedup.groupby([S.TARGET, S.DRAFTER, S.K], as_index=False).agg(
        alpha=(S.ALPHA, "mean"), measured=(S.MEASURED_SPEEDUP, "mean"),
        pred_iid=(S.PRED_IID, "mean"), pred_pos=(S.PRED_POSITIONAL, "mean"),
        pred_closed_form=(S.PRED_CONSTANT_COST, "mean"),
        vs_fp32_target=("speedup_vs_main_target", "mean"), **removed)


def _drafters_section(result) -> list[str]:
    t = getattr(result, "tables", {})
    if S.DRAFTER_COSTS not in t:
        return []
    costs = t[S.DRAFTER_COSTS].drop(columns=[S.T_TARGET_1, S.T_VERIFY], errors="ignore")
    return ["## Drafters: quantised self-draft, distilled, n-gram, layer-skip", "",
            "α per draft slot by kind of work (`alpha_by_kind.csv`; a quantised target is a "
            "row of its own):", "", _fmt(drafter_alpha_table(t[S.ALPHA_BY_KIND]), ".2f"), "",
            "Cost ratio c: measured from the loop's own draft and target programs "
            "(`pass_costs`, same interleaved rounds), from the roofline's bytes at the "
            "draft's stored weight width (`c_bytes`), and with the fp32 copies XLA:CPU "
            "writes and reads of every dequantised matrix (`c_bytes_materialised`):", "",
            _fmt(costs, ".3g"), "",
            "Speedup against K at temperature 0 (decode time per token: each call's loop "
            "program timed alone, its prefills run before it untimed; older tables "
            "subtracted a prefill timed alone, and `prefill_removed` false marks "
            "their rows where it took up a whole run; "
            "`pred_iid`/`pred_pos`: E(α, K) / the run's tokens per iteration with the "
            "measured pass times; `pred_closed_form`: Thm 3.8 at the measured c):", "",
            _fmt(drafter_speedup_table(t[S.DRAFTER_SPEEDUP]), ".2f"), "",
            "![drafters](drafters_speedup_vs_k.png) ![alpha](drafters_alpha_by_kind.png)", "",
            "What limits each drafter (closed form at temperature 0, mean α over the kinds; "
            "α and c needed for 1.5× minimised over K ≤ 16):", "",
            _fmt(t[S.DRAFTER_LIMITS], ".3g"), ""]


SECTIONS: list[Callable[[object], list[str]]] = [
    _header, _headline_section, _machine_section, _fidelity_section, _hardware_section,
    _inrun_section, _machine_state_section, _drafters_section]
"""report.md's sections in order; a new demo part appends the function for its own."""


def report_md(result) -> str:
    return "\n".join(line for section in SECTIONS for line in section(result)) + "\n"


# ---- files ------------------------------------------------------------------------------------
def _write_tables(result, folder: Path) -> None:
    for name, table in getattr(result, "tables", {}).items():
        table.to_csv(folder / f"{name}.csv", index=False)
    if not result.runs.empty:
        speedup_table(result).to_csv(folder / "speedup_table.csv", index=False)
    if _has_inrun(result.runs):
        f = fidelity_summary(result)
        machine = machine_summary(result)
        if machine:
            f["machine"] = machine
        (folder / f"{S.FIDELITY}.json").write_text(json.dumps(f, indent=1, default=str))
    (folder / "fits.json").write_text(json.dumps(
        {k: v.as_dict() for k, v in result.fits.items()}, indent=1, default=str))
    (folder / "environment.json").write_text(
        json.dumps(result.environment, indent=1, default=str))


def _swap_in(tmp: Path, out_dir: Path) -> None:
    old = None
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_demo(result, out_dir: Path, figures: Mapping[str, object] | None = None) -> list[str]:
    """Write every table, report.md and ``figures`` (file name -> anything with
    ``savefig``, e.g. from `specsim.plots.experiment.demo_figures`) into a fresh folder
    beside ``out_dir`` and swap it in. Returns the file names."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        _write_tables(result, tmp)
        for name, fig in (figures or {}).items():
            fig.savefig(tmp / name, dpi=110)
        (tmp / "report.md").write_text(report_md(result))
        files = sorted(p.name for p in tmp.iterdir())
        _swap_in(tmp, out_dir)
        return files
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# ---- the policies part --------------------------------------------------------------------------
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


def _policies_section(result) -> list[str]:
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
            _fmt(policies_table(result), ".2f"), "",
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


SECTIONS.append(_policies_section)
