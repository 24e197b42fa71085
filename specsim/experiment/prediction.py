"""Each speculative run's predicted speedup from its measured acceptance and measured
costs, beside its measured speedup::

    S = E · t_T(1) / (K · t_D(1) + t_T(K+1))        (analytic.speedup_from_costs)

with t(n) from a `specsim.batching` time model: the fitted roofline
(`batching.fit_time_model`), the sweep's own medians (`swept_time_model`) or a
datasheet row (`batching.hardware_time_model`). E comes from one α under the i.i.d.
model, or from the per-position rates (which equal the run's measured tokens per
iteration, so that prediction tests the cost model alone)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specsim import analytic, batching, roofline, schema


def mape(runs: pd.DataFrame, column: str = schema.PRED_IID) -> float:
    """Mean absolute percentage error of ``column`` against the measured speedup over the
    speculative runs."""
    spec = schema.speculative(runs)
    err = (spec[column] - spec[schema.MEASURED_SPEEDUP]).abs() / spec[schema.MEASURED_SPEEDUP]
    return float(100 * err.mean())


def swept_time_model(sweeps: pd.DataFrame, model_name: str) -> batching.TimeModel:
    """A time model that returns the sweep's median time of the pass (NaN when the sweep
    did not measure that point)."""
    own = sweeps[sweeps[schema.MODEL] == model_name]

    def time_model(cfg, n_tokens: int, batch: int, context: int) -> float:
        row = own[(own[schema.N_TOKENS] == n_tokens) & (own[schema.BATCH] == batch)
                  & (own[schema.CONTEXT] == context)]
        return float(row[schema.TIME_S].iloc[0]) if len(row) else math.nan

    time_model.description = f"swept medians of {model_name}"
    return time_model


@dataclass(frozen=True)
class Costs:
    """One pass time for each role of an iteration, from one time model."""
    t_target_1: float
    t_verify: float
    t_draft: float

    @classmethod
    def of(cls, target_cfg, draft_cfg, k: int, batch: int, context: int,
           target_model: batching.TimeModel, draft_model: batching.TimeModel | None):
        td = 0.0 if draft_model is None else draft_model(draft_cfg, 1, batch, context)
        return cls(target_model(target_cfg, 1, batch, context),
                   target_model(target_cfg, k + 1, batch, context), td)

    def speedup(self, expected_tokens: float, k: int) -> float:
        if not all(np.isfinite([self.t_target_1, self.t_verify, self.t_draft])):
            return math.nan
        return float(analytic.speedup_from_costs(expected_tokens, k, self.t_draft,
                                                 self.t_target_1, self.t_verify))


def baseline_rates(runs: pd.DataFrame) -> dict[tuple[float, int], float]:
    """Autoregressive decode seconds per new token per (temperature, batch): the median
    over kinds of work (the baseline's work does not depend on the text)."""
    ar = runs[runs[schema.DRAFTER] == schema.AUTOREGRESSIVE]
    per_token = ar[schema.DECODE_S] / ar[schema.NEW_TOKENS]
    return {key: float(np.median(per_token[g.index]))
            for key, g in ar.groupby([schema.TEMPERATURE, schema.BATCH])}


def hardware_predictions(runs: pd.DataFrame, target, cost_models: dict, fits: dict,
                         hardware: tuple[str, ...], dtype: str, context: int) -> pd.DataFrame:
    """Speedup of each (drafter, temperature, K) at its mean measured α, on this machine
    (fitted rooflines) and on datasheet rows (roofline of the model's FLOPs and bytes in
    ``dtype``, no fixed overhead), at batch 1 and ``context`` cache slots."""
    spec = schema.speculative(runs)
    keys = [schema.DRAFTER, schema.TEMPERATURE, schema.K]
    grouped = spec.groupby(keys, as_index=False)[schema.ALPHA].mean()
    models = [(schema.THIS_MACHINE, lambda m: None if m is None
               else batching.fit_time_model(fits[m.cfg.name]))]
    for name in hardware:
        hw = roofline.load_hardware(name)
        tm = batching.hardware_time_model(hw, dtype=dtype)
        models.append((hw.name, lambda m, tm=tm: None if m is None else tm))
    rows = []
    for _, g in grouped.iterrows():
        k, dm = int(g[schema.K]), cost_models[g[schema.DRAFTER]]
        e = float(analytic.expected_tokens(g[schema.ALPHA], k))
        for hw_name, time_model_of in models:
            costs = Costs.of(target.cfg, None if dm is None else dm.cfg, k, 1, context,
                             time_model_of(target), time_model_of(dm))
            rows.append({**{c: g[c] for c in keys}, schema.ALPHA: g[schema.ALPHA],
                         schema.HARDWARE_NAME: hw_name, schema.PRED_SPEEDUP: costs.speedup(e, k)})
    return pd.DataFrame(rows)
