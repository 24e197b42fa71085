"""Figures of the closed-form model (:mod:`specsim.analytic`) and the demo's report.

Every figure function returns a :class:`matplotlib.figure.Figure` built without pyplot's
global state (so nothing leaks between notebook cells and no backend is chosen here),
styled by seaborn inside a context manager; none calls ``matplotlib.use``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from specsim import analytic, atomic

__all__ = [
    "speedup_vs_alpha",
    "ops_factor_vs_alpha",
    "optimal_k_vs_alpha",
    "analytic_overview",
    "AnalyticReport",
    "analytic_report",
]

_STYLE = "whitegrid"


def _alphas(n: int) -> np.ndarray:
    return np.linspace(0.0, 0.995, n)


def _draw_speedup(ax, ks, c: float, n: int) -> None:
    a = _alphas(n)
    frame = pd.DataFrame([{"alpha": x, "speedup": s, "K": f"K={k}"}
                          for k in ks for x, s in zip(a, analytic.speedup(a, k, c))])
    sns.lineplot(frame, x="alpha", y="speedup", hue="K", ax=ax,
                 palette="viridis", legend="full")
    ax.axhline(1.0, color="0.3", lw=0.8, ls="--")
    ax.set(xlabel="acceptance rate α", ylabel="speedup S", title=f"speedup, c = {c:g}")


def _draw_ops(ax, ks, c_hat: float, n: int) -> None:
    a = _alphas(n)
    frame = pd.DataFrame([{"alpha": x, "ops": f, "K": f"K={k}"}
                          for k in ks for x, f in zip(a, analytic.ops_factor(a, k, c_hat))])
    sns.lineplot(frame, x="alpha", y="ops", hue="K", ax=ax, palette="viridis", legend="full")
    ax.set(xlabel="acceptance rate α", ylabel="arithmetic factor",
           title=f"extra arithmetic, ĉ = {c_hat:g}")


def _draw_optimal_k(ax, cs, k_max: int, n: int) -> None:
    a = _alphas(n)
    rows = []
    for c in cs:
        k_star, s = analytic.optimal_k(a, c, k_max=k_max)
        rows += [{"alpha": x, "K*": k, "c": f"c={c:g}"} for x, k in zip(a, k_star)]
    sns.lineplot(pd.DataFrame(rows), x="alpha", y="K*", hue="c", ax=ax,
                 palette="rocket", drawstyle="steps-post", legend="full")
    ax.set(xlabel="acceptance rate α", ylabel="optimal K", yscale="log",
           title=f"optimal draft length (K ≤ {k_max})")
    ticks = [t for t in (1, 2, 4, 8, 16, 32, 64, 128, 256) if t <= k_max]
    ax.set_yticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()


def speedup_vs_alpha(ks=(1, 2, 3, 5, 8), cs=(0.0, 0.05, 0.2), n: int = 200) -> Figure:
    """Speedup (Thm 3.8) against α, one line per K, one panel per cost ratio c."""
    with sns.axes_style(_STYLE):
        fig = Figure(figsize=(4.2 * len(cs), 3.6), layout="constrained")
        axes = fig.subplots(1, len(cs), sharey=True, squeeze=False)[0]
        for ax, c in zip(axes, cs):
            _draw_speedup(ax, ks, c, n)
    return fig


def ops_factor_vs_alpha(ks=(1, 2, 3, 5, 8), c_hats=(0.0, 0.05, 0.2), n: int = 200) -> Figure:
    """Arithmetic growth factor (Thm 3.11) against α, one line per K, one panel per ĉ."""
    with sns.axes_style(_STYLE):
        fig = Figure(figsize=(4.2 * len(c_hats), 3.6), layout="constrained")
        axes = fig.subplots(1, len(c_hats), sharey=True, squeeze=False)[0]
        for ax, c_hat in zip(axes, c_hats):
            _draw_ops(ax, ks, c_hat, n)
    return fig


def optimal_k_vs_alpha(cs=(0.01, 0.05, 0.1, 0.2, 0.5), k_max: int = analytic.DEFAULT_K_MAX,
                       n: int = 400) -> Figure:
    """The speedup-maximising K against α, one line per cost ratio c."""
    with sns.axes_style(_STYLE):
        fig = Figure(figsize=(5.5, 4), layout="constrained")
        _draw_optimal_k(fig.subplots(), cs, k_max, n)
    return fig


def analytic_overview(c: float = 0.05, ks=(1, 2, 3, 5, 8), cs=(0.01, 0.05, 0.2, 0.5),
                      k_max: int = analytic.DEFAULT_K_MAX, n: int = 200) -> Figure:
    """Three panels: speedup vs α (at c), arithmetic factor vs α (ĉ = c), optimal K vs α."""
    with sns.axes_style(_STYLE):
        fig = Figure(figsize=(14, 4), layout="constrained")
        ax_s, ax_o, ax_k = fig.subplots(1, 3)
        _draw_speedup(ax_s, ks, c, n)
        _draw_ops(ax_o, ks, c, n)
        _draw_optimal_k(ax_k, cs, k_max, n)
    return fig


@dataclass(frozen=True)
class AnalyticReport:
    """What ``analytic_report`` produced: the text table and the files it wrote."""

    table: str
    figures: tuple[Path, ...]


def analytic_report(out_dir="results/demo", *, c: float = 0.05,
                    alphas=(0.5, 0.6, 0.7, 0.8, 0.9, 0.95), ks=range(1, 9),
                    k_max: int = analytic.DEFAULT_K_MAX, dpi: int = 120) -> AnalyticReport:
    """The analytic part of ``specsim demo``: speedup table and overview figure.

    Builds the speedup table for ``alphas`` x ``ks`` at cost ratio ``c`` (plus the
    optimal K up to ``k_max``, the same limit as ``specsim optimal-k``), writes ``<out_dir>/analytic_speedup.png`` and
    returns both. Reusable by the full demo, which adds measured results to out_dir.
    """
    table = analytic.format_speedup_table(analytic.speedup_table(alphas, list(ks), [c]))
    k_star, s_star = analytic.optimal_k(np.asarray(alphas, dtype=float), c, k_max=k_max)
    best = "\n".join(f"  alpha={a:<5g} K*={k:<3d} speedup={s:.3f}"
                     for a, k, s in zip(alphas, k_star, s_star))
    text = (f"Closed-form speedup S(alpha, K, c={c:g}) (Leviathan et al. 2023, Thm 3.8)\n"
            f"{table}\nOptimal K (K <= {k_max}):\n{best}")
    path = Path(out_dir) / "analytic_speedup.png"
    fig = analytic_overview(c=c, k_max=k_max)
    atomic.write(path, lambda tmp: fig.savefig(tmp, dpi=dpi))
    return AnalyticReport(table=text, figures=(path,))
