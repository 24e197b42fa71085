"""Figures of real-model runs: acceptance by kind of work and temperature, and every
run's measured speedup against its predictions (per-position acceptance and speedup
against K are in `specsim.plots.experiment`).

Input: the per-run table of ``specsim demo`` (`experiment.run_demo(...).runs`, also its
CSV): one row per generation run with columns drafter, k, kind, temperature, alpha,
per_position (a JSON list of the K per-position rates), measured_speedup and the
predicted speedups (pred_speedup_iid, pred_speedup_positional). Autoregressive rows
(drafter == "autoregressive") are ignored.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

__all__ = ["speculative_runs", "alpha_by_kind", "predicted_vs_measured"]


def speculative_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The speculative rows of a demo run table, with a readable temperature label."""
    needed = {"drafter", "k", "kind", "temperature", "alpha"}
    missing = needed - set(runs.columns)
    if missing:
        raise ValueError(f"runs lacks columns {sorted(missing)} (expected specsim demo's run table)")
    d = runs[runs["drafter"] != "autoregressive"].copy()
    if d.empty:
        raise ValueError("runs has no speculative rows")
    d["T"] = d["temperature"].map(lambda t: f"T = {t:g}")
    return d


def alpha_by_kind(runs: pd.DataFrame) -> Figure:
    """α (accepted drafts per draft slot, averaged over K) by kind of work, one panel per
    drafter, one bar per temperature."""
    d = speculative_runs(runs)
    drafters = sorted(d["drafter"].unique())
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(4.5 * len(drafters), 3.8), layout="constrained")
        axes = np.atleast_1d(fig.subplots(1, len(drafters), sharey=True))
        for ax, name in zip(axes, drafters):
            sns.barplot(d[d["drafter"] == name], x="kind", y="alpha", hue="T", errorbar=None, ax=ax)
            ax.set(title=name, xlabel="kind of work", ylabel="α", ylim=(0, 1))
            ax.legend(fontsize=8)
    return fig


def predicted_vs_measured(runs: pd.DataFrame, columns=("pred_speedup_iid", "pred_speedup_positional")) -> Figure:
    """Measured speedup against each prediction column, with the line measured = predicted."""
    d = speculative_runs(runs)
    cols = [c for c in columns if c in d.columns]
    if "measured_speedup" not in d.columns or not cols:
        raise ValueError("runs lacks measured_speedup or the prediction columns")
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(4.8 * len(cols), 4.4), layout="constrained")
        axes = np.atleast_1d(fig.subplots(1, len(cols), sharey=True))
        lo = float(np.nanmin(d[cols + ["measured_speedup"]].to_numpy())) * 0.9
        hi = float(np.nanmax(d[cols + ["measured_speedup"]].to_numpy())) * 1.1
        for ax, col in zip(axes, cols):
            sns.scatterplot(d, x=col, y="measured_speedup", hue="drafter", style="T", ax=ax)
            ax.plot([lo, hi], [lo, hi], color="grey", ls="--", lw=1)
            ax.axhline(1.0, color="grey", lw=0.8)
            err = (d[col] - d["measured_speedup"]).abs() / d["measured_speedup"]
            ax.set(xlabel=col.replace("_", " "), ylabel="measured speedup", xlim=(lo, hi), ylim=(lo, hi),
                   title=f"MAPE {100 * float(err.mean()):.0f} %")
            ax.legend(fontsize=7)
    return fig
