"""Generation: the autoregressive baseline and the speculative loop, each ONE jitted
program (a `lax.while_loop` over a state pytree with fixed-size buffers), started from
the state a shared prefill program returns.

    generate_autoregressive(model, prompts, max_new_tokens, temperature, top_k, top_p, seed)
    generate_speculative(target, drafter, prompts, max_new_tokens, k, temperature, top_k,
                         top_p, seed, policy=None)

With a draft-length ``policy`` (`specsim.policies`) the speculative loop is a second
program, `_policy_program`: per-row K within a policy.k_max buffer, an early-stopping
draft loop, and a one-token target pass in iterations where no row proposed (see
`specsim.policy_engine` for the slots and why the verify step gets the thresholded q').

Both start with a prefill of the (padded) prompts through the target, whose last-position
logits give the first new token: `_prefill_program`, compiled once per (model, B, P, S)
and shared by plain decoding and every K, drafter and policy, so that changing K
recompiles the loop alone; its state and cache are donated to the loop program, which
updates them in place. A drafter's own prefill (`init_state`: a draft model's pass over
the prompts) is likewise `_drafter_prefill_program`, compiled once per (drafter, B, P, S)
and not once per K. `speculative_loop` returns the loop program a `generate_speculative`
call would run, with its arguments (a `LoopCall`), without running it: for timing its
compile or reading its HLO. Each speculative iteration then

1. drafts K tokens (`drafter.propose`: K draft passes in a `lax.scan` for a model),
2. runs the target once over K+1 positions: the last kept token and the K drafts,
3. accepts drafts: ``n_acc = sum(cumprod(accepted))`` per row,
4. samples one more token: from the residual max(0, p − q) at the first rejected
   position, or the bonus token from the target's last distribution when all K were
   accepted,
5. rolls back both KV caches by length (``cache.length``), appends n_acc + 1 tokens.

Every row has its own length, accept count and stop (end-of-sequence token or
max_new_tokens); finished rows ride along without changing. Random keys live in the
loop state and are split every iteration into separate streams for drafting,
acceptance and residual sampling.

Cache invariant: the target cache holds all tokens of a row but the last (length − 1);
a model drafter's cache holds all but the last two (see `specsim.drafters`).

Shapes: B batch, P padded prompt, N token buffer (= S cache slots), K drafts, V vocab,
I iteration buffer. `plan_shapes` pads P, S and I to buckets (the `ShapePlan` a result
carries as ``result.plan``), so calls with similar shapes reuse the compiled program;
``TRACE_COUNTS`` counts how often each program was traced.

Reading the loop body: `_verify` (accept, then the residual or bonus token),
`_nonfinite_policy` (which rows stop, how many tokens they keep), `_record_stats`, and
`_advance`, the done/EOS/length bookkeeping the autoregressive loop shares. Results
(`GenerationResult`, `SpeculativeStats`) live in `specsim.results`.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import time
from functools import partial, wraps
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specsim import policies, policy_engine, sharding
from specsim.drafters import (Context, Draft, check_drafter, model_drafter, off_draft,
                              reads_target_hidden)
from specsim.models.compiler import jit
from specsim.models.config import ModelConfig
from specsim.models.transformer import forward, forward_hidden, init_cache, project
from specsim.errors import InvalidArgument
from specsim.results import GenerationResult, ShapePlan, SpeculativeStats
from specsim.sampling import (SamplingParams, accept_drafts, is_finite_row, overlap,
                              sample_residual)
from specsim.validation import choice, integer, nonnegative_int, positive_int

__all__ = ["GenerationResult", "SpeculativeStats", "ShapePlan", "NonFiniteLogitsError",
           "generate_autoregressive", "generate_speculative", "plan_shapes", "warmup_tokens",
           "TRACE_COUNTS", "bucket", "LoopCall", "speculative_loop", "autoregressive_loop",
           "drafter_prefill_call", "StagedCall", "staged_autoregressive",
           "staged_speculative"]

# Incremented (as a Python side effect) each time a program is traced: a second call
# with the same shapes must leave it unchanged.
TRACE_COUNTS: collections.Counter = collections.Counter()


class NonFiniteLogitsError(FloatingPointError):
    """Raised when a run met non-finite logits (``on_nonfinite="raise"``); the result,
    with the affected rows stopped before the bad step, is in ``.result``."""

    def __init__(self, message: str, result: "GenerationResult"):
        super().__init__(message)
        self.result = result


# ---- eager validation ------------------------------------------------------------------------
def bucket(n: int, minimum: int = 16) -> int:
    """Pad a size to a bucket: powers of two up to 512, then multiples of 256."""
    n = max(int(n), minimum)
    if n <= 512:
        return 1 << (n - 1).bit_length()
    return -(-n // 256) * 256


def _encode_prompts(prompts, model, cfg: ModelConfig) -> list[list[int]]:
    if isinstance(prompts, str) or (isinstance(prompts, Sequence) and prompts
                                    and isinstance(prompts[0], (int, np.integer))):
        prompts = [prompts]
    if isinstance(prompts, np.ndarray):
        prompts = [list(r) for r in (prompts if prompts.ndim == 2 else prompts[None])]
    if not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise ValueError("prompts must be a non-empty list of token-id lists (or strings)")
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            if getattr(model, "tokenizer", None) is None:
                raise ValueError(f"prompts[{i}] is a string but the model has no tokenizer; "
                                 f"pass token ids")
            p = list(model.tokenizer.encode(p))
        p = list(np.asarray(p).reshape(-1)) if not isinstance(p, list) else p
        if len(p) == 0:
            raise ValueError(f"prompts[{i}] is empty; every prompt needs at least one token")
        arr = np.asarray(p)
        if arr.dtype.kind not in "iu":
            raise ValueError(f"prompts[{i}] must hold integer token ids, got dtype {arr.dtype}")
        if arr.min() < 0 or arr.max() >= cfg.vocab_size:
            raise ValueError(f"prompts[{i}] token ids must lie in [0, {cfg.vocab_size - 1}], "
                             f"got min {arr.min()}, max {arr.max()}")
        out.append([int(t) for t in arr])
    return out


def _resolve_eos(eos_token_id, cfg: ModelConfig) -> int:
    if eos_token_id == "auto":
        eos_token_id = cfg.eos_token_id
    if eos_token_id is None:
        return -1
    if isinstance(eos_token_id, (bool, np.bool_)) \
            or not isinstance(eos_token_id, (int, np.integer)) \
            or not 0 <= eos_token_id < cfg.vocab_size:
        raise InvalidArgument(f"eos_token_id must be None, 'auto' or a token id in "
                              f"[0, {cfg.vocab_size - 1}] (got {eos_token_id!r})")
    return int(eos_token_id)


def plan_shapes(prompts, max_new_tokens: int, k: int = 0,
                caps: int | Sequence[tuple[int, str]] = (), cache_len: int | None = None
                ) -> ShapePlan:
    """The shapes a generation call compiles for: the padded prompt P, the cache (and
    token buffer) slots S and the iteration buffer I, each bucketed with `bucket` so that
    calls of similar sizes share one program.

    ``prompts``: token-id lists (or their lengths); ``k``: draft length (0 for the
    autoregressive loop; a speculative run needs k + 1 slots of headroom); ``caps``: the
    largest cache allowed, an int or (limit, description) pairs such as
    ``[(cfg.max_seq_len, "max_seq_len of tiny-llama")]``; ``cache_len``: a fixed S
    (default: bucketed to need). Raises InvalidArgument when the longest prompt +
    max_new_tokens (+ k + 1) does not fit.
    """
    max_new = positive_int("max_new_tokens", max_new_tokens)
    k = nonnegative_int("k", k)
    lengths = [p if isinstance(p, (int, np.integer)) else len(p) for p in prompts]
    if not lengths:
        raise InvalidArgument("prompts must hold at least one prompt")
    if isinstance(caps, (int, np.integer)):
        caps = [(int(caps), "the cache limit")]
    caps = list(caps) or [(1 << 62, "no limit")]
    longest = positive_int("longest prompt", max(lengths))
    k_extra = k + 1 if k else 0
    need = longest + max_new + k_extra
    cap, cap_what = min(caps, key=lambda c: c[0])
    if cache_len is not None:
        cache_len = positive_int("cache_len", cache_len)
        if cache_len > cap:
            raise InvalidArgument(f"cache_len ({cache_len}) exceeds {cap_what} ({cap})")
        cap, cap_what = cache_len, "cache_len"
    if need > cap:
        extra = f" + k ({k}) + 1" if k else ""
        raise InvalidArgument(
            f"prompt too long for the cache: longest prompt ({longest}) + max_new_tokens "
            f"({max_new}){extra} = {need} positions, but {cap_what} allows {cap}")
    P = min(bucket(longest, 8), cap)
    S = cache_len if cache_len is not None else min(bucket(max(need, P)), cap)
    return ShapePlan(padded_prompt=P, cache_len=S, iterations=bucket(max_new))


def warmup_tokens(max_new_tokens: int) -> int:
    """The fewest new tokens whose iteration buffer equals that of ``max_new_tokens``
    (`plan_shapes` buckets it), so a warm-up call compiles the same program cheaply."""
    max_new = positive_int("max_new_tokens", max_new_tokens)
    b = bucket(max_new)
    n = max_new
    while n > 1 and bucket(n - 1) == b:
        n -= 1
    return n


def _pad(prompts: list[list[int]], P: int) -> tuple[np.ndarray, np.ndarray]:
    arr = np.zeros((len(prompts), P), np.int32)
    for b, p in enumerate(prompts):
        arr[b, :len(p)] = p
    return arr, np.asarray([len(p) for p in prompts], np.int32)


# ---- compiled pieces ---------------------------------------------------------------------------
class _Common(NamedTuple):
    tokens: jax.Array      # [B, N] int32 prompt + output
    length: jax.Array      # [B] int32
    done: jax.Array        # [B] bool
    nonfinite: jax.Array   # [B] bool
    eos_hit: jax.Array     # [B] bool
    key: jax.Array
    it: jax.Array          # [] int32 loop iterations


@jit(static_argnames=("cfg", "S"))
def _prefill_program(params, sp: SamplingParams, prompts, prompt_lens, max_new, eos, key, *,
                     cfg: ModelConfig, S: int):
    """Prefill the target and draw the first new token, as a program of its own that
    every generation program starts from: → ((common state, cache), feature [B, D]). The
    pair is the loop program's ``start`` (donated to it); the feature (final-normed, the
    one that produced the token) its ``feature`` where the drafter reads the target's,
    returned always so that one program serves every drafter. One prefill per (model,
    B, P, S) serves plain decoding and every K, drafter and policy, so a program that
    changes K or the drafter compiles only its loop (each forward pass in a program
    costs ~0.5 s of XLA:CPU compile whatever the model's size, and the prefill was one
    of them in every program)."""
    TRACE_COUNTS["prefill"] += 1
    B, P = prompts.shape
    cache = init_cache(cfg, B, S)
    h, cache = forward_hidden(params, cfg, prompts, cache)                    # [B, P, D]
    h_last = jnp.take_along_axis(h, (prompt_lens - 1)[:, None, None], axis=1)  # [B, 1, D]
    last = project(params, cfg, h_last)[:, 0]                                 # [B, V]
    probs = sp.probs(last)
    finite = is_finite_row(probs)                                             # [B]
    key, k_first = jax.random.split(key)
    first = sp.sample(k_first, probs)                                         # [B]
    tokens = jnp.zeros((B, S), jnp.int32).at[:, :P].set(prompts)
    tokens = tokens.at[jnp.arange(B), prompt_lens].set(jnp.where(finite, first, 0))
    length = prompt_lens + finite.astype(jnp.int32)
    eos_hit = finite & (first == eos)
    done = ~finite | eos_hit | (max_new <= 1)
    cache = cache._replace(length=prompt_lens)
    common = _Common(tokens, length, done, ~finite, eos_hit, key, jnp.int32(0))
    return (common, cache), h_last[:, 0]


@jit(static_argnames=("S",))
def _drafter_prefill_program(drafter, prompts, prompt_lens, feature, active, *, S: int):
    """The drafter's prefill as a program of its own: `init_state` over the padded
    prompts [B, P] (a draft model's forward pass over them; nothing for n-gram lookup),
    then, for a drafter that reads the target's features, `observe` of the prefill's
    ``feature`` [B, D] (None for the others) for the ``active`` [B] rows. → the drafter
    state the loop program starts from (donated to it). Keyed by the drafter and
    (B, P, S) alone, so a K sweep compiles the draft model's prefill once instead of
    once per K (the forward pass over P tokens was ~0.5 s of each program's compile)."""
    TRACE_COUNTS["drafter-prefill"] += 1
    dstate = drafter.init_state(prompts, prompt_lens, S)
    if reads_target_hidden(drafter):
        dstate = drafter.observe(dstate, feature[:, None],
                                 jnp.zeros((prompts.shape[0],), jnp.int32), active)
    return dstate


def _keep(new_tokens, n_new, remaining, eos):
    """How many of each row's [B, T] new tokens (the first n_new [B] valid) to keep: cut
    at max_new_tokens (remaining [B]) and just after the first EOS. → (n_keep, eos_hit)."""
    T = new_tokens.shape[1]
    pos = jnp.arange(T, dtype=jnp.int32)[None]                                 # [1, T]
    is_eos = (new_tokens == eos) & (pos < n_new[:, None])
    first_eos = jnp.min(jnp.where(is_eos, pos, T), axis=1)                    # [B]
    n_keep = jnp.minimum(jnp.minimum(n_new, remaining), first_eos + 1)
    return n_keep, first_eos < n_keep


def _append(tokens, length, new_tokens):
    """Write new [B, T] at each row's length (positions past the kept count are garbage
    beyond ``length`` and get overwritten later)."""
    return jax.vmap(lambda row, new, s: jax.lax.dynamic_update_slice(row, new, (s,)))(
        tokens, new_tokens, length)


def _advance(c: _Common, new_tokens, n_valid, finite, prompt_lens, max_new, eos,
             key) -> _Common:
    """The bookkeeping both loops share, after one iteration produced up to T tokens per
    row: append the first n_valid [B] of new_tokens [B, T] to every active row, cut at
    max_new_tokens and just after the first EOS, flag rows whose step met non-finite
    values (finite [B] False), and mark rows done. Finished rows stay unchanged."""
    active = ~c.done                                                             # [B]
    n_keep, eos_hit = _keep(new_tokens, n_valid, max_new - (c.length - prompt_lens), eos)
    n_keep = jnp.where(active, n_keep, 0)
    length = c.length + n_keep
    nonfinite = c.nonfinite | (active & ~finite)
    eos_hit = c.eos_hit | (active & eos_hit)
    done = c.done | nonfinite | eos_hit | (length - prompt_lens >= max_new)
    return c._replace(tokens=_append(c.tokens, c.length, new_tokens), length=length,
                      done=done, nonfinite=nonfinite, eos_hit=eos_hit, key=key, it=c.it + 1)


def _running(c: _Common, I: int):
    """Loop condition: iterations left and some row not done."""
    return (c.it < I) & jnp.any(~c.done)


DONATED = ("start", "dstate")
"""The arguments the loop programs donate (a prefill's output; see `LoopCall`)."""


@jit(static_argnames=("cfg", "S", "I"), donate_argnames=("start",))
def _autoregressive_program(params, sp: SamplingParams, prompt_lens, max_new, eos, start, *,
                            cfg: ModelConfig, S: int, I: int):
    """The decode loop from ``start`` = `_prefill_program`'s (common, cache)."""
    TRACE_COUNTS["autoregressive"] += 1
    common, cache = start

    def body(carry):
        c, cache = carry
        key, k_sample = jax.random.split(c.key)
        last = jnp.take_along_axis(c.tokens, (c.length - 1)[:, None], axis=1)   # [B, 1]
        start = cache.length
        logits, cache = forward(params, cfg, last, cache)                       # [B, 1, V]
        probs = sp.probs(logits[:, 0])                                           # [B, V]
        finite = is_finite_row(probs)                                            # [B]
        tok = sp.sample(k_sample, probs)                                         # [B]
        new = _advance(c, tok[:, None], finite.astype(jnp.int32), finite, prompt_lens,
                       max_new, eos, key)
        return new, cache._replace(length=start + (new.length - c.length))

    common, cache = jax.lax.while_loop(lambda carry: _running(carry[0], I), body,
                                       (common, cache))
    return common, cache       # the cache returned so that it reuses the donated buffers


class _SpecStatsBuf(NamedTuple):
    accepted: jax.Array  # [I, B] int32
    drafted: jax.Array   # [I, B] int32
    overlap: jax.Array   # [I, B, K] fp32


def _verify(k_accept, k_resid, draft, target_probs, sp: SamplingParams):
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


def _nonfinite_policy(draft_probs, target_probs, n_acc):
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


def _record_stats(stats: _SpecStatsBuf, it, ok, n_acc, draft, target_probs) -> _SpecStatsBuf:
    """Write iteration ``it``'s accepted and proposed counts and overlaps β for the rows
    that took part (ok [B]); −1 / NaN mark rows that did not."""
    K = draft.tokens.shape[1]
    proposed = jnp.sum(draft.probs, -1) > 0                                      # [B, K]
    beta = jnp.where(proposed, overlap(target_probs[:, :K], draft.probs), jnp.nan)  # [B, K]
    return _SpecStatsBuf(
        stats.accepted.at[it].set(jnp.where(ok, n_acc, -1)),
        stats.drafted.at[it].set(jnp.where(ok, jnp.sum(proposed, 1), -1)),
        stats.overlap.at[it].set(jnp.where(ok[:, None], beta, jnp.nan)))


@jit(static_argnames=("cfg", "k", "S", "I"),
     donate_argnames=DONATED)
def _speculative_program(params, drafter, sp: SamplingParams, prompt_lens, max_new, eos,
                         start, dstate, *, cfg: ModelConfig, k: int, S: int, I: int):
    """The fixed-K loop from ``start`` = `_prefill_program`'s (common, cache) and
    ``dstate`` = `_drafter_prefill_program`'s drafter state, both donated."""
    TRACE_COUNTS["speculative"] += 1
    B = prompt_lens.shape[0]
    K = k
    feats = reads_target_hidden(drafter)
    common, cache = start
    stats = _SpecStatsBuf(jnp.full((I, B), -1, jnp.int32), jnp.full((I, B), -1, jnp.int32),
                          jnp.full((I, B, K), jnp.nan, jnp.float32))

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
        n_acc, new, _ = _verify(k_accept, k_resid, draft, target_probs, sp)
        finite, n_valid = _nonfinite_policy(draft.probs, target_probs, n_acc)
        # 5. keep (stop at EOS / max_new); roll both caches back by length
        ok = ~c.done & finite                                                    # [B]
        cache = cache._replace(length=start + jnp.where(ok, n_acc + 1, 0))
        if feats:         # the feature at n_acc produced the residual/bonus token
            dstate = drafter.observe(dstate, h, n_acc, ok)
        dstate = drafter.commit(dstate, n_acc, ok)
        stats = _record_stats(stats, c.it, ok, n_acc, draft, target_probs)
        c = _advance(c, new, n_valid, finite, prompt_lens, max_new, eos, key)
        return c, cache, dstate, stats

    common, cache, dstate, stats = jax.lax.while_loop(
        lambda carry: _running(carry[0], I), body, (common, cache, dstate, stats))
    return common, stats, cache, dstate    # the caches returned: they reuse the donated buffers


class _PolicyStatsBuf(NamedTuple):
    k_used: jax.Array       # [I, B] int32 planned K (−1 where the row had finished)
    confidence: jax.Array   # [I, B, K] fp32 (NaN where the slot was not reached)
    accept_mask: jax.Array  # [I, B, K] bool: proposed and accepted by the test
    draft_steps: jax.Array  # [] int32: draft passes run (the drafter's prefill included)
    widths: jax.Array       # [K+1] int32: target passes over n = 1..K+1 tokens (index n−1)
    off_judged: jax.Array   # [I, B] int32: an off iteration's free first draft (see
    #                         `policy_engine.judge_off`): 1 matched the token, 0 did not,
    #                         −1 no draft judged


def _policy_draft(drafter, dstate, c: _Common, K: int, key, sp, policy, k_plan):
    """Step 1 under a policy, in an iteration where some row plans a draft: catch the
    drafter up if the loop skipped it, then draft each row's k_plan [B] (stopping
    early). → (dstate, PolicyDraft)."""
    return policy_engine.draft(drafter, dstate, Context(c.tokens, c.length), K, key, sp,
                               policy, k_plan)


def _record_policy(stats: _SpecStatsBuf, pstats: _PolicyStatsBuf, it, ok, pd, k_plan,
                   accepted, n_pass):
    """Policy statistics of iteration ``it``; `drafted` counts proposals and `overlap`
    is kept at proposed slots only (the slot that stopped a row holds a thresholded
    row that was never proposed); ``n_pass`` ([] int32) is the verify pass's width."""
    n_prop = jnp.sum(pd.proposed, 1)
    stats = stats._replace(
        drafted=stats.drafted.at[it].set(jnp.where(ok, n_prop, -1)),
        overlap=stats.overlap.at[it].set(jnp.where(pd.proposed, stats.overlap[it], jnp.nan)))
    pstats = _PolicyStatsBuf(
        pstats.k_used.at[it].set(jnp.where(ok, k_plan, -1)),
        pstats.confidence.at[it].set(jnp.where(ok[:, None], pd.confidence, jnp.nan)),
        pstats.accept_mask.at[it].set(accepted & pd.proposed & ok[:, None]),
        pstats.draft_steps + pd.steps,
        pstats.widths.at[n_pass - 1].add(1), pstats.off_judged)
    return stats, pstats


def _once_if(pred, fn, state):
    """``fn(state)`` where ``pred`` ([] bool) holds, else ``state``: a `lax.cond` with one
    branch the identity, written as a while loop of at most one trip. XLA's conditional
    copies each buffer a branch updates in place (the [L, B, S, G, E] caches, on every
    iteration of the loop around it); a while loop updates its carry in place. The
    policy program compiled with a conditional made the 4 cache copies per iteration that
    cost it 7-17% against the fixed-K program at the same K
    (tests/test_policies.py::test_policy_loop_copies_no_cache)."""
    def body(carry):
        return jnp.bool_(False), fn(carry[1])

    return jax.lax.while_loop(lambda carry: carry[0], body, (jnp.asarray(pred), state))[1]


def _policy_verify_pass(params, cfg, sp: SamplingParams, c: _Common, draft, n_pass,
                        cache, widths: tuple):
    """Step 2 under a policy: one target pass over the last token and the first
    ``n_wide`` ([] int32, 0..K) drafts, the widest proposal of any row, so a batch
    that proposed two drafts pays a 3-token pass and not a K+1 one; n_wide = 0 (p_min
    = 1; K = 0 planned everywhere with a drafter the loop cannot skip, see
    `policy_engine.skippable`) is an autoregressive step. One compiled layer stack per
    width of ``widths`` (sorted, the last K + 1; see `verify_widths`): the pass runs at
    ``n_pass`` ([] int32, `_pass_width`: the narrowest width >= n_wide + 1), chosen by
    `_once_if`, not `lax.cond`, so the caches are not copied. The output head, a fifth
    of the weights, is compiled per `_head_widths` (`_verify_head`: once per width).
    → (target_probs [B, K+1, V], cache, the final-normed features [B, K+1, D]);
    positions past the pass's width hold zeros, and positions past n_wide hold the
    target's distributions after tokens no row proposed: the acceptance test rejects an
    unproposed slot whatever the target says there, so the test, the residual and the
    drafter read only positions up to n_wide (a row's stopping slot n_prop ≤ n_wide
    included), and the cache slots written past them are reclaimed when `length` is
    reset."""
    B, K = draft.tokens.shape
    last = jnp.take_along_axis(c.tokens, (c.length - 1)[:, None], axis=1)       # [B, 1]
    tokens = jnp.concatenate([last, draft.tokens], 1)                            # [B, K+1]

    def width(w):
        def run(state):
            h, cache = forward_hidden(params, cfg, tokens[:, :w], state[1])      # [B, w, D]
            return jnp.pad(h, ((0, 0), (0, K + 1 - w), (0, 0))), cache
        return run

    hs = jax.eval_shape(width(K + 1), (None, cache))[0]
    state = (jnp.zeros(hs.shape, hs.dtype), cache)
    for w in widths:
        state = _once_if(n_pass == w, width(w), state)
    h, cache = state
    return _verify_head(params, cfg, sp, h, n_pass, widths), cache, h


# A verify pass of several widths shares one output head over all K + 1 positions while
# the head has at most this many rows (batch x (K + 1)); see `_verify_head`. 0 (the
# default since session 33): a head per width, whatever the batch.
SHARED_HEAD_ROWS = 0


def _head_widths(widths: tuple, batch: int) -> dict:
    """{head width: the verify widths whose pass runs its head at that width}: a head per
    width, or, while batch x max(widths) <= `SHARED_HEAD_ROWS`, one one-row head (width
    1) and one head over all max(widths) rows for every wider pass."""
    k1 = max(widths)
    shared = batch * k1 <= SHARED_HEAD_ROWS
    groups: dict = {}
    for w in widths:
        groups.setdefault(k1 if shared and w > 1 else w, []).append(w)
    return groups


def _verify_head(params, cfg, sp: SamplingParams, h, n_pass, widths: tuple):
    """The target's distributions [B, K+1, V] at the ``n_pass`` ([] int32) positions of a
    verify pass, zeros past them, from its features h [B, K+1, D] (zeros past n_pass).

    Heads are compiled per `_head_widths`. On XLA:CPU a one-row head is a
    matrix-vector product (SmolLM2's tied 49152 x 576 head: 3.3 ms), a wider one a
    matrix-matrix product whose time barely grows from 2 to 5 rows (9.3, 10.2, 10.3 ms)
    and grows beyond (16 ms at 8 rows, 23 at 20, 31 at 40, the VM then ~1.5x slower;
    `data/compile-cpu-s21/`): at batch 1 and K_max <= 4 a narrower pass's head padded to
    K + 1 rows cost at most a millisecond (~2% of a 2-token pass) there, and the program
    compiled K − 1 heads fewer (~0.2 s each), so session 21 shared one head at batch 1
    (`SHARED_HEAD_ROWS` 5). On session 33's Intel host the head is not flat (4.4, 6.2,
    6.2, 6.8, 8.2 ms at 1..5 rows, `data/policies-cpu-s33/head_rows_intel.txt`) and the
    shared head cost Goodput 3.5% of its loop with the feature head at batch 1, its goal-2
    margin, for 0.2 s of compile (`data/policies-cpu-s33/head_ab.py`): every pass now
    runs its own head (`SHARED_HEAD_ROWS` 0)."""
    B, K1, _ = h.shape
    out = jax.eval_shape(lambda x: sp.probs(project(params, cfg, x)), h)        # [B, K+1, V]
    probs = jnp.zeros(out.shape, out.dtype)
    for hw, ws in _head_widths(widths, B).items():
        def head(_, hw=hw):
            return jnp.pad(sp.probs(project(params, cfg, h[:, :hw])),
                           ((0, 0), (0, K1 - hw), (0, 0)))
        probs = _once_if(jnp.any(n_pass == jnp.asarray(ws, jnp.int32)), head, probs)
    inside = jnp.arange(K1, dtype=jnp.int32)[None, :, None] < n_pass            # [1, K+1, 1]
    return jnp.where(inside, probs, 0.0)


def _pass_width(widths: tuple, n_wide):
    """[] int32: the verify pass's width, the narrowest of ``widths`` that covers the
    last token and the ``n_wide`` ([] int32) drafts of the widest proposal."""
    ws = jnp.asarray(widths, jnp.int32)
    return ws[jnp.searchsorted(ws, n_wide + 1)]


class _PolicyRun(NamedTuple):
    """What every iteration of `_policy_program` reads and never changes."""
    params: object
    drafter: object
    sp: SamplingParams
    prompt_lens: jax.Array   # [B] int32
    max_new: jax.Array       # [] int32
    eos: jax.Array           # [] int32


def _policy_step(run: _PolicyRun, cfg, policy, widths: tuple, carry):
    """One speculative iteration under a policy (some row plans a draft, or the drafter
    is not `policy_engine.skippable`): plan, draft, verify (at the narrowest of
    ``widths`` that covers the widest proposal), accept, record, advance."""
    c, cache, dstate, pstate, stats, pstats = carry
    K, sp = policy.k_max, run.sp
    key, k_draft, k_accept, k_resid = jax.random.split(c.key, 4)
    k_plan = policy_engine.plan(policy, pstate, ~c.done)                          # [B]
    dstate, pd = _policy_draft(run.drafter, dstate, c, K, k_draft, sp, policy, k_plan)
    draft = Draft(pd.tokens, pd.probs)          # probs: q' (zero rows past each stop)
    start = cache.length                                                         # [B]
    n_pass = _pass_width(widths, jnp.max(jnp.sum(pd.proposed, 1)))               # []
    target_probs, cache, h = _policy_verify_pass(run.params, cfg, sp, c, draft, n_pass,
                                                 cache, widths)                   # [B, K+1, V]
    n_acc, new, accepted = _verify(k_accept, k_resid, draft, target_probs, sp)
    finite, n_valid = _nonfinite_policy(draft.probs, target_probs, n_acc)
    ok = ~c.done & finite                                                        # [B]
    cache = cache._replace(length=start + jnp.where(ok, n_acc + 1, 0))
    if reads_target_hidden(run.drafter):
        dstate = run.drafter.observe(dstate, h, n_acc, ok)
    dstate = run.drafter.commit(dstate, n_acc, ok)
    pstate = policy_engine.update(policy, pstate, k_plan, n_acc, jnp.sum(pd.proposed, 1), ok)
    stats = _record_stats(stats, c.it, ok, n_acc, draft, target_probs)
    stats, pstats = _record_policy(stats, pstats, c.it, ok, pd, k_plan, accepted, n_pass)
    c = _advance(c, new, n_valid, finite, run.prompt_lens, run.max_new, run.eos, key)
    return c, cache, dstate, pstate, stats, pstats


def _policy_off_step(run: _PolicyRun, cfg, policy, carry):
    """An iteration in which no row plans a draft (Goodput's K = 0), run as exactly the
    autoregressive loop's step (one target pass over the last token, a sample from the
    same key stream, `_advance`) plus the policy's update with nothing proposed and the
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
        s = judge(s) if when is None else _once_if(when, judge, s)
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
    new = _advance(c, tok[:, None], finite.astype(jnp.int32), finite, run.prompt_lens,
                   run.max_new, run.eos, key)
    cache = cache._replace(length=start + (new.length - c.length))
    return new, cache, pstate, stats, pstats, dstate


def _policy_off_loop(run: _PolicyRun, cfg, policy, I: int, carry):
    """Run `_policy_off_step` while the loop runs and no row plans a draft: a while
    loop of its own whose state (c, cache, pstate, stats, pstats, dstate) leaves the
    drafter out (dstate is () unless the drafter reads the target's features), so an
    iteration with speculation off costs what an autoregressive one does (no K-wide
    work, no `lax.cond` carrying the caches)."""
    def off(carry):
        c, _, pstate, _, _, _ = carry
        return _running(c, I) & ~jnp.any(policy_engine.plan(policy, pstate, ~c.done) > 0)

    return jax.lax.while_loop(off, partial(_policy_off_step, run, cfg, policy), carry)


def _primes_late(drafter, policy) -> bool:
    """Whether the policy program runs ``drafter``'s prefill itself, at the first draft
    (and never in a run that never drafts): under a ``policy`` that may switch
    speculation off (`policy_engine.switches_off`), a drafter that catches its own state
    up (``sync``: the draft models) and does not read the target's features. Every other
    drafter starts from `_drafter_prefill_program`'s state (compiled once per drafter,
    not once per K and policy; n-gram lookup's state is empty)."""
    return (policy_engine.switches_off(policy) and not reads_target_hidden(drafter)
            and hasattr(drafter, "sync"))


def _late_primed_loop(run: _PolicyRun, cfg, policy, step, prompts, S: int, I: int,
                      passes: int, carry):
    """The policy loop of a drafter that primes late (`_primes_late`): off iterations
    until some row plans a draft, then, only if the loop still runs, the drafter's
    prefill and a loop of one speculative iteration followed by the off iterations that
    come after it. The drafter's state exists only in that second part: a run that never
    drafts neither fills it nor copies it out. The earlier form carried a zero state
    through the whole loop and returned it: for SmolLM2's layer-skip draft at batch 8
    and 1024 slots (302 MB of caches) that cost 0.09-0.23 s a call, drafting or not
    (data/policies-cpu-s28/). The price: the off loop is compiled twice (before and after
    the first draft; ~0.15-0.4 s more compile). carry: (c, cache, pstate, stats, pstats),
    returned advanced."""
    drafter = run.drafter
    off_loop = partial(_policy_off_loop, run, cfg, policy, I)

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
            lambda carry: _running(carry[0], I), body,
            (c, cache, dstate, pstate, stats, pstats))
        return c, cache, pstate, stats, pstats

    carry = off(carry)
    return _once_if(_running(carry[0], I), drafting, carry)


@jit(static_argnames=("cfg", "policy", "S", "I", "widths"),
     donate_argnames=DONATED)
def _policy_program(params, drafter, sp: SamplingParams, prompts, prompt_lens, max_new, eos,
                    start, dstate, *, cfg: ModelConfig, policy, S: int, I: int,
                    widths: tuple):
    """`_speculative_program` with a draft-length policy: per-row K within a
    K = policy.k_max buffer (see `specsim.policy_engine`), policy state in the loop.

    Under a policy that may plan K = 0 (`policy_engine.switches_off`), with a
    `policy_engine.skippable` drafter or one reading the target's features, the loop
    alternates: a run of off iterations (`_policy_off_loop`; none when some row
    plans a draft), then, while the loop runs (and so some row plans a draft), one
    speculative iteration and again the off loop. A drafter that primes late
    (`_primes_late`) comes with ``dstate`` None: its prefill waits for the first run of
    off iterations, and is skipped when the loop never drafts (`_late_primed_loop`; its
    state is not returned). The others start from ``dstate`` (donated), and a
    feature-reading drafter is handed each off iteration's feature."""
    TRACE_COUNTS["speculative-policy"] += 1
    B, K = prompts.shape[0], policy.k_max
    feats = reads_target_hidden(drafter)
    common, cache = start
    stats = _SpecStatsBuf(jnp.full((I, B), -1, jnp.int32), jnp.full((I, B), -1, jnp.int32),
                          jnp.full((I, B, K), jnp.nan, jnp.float32))
    pstats = _PolicyStatsBuf(jnp.full((I, B), -1, jnp.int32),
                             jnp.full((I, B, K), jnp.nan, jnp.float32),
                             jnp.zeros((I, B, K), bool), jnp.int32(0),
                             jnp.zeros((K + 1,), jnp.int32), jnp.full((I, B), -1, jnp.int32))
    run = _PolicyRun(params, drafter, sp, prompt_lens, max_new, eos)
    step = partial(_policy_step, run, cfg, policy, widths)
    pstate = policies.begin(policy, policy.init(B, jnp), max_new - 1, jnp)   # the prefill gave one token
    late = dstate is None        # the caller's `_primes_late`: the prefill runs in here
    passes = int(drafter.passes_per_iteration(K) > 0)   # the drafter's prefill, if it runs
    if not late:
        pstats = pstats._replace(draft_steps=pstats.draft_steps + passes)
    if late:
        common, cache, pstate, stats, pstats = _late_primed_loop(
            run, cfg, policy, step, prompts, S, I, passes,
            (common, cache, pstate, stats, pstats))
        dstate = ()
    elif policy_engine.switches_off(policy) and (
            feats or policy_engine.skippable(drafter, dstate)):
        off_loop = partial(_policy_off_loop, run, cfg, policy, I)

        def body(carry):
            # one instance of the off loop and one of the speculative step in the
            # program (a first off loop before the while loop compiled a second copy)
            c, cache, dstate, pstate, stats, pstats = carry
            seen = dstate if feats else ()        # the part of the drafter off steps carry
            c, cache, pstate, stats, pstats, seen = off_loop(
                (c, cache, pstate, stats, pstats, seen))
            dstate = seen if feats else dstate
            return _once_if(_running(c, I), step, (c, cache, dstate, pstate, stats, pstats))

        common, cache, dstate, _, stats, pstats = jax.lax.while_loop(
            lambda carry: _running(carry[0], I), body,
            (common, cache, dstate, pstate, stats, pstats))
    else:
        common, cache, dstate, _, stats, pstats = jax.lax.while_loop(
            lambda carry: _running(carry[0], I), step,
            (common, cache, dstate, pstate, stats, pstats))
    return common, stats, pstats, cache, dstate    # the caches reuse the donated buffers


# ---- public entry points -------------------------------------------------------------------------
def _finish(common, prompts: list[list[int]], model, on_nonfinite: str, **fields):
    tokens = np.asarray(common.tokens)
    length = np.asarray(common.length)
    nonfinite = np.asarray(common.nonfinite)
    eos_hit = np.asarray(common.eos_hit)
    out, reasons = [], []
    for b, p in enumerate(prompts):
        out.append([int(t) for t in tokens[b, len(p):length[b]]])
        reasons.append("nonfinite" if nonfinite[b] else "eos" if eos_hit[b] else "length")
    tok = getattr(model, "tokenizer", None)
    text = [tok.decode(t) for t in out] if tok is not None else None
    result = GenerationResult(out, text, [len(p) for p in prompts], reasons, nonfinite,
                              **fields)
    if on_nonfinite == "raise" and nonfinite.any():
        raise NonFiniteLogitsError(
            f"non-finite logits met in rows {np.flatnonzero(nonfinite).tolist()}; those rows "
            f"stopped before the bad step (pass on_nonfinite='report' to get the result)",
            result)
    return result


def _placed(mesh, model, batch, replicated, drafter=None):
    """The program's arguments: as they are without a mesh (one device, the program
    unchanged), else placed on ``mesh`` by `specsim.sharding.place`."""
    if mesh is None:
        return model.params, tuple(jnp.asarray(x) for x in batch), replicated, drafter
    return sharding.place(mesh, model, batch=batch, replicated=replicated, drafter=drafter)


def _check_on_nonfinite(on_nonfinite):
    choice("on_nonfinite", on_nonfinite, ("raise", "report"))


def _seed_key(seed):
    return jax.random.PRNGKey(integer("seed", seed))


def _meta(plan: ShapePlan, temperature, top_k, top_p, seed, **more) -> dict:
    return dict(padded_prompt=plan.padded_prompt, cache_len=plan.cache_len, **more,
                temperature=float(temperature), top_k=int(top_k), top_p=float(top_p),
                seed=int(seed))


# Spans (start, end) of JAX tracing, lowering and compiling (or reading its persistent
# cache), from its monitoring events; `_timed` subtracts their union inside a call
# (nested traces overlap, so spans are merged, not summed).
_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")
_COMPILE_SPANS: list[tuple[float, float]] = []


def _on_span(event: str, start: float, end: float, **_):
    if event in _COMPILE_EVENTS:
        _COMPILE_SPANS.append((start, end))


jax.monitoring.register_event_time_span_listener(_on_span)


def _union_seconds(spans) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        total += max(end - max(start, reach), 0.0)
        reach = max(reach, end)
    return total


def _timed(generate):
    """Set ``wall_s`` (the call less compiling) and ``compile_s`` on the result."""
    @wraps(generate)
    def call(*args, **kwargs):
        t0, n0 = time.perf_counter(), len(_COMPILE_SPANS)
        result = generate(*args, **kwargs)
        wall = time.perf_counter() - t0
        compile_s = _union_seconds(_COMPILE_SPANS[n0:])
        del _COMPILE_SPANS[n0:]
        return dataclasses.replace(result, wall_s=max(wall - compile_s, 0.0),
                                   compile_s=compile_s)
    return call


@_timed
def generate_autoregressive(model, prompts, max_new_tokens: int, temperature: float = 0.0,
                            top_k: int = 0, top_p: float = 1.0, seed: int = 0, *,
                            eos_token_id="auto", cache_len: int | None = None,
                            on_nonfinite: str = "raise", mesh=None) -> GenerationResult:
    """Sample up to ``max_new_tokens`` per prompt, one target pass per token, in one
    compiled loop. ``prompts``: token-id lists (or strings with a tokenizer), rows may
    differ in length. ``eos_token_id``: "auto" (the config's), None (never stop early)
    or an id. ``cache_len``: KV slots (default: bucketed to need, capped by the model's
    max_seq_len; see `plan_shapes`). ``mesh``: a `specsim.sharding.make_mesh` mesh to
    run the same program on (weights tensor-parallel on "model", the batch on "data");
    None: one device."""
    loop, encoded, plan = _autoregressive_setup(
        model, prompts, max_new_tokens, temperature, top_k, top_p, seed,
        eos_token_id=eos_token_id, cache_len=cache_len, on_nonfinite=on_nonfinite, mesh=mesh)
    return _autoregressive_result(loop.program(*loop.args, **loop.static), model, encoded,
                                  plan, on_nonfinite, mesh,
                                  _meta(plan, temperature, top_k, top_p, seed))


def _autoregressive_result(out, model, encoded, plan, on_nonfinite, mesh, meta):
    """The `GenerationResult` of `_autoregressive_program`'s output ``out``."""
    common, _ = out
    common = common if mesh is None else sharding.to_host(common)
    n_it = int(common.it)
    return _finish(common, encoded, model, on_nonfinite, n_iterations=n_it,
                   target_passes=n_it + 1, draft_passes=0, plan=plan, meta=meta)


def _autoregressive_setup(model, prompts, max_new_tokens: int, temperature: float = 0.0,
                          top_k: int = 0, top_p: float = 1.0, seed: int = 0, *,
                          eos_token_id="auto", cache_len: int | None = None,
                          on_nonfinite: str = "raise", mesh=None):
    """`generate_autoregressive`'s arguments checked, its prefill run: → (the loop
    program's `LoopCall`, the encoded prompts, the `ShapePlan`)."""
    cfg = model.cfg
    max_new = positive_int("max_new_tokens", max_new_tokens)
    sp = SamplingParams.make(temperature, top_k, top_p, vocab_size=cfg.vocab_size)
    _check_on_nonfinite(on_nonfinite)
    key = _seed_key(seed)
    eos = _resolve_eos(eos_token_id, cfg)
    encoded = _encode_prompts(prompts, model, cfg)
    plan = plan_shapes(encoded, max_new, 0, [(cfg.max_seq_len, f"max_seq_len of {cfg.name}")],
                       cache_len)
    arr, lens = _pad(encoded, plan.padded_prompt)
    params, (arr, lens), (sp, max_new_a, eos_a, key), _ = _placed(
        mesh, model, (arr, lens), (sp, jnp.int32(max_new), jnp.int32(eos), key))
    start, _ = _prefill_program(params, sp, arr, lens, max_new_a, eos_a, key, cfg=cfg,
                                S=plan.cache_len)
    loop = LoopCall(_autoregressive_program, (params, sp, lens, max_new_a, eos_a, start),
                    dict(cfg=cfg, S=plan.cache_len, I=plan.iterations))
    return loop, encoded, plan


def autoregressive_loop(model, prompts, max_new_tokens: int, **kwargs) -> "LoopCall":
    """The loop program `generate_autoregressive` (same arguments) would run, with its
    arguments, not run: the prefill runs, the loop is left to the caller (time it
    without its prefill against `speculative_loop`'s; ``.lower()`` for its HLO)."""
    return _autoregressive_setup(model, prompts, max_new_tokens, **kwargs)[0]


def _as_drafter(drafter, target):
    """A plain `Model` (config + params, no `propose`) becomes a small-model draft."""
    if hasattr(drafter, "cfg") and hasattr(drafter, "params") and \
            not hasattr(drafter, "propose"):
        drafter = model_drafter(drafter, target)
    check_drafter(drafter, target.cfg.vocab_size)
    return drafter


def _resolve_policy(k, policy):
    """(K, policy or None): k alone is today's fixed-K program; a policy sets K = its
    k_max (k, if also given, must agree)."""
    if policy is None:
        return positive_int("k", 4 if k is None else k), None
    policy = policies.as_policy(policy)
    if k is not None and positive_int("k", k) != policy.k_max:
        raise InvalidArgument(f"k must be None or equal to policy.k_max = {policy.k_max} "
                              f"when a policy is given (got {k!r})")
    return policy.k_max, policy


def _copy(x):
    return x.copy() if isinstance(x, jax.Array) else x


class LoopCall(NamedTuple):
    """A generation loop program (jitted) and the arguments a call runs it with:
    ``program(*args, **static)`` runs it once (its ``start`` and ``dstate`` are donated,
    so once only; `fresh_copy` for another run), ``lower()`` lowers it without running
    it (compile timing, HLO inspection; ``override``: static arguments to change, e.g.
    ``widths``)."""
    program: object
    args: tuple
    static: dict

    def lower(self, **override):
        return self.program.lower(*self.args, **{**self.static, **override})

    def fresh_copy(self) -> "LoopCall":
        """This call with device copies of the arguments its program donates
        (``start``, ``dstate``; the weights are shared), so it can run once more from
        the same state."""
        names = list(inspect.signature(self.program).parameters)
        args = tuple(jax.tree.map(_copy, a) if name in DONATED else a
                     for name, a in zip(names, self.args))
        return self._replace(args=args)


class _SpeculativeRun(NamedTuple):
    """What `generate_speculative` reads after its loop program: the inputs of `_finish`."""
    encoded: list
    plan: ShapePlan
    k: int
    draft_passes_per_iteration: int
    meta: dict


def _speculative_setup(target, drafter, prompts, max_new_tokens: int, k: int | None = None,
                       temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                       seed: int = 0, *, eos_token_id="auto", cache_len: int | None = None,
                       on_nonfinite: str = "raise", policy=None, verify_widths="auto",
                       mesh=None) -> tuple[LoopCall, _SpeculativeRun]:
    """`generate_speculative` up to its loop program: the checks, the target's prefill
    and the drafter's (both run), and the loop program's call, not run."""
    cfg = target.cfg
    k, policy = _resolve_policy(k, policy)
    if policy is None and not (verify_widths is None or (isinstance(verify_widths, str)
                                                         and verify_widths == "auto")):
        raise InvalidArgument("verify_widths applies to a policy program only (the fixed-K "
                              f"program verifies k + 1 tokens every iteration; got "
                              f"{verify_widths!r} with policy None)")
    widths = None
    if policy is not None:
        widths, policy = policies.program_widths(policy, k, verify_widths)
    max_new = positive_int("max_new_tokens", max_new_tokens)
    sp = SamplingParams.make(temperature, top_k, top_p, vocab_size=cfg.vocab_size)
    _check_on_nonfinite(on_nonfinite)
    drafter = _as_drafter(drafter, target)
    if hasattr(drafter, "check_run"):       # a drafter's own eager limits (e.g. instrument)
        drafter.check_run(max_new_tokens=max_new, k=k, temperature=temperature)
    key = _seed_key(seed)
    eos = _resolve_eos(eos_token_id, cfg)
    encoded = _encode_prompts(prompts, target, cfg)
    caps = [(cfg.max_seq_len, f"max_seq_len of {cfg.name}")]
    if drafter.max_cache_len() is not None:
        caps.append((int(drafter.max_cache_len()), f"max_seq_len of drafter {drafter.name}"))
    plan = plan_shapes(encoded, max_new, k, caps, cache_len)
    arr, lens = _pad(encoded, plan.padded_prompt)
    params, (arr, lens), (sp, max_new_a, eos_a, key), placed_drafter = _placed(
        mesh, target, (arr, lens), (sp, jnp.int32(max_new), jnp.int32(eos), key), drafter)
    S = plan.cache_len
    start, feature = _prefill_program(params, sp, arr, lens, max_new_a, eos_a, key, cfg=cfg,
                                      S=S)
    dstate = None
    if policy is None or not _primes_late(drafter, policy):
        dstate = _drafter_prefill_program(
            placed_drafter, arr, lens, feature if reads_target_hidden(drafter) else None,
            ~start[0].done, S=S)
    shapes = dict(cfg=cfg, S=S, I=plan.iterations)
    if policy is None:
        loop = LoopCall(_speculative_program,
                        (params, placed_drafter, sp, lens, max_new_a, eos_a, start, dstate),
                        dict(k=k, **shapes))
    else:
        loop = LoopCall(_policy_program, (params, placed_drafter, sp, arr, lens, max_new_a,
                                          eos_a, start, dstate),
                        dict(policy=policy, widths=widths, **shapes))
    meta = _meta(plan, temperature, top_k, top_p, seed, k=k, drafter=drafter.name)
    return loop, _SpeculativeRun(encoded, plan, k, drafter.passes_per_iteration(k), meta)


def speculative_loop(target, drafter, prompts, max_new_tokens: int, **kwargs) -> LoopCall:
    """The loop program `generate_speculative` (same arguments) would run, with its
    arguments, not run: the prefill programs run, the loop is left to the caller
    (``.lower().compile()`` to time its compile or read its HLO; benchmarks/
    bench_loop_compile.py, the tests that count a program's dots or copies)."""
    return _speculative_setup(target, drafter, prompts, max_new_tokens, **kwargs)[0]


class StagedCall:
    """A generation call in two stages, so that its loop program can be timed alone:
    `prepare` does everything before the loop (the checks, the host work, the target's
    prefill program and, where it runs outside the loop, the drafter's), and calling the
    object runs the prepared loop program and returns its raw output (prepared first if
    `prepare` was not called); `result` turns the last call's output into the
    `GenerationResult` the matching ``generate_*`` call returns (its ``wall_s`` and
    ``compile_s`` are not set). Each prepared state is consumed by one call (its buffers
    are donated); ``prepare(copies=n)`` keeps n of them (the prefills' output and n − 1
    device copies of it), so n calls run the same loop from the same state at the price
    of one prefill.

    `specsim.bench.interleaved_rounds` runs a call's ``prepare`` outside its timed
    region. A speculative policy loop that primes its drafter late (`_primes_late`)
    keeps that drafter's prefill inside the loop, as the run pays it."""

    def __init__(self, setup: Callable, result: Callable):
        self._setup, self._result = setup, result
        self._ready: list = []
        self._info = None

    def prepare(self, copies: int = 1) -> None:
        copies = positive_int("copies", copies)
        loop, info = self._setup()
        jax.block_until_ready(loop.args)
        extra = [loop.fresh_copy() for _ in range(copies - 1)]
        jax.block_until_ready([c.args for c in extra])
        self._ready = [(loop, info)] + [(c, info) for c in extra]

    @property
    def prepared(self) -> int:
        """How many calls the prepared states left serve before the next ``prepare``."""
        return len(self._ready)

    def __call__(self):
        if not self._ready:
            self.prepare()
        loop, self._info = self._ready.pop()
        return loop.program(*loop.args, **loop.static)

    def result(self, out) -> "GenerationResult":
        if self._info is None:
            raise InvalidArgument("result: this StagedCall has not run (call it first)")
        return self._result(out, self._info)


def _bound(generate, *args, **kwargs) -> dict:
    """``generate``'s arguments by name, defaults applied (an unknown one is a TypeError
    here, at once)."""
    bound = inspect.signature(generate).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def staged_autoregressive(model, prompts, max_new_tokens: int, **kwargs) -> StagedCall:
    """`generate_autoregressive` (same arguments) as a `StagedCall`."""
    a = _bound(generate_autoregressive, model, prompts, max_new_tokens, **kwargs)

    def setup():
        loop, encoded, plan = _autoregressive_setup(**a)
        return loop, (encoded, plan)

    def result(out, info):
        encoded, plan = info
        meta = _meta(plan, a["temperature"], a["top_k"], a["top_p"], a["seed"])
        return _autoregressive_result(out, model, encoded, plan, a["on_nonfinite"],
                                      a["mesh"], meta)

    return StagedCall(setup, result)


def staged_speculative(target, drafter, prompts, max_new_tokens: int,
                       **kwargs) -> StagedCall:
    """`generate_speculative` (same arguments) as a `StagedCall`."""
    a = _bound(generate_speculative, target, drafter, prompts, max_new_tokens, **kwargs)

    def setup():
        loop, run = _speculative_setup(**a)
        return loop, (loop, run)

    def result(out, info):
        loop, run = info
        return _speculative_result(out, loop, run, target, a["on_nonfinite"], a["mesh"])

    return StagedCall(setup, result)


def drafter_prefill_call(target, drafter, prompts, padded_prompt: int, cache_len: int):
    """A zero-argument call of the drafter's own prefill as `generate_speculative` runs
    it (`_drafter_prefill_program`: a draft model's pass over the prompts, its logits
    never computed), over ``prompts`` (token ids) padded to ``padded_prompt``, with
    ``cache_len`` slots (a run's `ShapePlan` gives both). Compiled and run once here.
    For timing that prefill apart from the run (`specsim.experiment.inrun`): a one-pass
    forward call through the head costs 1.20-1.32x this program for SmolLM2's layer-skip
    draft (`data/prefill-cpu-s32/`). A drafter reading the target's features observes a
    zero feature."""
    drafter = _as_drafter(drafter, target)
    encoded = _encode_prompts(prompts, target, target.cfg)
    P, S = positive_int("padded_prompt", padded_prompt), positive_int("cache_len", cache_len)
    if max(len(p) for p in encoded) > P or P >= S:
        raise InvalidArgument(f"padded_prompt ({P}) must hold the longest prompt "
                              f"({max(len(p) for p in encoded)} tokens) and be below "
                              f"cache_len ({S})")
    arr, lens = _pad(encoded, P)
    arr, lens = jnp.asarray(arr), jnp.asarray(lens)
    B = arr.shape[0]
    feature = (jnp.zeros((B, target.cfg.d_model), jnp.float32)
               if reads_target_hidden(drafter) else None)
    active = jnp.ones((B,), bool)

    def call():
        return _drafter_prefill_program(drafter, arr, lens, feature, active, S=S)

    jax.block_until_ready(call())
    return call


@_timed
def generate_speculative(target, drafter, prompts, max_new_tokens: int, k: int | None = None,
                         temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                         seed: int = 0, *, eos_token_id="auto", cache_len: int | None = None,
                         on_nonfinite: str = "raise", policy=None, verify_widths="auto",
                         mesh=None) -> GenerationResult:
    """Speculative decoding of ``prompts`` with ``target`` (a `specsim.models.Model`) and
    ``drafter`` (see `specsim.drafters`; a plain `Model` is used as a small-model draft),
    ``k`` drafts per iteration, in one compiled
    loop. Exact: greedy verification at temperature 0, rejection sampling otherwise,
    target and draft distributions after the same temperature/top-k/top-p processing.
    Arguments as `generate_autoregressive` (with a ``mesh`` the drafter is replicated);
    the result carries `SpeculativeStats`.

    ``k``: drafts per iteration (default 4). ``policy``: a draft-length policy of
    `specsim.policies` (FixedK, ConfidenceThreshold, Heuristic, Goodput): each row drafts
    its own number of tokens per iteration within a K = policy.k_max buffer, a model
    drafter's loop stops when every row has stopped, and the stats also record each
    row's planned K, the draft confidences and the per-slot accept outcomes. None (the
    default) runs the fixed-K program unchanged. ``verify_widths`` (with a policy only):
    the widths at which the policy program compiles its verify pass. ``"auto"`` (the
    default): with a policy that carries its pass costs (Goodput), the fewest widths
    whose padding costs at most 5% per pass by those costs, which Goodput then plans
    with bucketed (`policies.program_widths`); with any other policy every width. None:
    each of 1..K+1. A subset holding K+1, e.g. (1, K+1), compiles fewer forward passes
    and pads a verify to the narrowest width that covers the widest proposal (see
    `policies.verify_widths`, and `policies.Costs.bucketed` for the costs Goodput should
    then plan with). Each width is one forward pass more to compile (0.2-0.35 s of XLA
    for SmolLM2-135M on a 2-core CPU): with specsim's CPU kernel a verify pass costs
    1.01-1.17 steps over 2-5 tokens, "auto" keeps (1, 3, 5) of K = 4, and Goodput's
    program compiled in 2.3-3.1 s instead of 2.9-3.9 on a quiet machine
    (`benchmarks/bench_compile.py`, data/compile-cpu-s27/)."""
    loop, run = _speculative_setup(
        target, drafter, prompts, max_new_tokens, k, temperature, top_k, top_p, seed,
        eos_token_id=eos_token_id, cache_len=cache_len, on_nonfinite=on_nonfinite,
        policy=policy, verify_widths=verify_widths, mesh=mesh)
    return _speculative_result(loop.program(*loop.args, **loop.static), loop, run, target,
                               on_nonfinite, mesh)


def _speculative_result(out, loop: LoopCall, run: _SpeculativeRun, target, on_nonfinite,
                        mesh):
    """The `GenerationResult` of the speculative loop program's output ``out``."""
    policy = loop.static.get("policy")                    # resolved: None is fixed K
    common, stats, pstats = out[:3] if policy is not None else (*out[:2], None)
    if mesh is not None:
        common, stats, pstats = sharding.to_host((common, stats, pstats))
    more = {}
    if pstats is not None:
        widths = np.asarray(pstats.widths)
        more = dict(policy=repr(policy),
                    single_token_target_passes=int(widths[0]),
                    target_passes_by_width=[int(n) for n in widths])
    n_it, k, dp = int(common.it), run.k, run.draft_passes_per_iteration
    extra = {} if pstats is None else dict(
        k_used=np.asarray(pstats.k_used)[:n_it], confidence=np.asarray(pstats.confidence)[:n_it],
        accept_mask=np.asarray(pstats.accept_mask)[:n_it],
        off_judged=np.asarray(pstats.off_judged)[:n_it])
    st = SpeculativeStats(k, np.asarray(stats.accepted)[:n_it], np.asarray(stats.drafted)[:n_it],
                          np.asarray(stats.overlap)[:n_it], **extra)
    # the policy program counts the drafter's prefill in draft_steps (it may skip it)
    passes = n_it * dp + (1 if dp else 0) if pstats is None else int(pstats.draft_steps)
    return _finish(common, run.encoded, target, on_nonfinite, n_iterations=n_it,
                   target_passes=n_it + 1, draft_passes=passes,
                   stats=st, plan=run.plan, meta={**run.meta, **more})
