"""The speculative loop under a draft-length policy (`specsim.policies`): per-row K
within a policy.k_max buffer, an early-stopping draft loop, and a one-token target pass
in iterations where no row proposed (see `specsim.policy_engine` for the slots and why
the verify step gets the thresholded q').

Under a policy that may plan K = 0 (`policy_engine.switches_off`), iterations with
speculation off run in a loop of their own (`policy_off_loop`), each exactly the
autoregressive step, so speculation switched off costs what plain decoding costs. A
draft model that catches its own state up primes late (`primes_late`): its prefill runs
inside the loop at the first draft, and never in a run that never drafts
(`late_primed_loop`).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from specsim import policies, policy_engine
from specsim.decode.accounting import TRACE_COUNTS
from specsim.decode.loop_state import DONATED, advance, once_if, running
from specsim.decode.policy_verify import pass_width, policy_verify_pass
from specsim.decode.speculative import (SpecStatsBuffer, empty_stats, nonfinite_rows,
                                        record_stats, verify_drafts)
from specsim.drafters.base import Context, Draft, off_draft, reads_target_hidden
from specsim.models.compiler import jit
from specsim.models.config import ModelConfig
from specsim.models.transformer import forward_hidden, project
from specsim.sampling import SamplingParams, is_finite_row

__all__ = ["PolicyStatsBuffer", "PolicyRun", "record_policy_stats", "policy_step",
           "policy_off_step", "policy_off_loop", "primes_late", "late_primed_loop",
           "policy_program"]


class PolicyStatsBuffer(NamedTuple):
    k_used: jax.Array       # [I, B] int32 planned K (−1 where the row had finished)
    confidence: jax.Array   # [I, B, K] fp32 (NaN where the slot was not reached)
    accept_mask: jax.Array  # [I, B, K] bool: proposed and accepted by the test
    draft_steps: jax.Array  # [] int32: draft passes run (the drafter's prefill included)
    widths: jax.Array       # [K+1] int32: target passes over n = 1..K+1 tokens (index n−1)
    off_judged: jax.Array   # [I, B] int32: an off iteration's free first draft (see
    #                         `policy_engine.judge_off`): 1 matched the token, 0 did not,
    #                         −1 no draft judged


def record_policy_stats(stats: SpecStatsBuffer, pstats: PolicyStatsBuffer, it, ok, pd,
                        k_plan, accepted, n_pass):
    """Policy statistics of iteration ``it``; `drafted` counts proposals and `overlap`
    is kept at proposed slots only (the slot that stopped a row holds a thresholded
    row that was never proposed); ``n_pass`` ([] int32) is the verify pass's width."""
    n_prop = jnp.sum(pd.proposed, 1)
    stats = stats._replace(
        drafted=stats.drafted.at[it].set(jnp.where(ok, n_prop, -1)),
        overlap=stats.overlap.at[it].set(jnp.where(pd.proposed, stats.overlap[it], jnp.nan)))
    pstats = PolicyStatsBuffer(
        pstats.k_used.at[it].set(jnp.where(ok, k_plan, -1)),
        pstats.confidence.at[it].set(jnp.where(ok[:, None], pd.confidence, jnp.nan)),
        pstats.accept_mask.at[it].set(accepted & pd.proposed & ok[:, None]),
        pstats.draft_steps + pd.steps,
        pstats.widths.at[n_pass - 1].add(1), pstats.off_judged)
    return stats, pstats


class PolicyRun(NamedTuple):
    """What every iteration of `policy_program` reads and never changes."""
    params: object
    drafter: object
    sp: SamplingParams
    prompt_lens: jax.Array   # [B] int32
    max_new: jax.Array       # [] int32
    eos: jax.Array           # [] int32


def policy_step(run: PolicyRun, cfg, policy, widths: tuple, carry):
    """One speculative iteration under a policy (some row plans a draft, or the drafter
    is not `policy_engine.skippable`): plan, draft each row's k_plan (stopping early,
    catching the drafter up if the loop skipped it), verify (at the narrowest of
    ``widths`` that covers the widest proposal), accept, record, advance."""
    c, cache, dstate, pstate, stats, pstats = carry
    K, sp = policy.k_max, run.sp
    key, k_draft, k_accept, k_resid = jax.random.split(c.key, 4)
    k_plan = policy_engine.plan(policy, pstate, ~c.done)                          # [B]
    dstate, pd = policy_engine.draft(run.drafter, dstate, Context(c.tokens, c.length), K,
                                     k_draft, sp, policy, k_plan)
    draft = Draft(pd.tokens, pd.probs)          # probs: q' (zero rows past each stop)
    start = cache.length                                                         # [B]
    n_pass = pass_width(widths, jnp.max(jnp.sum(pd.proposed, 1)))                # []
    target_probs, cache, h = policy_verify_pass(run.params, cfg, sp, c, draft, n_pass,
                                                cache, widths)                    # [B, K+1, V]
    n_acc, new, accepted = verify_drafts(k_accept, k_resid, draft, target_probs, sp)
    finite, n_valid = nonfinite_rows(draft.probs, target_probs, n_acc)
    ok = ~c.done & finite                                                        # [B]
    cache = cache._replace(length=start + jnp.where(ok, n_acc + 1, 0))
    if reads_target_hidden(run.drafter):
        dstate = run.drafter.observe(dstate, h, n_acc, ok)
    dstate = run.drafter.commit(dstate, n_acc, ok)
    pstate = policy_engine.update(policy, pstate, k_plan, n_acc, jnp.sum(pd.proposed, 1), ok)
    stats = record_stats(stats, c.it, ok, n_acc, draft, target_probs)
    stats, pstats = record_policy_stats(stats, pstats, c.it, ok, pd, k_plan, accepted, n_pass)
    c = advance(c, new, n_valid, finite, run.prompt_lens, run.max_new, run.eos, key)
    return c, cache, dstate, pstate, stats, pstats


def policy_off_step(run: PolicyRun, cfg, policy, carry):
    """An iteration in which no row plans a draft (Goodput's K = 0), run as exactly the
    autoregressive loop's step (one target pass over the last token, a sample from the
    same key stream, `advance`) plus the policy's update with nothing proposed and the
    iteration's statistics (k_used 0, no proposals; the [I, B, K] buffers keep their
    NaN / False). The drafter is left out (`sync` catches it up when drafting resumes),
    except that a drafter reading the target's features is handed the one it would have
    read (``dstate``; () for the others): the pass's feature, which produced the token.
    On the off iterations `policy_engine.judges_off` names, the drafter's first draft is
    judged against the step first (`policy_engine.judge_off`; a feature head's step
    counts in ``draft_steps``)."""
    c, cache, pstate, stats, pstats, dstate = carry
    key, k_sample = jax.random.split(c.key)
    last = jnp.take_along_axis(c.tokens, (c.length - 1)[:, None], axis=1)       # [B, 1]
    start = cache.length
    h, cache = forward_hidden(run.params, cfg, last, cache)                      # [B, 1, D]
    probs = run.sp.probs(project(run.params, cfg, h)[:, 0])                      # [B, V]
    finite = is_finite_row(probs)                                                # [B]
    tok = run.sp.sample(k_sample, probs)                                         # [B]
    ok = ~c.done & finite
    none = jnp.zeros_like(c.length)
    pstate = policy_engine.update(policy, pstate, none, none, none, ok)   # no row planned
    period = policy_engine.judges_off(run.drafter, policy)
    if period:       # the first draft from the state before this step's feature arrives
        paid = jnp.int32(off_draft(run.drafter) == "paid")

        def judge(s):
            ps, judged, steps = s
            ps, judged = policy_engine.judge_off(
                run.drafter, policy, ps, dstate, Context(c.tokens, c.length), probs, tok,
                ok, jax.random.fold_in(k_sample, 1), run.sp)
            return ps, judged, steps + paid

        s = (pstate, jnp.full_like(c.length, -1), pstats.draft_steps)
        when = None if period == 1 else c.it % period == 0
        if off_draft(run.drafter) == "paid":   # only where the policy can use it (its budget)
            gate = policies.may_judge(policy, pstate, ok, jnp)
            when = gate if when is None else (when if gate is None else when & gate)
        s = judge(s) if when is None else once_if(when, judge, s)
        pstate, judged, steps = s
        pstats = pstats._replace(off_judged=pstats.off_judged.at[c.it].set(judged),
                                 draft_steps=steps)
    if reads_target_hidden(run.drafter):
        dstate = run.drafter.observe(dstate, h, none, ok)
    zero_or_absent = jnp.where(ok, 0, -1)                                        # [B]
    stats = stats._replace(accepted=stats.accepted.at[c.it].set(zero_or_absent),
                           drafted=stats.drafted.at[c.it].set(zero_or_absent))
    pstats = pstats._replace(k_used=pstats.k_used.at[c.it].set(zero_or_absent),
                             widths=pstats.widths.at[0].add(1))
    new = advance(c, tok[:, None], finite.astype(jnp.int32), finite, run.prompt_lens,
                  run.max_new, run.eos, key)
    cache = cache._replace(length=start + (new.length - c.length))
    return new, cache, pstate, stats, pstats, dstate


def policy_off_loop(run: PolicyRun, cfg, policy, I: int, carry):
    """Run `policy_off_step` while the loop runs and no row plans a draft: a while
    loop of its own whose state (c, cache, pstate, stats, pstats, dstate) leaves the
    drafter out (dstate is () unless the drafter reads the target's features), so an
    iteration with speculation off costs what an autoregressive one does (no K-wide
    work, no `lax.cond` carrying the caches)."""
    def off(carry):
        c, _, pstate, _, _, _ = carry
        return running(c, I) & ~jnp.any(policy_engine.plan(policy, pstate, ~c.done) > 0)

    return jax.lax.while_loop(off, partial(policy_off_step, run, cfg, policy), carry)


def primes_late(drafter, policy) -> bool:
    """Whether the policy program runs ``drafter``'s prefill itself, at the first draft
    (and never in a run that never drafts): under a ``policy`` that may switch
    speculation off (`policy_engine.switches_off`), a drafter that catches its own state
    up (``sync``: the draft models) and does not read the target's features. Every other
    drafter starts from `drafter_prefill_program`'s state (compiled once per drafter,
    not once per K and policy; n-gram lookup's state is empty)."""
    return (policy_engine.switches_off(policy) and not reads_target_hidden(drafter)
            and hasattr(drafter, "sync"))


def late_primed_loop(run: PolicyRun, cfg, policy, step, prompts, S: int, I: int,
                     passes: int, carry):
    """The policy loop of a drafter that primes late (`primes_late`): off iterations
    until some row plans a draft, then, only if the loop still runs, the drafter's
    prefill and a loop of one speculative iteration followed by the off iterations that
    come after it. The drafter's state exists only in that second part: a run that never
    drafts neither fills it nor copies it out (carrying a zero state through the whole
    loop cost a large cache's copy every call; the price here is the off loop compiled
    twice; see docs/studies/policy-loop.md). carry: (c, cache, pstate, stats, pstats),
    returned advanced."""
    drafter = run.drafter
    off_loop = partial(policy_off_loop, run, cfg, policy, I)

    def off(carry):
        return off_loop((*carry, ()))[:5]

    def drafting(carry):
        c, cache, pstate, stats, pstats = carry
        dstate = drafter.init_state(prompts, run.prompt_lens, S)
        pstats = pstats._replace(draft_steps=pstats.draft_steps + passes)

        def body(carry):
            c, cache, dstate, pstate, stats, pstats = step(carry)
            c, cache, pstate, stats, pstats = off((c, cache, pstate, stats, pstats))
            return c, cache, dstate, pstate, stats, pstats

        c, cache, _, pstate, stats, pstats = jax.lax.while_loop(
            lambda carry: running(carry[0], I), body,
            (c, cache, dstate, pstate, stats, pstats))
        return c, cache, pstate, stats, pstats

    carry = off(carry)
    return once_if(running(carry[0], I), drafting, carry)


@jit(static_argnames=("cfg", "policy", "S", "I", "widths"),
     donate_argnames=DONATED)
def policy_program(params, drafter, sp: SamplingParams, prompts, prompt_lens, max_new, eos,
                   start, dstate, *, cfg: ModelConfig, policy, S: int, I: int,
                   widths: tuple):
    """`speculative_program` with a draft-length policy: per-row K within a
    K = policy.k_max buffer (see `specsim.policy_engine`), policy state in the loop.
    → (LoopState, SpecStatsBuffer, PolicyStatsBuffer, cache, drafter state).

    Under a policy that may plan K = 0 (`policy_engine.switches_off`), with a
    `policy_engine.skippable` drafter or one reading the target's features, the loop
    alternates: a run of off iterations (`policy_off_loop`; none when some row
    plans a draft), then, while the loop runs (and so some row plans a draft), one
    speculative iteration and again the off loop. A drafter that primes late
    (`primes_late`) comes with ``dstate`` None: its prefill waits for the first run of
    off iterations, and is skipped when the loop never drafts (`late_primed_loop`; its
    state is not returned). The others start from ``dstate`` (donated), and a
    feature-reading drafter is handed each off iteration's feature."""
    TRACE_COUNTS["speculative-policy"] += 1
    B, K = prompts.shape[0], policy.k_max
    feats = reads_target_hidden(drafter)
    common, cache = start
    stats = empty_stats(I, B, K)
    pstats = PolicyStatsBuffer(jnp.full((I, B), -1, jnp.int32),
                               jnp.full((I, B, K), jnp.nan, jnp.float32),
                               jnp.zeros((I, B, K), bool), jnp.int32(0),
                               jnp.zeros((K + 1,), jnp.int32), jnp.full((I, B), -1, jnp.int32))
    run = PolicyRun(params, drafter, sp, prompt_lens, max_new, eos)
    step = partial(policy_step, run, cfg, policy, widths)
    pstate = policies.begin(policy, policy.init(B, jnp), max_new - 1, jnp)   # the prefill gave one token
    late = dstate is None        # the caller's `primes_late`: the prefill runs in here
    passes = int(drafter.passes_per_iteration(K) > 0)   # the drafter's prefill, if it runs
    if not late:
        pstats = pstats._replace(draft_steps=pstats.draft_steps + passes)
    if late:
        common, cache, pstate, stats, pstats = late_primed_loop(
            run, cfg, policy, step, prompts, S, I, passes,
            (common, cache, pstate, stats, pstats))
        dstate = ()
    elif policy_engine.switches_off(policy) and (
            feats or policy_engine.skippable(drafter, dstate)):
        off_loop = partial(policy_off_loop, run, cfg, policy, I)

        def body(carry):
            # one instance of the off loop and one of the speculative step in the
            # program (a first off loop before the while loop compiled a second copy)
            c, cache, dstate, pstate, stats, pstats = carry
            seen = dstate if feats else ()        # the part of the drafter off steps carry
            c, cache, pstate, stats, pstats, seen = off_loop(
                (c, cache, pstate, stats, pstats, seen))
            dstate = seen if feats else dstate
            return once_if(running(c, I), step, (c, cache, dstate, pstate, stats, pstats))

        common, cache, dstate, _, stats, pstats = jax.lax.while_loop(
            lambda carry: running(carry[0], I), body,
            (common, cache, dstate, pstate, stats, pstats))
    else:
        common, cache, dstate, _, stats, pstats = jax.lax.while_loop(
            lambda carry: running(carry[0], I), step,
            (common, cache, dstate, pstate, stats, pstats))
    return common, stats, pstats, cache, dstate    # the caches reuse the donated buffers
