"""Tick labels a reader can read: plain numbers on log axes ("40", "0.5", never
"4×10¹" or "10⁰") and whole numbers on integer axes (K, draft position, batch)."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import (FixedLocator, FuncFormatter, LogLocator, MaxNLocator,
                               NullFormatter)

__all__ = ["plain_number", "plain_log", "integer_axis", "tick_labels"]


def plain_number(value: float, pos=None) -> str:
    """A tick value as a plain number: up to four significant digits, no exponent
    below a million ("4096", "0.25", "1.5")."""
    if value == 0 or not np.isfinite(value):
        return "0" if value == 0 else ""
    if abs(value) >= 1e6 or abs(value) < 1e-4:
        return f"{value:.3g}"
    return f"{value:.4g}" if abs(value) >= 1 else f"{value:.3g}"


def _axis(ax, which: str):
    if which not in ("x", "y"):
        raise ValueError(f"which must be 'x' or 'y', got {which!r}")
    return ax.xaxis if which == "x" else ax.yaxis


def plain_log(ax, which: str = "x", ticks=None) -> None:
    """Log scale on ``which`` axis with plain-number labels: at ``ticks`` (e.g. the
    measured batch sizes) when given, else at 1, 2 and 5 of every decade; minor ticks
    unlabelled."""
    axis = _axis(ax, which)
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    if ticks is not None:
        axis.set_major_locator(FixedLocator(sorted({float(t) for t in ticks})))
    else:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(plain_number))
    axis.set_minor_formatter(NullFormatter())


def integer_axis(ax, which: str = "x") -> None:
    """Whole-number ticks on a linear axis (no "2.5" between two draft lengths)."""
    axis = _axis(ax, which)
    axis.set_major_locator(MaxNLocator(integer=True))
    axis.set_major_formatter(FuncFormatter(plain_number))


def tick_labels(ax, which: str = "x") -> list[str]:
    """The non-empty major tick labels of an axis as drawn (draws the figure)."""
    from matplotlib.backend_bases import FigureCanvasBase
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = ax.figure
    if type(fig.canvas) is FigureCanvasBase:      # a pyplot-free Figure: draw with Agg
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    ticks = _axis(ax, which).get_majorticklabels()
    lo, hi = sorted(ax.get_xlim() if which == "x" else ax.get_ylim())
    return [t.get_text() for t in ticks
            if t.get_text() and lo <= (t.get_position()[0 if which == "x" else 1]) <= hi]
