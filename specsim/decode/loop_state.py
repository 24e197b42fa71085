"""What every generation loop shares: the common loop state, the per-iteration
bookkeeping (append the kept tokens, stop at EOS or max_new_tokens, flag non-finite
rows), the loop condition, and a one-trip conditional that updates the caches in place.

Every row has its own length and stop; finished rows ride along without changing.
Shapes: B batch, N token buffer (= S cache slots), T tokens one iteration produced.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["LoopState", "DONATED", "advance", "running", "once_if"]


class LoopState(NamedTuple):
    tokens: jax.Array      # [B, N] int32 prompt + output
    length: jax.Array      # [B] int32
    done: jax.Array        # [B] bool
    nonfinite: jax.Array   # [B] bool
    eos_hit: jax.Array     # [B] bool
    key: jax.Array
    it: jax.Array          # [] int32 loop iterations


DONATED = ("start", "dstate")
"""The arguments the loop programs donate (a prefill's output; see `LoopCall`)."""


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


def advance(c: LoopState, new_tokens, n_valid, finite, prompt_lens, max_new, eos,
            key) -> LoopState:
    """The bookkeeping every loop shares, after one iteration produced up to T tokens per
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


def running(c: LoopState, I: int):
    """Loop condition: iterations left and some row not done."""
    return (c.it < I) & jnp.any(~c.done)


def once_if(pred, fn, state):
    """``fn(state)`` where ``pred`` ([] bool) holds, else ``state``: a `lax.cond` with one
    branch the identity, written as a while loop of at most one trip. XLA's conditional
    copies each buffer a branch updates in place (the [L, B, S, G, E] caches, on every
    iteration of the loop around it); a while loop updates its carry in place
    (tests/test_policies.py::test_policy_loop_copies_no_cache; see
    docs/studies/policy-loop.md)."""
    def body(carry):
        return jnp.bool_(False), fn(carry[1])

    return jax.lax.while_loop(lambda carry: carry[0], body, (jnp.asarray(pred), state))[1]
