"""The prediction of one speculative run from in-run pass times, and the exact
decomposition of its miss (NumPy only; the numbers come from `specsim.experiment.inrun`).

With n decode tokens per row, I batched iterations, the run's effective tokens per
iteration E_eff = n / I, the in-run autoregressive step t1_run = (T_AR − prefill) / n and
the in-run iteration t_iter_run = (T_spec − prefill) / I, the measured speedup is
exactly ``E_eff · t1_run / t_iter_run``. The in-run prediction is ``E_eff · t1 / t_iter``
with t1 and t_iter = K · t_draft + t_verify(K+1) timed by the pass programs of
`specsim.pass_costs` in the same rounds: the acceptance the run had, the costs timed
beside it. So

    predicted / measured = (t1 / t1_run) · (t_iter_run / t_iter)
                            cost model       residual loop overhead

and in log-percent (100 · ln ratio) the two terms add up to the total error exactly.

The acceptance model is scored apart: E_model, the expected tokens per iteration of a run
of this length and batch at the run's own per-position rates, against E_eff. At batch 1
the rates' product telescopes to the run's own tokens per iteration, so E_model differs
from E_eff only by the last iteration's overshoot (an integer number of tokens, a
quantisation of the run that no timing interval holds); at larger batches also by the
slowest row (docs/measurement.md, "Which acceptance the in-run prediction takes").
"""

from __future__ import annotations

import math

import numpy as np

from specsim import analytic, schema
from specsim.errors import InvalidArgument


def log_pct(ratio: float) -> float:
    """100 · ln(ratio): a relative error that adds up across factors."""
    return 100.0 * math.log(ratio) if ratio > 0 else math.nan


def finite_run_tokens(pmf, n_tokens: int, batch: int) -> float:
    """Effective tokens per iteration of a run of ``n_tokens`` decode tokens per row at
    ``batch`` rows whose tokens per iteration follow ``pmf`` (j = 1..K+1): n / E[max_b I_b]."""
    from specsim.finite_run import expected_iterations
    return n_tokens / expected_iterations(pmf, n_tokens, batch)


def decompose(*, e_model: float, n_tokens: int, iterations: int, k: int, t_ar: float,
              t_spec: float, prefill: float, prefill_spec: float, t_target_1: float,
              t_verify: float, t_draft: float) -> dict[str, float]:
    """Measured and predicted speedup of one run, the two factors of their ratio and the
    acceptance model's term (see the module docstring). Times in seconds; ``t_ar``/``t_spec`` whole runs,
    ``prefill``/``prefill_spec`` their prefill, pass times per pass. A run whose time
    does not exceed its prefill's has no measured speedup (NaN, and NaN errors)."""
    for name, v in (("n_tokens", n_tokens), ("iterations", iterations), ("k", k)):
        if not v >= 1:
            raise InvalidArgument(f"{name} must be >= 1, got {v!r}")
    for name, v in (("t_ar", t_ar), ("t_spec", t_spec), ("t_target_1", t_target_1),
                    ("t_verify", t_verify), ("e_model", e_model)):
        if not v > 0:
            raise InvalidArgument(f"{name} must be > 0, got {v!r}")
    if not t_draft >= 0:
        raise InvalidArgument(f"t_draft must be >= 0 seconds, got {t_draft!r}")
    e_eff = n_tokens / iterations
    t_iter = k * t_draft + t_verify
    if t_ar > prefill and t_spec > prefill_spec:
        t1_run = (t_ar - prefill) / n_tokens
        titer_run = (t_spec - prefill_spec) / iterations
        measured = e_eff * t1_run / titer_run
    else:   # decode time not above its prefill's (a tiny model, noise): nothing measured
        t1_run = titer_run = measured = math.nan
    predicted = float(analytic.speedup_from_costs(e_eff, k, t_draft, t_target_1, t_verify))
    return {schema.E_EFFECTIVE: e_eff, schema.E_MODEL: e_model,
            schema.T_TARGET_1_RUN: t1_run, schema.T_ITERATION_RUN: titer_run,
            schema.T_TARGET_1: t_target_1, schema.T_VERIFY: t_verify, schema.T_DRAFT: t_draft,
            schema.COST_RATIO: t_draft / t_target_1, schema.MEASURED_SPEEDUP: measured,
            schema.PREDICTED_SPEEDUP: predicted,
            schema.PRED_EXPECTED_ACCEPTANCE: float(analytic.speedup_from_costs(
                e_model, k, t_draft, t_target_1, t_verify)),
            schema.ERR_TOTAL: log_pct(predicted / measured),
            schema.ERR_ACCEPTANCE: log_pct(e_model / e_eff),
            schema.ERR_COST: log_pct(t_target_1 / t1_run),
            schema.ERR_OVERHEAD: log_pct(titer_run / t_iter),
            schema.LOOP_OVERHEAD: titer_run / t_iter}


def acceptance_variants(row: dict, stats, k: int) -> dict[str, float]:
    """The acceptance models side by side for one run (`SpeculativeStats`): E from one
    measured α (i.i.d.), from the per-position rates, and the loop's mean tokens per
    iteration, each as its error against E_eff (log-percent), and the speedup each
    predicts with the in-run costs."""
    rates = np.nan_to_num(stats.per_position_per_slot, nan=0.0)
    e = {schema.E_IID: float(analytic.expected_tokens(stats.alpha_per_slot, k)),
         schema.E_POSITIONAL: float(analytic.expected_tokens_positional(rates)),
         schema.TOKENS_PER_ITERATION: float(stats.tokens_per_iteration)}
    e_eff = row[schema.E_EFFECTIVE]
    out = {schema.E_IID: e[schema.E_IID], schema.E_POSITIONAL: e[schema.E_POSITIONAL],
           schema.ERR_ACCEPT_IID: log_pct(e[schema.E_IID] / e_eff),
           schema.ERR_ACCEPT_POSITIONAL: log_pct(e[schema.E_POSITIONAL] / e_eff),
           schema.ERR_ACCEPT_TPI: log_pct(e[schema.TOKENS_PER_ITERATION] / e_eff)}
    for col, ecol in ((schema.PRED_IID, schema.E_IID), (schema.PRED_POSITIONAL, schema.E_POSITIONAL)):
        out[col] = float(analytic.speedup_from_costs(e[ecol], k, row[schema.T_DRAFT],
                                                     row[schema.T_TARGET_1], row[schema.T_VERIFY]))
    return out


def score(d, pred: str = schema.PREDICTED_SPEEDUP, meas: str = schema.MEASURED_SPEEDUP) -> dict:
    """``{"mape_pct", "max_abs_error_pct", "coverage_pct", "agreement_pct", "n_runs"}``
    of prediction ``pred`` against ``meas`` over the rows of ``d`` with both finite:
    relative error |predicted − measured| / measured in per cent; coverage, the share of
    runs whose prediction lies inside the measured speedup's 95% interval; and, for the
    in-run prediction and the one with the expected acceptance, agreement, the share whose
    error's 95% interval (both sides resampled over the same paired rounds, so the pass
    programs' timing noise counts as well as the run's) holds 0 (None where the intervals
    are missing)."""
    from specsim.experiment.intervals import coverage

    d = d[np.isfinite(d[pred]) & np.isfinite(d[meas])] if len(d) else d
    err = 100 * (d[pred] - d[meas]).abs() / d[meas]
    cov = None
    if len(d) and meas == schema.MEASURED_SPEEDUP and schema.MEASURED_CI_LO in d:
        c = coverage(d[pred], d[schema.MEASURED_CI_LO], d[schema.MEASURED_CI_HI])
        cov = round(100 * c, 1) if np.isfinite(c) else None
    agree = None
    bounds = _error_interval(d, pred) if len(d) else None
    if bounds is not None:
        a = coverage(np.zeros(len(d)), *bounds)
        agree = round(100 * a, 1) if np.isfinite(a) else None
    return {"mape_pct": round(float(err.mean()), 3) if len(d) else None,
            "max_abs_error_pct": round(float(err.max()), 3) if len(d) else None,
            "coverage_pct": cov, "agreement_pct": agree, "n_runs": int(len(d))}


def _error_interval(d, pred: str):
    """(lo, hi) of the 95% interval of prediction ``pred``'s error in log-percent over the
    rows of ``d``, or None where the runs table has none: the in-run prediction's own, and
    the same plus the acceptance term for the prediction with the expected acceptance
    (E_model is a constant of the run, so its error's interval is the in-run one shifted)."""
    if schema.ERR_TOTAL_CI_LO not in d:
        return None
    lo, hi = d[schema.ERR_TOTAL_CI_LO].astype(float), d[schema.ERR_TOTAL_CI_HI].astype(float)
    if pred == schema.PREDICTED_SPEEDUP:
        return lo, hi
    if pred == schema.PRED_EXPECTED_ACCEPTANCE and schema.ERR_ACCEPTANCE in d:
        term = d[schema.ERR_ACCEPTANCE].astype(float)
        return lo + term, hi + term
    return None


def fidelity_summary(runs) -> dict:
    """The in-run prediction's `score` over the speculative runs, overall,
    ``by_drafter`` (kind of drafter), ``by_batch`` and ``by_clock`` (each clock's own
    prediction against its own measurement); ``prior``: the prediction made before the
    run (fitted roofline, the drafter's α on the run's prompt known beforehand), overall
    and by drafter kind; ``prior_other_prompts``: the same with α from other prompts of
    the kind; ``expected_acceptance``: the in-run costs with E_model, the expected
    acceptance of a run of this length at the run's own rates, which adds the acceptance
    model to the cost model; ``acceptance_draw`` (`draw_summary`)."""
    spec = schema.speculative(runs)
    spec = spec[np.isfinite(spec[schema.PREDICTED_SPEEDUP]) & np.isfinite(spec[schema.MEASURED_SPEEDUP])]
    out = score(spec)
    out["by_drafter"] = {str(k): score(g) for k, g in spec.groupby(schema.DRAFTER_KIND)}
    out["by_batch"] = {str(int(k)): score(g) for k, g in spec.groupby(schema.BATCH)}
    if schema.CLOCK in spec and len(spec):
        out["clock"] = str(spec[schema.CLOCK].iloc[0])
    out["by_clock"] = {name: score(spec, schema.PREDICTED_BY_CLOCK[name], col)
                       for name, col in schema.MEASURED_BY_CLOCK.items()
                       if col in spec and schema.PREDICTED_BY_CLOCK[name] in spec}
    for key, col in (("prior", schema.PRED_PRIOR),
                     ("prior_other_prompts", schema.PRED_PRIOR_OTHER)):
        if col in spec:
            out[key] = score(spec, col)
            out[key]["by_drafter"] = {str(k): score(g, col)
                                      for k, g in spec.groupby(schema.DRAFTER_KIND)}
    if schema.ERR_ACCEPTANCE_DRAW_LO in spec:
        out["acceptance_draw"] = draw_summary(spec)
    if schema.PRED_EXPECTED_ACCEPTANCE in spec:   # adds the acceptance model (E_model)
        expected = spec[np.isfinite(spec[schema.PRED_EXPECTED_ACCEPTANCE])]
        out["expected_acceptance"] = score(expected, schema.PRED_EXPECTED_ACCEPTANCE)
        out["expected_acceptance"]["by_batch"] = {
            str(int(k)): score(g, schema.PRED_EXPECTED_ACCEPTANCE)
            for k, g in expected.groupby(schema.BATCH)}
    return out


def draw_summary(spec) -> dict:
    """How far the runs' own draw reaches: the share of runs whose acceptance term lies in
    the 95% range of runs simulated at their rates, length and batch (about 95% if the
    acceptance model holds), the median half-width of that range against the median
    measured 95% half-width (both in per cent), and the share of runs whose draw
    half-width exceeds their measured one (a run whose acceptance term alone can leave
    the measured interval); and agreement with the draw, the share of runs whose error
    with the expected acceptance (the in-run error plus the acceptance term), less the
    draw's midpoint, lies within the in-run error's 95% half-width (timing of both sides)
    and the draw's combined in quadrature."""
    lo = spec[schema.ERR_ACCEPTANCE_DRAW_LO].astype(float)
    d = spec[np.isfinite(lo)]
    if not len(d):
        return {"n_runs": 0}
    lo, hi = d[schema.ERR_ACCEPTANCE_DRAW_LO], d[schema.ERR_ACCEPTANCE_DRAW_HI]
    term = d[schema.ERR_ACCEPTANCE].astype(float)
    draw = (hi - lo) / 2
    meas = 100 * d[schema.MEASURED_HALF_WIDTH].astype(float)
    out = {}
    if schema.ERR_TOTAL_CI_LO in d:
        err_half = (d[schema.ERR_TOTAL_CI_HI] - d[schema.ERR_TOTAL_CI_LO]).astype(float) / 2
        off = (d[schema.ERR_TOTAL].astype(float) + term - (lo + hi) / 2).abs()
        ok = np.isfinite(err_half) & np.isfinite(off)
        if ok.any():
            out["agreement_with_draw_pct"] = round(100 * float(
                (off[ok] <= np.hypot(err_half[ok], draw[ok])).mean()), 1)
    return {**out, "acceptance_in_range_pct": round(100 * float(((lo <= term) & (term <= hi)).mean()), 1),
            "draw_half_width_median_pct": round(float(np.nanmedian(draw)), 2),
            "measured_half_width_median_pct": round(float(np.nanmedian(meas)), 2),
            "draw_wider_than_measured_pct": round(100 * float((draw > meas).mean()), 1),
            "n_runs": int(len(d))}
