"""The prefill programs every generation loop starts from.

`prefill_program` runs the target over the padded prompts and draws the first new
token; it is compiled once per (model, B, P, S) and shared by plain decoding and every K,
drafter and policy, so that changing K recompiles the loop alone.
`drafter_prefill_program` is a drafter's own prefill (`init_state`: a draft model's
pass over the prompts), compiled once per (drafter, B, P, S) and not once per K. Their
outputs are donated to the loop program, which updates them in place (see
docs/studies/compile-time.md for what a forward pass costs to compile).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specsim.decode.accounting import TRACE_COUNTS
from specsim.decode.loop_state import LoopState
from specsim.drafters.base import reads_target_hidden
from specsim.models.compiler import jit
from specsim.models.config import ModelConfig
from specsim.models.transformer import forward_hidden, init_cache, project
from specsim.sampling import SamplingParams, is_finite_row

__all__ = ["prefill_program", "drafter_prefill_program"]


@jit(static_argnames=("cfg", "S"))
def prefill_program(params, sp: SamplingParams, prompts, prompt_lens, max_new, eos, key, *,
                    cfg: ModelConfig, S: int):
    """Prefill the target over prompts [B, P] and draw the first new token: →
    ((`LoopState`, cache), feature [B, D]). The pair is the loop program's ``start``
    (donated to it); the feature (final-normed, the one that produced the token) its
    ``feature`` where the drafter reads the target's, returned always so that one
    program serves every drafter."""
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
    common = LoopState(tokens, length, done, ~finite, eos_hit, key, jnp.int32(0))
    return (common, cache), h_last[:, 0]


@jit(static_argnames=("S",))
def drafter_prefill_program(drafter, prompts, prompt_lens, feature, active, *, S: int):
    """The drafter's prefill: `init_state` over the padded prompts [B, P] (a draft
    model's forward pass over them; nothing for n-gram lookup), then, for a drafter that
    reads the target's features, `observe` of the prefill's ``feature`` [B, D] (None for
    the others) for the ``active`` [B] rows. → the drafter state the loop program starts
    from (donated to it). Keyed by the drafter and (B, P, S) alone, so a K sweep compiles
    the draft model's prefill once."""
    TRACE_COUNTS["drafter-prefill"] += 1
    dstate = drafter.init_state(prompts, prompt_lens, S)
    if reads_target_hidden(drafter):
        dstate = drafter.observe(dstate, feature[:, None],
                                 jnp.zeros((prompts.shape[0],), jnp.int32), active)
    return dstate
