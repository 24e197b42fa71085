"""The headline of report.md: plain decode speed, the best setting of a drafter a user
can deploy, and the instrument's (which tests the theory), with the prediction errors
under them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from specsim import schema as S
from specsim.experiment.prediction import baseline_rates
from specsim.report.fidelity import busy_lines, mape_lines
from specsim.report.tables import as_runs, speedup_table


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
            # the in-run prediction (in-run costs, the acceptance the run had)
            # where the runs have it, else E(α, K) from one α
            "predicted": mean(S.PREDICTED_SPEEDUP) if S.PREDICTED_SPEEDUP in same
            else float(best["pred_iid"]),
            "predicted_by": "in-run costs, the run's own n/I" if S.PREDICTED_SPEEDUP in same
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
    runs = as_runs(result_or_runs)
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


def headline_section(result) -> list[str]:
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
    lines += mape_lines(result) + busy_lines(result)
    return lines + [""]
