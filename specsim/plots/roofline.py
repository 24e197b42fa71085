"""Figures of the hardware side: the roofline with measured points, the fitted and the
measured ceilings, and forward latency against tokens per pass with the fitted curve.

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

from specsim.plots.axes import plain_log, plain_number

__all__ = ["roofline_plot", "latency_vs_tokens"]

_STYLE = "whitegrid"


def _check_sweep(df, needed=("n_tokens", "batch", "context", "time_s", "flops", "bytes")):
    missing = [c for c in needed if c not in df]
    if missing:
        raise ValueError(f"df lacks columns {missing} (expected a sweep_forward DataFrame)")
    if len(df) == 0:
        raise ValueError("df has no rows")


_LABELS = {"n_tokens": "tokens per pass", "batch": "batch", "context": "context"}


def _categories(d: pd.DataFrame, column: str) -> tuple[str, list[str]]:
    """Add a categorical copy of ``column`` whose categories are the measured values in
    numeric order (the legend lists 1, 2, 4, 8, not seaborn's binned 1, 3, 4, 6, 7)."""
    label = _LABELS.get(column, column)
    values = sorted(d[column].unique())
    order = [plain_number(v) for v in values]
    d[label] = pd.Categorical(d[column].map(plain_number), categories=order, ordered=True)
    return label, order


def _ceiling_values(ceilings) -> tuple[float, float] | None:
    """(matmul FLOP/s, copy bytes/s): the highest measured in a ceilings table or dict."""
    if ceilings is None or len(ceilings) == 0:
        return None
    peak = float(np.nanmax(np.asarray(ceilings["matmul_flops_per_s"], float)))
    bw = float(np.nanmax(np.asarray(ceilings["copy_bytes_per_s"], float)))
    return peak, bw


def roofline_plot(df: pd.DataFrame, fit=None, *, ceilings=None, hardware=(),
                  dtype: str = "float32", hue: str = "n_tokens",
                  title: str | None = None) -> Figure:
    """Achieved GFLOP/s against arithmetic intensity (FLOPs/byte, both from forward_cost)
    for every measured pass: colour by ``hue`` (tokens per pass), size by batch, marker by
    context, each legend listing the values measured. With ``fit``: its roofline
    min(P, I·W) (line) and its prediction at every point including the overhead t0 (open
    rings behind the points, so they never hide them). ``ceilings`` (a ceilings table of
    `specsim.bench.measure_ceilings`, or a dict with ``matmul_flops_per_s`` and
    ``copy_bytes_per_s``): the measured ceilings, dotted. ``hardware``: datasheet rows
    (`specsim.roofline.Hardware`), dashed."""
    _check_sweep(df)
    d = df.assign(intensity=df["flops"] / df["bytes"], achieved=df["flops"] / df["time_s"] / 1e9)
    hue_label, hue_order = _categories(d, hue)
    size_label, size_order = _categories(d, "batch")
    style_label, style_order = _categories(d, "context")
    lo, hi = d["intensity"].min() / 3, d["intensity"].max() * 3
    grid = np.geomspace(lo, hi, 200)
    with sns.axes_style(_STYLE):
        fig = Figure(figsize=(8.4, 4.8), layout="constrained")
        ax = fig.subplots()
        sns.scatterplot(d, x="intensity", y="achieved", hue=hue_label, hue_order=hue_order,
                        size=size_label, size_order=size_order,
                        sizes=dict(zip(size_order, np.linspace(22, 110, len(size_order)))),
                        style=style_label, style_order=style_order, palette="viridis",
                        ax=ax, legend="full", zorder=3, alpha=0.9)
        if fit is not None:
            ax.plot(grid, np.minimum(fit.peak_flops, grid * fit.bandwidth) / 1e9, color="k",
                    lw=1.6, zorder=2, label=f"fit: P={fit.peak_flops / 1e9:.3g} GFLOP/s, "
                                             f"W={fit.bandwidth / 1e9:.3g} GB/s")
            pred = d["flops"] / fit.predict(d["flops"].to_numpy(), d["bytes"].to_numpy()) / 1e9
            ax.scatter(d["intensity"], pred, s=170, facecolors="none", edgecolors="0.35",
                       linewidths=0.8, zorder=1, label=f"fit at each point, t0={fit.t0 * 1e3:.3g} ms")
        measured = _ceiling_values(ceilings)
        if measured is not None:
            peak, bw = measured
            ax.plot(grid, np.minimum(peak, grid * bw) / 1e9, color="tab:red", ls=":", lw=1.6,
                    zorder=2, label=f"measured ceilings: matmul {peak / 1e9:.3g} GFLOP/s, "
                                    f"copy {bw / 1e9:.3g} GB/s")
        for hw in hardware:
            peak = hw.peak(dtype)
            ax.plot(grid, np.minimum(peak, grid * hw.bandwidth) / 1e9, ls="--", lw=1,
                    label=f"{hw.name} ({dtype})")
        plain_log(ax, "x")
        plain_log(ax, "y")
        ax.set(xlabel="arithmetic intensity (FLOPs / byte)", ylabel="achieved GFLOP/s",
               title=title or "roofline: measured forward passes")
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
        plain_log(ax, "x", ticks=d["n_tokens"])
        plain_log(ax, "y")
        ax.set(xlabel="new tokens per pass", ylabel="latency of one pass (ms)",
               title=title or f"forward latency, batch {batch}, context {context}")
        ax.legend(fontsize=8)
    return fig
