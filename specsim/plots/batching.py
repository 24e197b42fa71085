"""Figures of speedup against batch size and context length (:mod:`specsim.batching`)."""

from __future__ import annotations

import numpy as np
import seaborn as sns
from matplotlib.figure import Figure
from specsim.plots.axes import integer_axis, plain_log

__all__ = ["speedup_vs_load", "speedup_vs_k"]


def _log_ticks(values, most: int = 9) -> np.ndarray:
    """At most ``most`` of the grid's values, evenly spaced along the log axis."""
    v = np.unique(np.asarray(values, float))
    step = max(1, int(np.ceil(len(v) / most)))
    return v[::step]


def speedup_vs_load(grid, best, along: str = "batch", k_ref: int = 4, title: str = "") -> Figure:
    """Three panels against ``along`` (log scale), one line per α:

    the speedup at the best K (with speedup = 1 marked), the best K, and — for K = ``k_ref``
    — what one iteration costs in target steps: the verify pass t(K + 1)/t(1), the drafting
    K·c, and their sum (the speedup is E(α, K) divided by that sum). ``grid`` and ``best`` come from `batching.speedup_grid` and `batching.best_k`.
    """
    if along not in ("batch", "context"):
        raise ValueError(f"along must be 'batch' or 'context', got {along!r}")
    alphas = sorted(best["alpha"].unique())
    palette = sns.color_palette("viridis", len(alphas))
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(13, 4), layout="constrained")
        ax_s, ax_k, ax_v = fig.subplots(1, 3)
        for a, col in zip(alphas, palette):
            d = best[best["alpha"] == a].sort_values(along)
            ax_s.plot(d[along], d["speedup_opt"], marker=".", color=col, label=f"α = {a:g}")
            ax_k.step(d[along], d["k_opt"], where="mid", color=col, label=f"α = {a:g}")
        ax_s.axhline(1.0, color="grey", lw=1)
        ax_s.set(xlabel=along, ylabel="speedup at the best K", title="speedup")
        ax_k.set(xlabel=along, ylabel="best K", title="best draft length")
        for ax in (ax_s, ax_k, ax_v):
            plain_log(ax, "x", ticks=_log_ticks(best[along]))
        integer_axis(ax_k, "y")
        ax_s.legend(fontsize=8)
        ref = grid[(grid["k"] == k_ref) & (grid["alpha"] == alphas[0])].sort_values(along)
        if not ref.empty:
            drafting = k_ref * ref["c"]
            total = drafting + ref["verify_ratio"]
            ax_v.plot(ref[along], ref["verify_ratio"], marker=".", label=f"verify: t(K+1) / t(1)")
            ax_v.plot(ref[along], drafting, marker=".", ls="--", label="drafting: K·c")
            ax_v.plot(ref[along], total, marker=".", color="k", label="one iteration")
            ax_v.axhline(k_ref + 1, color="grey", ls=":", lw=1, label=f"K + 1 = {k_ref + 1} steps")
            ax_v.set(xlabel=along, ylabel="target steps (t(1) = 1)",
                     title=f"cost of one iteration, K = {k_ref}",
                     ylim=(0, max(k_ref + 1.5, float(np.nanmax(total)) + 0.5)))
            ax_v.legend(fontsize=7)
        if title:
            fig.suptitle(title)
    return fig


def speedup_vs_k(grid, style: str | None = None, title: str = "") -> Figure:
    """Predicted speedup against K, one line per α (and per ``style`` column, e.g. the
    drafter), for a grid at one batch size and context."""
    d = grid.copy()
    d["α"] = d["alpha"].map(lambda a: f"{a:g}")
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(6.5, 4.2), layout="constrained")
        ax = fig.subplots()
        sns.lineplot(d, x="k", y="speedup", hue="α", style=style, marker="o", palette="viridis", ax=ax)
        ax.axhline(1.0, color="grey", lw=1)
        ax.set(xlabel="draft length K", ylabel="predicted speedup", title=title or "speedup against K")
        integer_axis(ax, "x")
        ax.legend(fontsize=8)
    return fig
