"""Confidence intervals from paired timing rounds (NumPy only).

Every call of a run is timed once in every round (`specsim.bench.paired_rounds`), so a
round is the unit of resampling: a bootstrap draws rounds with replacement, the same
rounds for every series of the run, and recomputes the statistic (a ratio of medians,
a prediction, an error) on each draw. Drift of the machine that hits one round hits
all of its series alike, and the interval carries only what pairing does not cancel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from specsim.errors import InvalidArgument

LEVEL = 0.95
"""The confidence level of every interval the demo reports."""
DRAWS = 1000
"""Bootstrap draws per interval (the percentiles of 1000 draws move by well under the
half-widths the demo resolves)."""


@dataclass(frozen=True)
class Interval:
    """A statistic ``value`` with its bootstrap interval [``lo``, ``hi``]."""
    value: float
    lo: float
    hi: float

    @property
    def half_width(self) -> float:
        """Half the interval's width relative to ``value`` (0.03: ±3%); inf when the
        value is zero or not finite."""
        if not (np.isfinite(self.value) and self.value != 0):
            return math.inf
        return float((self.hi - self.lo) / 2 / abs(self.value))

    def contains(self, x: float) -> bool:
        return bool(self.lo <= x <= self.hi)


def resample_medians(series: Mapping, *, draws: int = DRAWS, seed: int = 0) -> dict:
    """Per key of ``series`` (each a 1-D array over the same rounds, in round order):
    the median over rounds, and ``draws`` medians over rounds drawn with replacement,
    the same rounds for every key. → ``{key: (median, [draws] medians)}``."""
    arrays = {k: np.asarray(v, float) for k, v in series.items()}
    lengths = {a.shape for a in arrays.values()}
    if len(lengths) != 1 or len(next(iter(lengths))) != 1:
        raise InvalidArgument(f"series must be 1-D arrays over the same rounds, got shapes "
                              f"{sorted(lengths)}")
    n = next(iter(lengths))[0]
    if n < 1:
        raise InvalidArgument("series must hold at least one round")
    idx = np.random.default_rng(seed).integers(0, n, size=(int(draws), n))
    return {k: (float(np.median(a)), np.median(a[idx], axis=-1)) for k, a in arrays.items()}


def bootstrap(series: Mapping, statistic: Callable[[dict], object], *, draws: int = DRAWS,
              level: float = LEVEL, seed: int = 0) -> Interval:
    """``statistic`` of the per-key medians over rounds, with its percentile interval
    over ``draws`` resamplings of the rounds. ``statistic`` takes ``{key: median}`` and
    must work elementwise on arrays (it is called once with floats, once with [draws]
    arrays). Draws where the statistic is not finite are left out of the percentiles."""
    if not 0 < level < 1:
        raise InvalidArgument(f"level must be in (0, 1), got {level!r}")
    med = resample_medians(series, draws=draws, seed=seed)
    value = float(statistic({k: m for k, (m, _) in med.items()}))
    boot = np.asarray(statistic({k: b for k, (_, b) in med.items()}), float)
    boot = boot[np.isfinite(boot)]
    if boot.size == 0:
        return Interval(value, math.nan, math.nan)
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    return Interval(value, float(lo), float(hi))


def ratio_of_medians(numerator, denominator, **kw) -> Interval:
    """median(numerator) / median(denominator) over paired rounds, with its interval."""
    return bootstrap({"n": numerator, "d": denominator}, lambda m: m["n"] / m["d"], **kw)


def coverage(predicted, lo, hi) -> float:
    """The share of runs whose prediction lies inside its measured interval [lo, hi]
    (runs with a NaN in any of the three left out; NaN when none is left)."""
    p, a, b = (np.asarray(x, float) for x in (predicted, lo, hi))
    ok = np.isfinite(p) & np.isfinite(a) & np.isfinite(b)
    if not ok.any():
        return math.nan
    return float(np.mean((a[ok] <= p[ok]) & (p[ok] <= b[ok])))
