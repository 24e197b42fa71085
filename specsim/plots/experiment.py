"""Figures of the end-to-end check (`specsim.experiment`): predicted against measured
speedup over K, and acceptance by draft position. Inputs are the ``runs`` DataFrame of
a `specsim.experiment.DemoResult`; every function returns a Figure."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

__all__ = ["speedup_predicted_vs_measured", "acceptance_by_position"]


def _spec(runs: pd.DataFrame) -> pd.DataFrame:
    needed = {"drafter", "k", "temperature", "measured_speedup", "pred_speedup_iid"}
    missing = needed - set(runs.columns)
    if missing:
        raise ValueError(f"runs lacks columns {sorted(missing)} (expected DemoResult.runs)")
    spec = runs[runs["drafter"] != "autoregressive"]
    if spec.empty:
        raise ValueError("runs holds no speculative run")
    return spec


def speedup_predicted_vs_measured(runs: pd.DataFrame) -> Figure:
    """Speedup against K, one panel per (drafter, temperature): measured (points, the
    mean over kinds of work with its range), predicted from one α (i.i.d.) and from the
    per-position rates, all with the fitted costs."""
    spec = _spec(runs)
    panels = sorted(spec.groupby(["drafter", "temperature"]).groups)
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(4.2 * len(panels), 3.8), layout="constrained")
        axes = np.atleast_1d(fig.subplots(1, len(panels), sharey=True))
        for ax, (drafter, temp) in zip(axes, panels):
            d = spec[(spec["drafter"] == drafter) & (spec["temperature"] == temp)]
            g = d.groupby("k").agg(meas=("measured_speedup", "mean"),
                                   lo=("measured_speedup", "min"),
                                   hi=("measured_speedup", "max"),
                                   iid=("pred_speedup_iid", "mean"),
                                   pos=("pred_speedup_positional", "mean")).reset_index()
            ax.errorbar(g["k"], g["meas"], yerr=[g["meas"] - g["lo"], g["hi"] - g["meas"]],
                        fmt="o", capsize=3, label="measured (mean, range over kinds)")
            ax.plot(g["k"], g["iid"], "-", label="predicted, i.i.d. α")
            ax.plot(g["k"], g["pos"], "--", label="predicted, per-position α")
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set(title=f"{drafter}, T={temp:g}", xlabel="draft length K",
                   ylabel="speedup over autoregressive")
        axes[0].legend(fontsize=7)
    return fig


def acceptance_by_position(runs: pd.DataFrame) -> Figure:
    """Per-position acceptance α_j (conditional on reaching j) for the largest K of each
    drafter, by kind of work and temperature."""
    spec = _spec(runs)
    rows = []
    for _, r in spec.iterrows():
        if r["k"] != spec[spec["drafter"] == r["drafter"]]["k"].max():
            continue
        for j, a in enumerate(json.loads(r["per_position"]), start=1):
            rows.append(dict(drafter=r["drafter"], kind=r["kind"], temperature=r["temperature"],
                             position=j, alpha=a))
    df = pd.DataFrame(rows)
    drafters = sorted(df["drafter"].unique())
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(4.4 * len(drafters), 3.8), layout="constrained")
        axes = np.atleast_1d(fig.subplots(1, len(drafters), sharey=True))
        for ax, name in zip(axes, drafters):
            sns.lineplot(df[df["drafter"] == name], x="position", y="alpha", hue="kind",
                         style="temperature", markers=True, ax=ax)
            ax.set(title=name, xlabel="draft position j", ylabel="α_j", ylim=(0, 1.02))
            ax.legend(fontsize=7)
    return fig
