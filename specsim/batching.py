"""Speedup against batch size and context length, from a roofline time model.

Speculation turns K sequential target steps into one target pass over K + 1 tokens.
That pass is free only while it is memory-bound: at batch B it does B·(K + 1) tokens of
arithmetic against one read of the weights (and B rows of KV cache), so as B grows it
crosses the hardware's ridge point and starts to cost K + 1 steps' worth of compute.
This module evaluates

    S = E(α, K) · t_target(1) / (K · t_draft(1) + t_target(K + 1))

(`analytic.speedup_from_costs`) with every t(n) — one forward pass over n new tokens per
row at batch B with a cache of ``context`` slots — taken from a time model: a datasheet
row of ``specsim/data/hardware.csv`` through `roofline.predict_time`, or a fitted roofline
(`fit.RooflineFit`). It then finds the best K at each load and the load beyond which no
K pays (speedup ≤ 1): the reason serving engines switch speculation off by batch size.

NumPy/pandas only; imports no JAX.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from specsim import analytic, roofline, validation
from specsim.errors import InvalidArgument

__all__ = ["TimeModel", "hardware_time_model", "fit_time_model", "speedup_grid", "best_k", "break_even"]

TimeModel = Callable[..., float]
"""``time_model(cfg, n_tokens, batch, context) -> seconds`` of one forward pass."""


def hardware_time_model(hw, dtype: str = "bfloat16", overhead: float = 0.0, mode: str = "max") -> TimeModel:
    """Roofline time on a `roofline.Hardware` (or a name from ``specsim/data/hardware.csv``):
    ``overhead + max(FLOPs/peak, bytes/bandwidth)`` of `roofline.forward_cost`."""
    if isinstance(hw, str):
        hw = roofline.load_hardware(hw)

    def time_model(cfg, n_tokens: int, batch: int, context: int) -> float:
        cost = roofline.forward_cost(cfg, batch=int(batch), n_tokens=int(n_tokens), context=int(context),
                                     dtype=dtype)
        return float(roofline.predict_time(hw, cost, overhead=overhead, mode=mode))

    time_model.description = f"{hw.name} datasheet, {dtype}, t0 = {overhead:g} s"
    return time_model


def fit_time_model(fit, dtype: str | None = None) -> TimeModel:
    """Time from a fitted roofline (anything with ``predict_forward(cfg, n_tokens, batch,
    context, dtype)``, e.g. `fit.RooflineFit`)."""

    def time_model(cfg, n_tokens: int, batch: int, context: int) -> float:
        return float(fit.predict_forward(cfg, int(n_tokens), int(batch), int(context), dtype))

    time_model.description = f"fitted roofline ({getattr(fit, 'kind', 'fit')})"
    return time_model


def speedup_grid(target_cfg, draft_cfg, time_model: TimeModel, alpha, ks, batches, contexts,
                 draft_time_model: TimeModel | None = None) -> pd.DataFrame:
    """Predicted speedup over the grid alpha × K × batch × context (one row each).

    Columns: alpha, k, batch, context, t_target_1, t_target_verify (K + 1 tokens),
    t_draft, c = t_draft / t_target_1, verify_ratio = t_target_verify / t_target_1,
    expected_tokens, speedup. ``context`` (cache slots read) must be at least K + 1.
    The draft runs on ``draft_time_model`` (default: the target's).
    """
    alphas = np.atleast_1d(validation.check_probability("alpha", alpha))
    ks, batches, contexts = (np.atleast_1d(validation.check_draft_length(name, v))
                             for name, v in (("ks", ks), ("batches", batches),
                                             ("contexts", contexts)))
    if alphas.ndim != 1 or min(alphas.size, ks.size, batches.size, contexts.size) == 0:
        raise InvalidArgument("alpha, ks, batches and contexts must be non-empty 1-D sequences")
    if contexts.min() < ks.max() + 1:
        raise InvalidArgument(f"contexts must be at least max(ks) + 1 = {ks.max() + 1} "
                              f"(got {contexts.min()})")
    draft_time_model = draft_time_model or time_model
    rows = []
    for b in batches:
        for s in contexts:
            t1 = time_model(target_cfg, 1, b, s)
            td = draft_time_model(draft_cfg, 1, b, s)
            for k in ks:
                tv = time_model(target_cfg, k + 1, b, s)
                rows.append((b, s, k, t1, tv, td))
    base = pd.DataFrame(rows, columns=["batch", "context", "k", "t_target_1", "t_target_verify", "t_draft"])
    out = base.merge(pd.DataFrame({"alpha": alphas}), how="cross")
    k = out["k"].to_numpy()
    out["c"] = out["t_draft"] / out["t_target_1"]
    out["verify_ratio"] = out["t_target_verify"] / out["t_target_1"]
    out["expected_tokens"] = analytic.expected_tokens(out["alpha"].to_numpy(), k)
    out["speedup"] = analytic.speedup_from_costs(out["expected_tokens"].to_numpy(), k, out["t_draft"].to_numpy(),
                                                 out["t_target_1"].to_numpy(), out["t_target_verify"].to_numpy())
    cols = ["alpha", "k", "batch", "context", "t_target_1", "t_target_verify", "t_draft", "c", "verify_ratio",
            "expected_tokens", "speedup"]
    return out[cols].sort_values(["alpha", "context", "batch", "k"], ignore_index=True)


def best_k(grid: pd.DataFrame) -> pd.DataFrame:
    """The K with the largest speedup at each (alpha, batch, context); ties go to the smaller K."""
    order = grid.sort_values(["alpha", "batch", "context", "speedup", "k"], ascending=[True, True, True, False, True])
    best = order.groupby(["alpha", "batch", "context"], sort=True).head(1)
    return best.rename(columns={"k": "k_opt", "speedup": "speedup_opt"}).reset_index(drop=True)


def break_even(best: pd.DataFrame, along: str = "batch") -> pd.DataFrame:
    """Where the best-K speedup first drops to 1 or below as ``along`` ("batch" or "context") grows.

    One row per (alpha, the other axis): ``last_paying`` is the largest grid value of
    ``along`` before the first one at which speculation no longer pays, ``first_losing``
    that value (NaN if it pays everywhere on the grid), and ``crossing`` a log-linear
    interpolation of where the speedup equals 1 between them.
    """
    validation.choice("along", along, ("batch", "context"))
    other = "context" if along == "batch" else "batch"
    rows = []
    for (a, o), d in best.groupby(["alpha", other], sort=True):
        d = d.sort_values(along)
        x, s = d[along].to_numpy(float), d["speedup_opt"].to_numpy()
        losing = np.flatnonzero(s <= 1.0)
        rec = {"alpha": a, other: o, "last_paying": np.nan, "first_losing": np.nan, "crossing": np.nan}
        if losing.size == 0:
            rec["last_paying"] = x[-1]
        else:
            i = losing[0]
            rec["first_losing"] = x[i]
            if i > 0:
                rec["last_paying"] = x[i - 1]
                lx0, lx1 = np.log(x[i - 1]), np.log(x[i])
                frac = (s[i - 1] - 1.0) / (s[i - 1] - s[i])
                rec["crossing"] = float(np.exp(lx0 + frac * (lx1 - lx0)))
            else:
                rec["crossing"] = x[0]
        rows.append(rec)
    return pd.DataFrame(rows)
