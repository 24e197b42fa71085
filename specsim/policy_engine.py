"""The draft-length policies of `specsim.policies` inside the compiled loop (JAX).

The policy objects are static (hashable) arguments of the jitted program; their per-row
state is a tuple of [B, ...] arrays in the loop state, and their `plan` / `keep` /
`update` run here with ``xp = jax.numpy``, the same arithmetic `specsim.simulate`
replays with NumPy.

One iteration under a policy, for K = policy.k_max draft slots:

1. ``k_plan = policy.plan(state)`` [B] (0 for finished rows, so they never hold the
   draft loop open);
   when no row plans a draft and the drafter is `skippable` or reads the target's
   features (handed the off step's feature), the iteration is a plain autoregressive
   step (`specsim.decode` runs those in a loop of their own, so speculation switched
   off costs what plain decoding costs);
2. slot j of row b is *reached* when j < k_plan[b] and every earlier slot was proposed;
   a reached slot draws x_j ~ q_j and proposes it when ``policy.keep(j, s_j)`` holds,
   s_j the draft's confidence in x_j (sampling: q_j(x_j); greedy: the draft's softmax
   at temperature 1, since q_j is one-hot there);
3. the verify distribution of a reached slot is the thresholded law
   q'_j = q_j · keep(j, q_j) (elementwise), of an unreached slot zero ("no proposal").

Exactness: a slot proposes x with probability q'_j(x) and nothing with the remaining
mass. Speculative sampling is exact for any such sub-probability proposal Q when the
acceptance test uses Q (accept x w.p. min(1, p(x)/Q(x))) and a rejection *or* an empty
proposal samples the residual (p − Q)⁺ / Σ(p − Q)⁺: the output law is
min(p, Q) + (p − Q)⁺ = p. Hence the verify step receives q', not q: the slot that
stopped the row keeps its thresholded row (its token has q'(x) = 0 and is always
rejected), and the residual there is (p − q')⁺, not p. At temperature 0 the output is
the target's argmax whatever is proposed, so there q' is q on proposed slots and zero
elsewhere.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specsim import policies as P
from specsim.drafters.base import off_draft
from specsim.drafters.policy_draft import masked_draft

__all__ = ["skippable", "draft", "plan", "update", "judges_off", "judge_off", "switches_off"]


def plan(policy, state, active):
    """[B] int32 planned drafts, 0 for inactive rows."""
    B = active.shape[0]
    return jnp.where(active, policy.plan(state, B, jnp, active), 0).astype(jnp.int32)


def update(policy, state, k_plan, n_accepted, n_proposed, active):
    return policy.update(state, k_plan, n_accepted, n_proposed, active, jnp)


def switches_off(policy) -> bool:
    """Whether ``policy`` may plan K = 0 for a running row (its ``plans_off``; True for a
    policy that does not say): only then does the program hold the off iterations' loop
    (`specsim.decode.policy_loop.policy_program`). Static."""
    return bool(getattr(policy, "plans_off", True))


def judges_off(drafter, policy) -> int:
    """Every how many off iterations (no row plans a draft) the loop judges the
    drafter's first draft (0: never; `specsim.policies.judge_period` of the drafter's
    `specsim.drafters.off_draft`): a free draft (n-gram lookup) on every one, a draft
    that costs a step but whose state the off steps keep current (the feature head) on
    every n-th, where the policy takes the evidence (``observe_off``, e.g.
    `specsim.policies.Goodput`). Static."""
    return P.judge_period(policy, off_draft(drafter))


def judge_off(drafter, policy, pstate, dstate, context, probs, token, active, key, sampling):
    """Evidence gathered while speculation is off: the first draft x ~ q of the next
    position (``drafter.propose`` of one token from ``dstate`` on ``context``, before
    the step's token was appended) put to the acceptance test against the step's
    distribution ``probs`` [B, V], which drew ``token`` [B]. A one-hot draft (n-gram
    lookup; every draft at temperature 0) passes when it equals the token: probability
    p(x), the test's, and at temperature 0 exactly [x = argmax p]. Any other passes when
    u · q(x) < p(x), u ~ U(0, 1): probability min(1, p(x)/q(x)), the test's. The output
    is untouched (nothing was proposed). A row with no draft (no n-gram match: a zero
    row) is not judged.
    → (policy.observe_off(...) state, judged [B] int32: 1 passed, 0 not, −1 none)."""
    k_draft, k_test = jax.random.split(key)
    _, d = drafter.propose(dstate, context, 1, k_draft, sampling)
    x, q = d.tokens[:, 0], d.probs[:, 0]                                       # [B], [B, V]
    qx = jnp.take_along_axis(q, x[:, None], axis=1)[:, 0]                      # [B]
    px = jnp.take_along_axis(probs, x[:, None], axis=1)[:, 0]
    u = jax.random.uniform(k_test, x.shape)
    has = active & (qx > 0)
    matched = has & jnp.where(qx >= 1.0, x == token, u * qx < px)
    pstate = policy.observe_off(pstate, has, matched, active, jnp,
                                paid=off_draft(drafter) == "paid")
    return pstate, jnp.where(has, matched.astype(jnp.int32), -1)


def skippable(drafter, dstate) -> bool:
    """Whether the loop may leave ``drafter`` out of an iteration in which no row plans
    a draft (Goodput's K = 0), running that iteration as a plain autoregressive step: a
    drafter that catches its state up itself (``sync``, the model drafters) or one with
    no state (n-gram lookup, whose proposal depends on the context alone). Others (the
    instrument's latent chain) run every iteration. Static: decided while tracing."""
    if hasattr(drafter, "sync"):
        return True
    return not jax.tree_util.tree_leaves(dstate)


def draft(drafter, dstate, context, k: int, key, sampling, policy, k_plan):
    """(dstate, PolicyDraft): the drafter's own early-stopping loop when it has one
    (`propose_policy`), else its K-slot proposal masked by `masked_draft`.

    A drafter with ``sync`` is first caught up on the context tokens it missed in the
    iterations the loop ran without it (see `skippable`; a few tokens per pass, counted
    in ``steps``; no pass when it is in step), under a policy that may switch off
    (`switches_off`): under any other the loop never leaves the drafter out, and the
    program holds no catch-up pass to compile."""
    if not (hasattr(drafter, "sync") and switches_off(policy)):
        return _draft_now(drafter, dstate, context, k, key, sampling, policy, k_plan)
    dstate, n_sync = drafter.sync(dstate, context)
    dstate, pd = _draft_now(drafter, dstate, context, k, key, sampling, policy, k_plan)
    return dstate, pd._replace(steps=pd.steps + n_sync)


def _draft_now(drafter, dstate, context, k: int, key, sampling, policy, k_plan):
    if hasattr(drafter, "propose_policy"):
        return drafter.propose_policy(dstate, context, k, key, sampling, policy, k_plan)
    dstate, d = drafter.propose(dstate, context, k, key, sampling)
    return dstate, masked_draft(policy, d.tokens, d.probs, k_plan, sampling.greedy,
                                drafter.passes_per_iteration(k))
