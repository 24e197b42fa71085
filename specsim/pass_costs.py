"""Pass costs under the conditions of a run: what one loop iteration of
`specsim.decode` costs, timed so that a speedup prediction can be checked.

The prediction (docs/design.md, "Speedup with measured costs")::

    S = E · t_target_1 / (K · t_draft + t_verify + residual)

needs three times, each measured here as the loop pays it, not as a bare forward pass:

* ``t_target_1``: one autoregressive step: gather the last token, one target pass over
  it, the sampling work (``SamplingParams.probs`` over the vocabulary, the draw), the
  append to the token buffer;
* ``t_verify``: one target pass over K+1 positions plus the acceptance test, the
  residual/bonus draw, the non-finite checks, the measured overlap β over [B, K, V] and
  the statistics writes;
* ``t_draft``: one draft step, ``drafter.propose`` of K steps and ``commit`` divided by K;
* the iteration, K · t_draft + t_verify: the loop's body (propose, verify, observe,
  commit) in its order. Draft steps timed back to back find the draft's weights still in
  the CPU's caches; in the loop a target pass runs between two proposals and evicts
  them, so where a draft has weights the in-run prediction reads its draft cost as
  (iteration − t_verify) / K (docs/studies/pass-cost-programs.md).

Each is a jitted program running ``steps`` of its iteration in a `lax.fori_loop` (so the
per-call dispatch is amortised the way the compiled loop amortises it) with the run's
model (same parameters and layer loop), batch B, cache slots S, token buffer [B, S] and
sampling settings. Its state (token buffer, KV caches, drafter state) is donated and fed
back call after call (`Chained`), so the caches are updated in place as in the loop,
whose caches live inside its one program; without donation every call would copy the
[L, B, S, G, E] caches on entry and time a step the loop never runs. Every step consumes
the previous step's output (the sampled tokens are written where the next step reads
them; the caches are carried), so XLA cannot hoist the work out of the loop; the cache
length is set back every step, so every step does the same work at one context (S/2
unless given; XLA's attention reads all S slots whatever the context; specsim's CPU
attention kernel, `specsim.models.kernels.cache_attention`, reads the slots up to each
row's position, so the demo runs them at its loop's mean context).
How closely these programs track the loop's own step: docs/studies/pass-cost-programs.md.
``TRACE_COUNTS`` counts traces (one per distinct shape).

Time these calls in the same interleaved rounds as the generation runs they predict
(`specsim.bench.time_calls` for a single series); `PassCosts.from_times` turns per-call
times into per-pass medians with their spread. The verify program calls the loop's own
acceptance, non-finite policy and statistics steps (`specsim.decode.speculative`'s
``verify_drafts``, ``nonfinite_rows``, ``record_stats``); the autoregressive step mirrors the loop's.

A finite run's iterations (E[max_b I_b] at batch B) are `specsim.finite_run`'s.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specsim.errors import InvalidArgument
from specsim import analytic
from specsim.decode import speculative
from specsim.bench import TimingStats, stats_from_times
from specsim.drafters.base import Context, Draft, reads_target_hidden
from specsim.models.compiler import jit
from specsim.models.config import ModelConfig
from specsim.models.transformer import forward, forward_hidden, init_cache, project
from specsim.sampling import SamplingParams, is_finite_row

__all__ = ["TRACE_COUNTS", "PIECES", "Chained", "PassCalls", "PassCosts", "max_context",
           "pass_calls", "predict_speedup"]

TRACE_COUNTS: collections.Counter = collections.Counter()


# ---- the per-iteration programs ----------------------------------------------------------------
def gather_window(tokens, start, n):
    """tokens[b, start[b] : start[b] + n] → [B, n] (indices clamped into the buffer)."""
    idx = jnp.clip(start[:, None] + jnp.arange(n, dtype=jnp.int32)[None], 0, tokens.shape[1] - 1)
    return jnp.take_along_axis(tokens, idx, axis=1)


def _append(tokens, start, new):
    return jax.vmap(lambda row, x, s: jax.lax.dynamic_update_slice(row, x, (s,)))(
        tokens, new, start)


@jit(static_argnames=("cfg", "steps"), donate_argnums=0)
def _target_1_program(state, params, sp: SamplingParams, length, key, *, cfg: ModelConfig,
                      steps: int):
    """``steps`` autoregressive steps. state = (tokens [B, S], cache at length − 1, the
    loop's invariant), donated and returned; length [B] (fixed). → (state, the last
    sampled tokens [B])."""
    TRACE_COUNTS["target_1"] += 1
    tokens, cache = state
    start = cache.length

    def body(i, carry):
        tokens, cache, key, _ = carry
        key, k_sample = jax.random.split(key)
        last = gather_window(tokens, length - 1, 1)                             # [B, 1]
        logits, cache = forward(params, cfg, last, cache)                       # [B, 1, V]
        probs = sp.probs(logits[:, 0])                                           # [B, V]
        tok = sp.sample(k_sample, probs)                                         # [B]
        tok = jnp.where(is_finite_row(probs), tok, 0)
        tokens = _append(tokens, length - 1, tok[:, None])   # the next step reads it
        return tokens, cache._replace(length=start), key, tok

    tok = jnp.zeros(tokens.shape[:1], jnp.int32)
    tokens, cache, _, tok = jax.lax.fori_loop(0, steps, body, (tokens, cache, key, tok))
    return (tokens, cache), tok


@jit(static_argnames=("cfg", "k", "steps"), donate_argnums=0)
def _verify_program(state, params, sp: SamplingParams, length, key, *, cfg: ModelConfig,
                    k: int, steps: int):
    """``steps`` verify passes over K+1 positions with acceptance, residual draw,
    overlap and statistics, as `specsim.decode`'s loop body does them. state = (tokens,
    cache) as `_target_1_program`'s. → (state, statistics [steps, B(, K)])."""
    TRACE_COUNTS["verify"] += 1
    tokens, cache = state
    B, K, V = tokens.shape[0], k, cfg.vocab_size
    start = cache.length
    stats = speculative.empty_stats(steps, B, K)

    def body(i, carry):
        tokens, cache, key, stats = carry
        key, k_accept, k_resid = jax.random.split(key, 3)
        window = gather_window(tokens, length - 1, K + 1)                       # [B, K+1]
        draft = Draft(window[:, 1:], jax.nn.one_hot(window[:, 1:], V, dtype=jnp.float32))
        logits, cache = forward(params, cfg, window, cache)                      # [B, K+1, V]
        target_probs = sp.probs(logits)
        # the loop's own steps 3-5 (acceptance, residual/bonus, non-finite policy, stats)
        n_acc, new, _ = speculative.verify_drafts(k_accept, k_resid, draft, target_probs, sp)
        finite, _ = speculative.nonfinite_rows(draft.probs, target_probs, n_acc)
        stats = speculative.record_stats(stats, i, finite, n_acc, draft, target_probs)
        # the kept tokens become the next step's last token and drafts
        tokens = _append(tokens, length - 1, new)
        return tokens, cache._replace(length=start), key, stats

    tokens, cache, _, stats = jax.lax.fori_loop(0, steps, body, (tokens, cache, key, stats))
    return (tokens, cache), stats


@jit(static_argnames=("k", "steps"), donate_argnums=0)
def _draft_program(state, drafter, sp: SamplingParams, length, key, *, k: int, steps: int):
    """``steps`` proposals of K tokens (and commits of none accepted, which is what the
    loop pays per iteration whatever it accepts). state = (tokens [B, S], drafter
    state), donated and returned. → (state, the last proposal [B, K])."""
    TRACE_COUNTS["draft"] += 1
    tokens, dstate = state
    B = tokens.shape[0]
    active = jnp.ones((B,), bool)

    def body(i, carry):
        tokens, dstate, key, _ = carry
        key, k_draft = jax.random.split(key)
        dstate, draft = drafter.propose(dstate, Context(tokens, length), k, k_draft, sp)
        dstate = drafter.commit(dstate, jnp.zeros((B,), jnp.int32), active)
        tokens = _append(tokens, length, draft.tokens)          # the next proposal reads it
        return tokens, dstate, key, draft.tokens

    out = jnp.zeros((B, k), jnp.int32)
    tokens, dstate, _, out = jax.lax.fori_loop(0, steps, body, (tokens, dstate, key, out))
    return (tokens, dstate), out


@jit(static_argnames=("cfg", "k", "steps"), donate_argnums=0)
def _iteration_program(state, params, drafter, sp: SamplingParams, length, key, *,
                       cfg: ModelConfig, k: int, steps: int):
    """``steps`` whole iterations in the loop's order: K proposals, one target pass over
    the last token and the drafts, acceptance, residual draw, statistics, the drafter's
    observe (a feature-reading drafter) and commit. A draft step timed alone runs with
    the draft weights left in the caches by the step before it; in the loop a target
    pass runs between two proposals, so this program costs K · t_draft + t_verify as the
    loop pays them. state = (tokens [B, S], cache, drafter state), donated and
    returned. → (state, statistics [steps, B(, K)])."""
    TRACE_COUNTS["iteration"] += 1
    tokens, cache, dstate = state
    B, K = tokens.shape[0], k
    start = cache.length
    active = jnp.ones((B,), bool)
    feats = reads_target_hidden(drafter)
    stats = speculative.empty_stats(steps, B, K)

    def body(i, carry):
        tokens, cache, dstate, key, stats = carry
        key, k_draft, k_accept, k_resid = jax.random.split(key, 4)
        dstate, draft = drafter.propose(dstate, Context(tokens, length), K, k_draft, sp)
        last = gather_window(tokens, length - 1, 1)                             # [B, 1]
        h, cache = forward_hidden(params, cfg, jnp.concatenate([last, draft.tokens], 1), cache)
        target_probs = sp.probs(project(params, cfg, h))                        # [B, K+1, V]
        n_acc, new, _ = speculative.verify_drafts(k_accept, k_resid, draft, target_probs, sp)
        finite, _ = speculative.nonfinite_rows(draft.probs, target_probs, n_acc)
        stats = speculative.record_stats(stats, i, finite, n_acc, draft, target_probs)
        if feats:
            dstate = drafter.observe(dstate, h, n_acc, active)
        dstate = drafter.commit(dstate, n_acc, active)
        tokens = _append(tokens, length - 1, new)          # the next iteration reads it
        return tokens, cache._replace(length=start), dstate, key, stats

    tokens, cache, dstate, _, stats = jax.lax.fori_loop(
        0, steps, body, (tokens, cache, dstate, key, stats))
    return (tokens, cache, dstate), stats


@jit(static_argnames=("P", "S"))
def _draft_setup(drafter, tokens, *, P: int, S: int):
    B = tokens.shape[0]
    return drafter.init_state(tokens[:, :P], jnp.full((B,), P, jnp.int32), S)


class Chained:
    """A zero-argument call of ``program(state, *args, **static)`` that feeds the
    returned state back into the next call. The state (the token buffer and the KV
    caches) is donated, so XLA updates it in place as the compiled loop does: a program
    that took the caches without donation would copy all of [L, B, S, G, E] on entry
    every call (docs/studies/pass-cost-programs.md). Each call returns the program's
    small output (not the donated state)."""

    def __init__(self, program, state, *args, **static):
        self.program, self.state, self.args, self.static = program, state, args, static

    def __call__(self, **static):
        self.state, out = self.program(self.state, *self.args, **{**self.static, **static})
        return out

    def lower(self):
        """The program lowered at the current state (for reading its HLO)."""
        return self.program.lower(self.state, *self.args, **self.static)


# ---- calls and costs ---------------------------------------------------------------------------
def max_context(cache_len: int, k: int, steps: int) -> int:
    """The longest context at which `pass_calls` fits ``steps`` passes of K + 1 tokens
    (and a draft's K) into ``cache_len`` slots."""
    return int(cache_len) - int(steps) * (int(k) + 1) - int(k) - 1


PIECES = ("target_1", "verify", "draft", "iteration")


class PassCalls(NamedTuple):
    """Zero-argument timed calls; each runs ``steps`` iterations of its piece (None: a
    piece not asked for, or no drafter)."""
    target_1: Callable[[], Any] | None
    verify: Callable[[], Any] | None
    draft: Callable[[], Any] | None
    steps: int
    k: int
    iteration: Callable[[], Any] | None = None


def pass_calls(target, drafter, *, batch: int, cache_len: int, k: int,
               temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, steps: int = 4,
               seed: int = 0, pieces=("target_1", "verify", "draft"),
               context: int | None = None) -> PassCalls:
    """Compiled calls timing one iteration's pieces for ``target`` (a `Model`, with the
    layer loop and layout of the run) and ``drafter`` (None: no draft work) at the run's
    batch, cache slots and K: the ``pieces`` asked for, of `PIECES` ("draft" and
    "iteration" need a drafter). Compiles here (one warm call each), so timing excludes
    it. Passes run at ``context`` cached tokens (default S/2): the CPU attention kernel
    reads the slots up to each row's position, so a pass costs more the longer its
    context, and a run's prediction takes its passes at the loop's mean context
    (`specsim.experiment.inrun.loop_context`); XLA's attention reads all S slots
    whatever the context."""
    for name, v in (("batch", batch), ("cache_len", cache_len), ("k", k), ("steps", steps)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InvalidArgument(f"{name} must be an integer >= 1, got {v!r}")
    pieces = tuple(pieces)
    if not pieces or any(p not in PIECES for p in pieces):
        raise InvalidArgument(f"pieces must be a non-empty selection of {PIECES}, got {pieces!r}")
    cfg = target.cfg
    S, K = int(cache_len), int(k)
    if context is not None and (isinstance(context, bool) or not isinstance(
            context, (int, np.integer)) or context < 2):
        raise InvalidArgument(f"context must be an integer >= 2 (cached tokens a pass "
                              f"attends), got {context!r}")
    ctx = S // 2 if context is None else int(context)
    if ctx > max_context(S, K, steps) or ctx < 2:
        raise InvalidArgument(f"cache_len ({S}) too small for k ({K}), steps ({steps}) and "
                              f"context ({ctx}): need context + steps*(k+1) + k + 1 <= "
                              f"cache_len")
    sp = SamplingParams.make(temperature, top_k, top_p, vocab_size=cfg.vocab_size)
    rng = np.random.default_rng(seed)
    tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (batch, S)), jnp.int32)
    length = jnp.full((batch,), ctx, jnp.int32)
    cache = init_cache(cfg, batch, S)
    cache = cache._replace(length=length - 1)
    key = jax.random.PRNGKey(seed)
    copy = lambda tree: jax.tree_util.tree_map(jnp.copy, tree)   # each call owns its state
    draft_state = lambda: _draft_setup(drafter, tokens, P=ctx - 1, S=S)
    build = {
        "target_1": lambda: Chained(_target_1_program, (copy(tokens), copy(cache)),
                                    target.params, sp, length, key, cfg=cfg, steps=steps),
        "verify": lambda: Chained(_verify_program, (copy(tokens), copy(cache)), target.params,
                                  sp, length, key, cfg=cfg, k=K, steps=steps),
        "draft": lambda: Chained(_draft_program, (copy(tokens), draft_state()), drafter, sp,
                                 length, key, k=K, steps=steps),
        "iteration": lambda: Chained(_iteration_program,
                                     (copy(tokens), copy(cache), draft_state()), target.params,
                                     drafter, sp, length, key, cfg=cfg, k=K, steps=steps),
    }
    calls = {}
    for piece in pieces:
        if piece in ("draft", "iteration") and drafter is None:
            continue
        calls[piece] = build[piece]()
        jax.block_until_ready(calls[piece]())
    return PassCalls(calls.get("target_1"), calls.get("verify"), calls.get("draft"),
                     steps=int(steps), k=K, iteration=calls.get("iteration"))


@dataclass(frozen=True)
class PassCosts:
    """Per-pass times (seconds, medians over the samples) with their spread."""
    t_target_1: TimingStats
    t_verify: TimingStats
    t_draft: TimingStats | None
    k: int

    @classmethod
    def from_times(cls, calls: PassCalls, target_1, verify, draft=None) -> "PassCosts":
        """From per-call times (seconds, one per timed call of each piece)."""
        per = lambda ts, n: stats_from_times([t / n for t in ts])
        return cls(per(target_1, calls.steps), per(verify, calls.steps),
                   None if draft is None else per(draft, calls.steps * calls.k), calls.k)

    @property
    def draft_s(self) -> float:
        return 0.0 if self.t_draft is None else self.t_draft.median

    @property
    def cost_ratio(self) -> float:
        """c = draft step / target step (the autoregressive step, same batch)."""
        return self.draft_s / self.t_target_1.median

    @property
    def iteration_s(self) -> float:
        """K · t_draft + t_verify: one speculative iteration's passes."""
        return self.k * self.draft_s + self.t_verify.median


def predict_speedup(expected_tokens, k: int, t_target_1: float, t_verify: float,
                    t_draft: float = 0.0, residual: float = 0.0):
    """S = E · t_target_1 / (K · t_draft + t_verify + residual): the closed form of
    `analytic.speedup_from_costs` with the verify pass carrying the iteration's
    residual loop overhead (seconds, >= 0)."""
    if not np.all(np.asarray(residual) >= 0):
        raise InvalidArgument(f"residual must be >= 0 seconds, got {residual!r}")
    return analytic.speedup_from_costs(expected_tokens, k, t_draft, t_target_1,
                                       np.asarray(t_verify) + residual)
