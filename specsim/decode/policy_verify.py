"""The verify pass of the policy loop, compiled at a few widths.

A batch that proposed two drafts pays a 3-token target pass, not a K+1 one: the pass
runs at the narrowest compiled width that covers the widest proposal (`pass_width`).
One layer stack and one output head are compiled per width of ``widths`` (sorted, the
last K + 1; `specsim.policies.verify_widths`), each chosen by `once_if`, not `lax.cond`,
so the caches are not copied (see docs/studies/verify-widths.md for the widths kept).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specsim.decode.loop_state import LoopState, once_if
from specsim.models.transformer import forward_hidden, project
from specsim.sampling import SamplingParams

__all__ = ["policy_verify_pass", "verify_head", "pass_width"]


def policy_verify_pass(params, cfg, sp: SamplingParams, c: LoopState, draft, n_pass,
                       cache, widths: tuple):
    """Step 2 under a policy: one target pass over the last token and the drafts, at
    width ``n_pass`` ([] int32, `pass_width`: the narrowest of ``widths`` >= the widest
    proposal n_wide + 1); n_wide = 0 (K = 0 planned everywhere with a drafter the loop
    cannot skip, see `policy_engine.skippable`) is an autoregressive step.
    → (target_probs [B, K+1, V], cache, the final-normed features [B, K+1, D]).

    Positions past the pass's width hold zeros, and positions past n_wide hold the
    target's distributions after tokens no row proposed: the acceptance test rejects an
    unproposed slot whatever the target says there, so the test, the residual and the
    drafter read only positions up to n_wide (a row's stopping slot included), and the
    cache slots written past them are reclaimed when `length` is reset."""
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
        state = once_if(n_pass == w, width(w), state)
    h, cache = state
    return verify_head(params, cfg, sp, h, n_pass, widths), cache, h


def verify_head(params, cfg, sp: SamplingParams, h, n_pass, widths: tuple):
    """The target's distributions [B, K+1, V] at the ``n_pass`` ([] int32) positions of a
    verify pass, zeros past them, from its features h [B, K+1, D] (zeros past n_pass):
    one output head compiled per width, each run only at its own width (a head padded to
    a wider pass costs more than the compile it saves; see
    docs/studies/verify-widths.md)."""
    B, K1, _ = h.shape
    out = jax.eval_shape(lambda x: sp.probs(project(params, cfg, x)), h)        # [B, K+1, V]
    probs = jnp.zeros(out.shape, out.dtype)
    for w in widths:
        def head(_, w=w):
            return jnp.pad(sp.probs(project(params, cfg, h[:, :w])),
                           ((0, 0), (0, K1 - w), (0, 0)))
        probs = once_if(n_pass == w, head, probs)
    inside = jnp.arange(K1, dtype=jnp.int32)[None, :, None] < n_pass            # [1, K+1, 1]
    return jnp.where(inside, probs, 0.0)


def pass_width(widths: tuple, n_wide):
    """[] int32: the verify pass's width, the narrowest of ``widths`` that covers the
    last token and the ``n_wide`` ([] int32) drafts of the widest proposal."""
    ws = jnp.asarray(widths, jnp.int32)
    return ws[jnp.searchsorted(ws, n_wide + 1)]
