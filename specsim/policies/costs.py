"""The cost model a policy plans with (`Costs`: one draft step and one target pass per
width, at the run's batch size), and the verify widths a policy program compiles
(`verify_widths`, `program_widths`)."""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass

import numpy as np

from specsim.errors import InvalidArgument
from specsim.policies.protocol import set_fields
from specsim.validation import nonnegative_float, positive_float, positive_int

__all__ = ["AUTO_WIDTH_TOLERANCE", "Costs", "verify_widths", "program_widths"]

AUTO_WIDTH_TOLERANCE = 0.05
"""``verify_widths="auto"`` (the default of `specsim.decode.generate_speculative`, with a
policy that carries `Costs`): a verify pass padded to a kept width may cost at most 5%
more than its own width (`Costs.fewest_widths`)."""


@dataclass(frozen=True, kw_only=True)
class Costs:
    """The cost model of one iteration at the run's batch size and context:
    t_draft = one draft step; t_target[n − 1] = one target pass over n new tokens,
    n = 1 .. k_max + 1 (t_target[0] is the autoregressive step). Any time unit."""
    t_draft: float
    t_target: tuple

    def __post_init__(self):
        t_target = tuple(positive_float(f"t_target[{i}]", float(t))
                         for i, t in enumerate(np.atleast_1d(np.asarray(self.t_target))))
        if not t_target:
            raise InvalidArgument("t_target must hold at least one pass time (got none)")
        set_fields(self, t_draft=nonnegative_float("t_draft", self.t_draft), t_target=t_target)

    @classmethod
    def from_ratio(cls, c: float, k_max: int, verify_slope: float = 0.0) -> "Costs":
        """Constant costs in target-step units: t_draft = c, t_target(n) = 1 +
        verify_slope·(n − 1) (slope 0: verifying K + 1 tokens costs one step)."""
        k_max = positive_int("k_max", k_max)
        slope = nonnegative_float("verify_slope", verify_slope)
        return cls(t_draft=c, t_target=tuple(1.0 + slope * n for n in range(k_max + 1)))

    def iteration_time(self, k, xp=np):
        """t(K) = K·t_draft + t_target(K + 1) for K = 0..k_max ([K+1] or broadcast)."""
        return k * self.t_draft + xp.asarray(self.t_target)[k]

    def nondecreasing(self) -> "Costs":
        """The closest pass times (least squares) that do not fall as a pass grows: a
        pass over more tokens reads the same weights and does more arithmetic, so a
        measured t(n + 1) < t(n) is noise (pool-adjacent-violators over t_target)."""
        return Costs(t_draft=self.t_draft, t_target=tuple(_nondecreasing(self.t_target)))

    def bucketed(self, widths) -> "Costs":
        """The costs of an engine that verifies only at ``widths`` (see `verify_widths`;
        k_max = len(t_target) − 1): a verify over n >= 2 tokens costs the pass at the
        narrowest width >= n, so a plan reads what the padded pass takes. t_target[0]
        stays the one-token pass: a plan of K = 0 runs the autoregressive step, which
        the policy program compiles apart from its verify widths (an iteration that
        planned drafts and proposed none pays the narrowest width instead, which the
        replay then undercharges unless 1 is among the widths)."""
        k_max = len(self.t_target) - 1
        ws = verify_widths(k_max, widths)
        pass_width = [1] + [ws[int(np.searchsorted(ws, n))] for n in range(2, k_max + 2)]
        return Costs(t_draft=self.t_draft, t_target=tuple(self.t_target[w - 1] for w in pass_width))

    def fewest_widths(self, tolerance: float = AUTO_WIDTH_TOLERANCE,
                      k_max: int | None = None) -> tuple:
        """The fewest verify widths (for `verify_widths`, `bucketed`) at which no pass
        of n = 2..k_max + 1 tokens, padded to the narrowest kept width >= n, costs more
        than (1 + ``tolerance``)·t(n). 1 and k_max + 1 are always kept (the
        autoregressive step, which the policy program compiles apart; the widest
        verify). ``k_max``: default len(t_target) − 1.

        Read on the `nondecreasing` costs (a measured dip is noise), where the rule kept
        from the widest pass down (keep n when the kept width above it costs more than
        the tolerance allows) is the smallest such set: each width it keeps opens an
        interval [n, kept above) in which any valid set must keep a width. Each width
        left out is one forward pass less for the policy program to compile. On a flat
        curve (a memory-bound pass) → (1, k_max + 1); the widths kept on measured
        curves: see docs/studies/verify-widths.md."""
        tol = nonnegative_float("tolerance", tolerance)
        top = len(self.t_target) - 1 if k_max is None else positive_int("k_max", k_max)
        if top + 1 > len(self.t_target):
            raise InvalidArgument(f"k_max must be at most len(t_target) - 1 = "
                                  f"{len(self.t_target) - 1} (got {k_max!r})")
        t = self.nondecreasing().t_target
        kept, above = [top + 1], top + 1
        for n in range(top, 1, -1):
            if t[above - 1] > (1.0 + tol) * t[n - 1]:
                kept.append(n)
                above = n
        return tuple(sorted(set(kept) | {1}))


def _nondecreasing(values) -> list:
    """Isotonic (non-decreasing) least-squares fit of ``values`` by pooling adjacent
    violators: each run that falls is replaced by its mean."""
    blocks = []                                          # [mean, count] per pooled run
    for v in map(float, values):
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, n2), (m1, n1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return [m for m, n in blocks for _ in range(n)]


def verify_widths(k_max: int, widths=None) -> tuple:
    """The widths at which a policy program compiles its verify pass, sorted: None is
    every width 1..k_max + 1 (a batch whose widest proposal is n − 1 drafts pays an
    n-token pass); a subset must hold k_max + 1 and pads a pass to the narrowest width
    that covers it. Each compiled width is one more forward pass in the program to
    compile, so a subset trades compile time for padded verify work."""
    k_max = positive_int("k_max", k_max)
    if widths is None:
        return tuple(range(1, k_max + 2))
    try:
        ws = sorted({operator.index(w) for w in widths})
    except TypeError:
        raise InvalidArgument(f"verify_widths must be None or a sequence of integers in "
                              f"1..k_max + 1 = {k_max + 1} (got {widths!r})") from None
    if not ws or ws[0] < 1 or ws[-1] != k_max + 1:
        raise InvalidArgument(f"verify_widths must be integers in 1..k_max + 1 = {k_max + 1} "
                              f"and include k_max + 1 (got {widths!r})")
    return tuple(ws)


def program_widths(policy, k_max: int, widths="auto") -> tuple:
    """(verify widths, policy) of a policy program: ``widths`` None or a sequence as
    `verify_widths`, the policy unchanged; ``"auto"`` (the default of
    `specsim.decode.generate_speculative`): for a policy that carries `Costs` (Goodput),
    the fewest widths within `AUTO_WIDTH_TOLERANCE` of the policy's own pass costs
    (`Costs.fewest_widths`), and the policy planning with its costs bucketed to them
    (`Costs.bucketed`), so its plan reads what the padded passes take; for any other
    policy (it has no costs to read) every width, as None."""
    if not isinstance(widths, str):
        return verify_widths(k_max, widths), policy
    if widths != "auto":
        raise InvalidArgument(
            f"verify_widths must be 'auto', None or a sequence of integers in 1..k_max + 1 "
            f"= {k_max + 1}; got {widths!r} with {type(policy).__name__}")
    costs = getattr(policy, "costs", None)
    if not isinstance(costs, Costs):
        return verify_widths(k_max, None), policy
    own = Costs(t_draft=costs.t_draft, t_target=costs.t_target[:k_max + 1])
    ws = own.fewest_widths()
    return ws, dataclasses.replace(policy, costs=own.bucketed(ws))

