"""`Goodput`: within a loss budget, each iteration's K in {0, ..., k_max} maximising
E(K) / t(K), from a running estimate of each row's per-position acceptance.

E(K) = 1 + Σ_{k≤K} Π_{j≤k} α̂_j, each position's rate shrunk towards the row's pooled
rate, itself shrunk towards ``prior_alpha`` with weight ``prior_weight``; t(K) =
K·t_draft + t_target(K + 1) from `Costs` measured at the run's batch size. K = 0 (no
speculation: E = 1, t = t_target(1)) wins wherever speculation cannot pay:
disable-by-batch-size done by arithmetic. The settings:

- ``decay`` (0.98): counts decay per iteration (memory ~ 1/(1 − decay) iterations), so
  a position the row stopped reaching relaxes to the pooled rate and a row that turned
  itself off relaxes to the prior and tries again.
- ``width``: the engine drafts and verifies as wide as the widest row, so Goodput plans
  one K for the batch. "slowest" (default): the K maximising min_rows E_row(K) / t(K)
  over the running rows, the pace of a static batch, which runs until its slowest row
  is done; "shared": Σ_rows E_row(K) / t(K), a batch whose finished rows are replaced
  at once (continuous batching); "per-row": each row's own argmax (an engine that
  verifies each row at its own width).
- ``p_min`` (0.2): the plan is an upper bound, and a draft of confidence <= p_min ends
  the row's proposal, as in `ConfidenceThreshold` (llama.cpp's --draft-max with
  --draft-p-min, plus K = 0).
- A planned slot a row did not propose (cut by p_min, or an n-gram lookup without a
  match) counts as a rejection when another row's proposal made the batch verify it
  (paid for, no token), and not at all when no row proposed it (the verify is as wide
  as the widest proposal), so at batch 1 the estimates are of the drafts proposed.
- ``judge_off`` (True): with a drafter whose first draft is free (n-gram lookup), an
  iteration in which no row drafts still judges each row's lookup against the token
  the step drew (`observe_off`, `specsim.policy_engine.judge_off`), so a row that
  turned itself off goes on learning at no cost. ``judge_share`` (0.01): a drafter
  whose first draft costs a draft step but can be computed while off (the feature
  head: `specsim.drafters.off_draft` "paid") is judged on every n-th off iteration,
  n = ceil(t_draft / (judge_share · t_target(1))), so judging costs at most that share
  of plain decoding's time; 0 never judges it. A draft model's cache is left behind
  while off: it is not judged.
- ``budget`` ε (0.015; None: off) makes Goodput a conservative bandit over the run (Wu
  et al. 2016, "Conservative Bandits"): each row keeps a bank that starts at ε of the
  run's plain-decoding time (`begin`: ε · t_target(1) · (max_new_tokens − 1), paid in
  inside the compiled program), gains t_target(1) per token and pays each iteration's
  time by the cost model and each paid judgement's draft step. A K > 0 is planned only
  where the bank covers its worst outcome (every draft rejected: one token for t(K)),
  and a paid judgement runs only while the bank, less its step, could still buy a
  draft (`may_judge`). So by the cost model a run never loses more than ε against
  plain decoding, whatever the drafter does.
- ``recover`` (1; None: off) and ``overdraft`` (1/3): a recovery probe
  (`Goodput.recovery`) is a K = 1 iteration the bank cannot cover, allowed where the
  first slot's rate less ``recover`` standard errors makes K = 1 beat plain decoding
  and its worst outcome leaves the bank at or above −``overdraft`` × the run's
  allowance: by the cost model a run loses at most (1 + overdraft)·ε, 2% by default.
  It is for a row whose first probes failed and whose later first drafts, judged while
  off, pass.

Why each default is what it is, and the variants not taken: see
docs/studies/goodput-settings.md. The bound of ``budget`` and ``recover`` is checked on
300 random position tables in `tests/test_policies.py`, and the engine's arithmetic
against the exact replay in `tests/test_position_replay.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import InvalidArgument
from specsim.policies.costs import Costs
from specsim.policies.protocol import OFF_DRAFTS, check_decay, draft_steps, set_fields
from specsim.validation import nonnegative_float, positive_float, positive_int, probability

__all__ = ["WIDTHS", "Goodput"]

WIDTHS = ("slowest", "shared", "per-row")
"""Goodput's plan: one K for the batch (its iteration costs t(K) of its widest row, as in
`specsim.decode`) chosen for the pace of its slowest row ("slowest": a static batch runs
until its slowest row is done) or for the sum over its rows ("shared": a batch whose
finished rows are replaced at once), or each row's own K ("per-row": an engine verifying
each row at its own width)."""


@dataclass(frozen=True, kw_only=True)
class Goodput:
    """K maximising expected tokens per unit time from running per-position estimates."""
    k_max: int
    costs: Costs
    prior_alpha: float = 0.5
    prior_weight: float = 4.0
    decay: float = 0.98
    width: str = "slowest"
    p_min: float = 0.2
    judge_off: bool = True
    judge_share: float = 0.01
    budget: float | None = 0.015
    recover: float | None = 1.0
    overdraft: float = 1 / 3
    plans_off = True         # K = 0 where speculation cannot pay

    def __post_init__(self):
        k_max = positive_int("k_max", self.k_max)
        if self.budget is not None:
            b = nonnegative_float("budget", self.budget)
            if b >= 1.0:
                raise InvalidArgument(f"budget must be None or a number in [0, 1) "
                                      f"(got {self.budget!r})")
            set_fields(self, budget=b)
        if self.recover is not None:
            set_fields(self, recover=nonnegative_float("recover", self.recover))
        set_fields(self, overdraft=nonnegative_float("overdraft", self.overdraft))
        if not isinstance(self.judge_off, (bool, np.bool_)):
            raise InvalidArgument(f"judge_off must be True or False (got {self.judge_off!r})")
        if not isinstance(self.costs, Costs):
            raise InvalidArgument(f"costs must be a specsim.policies.Costs (got {self.costs!r})")
        if len(self.costs.t_target) < k_max + 1:
            raise InvalidArgument(f"costs.t_target must give k_max + 1 = {k_max + 1} pass times "
                                  f"(got {len(self.costs.t_target)})")
        set_fields(self, k_max=k_max,
                   prior_alpha=probability("prior_alpha", self.prior_alpha),
                   prior_weight=positive_float("prior_weight", self.prior_weight),
                   decay=check_decay(self.decay),
                   judge_share=nonnegative_float("judge_share", self.judge_share),
                   p_min=probability("p_min", self.p_min))
        if self.width not in WIDTHS:
            raise InvalidArgument(f"width must be one of {WIDTHS} (got {self.width!r})")

    def init(self, batch: int, xp=np) -> tuple:
        """(accepted [B, K], reached [B, K]), then, with a ``budget``, the floor [B] a
        recovery probe may overdraw the bank to (with ``recover``; `begin` sets it) and
        the bank [B] (empty until `begin` fills it with the run's allowance)."""
        zeros = xp.zeros((batch, self.k_max), xp.float32)
        row = xp.zeros((batch,), xp.float32)
        return (zeros, zeros) + ((row,) if self._recovers else ()) + \
            ((row,) if self.budget is not None else ())

    @property
    def _recovers(self) -> bool:
        """Whether the plan may take a recovery probe (`recovery`): a ``budget`` and a
        ``recover`` z."""
        return self.budget is not None and self.recover is not None

    def begin(self, state, new_tokens, xp=np) -> tuple:
        """The run's start: with a ``budget`` ε each row's bank receives the run's
        allowance, ε · t_target(1) · ``new_tokens`` (the tokens the run decodes after the
        prefill's: [] or [B]), the time the run may lose against plain decoding by the
        cost model (`update`, `margin`); without one the state is returned unchanged.
        With ``recover`` the floor a recovery probe may overdraw the bank to is set to
        −``overdraft`` × the allowance. The engine calls it once, after `init`, inside
        the compiled program (runs of any length share one program), and so do
        `specsim.simulate.simulate_policy` (with the trace's iterations) and
        `replay_positions` (with ``new_tokens`` − 1)."""
        if self.budget is None:
            return state
        allowance = self.budget * float(self.costs.t_target[0]) * \
            xp.asarray(new_tokens, xp.float32)
        if self._recovers:        # the floor: ``overdraft`` × the allowance below zero
            return tuple(state[:-2]) + (state[-2] - self.overdraft * allowance,
                                        state[-1] + allowance)
        return tuple(state[:-1]) + (state[-1] + allowance,)

    def alpha_estimate(self, state, xp=np):
        """[B, K] per-position rates, each shrunk towards the row's pooled rate (itself
        shrunk towards prior_alpha) with prior_weight pseudo-observations, so a position
        the row stopped reaching follows the pooled rate instead of freezing."""
        acc, reached = state[0], state[1]
        w = self.prior_weight
        pooled = (xp.sum(acc, 1, keepdims=True) + w * self.prior_alpha) / \
            (xp.sum(reached, 1, keepdims=True) + w)                              # [B, 1]
        return (acc + w * pooled) / (reached + w)                              # [B, K]

    def _standard_error(self, a, state, xp=np):
        """[B, K]: sqrt(α̂(1 − α̂) / (n + w)), n the decayed count of reached slots."""
        return xp.sqrt(a * (1 - a) / (state[1] + self.prior_weight))

    def plan(self, state, batch: int, xp=np, active=None):
        """[B] K per row; with width "shared" the batch's K, summed over the ``active``
        rows ([B] bool; None: every row), so finished rows do not steer it. With a
        ``budget`` only the K whose `margin` is >= 0 are candidates (K = 0 always is),
        and K = 1 where the row may take a `recovery` probe."""
        e = _expected_tokens(self.alpha_estimate(state, xp), xp)               # [B, K+1]
        t = self.costs.iteration_time(xp.arange(self.k_max + 1), xp)           # [K+1]
        ok = None if self.budget is None else self._affordable(
            self._plan_margin(state, xp), batch, active, xp)
        if self.width == "per-row":
            g = e / t[None]                                                    # [B, K+1]
        else:   # one K for the batch: E over the running rows, their min ("slowest") or sum
            g = self._over_rows(e, batch, active, xp) / t                      # [K+1]
        if ok is not None:
            drafts = xp.arange(self.k_max + 1) > 0                             # [K+1]
            g = xp.where(ok | ~drafts, g, -1.0)
        k = xp.argmax(g, axis=-1).astype(xp.int32)
        return k if self.width == "per-row" else xp.full((batch,), k, xp.int32)

    def _over_rows(self, x, batch, active, xp=np):
        """[K+1]: a [B, K+1] row quantity over the running rows as the batch plan reads
        it: their min ("slowest") or their sum ("shared")."""
        ignore, over_rows = (xp.inf, xp.min) if self.width == "slowest" else (0.0, xp.sum)
        on = (xp.ones((batch,), bool) if active is None else active)[:, None]
        return over_rows(xp.where(on, x, ignore), axis=0)

    def _affordable(self, m, batch, active, xp=np):
        """Which K the budget allows, from margins m [B, K+1]: [B, K+1] per row
        ("per-row"), else [K+1] read over the running rows as the plan reads them."""
        return m >= 0 if self.width == "per-row" else self._over_rows(m, batch, active, xp) >= 0

    def may_judge(self, state, active, xp=np):
        """[] bool: whether an off iteration's paid judgement (`observe_off` with paid:
        the feature head's draft step) is worth its step. Always without a ``budget``;
        with one, only while the banks, less that step, could still afford some K > 0 as
        `plan` reads them (``active`` [B] bool: the running rows), a recovery probe
        counted as affordable where its worst outcome would keep the bank above its
        floor (the evidence may yet allow it). A bank that cannot never drafts again
        (off iterations neither fill nor drain it), so judging would buy nothing, and
        with this gate the judging too stays inside the budget and its overdraft."""
        if self.budget is None:
            return xp.asarray(True)
        t_draft = float(self.costs.t_draft)
        m = self.margin(state, xp) - t_draft                                   # [B, K+1]
        if self._recovers:      # or a recovery probe, should the evidence come to allow it
            m = _lift_k1(m, self._worst_k1(state) - t_draft >= state[-2], xp)
        ok = self._affordable(m, state[0].shape[0], active, xp)[..., 1:]      # K > 0
        return xp.any(ok & active[:, None] if self.width == "per-row" else ok)

    def margin(self, state, xp=np):
        """[B, K+1]: the row's bank after an iteration at each K that yields the fewest
        tokens it can, one (every draft rejected): bank − t(K) + t_target(1). ``budget`` ε
        makes Goodput a conservative bandit (Wu et al. 2016) over the run: the bank
        starts at ε of the run's plain-decoding time (`begin`), gains t_target(1) per
        token, pays each iteration's time by the cost model (`update`) and each paid
        judgement's draft step (`observe_off`), so it is what the run may still lose
        against plain decoding; a K > 0 is planned only where even its worst outcome
        leaves the bank non-negative. So, by the cost model, a run of its max_new_tokens
        loses at most ε against plain decoding, judging included (a paid judgement runs
        only while the bank could pay for it and still buy a draft: `may_judge`): the
        bound holds whatever the drafter does, not on average. A row that stops early at
        EOS may lose up to the whole allowance, a larger share of its shorter run. What
        speculation wins refills the bank, so a row where drafting pays drafts on; a row
        whose first probes failed cannot draft again until it could afford another
        failure, except by a `recovery` probe its evidence backs, paid from an overdraft
        (with ``recover``, the default: the bound is then (1 + ``overdraft``)·ε)."""
        t = self.costs.iteration_time(xp.arange(self.k_max + 1), xp)           # [K+1]
        return state[-1][:, None] - t[None] + float(self.costs.t_target[0])

    def _worst_k1(self, state):
        """[B]: the bank after a K = 1 iteration whose draft is rejected."""
        return state[-1] - (self.costs.iteration_time(1) - float(self.costs.t_target[0]))

    def recovery(self, state, xp=np):
        """[B] bool: whether the row may take a recovery probe, a K = 1 iteration its
        bank cannot cover (`margin` < 0). ``recover`` z (default 1; None: never): where
        a first probe failed early and the bank can no longer cover another, the row
        would never draft again (off iterations neither fill nor drain it), though the
        evidence judged while off (`observe_off`) may show its first drafts passing
        since. A K = 1 probe risks exactly that first draft, so it is allowed where
        the first slot's rate less z standard errors, α̂₀ − z·sqrt(α̂₀(1 − α̂₀)/(n + w)),
        makes K = 1 beat plain decoding, t_target(1)·(1 + α) >= t(1), and its worst
        outcome leaves the bank at or above its floor, −``overdraft`` × the run's
        allowance (`begin`). So by the cost model a run loses at most
        (1 + ``overdraft``)·ε of plain decoding (ε 0.015, overdraft 1/3: 2%), judging
        included (`may_judge`), and the overdraft is spent only on probes the evidence
        backs; a probe that wins refills the bank, from which wider K follow."""
        if not self._recovers:
            return xp.zeros(state[0].shape[:1], bool)
        a = self.alpha_estimate(state, xp)                                     # [B, K]
        lcb = (a - self.recover * self._standard_error(a, state, xp))[:, 0]    # [B]
        t0 = float(self.costs.t_target[0])
        pays = t0 * (1.0 + lcb) >= self.costs.iteration_time(1)
        return pays & (self._worst_k1(state) >= state[-2])

    def _plan_margin(self, state, xp=np):
        """[B, K+1]: `margin`, with K = 1's lifted to 0 where `recovery` allows it."""
        m = self.margin(state, xp)
        return _lift_k1(m, self.recovery(state, xp), xp) if self._recovers else m

    def keep(self, j, confidence, xp=np):
        """A draft ends the row's proposal when its confidence is <= p_min (default 0.2;
        p_min 0: every draft of nonzero confidence is kept, as `FixedK`)."""
        return confidence > self.p_min

    def update(self, state, k_plan, n_accepted, n_proposed, active, xp=np) -> tuple:
        """Slot j of a row was reached when the row planned it, accepted every draft
        before it, and the batch paid for it: the verify covered it (j < n_wide, the
        widest proposal of the running rows). It counts as accepted when its draft was.
        A planned slot the row did not propose (an n-gram lookup without a match, a
        draft cut by p_min) while another row's proposal made the batch verify it is a
        rejection: paid for, no token. Where no row proposed it, it cost nothing (the
        verify is as wide as the widest proposal) and is not counted, so at batch 1 the
        estimates are of the drafts proposed, and E(K) / t(K) compares a proposal's
        tokens with its cost."""
        acc, reached = state[0], state[1]
        j = xp.arange(self.k_max)[None]                                        # [1, K]
        n_wide = xp.max(xp.where(active, n_proposed, 0))                       # []
        paid = j < xp.minimum(k_plan, n_wide)[:, None]                         # [B, K]
        was_reached = paid & (j <= n_accepted[:, None])                        # [B, K]
        was_acc = j < n_accepted[:, None]
        d = self.decay
        new_acc = d * acc + was_acc.astype(acc.dtype)
        new_reached = d * reached + was_reached.astype(reached.dtype)
        a = active[:, None]
        out = (xp.where(a, new_acc, acc), xp.where(a, new_reached, reached))
        if self._recovers:              # the floor: set once, in `begin`
            out += (state[-2],)
        if self.budget is not None:     # the bank: t(1) per token less what was paid
            paid = self._paid(k_plan, n_proposed, active, xp)
            earned = float(self.costs.t_target[0]) * (n_accepted + 1)
            out += (xp.where(active, state[-1] + earned - paid, state[-1]),)
        return out

    def _paid(self, k_plan, n_proposed, active, xp=np):
        """[]: the iteration's time by the cost model, as the engine runs it: the draft
        steps of the row that needed most (its proposals and the one that stopped it)
        and a verify over the widest proposal + 1 tokens; the autoregressive step when
        no running row planned a draft."""
        steps = xp.max(xp.where(active, draft_steps(k_plan, n_proposed, xp), 0))
        n_wide = xp.max(xp.where(active, n_proposed, 0))
        return steps * self.costs.t_draft + xp.asarray(self.costs.t_target)[n_wide]


    def off_judge_period(self, off_draft: str) -> int:
        """Every how many off iterations to judge a drafter whose first draft costs
        ``off_draft`` (`specsim.drafters.OFF_DRAFTS`): "free" every one, "paid" every
        ceil(t_draft / (judge_share · t_target(1))) (1 when a draft step is modelled as
        free), "none" never (0); 0 too without ``judge_off`` or, for "paid", with
        ``judge_share`` 0."""
        if off_draft not in OFF_DRAFTS:
            raise InvalidArgument(f"off_draft must be one of {OFF_DRAFTS} (got {off_draft!r})")
        if not self.judge_off or off_draft == "none":
            return 0
        t_draft = float(self.costs.t_draft)
        if off_draft == "free" or t_draft <= 0:
            return 1
        if self.judge_share == 0:
            return 0
        return max(1, int(np.ceil(t_draft / (self.judge_share * float(self.costs.t_target[0]))
                                  - 1e-9)))

    def observe_off(self, state, proposed, matched, active, xp=np, paid=False) -> tuple:
        """Evidence gathered in an iteration where no row drafted (`judge_period`;
        `specsim.policy_engine.judge_off`): slot 0 of each ``active`` row with a draft
        (``proposed`` [B] bool) was reached, and accepted where the draft passed the
        acceptance test against the step's distribution (``matched`` [B] bool). A row
        that turned itself off so goes on learning whether drafting would pay, at no
        cost or a draft step's, instead of waiting for its evidence to decay and
        re-probing at a verify's price (``judge_off`` False: the state is returned
        unchanged). Called after `update`, which has already decayed the counts. ``paid``
        (a draft step judged it: the feature head) charges that step, t_draft, to each
        active row's bank (with a ``budget``), so the budget covers the judging too."""
        if not self.judge_off:
            return state
        seen = (active & proposed).astype(state[1].dtype)                      # [B]
        hit = (active & proposed & matched).astype(state[0].dtype)
        first = (xp.arange(self.k_max) == 0)[None].astype(state[1].dtype)      # [1, K]
        out = (state[0] + hit[:, None] * first, state[1] + seen[:, None] * first) + \
            tuple(state[2:])
        if paid and self.budget is not None:
            bank = out[-1]
            out = out[:-1] + (xp.where(active, bank - float(self.costs.t_draft), bank),)
        return out



def _lift_k1(m, allow, xp=np):
    """[B, K+1] margins ``m`` with K = 1's raised to at least 0 where ``allow`` [B]."""
    k1 = xp.where(allow, xp.maximum(m[:, 1], 0.0), m[:, 1])
    return xp.concatenate([m[:, :1], k1[:, None], m[:, 2:]], axis=1)


def _expected_tokens(alpha, xp=np):
    """[B, K+1]: E(K) = 1 + Σ_{k≤K} Π_{j≤k} α_j for K = 0..k_max, from [B, K] rates."""
    surv = xp.cumprod(alpha, axis=1)                                           # [B, K]
    return 1.0 + xp.concatenate([xp.zeros_like(surv[:, :1]), xp.cumsum(surv, 1)], 1)

