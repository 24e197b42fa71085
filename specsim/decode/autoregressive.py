"""The autoregressive loop: one target pass per token, in one compiled `lax.while_loop`
started from `prefill_program`'s state (the baseline every speedup is measured
against)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specsim.decode.accounting import TRACE_COUNTS
from specsim.decode.loop_state import advance, running
from specsim.models.compiler import jit
from specsim.models.config import ModelConfig
from specsim.models.transformer import forward
from specsim.sampling import SamplingParams, is_finite_row

__all__ = ["autoregressive_program"]


@jit(static_argnames=("cfg", "S", "I"), donate_argnames=("start",))
def autoregressive_program(params, sp: SamplingParams, prompt_lens, max_new, eos, start, *,
                           cfg: ModelConfig, S: int, I: int):
    """The decode loop from ``start`` = `prefill_program`'s (LoopState, cache), donated;
    → (LoopState, cache)."""
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
        new = advance(c, tok[:, None], finite.astype(jnp.int32), finite, prompt_lens,
                      max_new, eos, key)
        return new, cache._replace(length=start + (new.length - c.length))

    common, cache = jax.lax.while_loop(lambda carry: running(carry[0], I), body,
                                       (common, cache))
    return common, cache       # the cache returned so that it reuses the donated buffers
