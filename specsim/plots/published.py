"""Figures for published GPU/TPU speedups against the iteration cost model (notebook 11)."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from specsim import analytic
from specsim.iteration_cost import DrafterSpec, iteration_terms, speedup_from_terms


def observed_vs_predicted(pred, column: str = "predicted") -> Figure:
    """Each published row's reported speedup against ``column`` (the leave-one-source-out
    prediction by default), one marker colour per source, with the ±10% band."""
    fig = Figure(figsize=(6.4, 5.2))
    ax = fig.subplots()
    hi = float(max(pred["observed"].max(), pred[column].max())) * 1.08
    x = np.linspace(0, hi, 2)
    ax.plot(x, x, color="0.3", lw=1)
    ax.fill_between(x, 0.9 * x, 1.1 * x, color="0.85", label="±10%")
    for source, g in pred.groupby("source_id"):
        ax.scatter(g["observed"], g[column], s=22, label=source,
                   marker="^" if g["tree"].all() else "o")
    ax.set_xlim(0, hi)
    ax.set_ylim(0, hi)
    ax.set_xlabel("reported speedup")
    ax.set_ylabel(f"{column.replace('_', ' ')} speedup")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def speedup_vs_k_and_batch(target, hardware, overheads, *, alpha: float, drafter: str = "eagle",
                           draft=None, tp: int = 1, k_max: int = 12,
                           batches=(1, 2, 4, 8, 16, 32, 64, 128, 256)) -> Figure:
    """Two panels from `specsim.iteration_cost`: speedup against K at batch 1, and against
    batch at K = 2, 4, 8, for a chain drafter at acceptance ``alpha``."""
    def speed(k, b):
        calls = 0 if drafter in ("ngram", "ngram_tree", "lookahead") else (1 if drafter == "medusa" else k)
        spec = DrafterSpec(kind=drafter, calls=calls, draft_model=draft)
        terms = iteration_terms(target, hardware, spec, verify_tokens=k + 1, batch=b, tp=tp)
        return speedup_from_terms(terms, overheads, float(analytic.expected_tokens(alpha, k)))

    fig = Figure(figsize=(9.6, 3.6))
    a1, a2 = fig.subplots(1, 2)
    ks = np.arange(1, k_max + 1)
    a1.plot(ks, [speed(int(k), 1) for k in ks], marker="o", ms=3)
    a1.axhline(1.0, color="0.5", lw=0.8)
    a1.set_xlabel("K (batch 1)")
    a1.set_ylabel("speedup")
    for k in (2, 4, 8):
        a2.plot(batches, [speed(k, b) for b in batches], marker="o", ms=3, label=f"K={k}")
    a2.axhline(1.0, color="0.5", lw=0.8)
    a2.set_xscale("log", base=2)
    a2.set_xlabel("batch")
    a2.legend(fontsize=8)
    fig.suptitle(f"{target} on {getattr(hardware, 'name', hardware)}, {drafter}, α = {alpha}")
    fig.tight_layout()
    return fig
