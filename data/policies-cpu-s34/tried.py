"""Two changes to Goodput tried in session 34 and not taken, judged by exact replays of
session 24's 309 position tables (`../goodput-positions-s27/replay_table.py`) at session
33's batch-1 pass costs on the Intel host (t(n)/t(1) = 1, 1.119, 1.223, 1.337, 1.396):

- **context**: each row keeps a second set of decayed counts for the iterations that
  follow a "hot" one (every draft it last proposed, or had judged while off, was accepted)
  and plans from the rates of its current context, shrunk towards its overall rates with
  ``ctx_weight`` pseudo-observations. Pooled over the tables at fixed K 4, a first draft
  after an all-accepted iteration passes at 0.80 (n-gram) and 0.84 (feature head),
  after a rejection at 0.12 and 0.27; but much of that contrast is between prompts.
- **strong**: a recovery probe (K = 1) is also allowed below the overdraft's floor where
  the first slot's rate less ``strong`` standard errors makes K = 1 beat plain decoding:
  a row whose bank is spent may draft again on overwhelming evidence, and the loss bound
  becomes a high-probability one.

    PYTHONPATH=. python data/policies-cpu-s34/tried.py ngram,feature-head 40,80 > data/policies-cpu-s34/tried.md
"""
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "goodput-positions-s27"))
import replay_table as rt  # noqa: E402

from specsim import policies as P  # noqa: E402

rt.RATIOS["s33"] = (1, 1.119, 1.223, 1.337, 1.396)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContextGoodput(P.Goodput):
    """State: (accepted, reached, hot accepted, hot reached, hot flag [B], floor, bank);
    no ``horizon``."""
    ctx_weight: float = 4.0

    def init(self, batch, xp=np):
        s = super().init(batch, xp)
        z = xp.zeros((batch, self.k_max), xp.float32)
        return (s[0], s[1], z, z, xp.zeros((batch,), xp.float32)) + tuple(s[2:])

    def _context(self, state, xp):
        acc, reached, hacc, hreached, hot = state[:5]
        h = hot[:, None] > 0
        return xp.where(h, hacc, acc - hacc), xp.where(h, hreached, reached - hreached)

    def alpha_estimate(self, state, xp=np):
        base = super().alpha_estimate(state, xp)
        cacc, creached = self._context(state, xp)
        return (cacc + self.ctx_weight * base) / (creached + self.ctx_weight)

    def _standard_error(self, a, state, xp=np):
        return xp.sqrt(a * (1 - a) / (self._context(state, xp)[1] + self.ctx_weight))

    def update(self, state, k_plan, n_accepted, n_proposed, active, xp=np):
        acc, reached, hacc, hreached, hot = state[:5]
        out = super().update((acc, reached) + tuple(state[5:]), k_plan, n_accepted,
                             n_proposed, active, xp)
        j = xp.arange(self.k_max)[None]
        n_wide = xp.max(xp.where(active, n_proposed, 0))
        paid = j < xp.minimum(k_plan, n_wide)[:, None]
        h, a, d = (hot > 0)[:, None], active[:, None], self.decay
        new_acc = xp.where(a, d * hacc + ((j < n_accepted[:, None]) & h), hacc)
        new_hit = xp.where(a, d * hreached + (paid & (j <= n_accepted[:, None]) & h), hreached)
        drafted = active & (n_proposed > 0)
        new_hot = xp.where(drafted, (n_accepted >= n_proposed).astype(hot.dtype), hot)
        return (out[0], out[1], new_acc, new_hit, new_hot) + tuple(out[2:])

    def observe_off(self, state, proposed, matched, active, xp=np, paid=False):
        if not self.judge_off:
            return state
        acc, reached, hacc, hreached, hot = state[:5]
        out = super().observe_off((acc, reached) + tuple(state[5:]), proposed, matched,
                                  active, xp, paid)
        seen = active & proposed
        first = (xp.arange(self.k_max) == 0)[None]
        h = (hot > 0)
        return (out[0], out[1], hacc + ((seen & matched & h)[:, None] & first),
                hreached + ((seen & h)[:, None] & first),
                xp.where(seen, matched.astype(hot.dtype), hot)) + tuple(out[2:])


@dataclasses.dataclass(frozen=True, kw_only=True)
class StrongRecovery(P.Goodput):
    strong: float = 2.0

    def recovery(self, state, xp=np):
        a = self.alpha_estimate(state, xp)
        lcb = (a - self.strong * self._standard_error(a, state, xp))[:, 0]
        t0 = float(self.costs.t_target[0])
        return super().recovery(state, xp) | (t0 * (1.0 + lcb) >= self.costs.iteration_time(1))


VARIANTS = {"default": (P.Goodput, {}),
            "context, weight 4": (ContextGoodput, {}),
            "context, weight 2": (ContextGoodput, {"ctx_weight": 2.0}),
            "context, weight 8": (ContextGoodput, {"ctx_weight": 8.0}),
            "strong 1.5": (StrongRecovery, {"strong": 1.5}),
            "strong 2": (StrongRecovery, {"strong": 2.0}),
            "strong 3": (StrongRecovery, {"strong": 3.0})}

if __name__ == "__main__":
    drafters, tokens = sys.argv[1:3]
    rt.print_table("Goodput", VARIANTS, drafters.split(","), ["s33"],
                   [int(n) for n in tokens.split(",")])
