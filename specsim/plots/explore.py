"""The speedup explorer's figure: E, speedup, optimal K, break-even α and ops growth at once."""

from __future__ import annotations

import numpy as np
import seaborn as sns
from matplotlib.figure import Figure

from specsim import analytic
from specsim.plots.axes import integer_axis, plain_log

__all__ = ["explorer_summary", "explorer_figure"]


def explorer_summary(alpha: float, k: int, c: float, c_hat: float | None = None, k_max: int = 32) -> dict:
    """The numbers the explorer prints for one (α, K, c): E, speedup, K*, break-even α, ops."""
    c_hat = c if c_hat is None else c_hat
    k_opt, s_opt = analytic.optimal_k(alpha, c, k_max=k_max)
    return {
        "alpha": alpha, "k": k, "c": c, "c_hat": c_hat,
        "expected_tokens": float(analytic.expected_tokens(alpha, k)),
        "speedup": float(analytic.speedup(alpha, k, c)),
        "k_opt": int(k_opt), "speedup_at_k_opt": float(s_opt),
        "break_even_alpha": float(analytic.break_even_alpha(k, c)),
        "ops_factor": float(analytic.ops_factor(alpha, k, c_hat)),
    }


def explorer_figure(alpha: float, k: int, c: float, c_hat: float | None = None, k_max: int = 32,
                    n: int = 181) -> Figure:
    """Four panels around the point (α, K, c):

    E(α, K) against K; speedup against α at this K and at the best K, with the break-even
    α; the optimal K against α at this c; the arithmetic factor against α at this K.
    """
    c_hat = c if c_hat is None else c_hat
    alphas = np.linspace(0.0, 0.99, n)
    ks = np.arange(1, k_max + 1)
    s = explorer_summary(alpha, k, c, c_hat, k_max)
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(11, 7.5), layout="constrained")
        (ax_e, ax_s), (ax_k, ax_o) = fig.subplots(2, 2)

        ax_e.plot(ks, analytic.expected_tokens(np.full(ks.shape, alpha), ks), marker=".",
                  label=f"E(α = {alpha:.2f}, K)")
        ax_e.plot(ks, ks + 1, color="grey", ls=":", label="K + 1 (all accepted)")
        ax_e.axhline(1.0 / (1.0 - alpha) if alpha < 1 else np.nan, color="grey", ls="--", lw=1,
                     label="1 / (1 − α), K → ∞")
        ax_e.scatter([k], [s["expected_tokens"]], color="red", zorder=5)
        ax_e.set(xlabel="K", ylabel="expected tokens per iteration", ylim=(0, min(k_max, 20) + 1.5),
                 title=f"E = {s['expected_tokens']:.2f}")
        ax_e.legend(fontsize=8)

        ax_s.plot(alphas, analytic.speedup(alphas, k, c), label=f"K = {k}")
        _, s_best = analytic.optimal_k(alphas, np.full_like(alphas, c), k_max=k_max)
        ax_s.plot(alphas, s_best, ls="--", label="best K")
        ax_s.axhline(1.0, color="grey", lw=1)
        ax_s.axvline(s["break_even_alpha"], color="red", ls=":", lw=1,
                     label=f"break-even α = {s['break_even_alpha']:.2f}")
        ax_s.scatter([alpha], [s["speedup"]], color="red", zorder=5)
        ax_s.set(xlabel="α", ylabel="speedup (Thm 3.8)",
                 title=f"speedup {s['speedup']:.2f}×; best K = {s['k_opt']} gives {s['speedup_at_k_opt']:.2f}×")
        ax_s.legend(fontsize=8)

        k_best, _ = analytic.optimal_k(alphas, np.full_like(alphas, c), k_max=k_max)
        ax_k.step(alphas, k_best, where="mid")
        ax_k.scatter([alpha], [s["k_opt"]], color="red", zorder=5)
        plain_log(ax_k, "y")
        ax_k.set(xlabel="α", ylabel="optimal K", title=f"optimal K at c = {c:g}")
        integer_axis(ax_e, "x")

        ax_o.plot(alphas, analytic.ops_factor(alphas, k, c_hat), label=f"K = {k}, ĉ = {c_hat:g}")
        ax_o.scatter([alpha], [s["ops_factor"]], color="red", zorder=5)
        ax_o.set(xlabel="α", ylabel="arithmetic factor (Thm 3.11)", title=f"ops × {s['ops_factor']:.2f}")
        ax_o.legend(fontsize=8)
    return fig
