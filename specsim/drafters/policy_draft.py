"""Drafting under a draft-length policy, on the drafter's side: slot j of a row is
*reached* when j < k_plan and every earlier slot was proposed; a reached slot draws
x_j ~ q_j and proposes it when ``policy.keep(j, s_j)`` holds (s_j the draft's confidence
in x_j), and its verify distribution is the thresholded law q'_j (see
`specsim.policy_engine` for why the verify step gets q'). `stepwise_draft` is the
early-stopping loop of the drafters that compute slot by slot; `masked_draft` cuts a
full K-slot draft after the fact."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["PolicyDraft", "confidence", "slot", "masked_draft", "stepwise_draft"]


class PolicyDraft(NamedTuple):
    tokens: jax.Array      # [B, K] int32
    probs: jax.Array       # [B, K, V] fp32: q' per slot (zero rows past the stop)
    proposed: jax.Array    # [B, K] bool
    confidence: jax.Array  # [B, K] fp32: s_j where the slot was reached, NaN elsewhere
    steps: jax.Array       # [] int32: draft passes this iteration


def confidence(logits, probs, tokens, sampling):
    """[B]: the draft's probability of its own token; greedy (a one-hot ``probs``) uses
    ``sampling.softmax(logits)`` [B, V] (a restricted head's sampling scatters its
    head's softmax into the vocabulary)."""
    if sampling.greedy:
        probs = sampling.softmax(logits)
    return jnp.take_along_axis(probs, tokens[:, None], axis=-1)[:, 0]


def slot(policy, j, probs, tokens, conf, reach, greedy: bool):
    """One draft slot j: probs [B, V] (q_j), tokens [B], conf [B], reach [B] bool →
    (q'_j [B, V], proposed [B] bool). Non-finite entries of q_j are kept, so the loop
    still detects a non-finite draft."""
    if greedy:
        proposed = reach & policy.keep(j, conf, jnp) & (conf > 0)
        return jnp.where(proposed[:, None], probs, 0.0), proposed
    keep = policy.keep(j, probs, jnp) | jnp.isnan(probs)                     # [B, V]
    q = jnp.where(reach[:, None] & keep, probs, 0.0)
    proposed = reach & (jnp.take_along_axis(q, tokens[:, None], axis=-1)[:, 0] > 0)
    return q, proposed


def masked_draft(policy, tokens, probs, k_plan, greedy: bool, steps,
                 conf_all=None) -> PolicyDraft:
    """A full K-slot draft (from a drafter without an early-stopping loop) cut by the
    policy after the fact: the same slots and q' as drafting slot by slot, but every
    slot was computed. ``conf_all`` [B, K]: the confidences (default q_j(x_j); for a
    one-hot draft such as n-gram lookup 1 where it proposed and 0 where it did not)."""
    B, K, _ = probs.shape
    if conf_all is None:
        conf_all = jnp.take_along_axis(probs, tokens[..., None], axis=-1)[..., 0]  # [B, K]
    qs, props, confs = [], [], []
    reach = k_plan > 0
    for j in range(K):                                  # K is small and static
        q, p = slot(policy, j, probs[:, j], tokens[:, j], conf_all[:, j], reach, greedy)
        qs.append(q)
        props.append(p)
        confs.append(jnp.where(reach, conf_all[:, j], jnp.nan))
        reach = p & (j + 1 < k_plan)
    return PolicyDraft(tokens, jnp.stack(qs, 1), jnp.stack(props, 1), jnp.stack(confs, 1),
                       jnp.asarray(steps, jnp.int32))


def stepwise_draft(first, step, k: int, key, sampling, policy, k_plan, vocab_size: int):
    """Draft up to ``k`` slots per row, one draft pass per slot, under ``policy``: the
    early-stopping loop of the drafters that compute slot by slot (`ModelDrafter`,
    `DistilledDrafter`, `FeatureHeadDrafter`). ``first()`` → (carry, logits [B, ·]) is
    the pass of slot 0 and always runs; ``step(carry, tok [B])`` → (carry, logits) is the
    pass of the next slot, run in a `lax.while_loop` that ends as soon as no row is
    still drafting, so rows that stop early save draft passes. ``sampling``: probs
    (logits → [B, V]), sample, greedy, softmax (see `confidence`). k_plan [B] int32
    → (carry, PolicyDraft); steps = passes run (1 + loop steps)."""
    B = k_plan.shape[0]
    keys = jax.random.split(key, k)
    carry, logits = first()

    def draw(j, logits_j, reach):                                        # logits_j [B, ·]
        probs = sampling.probs(logits_j)                                 # [B, V]
        tok = sampling.sample(keys[j], probs)                            # [B]
        conf = confidence(logits_j, probs, tok, sampling)
        q, proposed = slot(policy, j, probs, tok, conf, reach, sampling.greedy)
        return tok, q, proposed, jnp.where(reach, conf, jnp.nan)

    def write(bufs, j, vals):
        return tuple(b.at[:, j].set(v) for b, v in zip(bufs, vals))

    bufs = (jnp.zeros((B, k), jnp.int32), jnp.zeros((B, k, vocab_size), jnp.float32),
            jnp.zeros((B, k), bool), jnp.full((B, k), jnp.nan, jnp.float32))
    out0 = draw(0, logits, k_plan > 0)
    bufs = write(bufs, 0, out0)

    def cond(loop):
        j, _, _, going, _ = loop
        return (j < k) & jnp.any(going)

    def body(loop):
        j, carry, tok, going, bufs = loop
        carry, logits = step(carry, tok)
        out = draw(j, logits, going)
        return (j + 1, carry, out[0], out[2] & (j + 1 < k_plan), write(bufs, j, out))

    j, carry, _, _, bufs = jax.lax.while_loop(
        cond, body, (jnp.int32(1), carry, out0[0], out0[2] & (1 < k_plan), bufs))
    return carry, PolicyDraft(*bufs, steps=j)
