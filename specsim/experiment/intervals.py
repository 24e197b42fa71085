"""Confidence intervals from paired timing rounds (NumPy only).

Every call of a run is timed once in every round (`specsim.experiment.paired`), so a
round is the unit of resampling: a bootstrap draws rounds with replacement, the same
rounds for every series of the run, and recomputes the statistic (a ratio of medians,
a prediction, an error) on each draw. Drift of the machine that hits one round hits
all of its series alike, and the interval carries only what pairing does not cancel.

A percentile bootstrap over a few rounds is too narrow (its draws can only reshuffle
the rounds there are: over 3 rounds it spans little more than their range), so every
interval is at least as wide as the Student-t interval of the statistic computed round
by round, centred on the statistic; with one round there is no interval (NaN).
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


def interval(value: float, boot, per_round, level: float = LEVEL, *,
             positive: bool = False) -> Interval:
    """``value`` with the union of the percentile interval of its bootstrap draws
    ``boot`` and the Student-t interval of its per-round values ``per_round`` (mean ±
    t · sd / √n, shifted to centre on ``value``). With ``positive`` (a ratio or a time,
    whose rounds are all > 0) the Student-t interval is taken on the logarithm, so a wide
    spread never gives a bound at or below zero. Non-finite draws and rounds are left
    out; NaN bounds with fewer than two finite rounds or no finite draw."""
    from scipy import stats

    if not 0 < level < 1:
        raise InvalidArgument(f"level must be in (0, 1), got {level!r}")
    boot = np.asarray(boot, float)
    boot = boot[np.isfinite(boot)]
    rounds = np.asarray(per_round, float)
    rounds = rounds[np.isfinite(rounds)]
    if boot.size == 0 or rounds.size < 2 or not np.isfinite(value):
        return Interval(float(value), math.nan, math.nan)
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    t = float(stats.t.ppf(0.5 + level / 2, rounds.size - 1))
    if positive and value > 0 and (rounds > 0).all():
        h = t * float(np.log(rounds).std(ddof=1)) / math.sqrt(rounds.size)
        t_lo, t_hi = value * math.exp(-h), value * math.exp(h)
    else:
        h = t * float(rounds.std(ddof=1)) / math.sqrt(rounds.size)
        t_lo, t_hi = value - h, value + h
    return Interval(float(value), float(min(lo, t_lo)), float(max(hi, t_hi)))


def bootstrap(series: Mapping, statistic: Callable[[dict], object], *, draws: int = DRAWS,
              level: float = LEVEL, seed: int = 0, positive: bool = False) -> Interval:
    """``statistic`` of the per-key medians over rounds, with its `interval`: the
    percentile interval over ``draws`` resamplings of the rounds, widened to the
    Student-t interval of the statistic round by round. ``statistic`` takes ``{key:
    median}`` and must work elementwise on arrays (it is called with floats, with
    [draws] arrays and with the [rounds] series themselves)."""
    if not 0 < level < 1:
        raise InvalidArgument(f"level must be in (0, 1), got {level!r}")
    med = resample_medians(series, draws=draws, seed=seed)
    value = float(statistic({k: m for k, (m, _) in med.items()}))
    boot = statistic({k: b for k, (_, b) in med.items()})
    per_round = statistic({k: np.asarray(v, float) for k, v in series.items()})
    return interval(value, boot, per_round, level, positive=positive)


def ratio_of_medians(numerator, denominator, **kw) -> Interval:
    """median(numerator) / median(denominator) over paired rounds, with its interval."""
    return bootstrap({"n": numerator, "d": denominator}, lambda m: m["n"] / m["d"],
                     positive=True, **kw)


def coverage(predicted, lo, hi) -> float:
    """The share of runs whose prediction lies inside its measured interval [lo, hi]
    (runs with a NaN in any of the three left out; NaN when none is left)."""
    p, a, b = (np.asarray(x, float) for x in (predicted, lo, hi))
    ok = np.isfinite(p) & np.isfinite(a) & np.isfinite(b)
    if not ok.any():
        return math.nan
    return float(np.mean((a[ok] <= p[ok]) & (p[ok] <= b[ok])))
