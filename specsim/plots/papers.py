"""Figures of the paper reproductions (:mod:`specsim.papers`).

Every function returns a :class:`matplotlib.figure.Figure` built without pyplot's global
state, styled by seaborn inside a context manager; none calls ``matplotlib.use``.
"""

from __future__ import annotations

import numpy as np
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from specsim import analytic
from specsim.plots.axes import integer_axis, plain_log

__all__ = [
    "leviathan_speedup_ops",
    "leviathan_optimal_gamma",
    "leviathan_predicted_vs_measured",
    "leviathan_lenience",
    "chen_speedup_vs_k",
    "domain_table_figure",
]

_STYLE = "whitegrid"


def _alphas(n: int) -> np.ndarray:
    return np.linspace(0.0, 0.99, n)


def leviathan_speedup_ops(gammas=(1, 2, 3, 5, 7, 10), table1=None, n: int = 199, c: float = 0.0,
                          c_hat: float | None = None) -> Figure:
    """Leviathan et al. 2023 Figure 4: speedup and arithmetic growth against α for several γ,
    at c = ĉ = 0 as in the paper (or at the given draft cost c and arithmetic ratio ĉ).

    ``table1`` (from :func:`specsim.papers.leviathan_table1`) overlays the printed
    Table 1 points (which assume c = ĉ = 0).
    """
    c_hat = c if c_hat is None else c_hat
    alphas = _alphas(n)
    palette = sns.color_palette("viridis", len(gammas))
    with sns.axes_style(_STYLE):
        fig = Figure(figsize=(10, 4), layout="constrained")
        ax_s, ax_o = fig.subplots(1, 2)
        for g, col in zip(gammas, palette):
            ax_s.plot(alphas, analytic.speedup(alphas, g, c), color=col, label=f"γ = {g}")
            ax_o.plot(alphas, analytic.ops_factor(alphas, g, c_hat), color=col, label=f"γ = {g}")
        if table1 is not None:
            ax_s.scatter(table1["alpha"], table1["speedup_reported"], color="k", marker="x", zorder=5,
                         label="Table 1 (printed)")
            ax_o.scatter(table1["alpha"], table1["ops_reported"], color="k", marker="x", zorder=5,
                         label="Table 1 (printed)")
        ax_s.axhline(1.0, color="grey", lw=0.8)
        ax_s.set(xlabel="α", ylabel="walltime improvement (Thm 3.8)", title=f"Speedup, c = {c:g}")
        ax_o.set(xlabel="α", ylabel="arithmetic operations factor (Thm 3.11)",
                 title=f"Extra arithmetic, ĉ = {c_hat:g}")
        ax_s.legend(fontsize=8)
        ax_o.legend(fontsize=8)
    return fig


def leviathan_optimal_gamma(cs=(0.01, 0.02, 0.05, 0.1, 0.2), k_max: int = 32, n: int = 197) -> Figure:
    """Leviathan et al. 2023 Figure 3: the optimal γ against α for several c."""
    alphas = np.linspace(0.02, 0.98, n)
    palette = sns.color_palette("rocket", len(cs))
    with sns.axes_style(_STYLE):
        fig = Figure(figsize=(6, 4), layout="constrained")
        ax = fig.subplots()
        for c, col in zip(cs, palette):
            k_opt, _ = analytic.optimal_k(alphas, np.full_like(alphas, c), k_max=k_max)
            ax.step(alphas, k_opt, where="mid", color=col, label=f"c = {c}")
        plain_log(ax, "y")
        ax.set(xlabel="α", ylabel="optimal γ", title="Optimal γ (Thm 3.8, integer γ)")
        ax.legend(fontsize=8)
    return fig


def leviathan_predicted_vs_measured(table4) -> Figure:
    """Tables 2/4: Thm 3.8's prediction (recomputed) against the measured speedup."""
    with sns.axes_style(_STYLE):
        fig = Figure(figsize=(5.5, 5), layout="constrained")
        ax = fig.subplots()
        sns.scatterplot(data=table4, x="expected_recomputed", y="measured", hue="draft", style="task",
                        s=70, ax=ax)
        lo = 1.0
        hi = float(max(table4["expected_recomputed"].max(), table4["measured"].max())) + 0.3
        ax.plot([lo, hi], [lo, hi], color="grey", lw=1, ls="--", label="measured = predicted")
        ax.errorbar(table4["expected_recomputed"], table4["measured"],
                    xerr=[table4["expected_recomputed"] - table4["expected_lo"],
                          table4["expected_hi"] - table4["expected_recomputed"]],
                    fmt="none", ecolor="grey", alpha=0.6, lw=1)
        ax.set(xlabel="predicted speedup (Thm 3.8 from printed α, γ, c)", ylabel="measured speedup",
               title="T5-XXL, batch 1, one TPU-v4", xlim=(lo, hi), ylim=(lo, hi))
        ax.legend(fontsize=8)
    return fig


def leviathan_lenience(lenience) -> Figure:
    """Appendix A.5: printed speedups against Thm 3.8 at c = 0.015 for each lenience l."""
    with sns.axes_style(_STYLE):
        fig = Figure(figsize=(6, 4), layout="constrained")
        ax = fig.subplots()
        for kind, marker in (("sampling", "o"), ("argmax", "s")):
            d = lenience[lenience["kind"] == kind].sort_values("alpha")
            if d.empty:
                continue
            label_gamma = "best γ" if kind == "sampling" else "γ = 8"
            ax.plot(d["alpha"], d["speedup_recomputed"], marker=marker, ls="-",
                    label=f"{kind}: Thm 3.8, {label_gamma}")
            ax.errorbar(d["alpha"], d["speedup_recomputed"],
                        yerr=[d["speedup_recomputed"] - d["speedup_lo"], d["speedup_hi"] - d["speedup_recomputed"]],
                        fmt="none", ecolor="grey", lw=1)
            ax.scatter(d["alpha"], d["speedup_reported"], marker="x", s=60, zorder=5, label=f"{kind}: printed")
            for _, r in d.iterrows():
                ax.annotate(f"l={r['lenience']:g}", (r["alpha"], r["speedup_reported"]),
                            textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.set(xlabel="α with lenience", ylabel="speedup at c = 0.015",
               title="Lenience, T5-XXL / T5-small, EnDe")
        ax.legend(fontsize=8)
    return fig


def chen_speedup_vs_k(chen, c: float, k_measured: int = 4, k_max: int = 12) -> Figure:
    """Chen et al. 2023: Thm 3.8 against K for each inferred α, with the measured K = 4 points."""
    ks = np.arange(1, k_max + 1)
    with sns.axes_style(_STYLE):
        fig = Figure(figsize=(6.5, 4), layout="constrained")
        ax = fig.subplots()
        palette = sns.color_palette("deep", len(chen))
        for (_, r), col in zip(chen.iterrows(), palette):
            label = f"{r['benchmark']} {r['sampling']} (α = {r['alpha']:.2f})"
            ax.plot(ks, analytic.speedup(np.full(ks.shape, r["alpha"]), ks, np.full(ks.shape, c)),
                    marker=".", color=col, label=label)
            ax.scatter([k_measured], [r["speedup_recomputed"]], color=col, marker="x", s=80, zorder=5)
            ax.scatter([r["k_opt"]], [r["speedup_at_k_opt"]], facecolors="none", edgecolors=col, s=90,
                       zorder=5)
        ax.axhline(1.0, color="grey", lw=1)
        integer_axis(ax, "x")
        ax.set(xlabel="draft length K", ylabel="speedup",
               title=f"Chinchilla 70B / 4B draft, c = {c:.3f} (× measured, ○ best K)")
        ax.legend(fontsize=8)
    return fig


def domain_table_figure(fit: dict, break_even=None, k: int = 5, n: int = 199) -> Figure:
    """The practitioner table's boxes (α range × speedup range) against Thm 3.8 at the fitted c."""
    ends = fit["table"]
    alphas = _alphas(n)
    with sns.axes_style(_STYLE):
        fig = Figure(figsize=(7, 4.5), layout="constrained")
        ax = fig.subplots()
        palette = sns.color_palette("deep", ends["row"].nunique())
        for (row, d), col in zip(ends.groupby("row", sort=False), palette):
            lo, hi = d[d["end"] == "low"].iloc[0], d[d["end"] == "high"].iloc[0]
            ax.add_patch(Rectangle((lo["alpha"], lo["speedup"]), hi["alpha"] - lo["alpha"],
                                   hi["speedup"] - lo["speedup"], facecolor=col, alpha=0.3, edgecolor=col,
                                   label=lo["workload"]))
        lo_c, hi_c = fit["c_range_implied"]
        ax.plot(alphas, analytic.speedup(alphas, k, fit["c"]), color="k",
                label=f"Thm 3.8, K = {k}, fitted c = {fit['c']:.3f}")
        ax.fill_between(alphas, analytic.speedup(alphas, k, hi_c), analytic.speedup(alphas, k, lo_c),
                        color="k", alpha=0.1, label=f"c from {lo_c:.3f} to {hi_c:.3f}")
        ax.axhline(1.0, color="grey", lw=1)
        ax.axvspan(0.35, 0.40, color="red", alpha=0.12, label="claimed break-even 35–40 %")
        if break_even is not None:
            be = float(break_even.loc[break_even["c_source"] == "fitted", "break_even_alpha_k"].iloc[0])
            ax.axvline(be, color="red", ls="--", lw=1, label=f"break-even at fitted c: α = {be:.2f}")
        ax.set(xlabel="α", ylabel="speedup", xlim=(0.2, 1.0), ylim=(0.5, 4.5),
               title="The K = 5 domain table against one cost ratio")
        ax.legend(fontsize=7, loc="upper left")
    return fig
