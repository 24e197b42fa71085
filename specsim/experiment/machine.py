"""The machine's state over a demo, and whether it was quiet enough for the precision
asked (NumPy and pandas only): ceilings at the start and the end, CPU time over wall
time of the timed calls, the spread of the baselines, and the runs whose interval did
not reach ``target_half_width``."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from specsim import schema


def _drift(start: dict, end: dict, key: str) -> float:
    a, b = start.get(key, math.nan), end.get(key, math.nan)
    return float(b / a - 1) if a and np.isfinite(a) and np.isfinite(b) else math.nan


def machine_summary(environment: dict, runs: pd.DataFrame, settings) -> dict:
    """``{"start", "end", "drift", "cpu_over_wall", "baseline_spread_pct",
    "runs", "converged", "unconverged", "busy"}``: ``drift`` is each ceiling's relative
    change from the start to the end; ``unconverged`` lists the runs whose measured
    speedup's interval stayed wider than ``settings.target_half_width`` and why their
    rounds stopped; ``busy`` the reasons (empty when none) the machine was too busy to
    measure to that precision: more than ``settings.busy_unconverged_share`` of runs
    unconverged, or a matmul ceiling that moved by more than ``settings.busy_drift``.
    The copy ceiling's drift is reported but does not decide: a quiet VM reads its
    memory bandwidth 13–26% apart between a demo's start and end
    (docs/measurement.md)."""
    start, end = environment.get("machine_start", {}), environment.get("machine_end", {})
    drift = {k: _drift(start, end, k) for k in ("matmul_flops_per_s", "copy_bytes_per_s")}
    spec = schema.speculative(runs) if not runs.empty else runs
    have = not spec.empty and schema.STOPPED in spec
    out = {"start": start, "end": end, "drift": drift,
           "cpu_over_wall": float(spec[schema.CPU_OVER_WALL].median())
           if have else math.nan,
           "baseline_spread_pct": float(spec[schema.BASELINE_SPREAD].median())
           if have else math.nan,
           "target_half_width": settings.target_half_width, "runs": int(len(spec)),
           "converged": 0, "unconverged": [], "busy": []}
    if not have:
        return out
    bad = spec[spec[schema.MEASURED_HALF_WIDTH].isna()
               | (spec[schema.MEASURED_HALF_WIDTH] > settings.target_half_width)]
    out["converged"] = int(len(spec) - len(bad))
    out["unconverged"] = [
        {"drafter": r[schema.DRAFTER], "kind": r[schema.KIND], "k": int(r[schema.K]),
         "batch": int(r[schema.BATCH]), "rounds": int(r[schema.ROUNDS]),
         "half_width_pct": round(100 * float(r[schema.MEASURED_HALF_WIDTH]), 2),
         "stopped": r[schema.STOPPED]} for _, r in bad.iterrows()]
    share = len(bad) / len(spec)
    if share > settings.busy_unconverged_share:
        out["busy"].append(
            f"{len(bad)} of {len(spec)} runs ({100 * share:.0f}%) did not reach "
            f"±{100 * settings.target_half_width:g}% within their rounds and time budget "
            f"(more than {100 * settings.busy_unconverged_share:g}%)")
    d = drift["matmul_flops_per_s"]      # the copy ceiling's drift is shown, not judged
    if np.isfinite(d) and abs(d) > settings.busy_drift:
        out["busy"].append(f"the matmul ceiling moved by {100 * d:+.0f}% from the start "
                           f"to the end of the demo (more than "
                           f"±{100 * settings.busy_drift:g}%)")
    return out
