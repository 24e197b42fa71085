"""The fixed-K speculative loop, and the verify step and statistics every speculative
loop shares.

Each iteration

1. drafts K tokens (`drafter.propose`: K draft passes in a `lax.scan` for a model),
2. runs the target once over K+1 positions: the last kept token and the K drafts,
3. accepts drafts: ``n_acc = sum(cumprod(accepted))`` per row (`verify_drafts`),
4. samples one more token: from the residual max(0, p − q) at the first rejected
   position, or the bonus token from the target's last distribution when all K were
   accepted,
5. rolls back both KV caches by length (``cache.length``), appends n_acc + 1 tokens.

Random keys live in the loop state and are split every iteration into separate streams
for drafting, acceptance and residual sampling. Cache invariant: the target cache holds
all tokens of a row but the last (length − 1); a model drafter's cache holds all but the
last two (see `specsim.drafters`). Shapes: B batch, K drafts, V vocab, I iteration buffer.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from specsim.decode.accounting import TRACE_COUNTS
from specsim.decode.loop_state import DONATED, advance, running
from specsim.drafters.base import Context, reads_target_hidden
from specsim.models.compiler import jit
from specsim.models.config import ModelConfig
from specsim.models.transformer import forward_hidden, project
from specsim.sampling import SamplingParams, accept_drafts, is_finite_row, overlap, sample_residual

__all__ = ["SpecStatsBuffer", "empty_stats", "verify_drafts", "nonfinite_rows", "record_stats",
           "speculative_program"]


class SpecStatsBuffer(NamedTuple):
    """Per-iteration statistics of a speculative loop (−1 / NaN: the row took no part)."""
    accepted: jax.Array  # [I, B] int32
    drafted: jax.Array   # [I, B] int32
    overlap: jax.Array   # [I, B, K] fp32


def empty_stats(I: int, B: int, K: int) -> SpecStatsBuffer:
    """A `SpecStatsBuffer` with no iteration recorded."""
    return SpecStatsBuffer(jnp.full((I, B), -1, jnp.int32), jnp.full((I, B), -1, jnp.int32),
                           jnp.full((I, B, K), jnp.nan, jnp.float32))


def verify_drafts(k_accept, k_resid, draft, target_probs, sp: SamplingParams):
    """Steps 3–4 of an iteration: accept the leading drafts, then one more token (the
    residual at the first rejection, or the bonus after K). draft: tokens [B, K], probs
    [B, K, V]; target_probs [B, K+1, V]. → (n_acc [B], new tokens [B, K+1], the first
    n_acc + 1 valid; accepted [B, K] bool, the acceptance test of every slot)."""
    B, K = draft.tokens.shape
    rows = jnp.arange(B)
    accepted = accept_drafts(k_accept, draft.tokens, draft.probs, target_probs[:, :K],
                             greedy=sp.greedy)                                    # [B, K]
    n_acc = jnp.sum(jnp.cumprod(accepted.astype(jnp.int32), axis=1), axis=1)      # [B]
    p_next = target_probs[rows, n_acc]                                           # [B, V]
    q_next = jnp.where((n_acc < K)[:, None], draft.probs[rows, jnp.minimum(n_acc, K - 1)],
                       0.0)                                                      # [B, V]
    extra = sample_residual(k_resid, p_next, q_next, greedy=sp.greedy)           # [B]
    pos = jnp.arange(K + 1, dtype=jnp.int32)[None]                               # [1, K+1]
    drafts_ext = jnp.concatenate([draft.tokens, jnp.zeros((B, 1), jnp.int32)], 1)
    new = jnp.where(pos < n_acc[:, None], drafts_ext, extra[:, None])            # [B, K+1]
    return n_acc, new, accepted


def nonfinite_rows(draft_probs, target_probs, n_acc):
    """Which rows met non-finite values, and how many new tokens each keeps.

    A NaN distribution never passes the acceptance test, so it stops the accepted run at
    or before it. A row is flagged when such a distribution was consulted (position <=
    n_acc); it keeps the drafts accepted before it and stops. draft_probs [B, K, V],
    target_probs [B, K+1, V], n_acc [B] → (finite [B] bool, n_valid [B] int32)."""
    K = draft_probs.shape[1]
    pos = jnp.arange(K + 1, dtype=jnp.int32)[None]                               # [1, K+1]
    bad = ~is_finite_row(target_probs)                                           # [B, K+1]
    bad = bad.at[:, :K].set(bad[:, :K] | ~is_finite_row(draft_probs))
    first_bad = jnp.min(jnp.where(bad, pos, K + 1), axis=1)                      # [B]
    finite = first_bad > n_acc
    return finite, jnp.where(finite, n_acc + 1, jnp.minimum(n_acc, first_bad))


def record_stats(stats: SpecStatsBuffer, it, ok, n_acc, draft,
                 target_probs) -> SpecStatsBuffer:
    """Write iteration ``it``'s accepted and proposed counts and overlaps β for the rows
    that took part (ok [B]); −1 / NaN mark rows that did not."""
    K = draft.tokens.shape[1]
    proposed = jnp.sum(draft.probs, -1) > 0                                      # [B, K]
    beta = jnp.where(proposed, overlap(target_probs[:, :K], draft.probs), jnp.nan)  # [B, K]
    return SpecStatsBuffer(
        stats.accepted.at[it].set(jnp.where(ok, n_acc, -1)),
        stats.drafted.at[it].set(jnp.where(ok, jnp.sum(proposed, 1), -1)),
        stats.overlap.at[it].set(jnp.where(ok[:, None], beta, jnp.nan)))


@jit(static_argnames=("cfg", "k", "S", "I"),
     donate_argnames=DONATED)
def speculative_program(params, drafter, sp: SamplingParams, prompt_lens, max_new, eos,
                        start, dstate, *, cfg: ModelConfig, k: int, S: int, I: int):
    """The fixed-K loop from ``start`` = `prefill_program`'s (LoopState, cache) and
    ``dstate`` = `drafter_prefill_program`'s drafter state, both donated. → (LoopState,
    SpecStatsBuffer, cache, drafter state)."""
    TRACE_COUNTS["speculative"] += 1
    B = prompt_lens.shape[0]
    K = k
    feats = reads_target_hidden(drafter)
    common, cache = start
    stats = empty_stats(I, B, K)

    def body(carry):
        c, cache, dstate, stats = carry
        key, k_draft, k_accept, k_resid = jax.random.split(c.key, 4)
        # 1. draft K tokens
        dstate, draft = drafter.propose(dstate, Context(c.tokens, c.length), K, k_draft, sp)
        # 2. one target pass over K+1 positions: the last kept token and the drafts
        last = jnp.take_along_axis(c.tokens, (c.length - 1)[:, None], axis=1)   # [B, 1]
        start = cache.length                                                     # [B]
        h, cache = forward_hidden(params, cfg, jnp.concatenate([last, draft.tokens], 1), cache)
        target_probs = sp.probs(project(params, cfg, h))                         # [B, K+1, V]
        # 3.–4. accept the leading drafts, add the residual or bonus token
        n_acc, new, _ = verify_drafts(k_accept, k_resid, draft, target_probs, sp)
        finite, n_valid = nonfinite_rows(draft.probs, target_probs, n_acc)
        # 5. keep (stop at EOS / max_new); roll both caches back by length
        ok = ~c.done & finite                                                    # [B]
        cache = cache._replace(length=start + jnp.where(ok, n_acc + 1, 0))
        if feats:         # the feature at n_acc produced the residual/bonus token
            dstate = drafter.observe(dstate, h, n_acc, ok)
        dstate = drafter.commit(dstate, n_acc, ok)
        stats = record_stats(stats, c.it, ok, n_acc, draft, target_probs)
        c = advance(c, new, n_valid, finite, prompt_lens, max_new, eos, key)
        return c, cache, dstate, stats

    common, cache, dstate, stats = jax.lax.while_loop(
        lambda carry: running(carry[0], I), body, (common, cache, dstate, stats))
    return common, stats, cache, dstate    # the caches returned: they reuse the donated buffers
