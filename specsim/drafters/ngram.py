"""Prompt lookup (n-gram) drafting: no model, a few gathers inside the loop."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from specsim.drafters.base import Context, Draft, gather_last
from specsim.errors import InvalidArgument
from specsim.sampling import SamplingParams
from specsim.validation import positive_int

__all__ = ["NGramDrafter"]


# ---- n-gram prompt lookup ------------------------------------------------------------------
@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class NGramDrafter:
    """Prompt lookup: find the most recent earlier occurrence of the last n tokens in
    prompt + output so far and propose the up-to-K tokens that followed it. n-gram sizes
    are tried from ``n`` down to ``min_n``; the longest size with a match wins. Where the
    continuation is shorter than K (or there is no match) the remaining positions are
    "no proposal" (zero draft distribution): the target samples there itself. The draft
    is deterministic: its distribution is a one-hot, which keeps the output exact."""
    vocab_size: int
    n: int = 3
    min_n: int = 1
    name: str = "ngram"

    def __post_init__(self):
        for field in ("vocab_size", "n", "min_n"):
            positive_int(field, getattr(self, field))
        if self.min_n > self.n:
            raise InvalidArgument(f"min_n ({self.min_n}) must be <= n ({self.n})")

    def tree_flatten(self):
        return (), (self.vocab_size, self.n, self.min_n, self.name)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*aux)

    def passes_per_iteration(self, k: int) -> int:
        return 0

    @property
    def drafts_free(self) -> bool:
        """A lookup: no model pass, no state, a one-hot draft from the context alone, so
        the policy loop can judge its first draft while speculation is off
        (`specsim.policy_engine.judge_off`)."""
        return True

    def max_cache_len(self) -> int | None:
        return None

    def init_state(self, prompts, prompt_lens, cache_len: int):
        return ()

    def commit(self, state, n_accepted, active):
        return state

    def match(self, context: Context, size: int) -> jax.Array:
        """End position of the most recent earlier occurrence of the last ``size``
        tokens, per row → [B] int32 (-1 when none)."""
        tokens, length = context.tokens, context.length                 # [B, N], [B]
        B, N = tokens.shape
        pos = jnp.arange(N, dtype=jnp.int32)[None]                       # [1, N]
        hit = (pos >= size - 1) & (pos <= length[:, None] - 2)           # [B, N] ends j
        for s in range(size):
            want = gather_last(tokens, length, size - s)                # [B] pattern[s]
            shift = size - 1 - s                                         # seq[j - shift]
            shifted = jnp.pad(tokens, ((0, 0), (shift, 0)))[:, :N]       # [B, N]
            hit &= shifted == want[:, None]
        hit &= (length >= size + 1)[:, None]
        return jnp.max(jnp.where(hit, pos, -1), axis=1)

    def propose(self, state, context: Context, k: int, key, sampling: SamplingParams):
        tokens, length = context.tokens, context.length
        B, N = tokens.shape
        end = jnp.full((B,), -1, jnp.int32)
        for size in range(self.n, self.min_n - 1, -1):                  # longest first
            j = self.match(context, size)
            end = jnp.where(end >= 0, end, j)
        i = jnp.arange(k, dtype=jnp.int32)[None]                          # [1, K]
        src = end[:, None] + 1 + i                                        # [B, K]
        valid = (end[:, None] >= 0) & (src <= length[:, None] - 1)        # [B, K]
        draft = jnp.take_along_axis(tokens, jnp.clip(src, 0, N - 1), axis=1)
        draft = jnp.where(valid, draft, 0).astype(jnp.int32)
        probs = jax.nn.one_hot(draft, self.vocab_size, dtype=jnp.float32) * valid[..., None]
        return state, Draft(draft, probs)
