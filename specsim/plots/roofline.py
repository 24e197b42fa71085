"""Figures of the hardware side: the roofline with measured points and the fitted
ceilings, and forward latency against tokens per pass with the fitted curve.

Every function returns a :class:`matplotlib.figure.Figure` built without pyplot's global
state and never calls ``matplotlib.use``. Inputs are the DataFrames of
:func:`specsim.bench.sweep_forward` (columns n_tokens, batch, context, time_s, flops,
bytes) and a :class:`specsim.fit.RooflineFit`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

__all__ = ["roofline_plot", "latency_vs_tokens"]

_STYLE = "whitegrid"


def _check_sweep(df, needed=("n_tokens", "batch", "context", "time_s", "flops", "bytes")):
    missing = [c for c in needed if c not in df]
    if missing:
        raise ValueError(f"df lacks columns {missing} (expected a sweep_forward DataFrame)")
    if len(df) == 0:
        raise ValueError("df has no rows")


def roofline_plot(df: pd.DataFrame, fit=None, *, hardware=(), dtype: str = "float32",
                  hue: str = "n_tokens", title: str | None = None) -> Figure:
    """Achieved FLOP/s against arithmetic intensity (FLOPs/byte, both from forward_cost)
    for every measured pass, with the fitted roofline min(P, I·W) (and, dashed, the fit's
    ceilings including its overhead t0 at each point) and optional datasheet rows
    (`specsim.roofline.Hardware`) for comparison."""
    _check_sweep(df)
    d = df.assign(intensity=df["flops"] / df["bytes"], achieved=df["flops"] / df["time_s"])
    lo, hi = d["intensity"].min() / 3, d["intensity"].max() * 3
    with sns.axes_style(_STYLE):
        fig = Figure(figsize=(8.0, 4.6), layout="constrained")
        ax = fig.subplots()
        sns.scatterplot(d, x="intensity", y="achieved", hue=hue, size="batch", style="context",
                        palette="viridis", ax=ax, legend="brief")
        grid = np.geomspace(lo, hi, 200)
        if fit is not None:
            ax.plot(grid, np.minimum(fit.peak_flops, grid * fit.bandwidth), color="k", lw=1.6,
                    label=f"fit: P={fit.peak_flops / 1e9:.3g} GFLOP/s, W={fit.bandwidth / 1e9:.3g} GB/s")
            pred = d["flops"] / fit.predict(d["flops"].to_numpy(), d["bytes"].to_numpy())
            ax.scatter(d["intensity"], pred, marker="x", color="k", s=18,
                       label=f"fit with t0={fit.t0 * 1e3:.3g} ms")
        for hw in hardware:
            peak = hw.peak(dtype)
            ax.plot(grid, np.minimum(peak, grid * hw.bandwidth), ls="--", lw=1,
                    label=f"{hw.name} ({dtype})")
        ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOPs / byte)",
               ylabel="achieved FLOP/s", title=title or "roofline: measured forward passes")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig


def latency_vs_tokens(df: pd.DataFrame, fit=None, cfg=None, *, batch: int | None = None,
                      context: int | None = None, title: str | None = None) -> Figure:
    """Latency of one pass against new tokens per pass at one (batch, context) (default:
    the most common pair in ``df``), measured medians with their interquartile range, and
    the fitted curve (continuous over n when ``cfg`` is given, else at the measured n)."""
    _check_sweep(df)
    if batch is None or context is None:
        b0, c0 = df.groupby(["batch", "context"]).size().idxmax()
        batch = b0 if batch is None else batch
        context = c0 if context is None else context
    d = df[(df["batch"] == batch) & (df["context"] == context)].sort_values("n_tokens")
    if d.empty:
        raise ValueError(f"no rows at batch={batch}, context={context}")
    with sns.axes_style(_STYLE):
        fig = Figure(figsize=(6.0, 4.2), layout="constrained")
        ax = fig.subplots()
        yerr = None
        if {"time_q25", "time_q75"} <= set(d.columns):
            yerr = np.vstack([d["time_s"] - d["time_q25"], d["time_q75"] - d["time_s"]]) * 1e3
        ax.errorbar(d["n_tokens"], d["time_s"] * 1e3, yerr=yerr, fmt="o", ms=4, capsize=2,
                    label="measured median (IQR)")
        if fit is not None:
            if cfg is not None:
                n = np.arange(1, int(d["n_tokens"].max()) + 1)
                n = n[n <= context]
                t = fit.predict_forward(cfg, n, batch, context)
            else:
                n = d["n_tokens"].to_numpy()
                t = fit.predict(d["flops"].to_numpy(), d["bytes"].to_numpy())
            ax.plot(n, np.asarray(t) * 1e3, color="k", lw=1.4,
                    label=f"roofline fit ({fit.kind}), held-out MAPE {fit.mape_heldout:.1f}%")
        ax.set(xscale="log", yscale="log", xlabel="new tokens per pass", ylabel="latency (ms)",
               title=title or f"forward latency, batch {batch}, context {context}")
        ax.legend(fontsize=8)
    return fig
