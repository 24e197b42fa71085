"""Sampling: logits → probabilities, and the pieces of speculative rejection sampling.

Everything is fp32 and works inside `jax.jit`. Dimension names: B batch, K drafts,
V vocab; ``...`` means any leading shape.

* `logits_to_probs` applies temperature, then top-k, then top-p (the order of Hugging
  Face's logits processors). Temperature 0 is greedy: a one-hot on the argmax, and the
  logits are never divided by it.
* `accept_drafts` is the acceptance test: accept a drafted x with probability
  min(1, target_probs(x) / draft_probs(x)), written as ``u * q(x) < p(x)`` so that
  nothing divides. A draft whose distribution row is all zero is "no proposal" and is
  always rejected.
* `residual_probs` is max(0, target − draft) renormalised; when the residual is all zero
  (target == draft, so rejection had probability 0 anyway) it falls back to the target.
  With draft_probs = 0 (no proposal) the residual is exactly the target.
* `overlap` is β = Σₓ min(target(x), draft(x)) = 1 − TV, the per-step acceptance
  probability.

Non-finite logits turn the whole row of probabilities into NaN (never a silent one-hot
or a silently renormalised row), so that callers can detect them with `is_finite_row`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from specsim.errors import InvalidArgument
from specsim.validation import nonnegative_float, nonnegative_int, probability

__all__ = ["SamplingParams", "logits_to_probs", "sample", "accept_drafts", "residual_probs",
           "sample_residual", "overlap", "is_finite_row", "validate_sampling", "argmax"]


def validate_sampling(temperature, top_k, top_p, vocab_size: int) -> tuple[float, int, float]:
    """Eager checks at the public boundary; returns the values as Python numbers."""
    temperature = nonnegative_float("temperature", temperature)
    top_k = nonnegative_int("top_k", top_k)
    if top_k > vocab_size:
        raise InvalidArgument(f"top_k must be an integer in [0, {vocab_size}] (0 = off), "
                              f"got {top_k}")
    top_p = probability("top_p", top_p)
    if top_p == 0.0:
        raise InvalidArgument(f"top_p must be a number in (0, 1], got {top_p!r}")
    return temperature, top_k, top_p


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings as a pytree: the values are traced (a new temperature does not
    recompile), the switches (greedy, top-k on, top-p on) are static."""
    temperature: jax.Array | float = 0.0
    top_k: jax.Array | int = 0
    top_p: jax.Array | float = 1.0
    greedy: bool = True
    use_top_k: bool = False
    use_top_p: bool = False

    @classmethod
    def make(cls, temperature=0.0, top_k=0, top_p=1.0, vocab_size: int | None = None
             ) -> "SamplingParams":
        """Validated settings; ``vocab_size`` bounds top_k."""
        temperature, top_k, top_p = validate_sampling(
            temperature, top_k, top_p, vocab_size if vocab_size is not None else 2**31 - 1)
        greedy = temperature == 0.0
        use_top_k = (not greedy) and 0 < top_k < (vocab_size or 2**31 - 1)
        use_top_p = (not greedy) and top_p < 1.0
        return cls(jnp.float32(temperature if not greedy else 1.0), jnp.int32(top_k),
                   jnp.float32(top_p), greedy, use_top_k, use_top_p)

    def tree_flatten(self):
        return ((self.temperature, self.top_k, self.top_p),
                (self.greedy, self.use_top_k, self.use_top_p))

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    def probs(self, logits: jax.Array) -> jax.Array:
        """[..., V] logits → [..., V] fp32 probabilities after the processing."""
        return _process(logits, self.temperature, self.top_k, self.top_p,
                        self.greedy, self.use_top_k, self.use_top_p)

    def sample(self, key: jax.Array, probs: jax.Array) -> jax.Array:
        """Draw one token per row of [..., V] probabilities → [...] int32."""
        return sample(key, probs, greedy=self.greedy)

    def softmax(self, logits: jax.Array) -> jax.Array:
        """[..., V] logits → [..., V] fp32: the temperature-1 law, unprocessed (a greedy
        draft's confidence in its own token; `specsim.policy_engine.confidence`)."""
        return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)

    def replace(self, **changes) -> "SamplingParams":
        return dataclasses.replace(self, **changes)


def argmax(x: jax.Array) -> jax.Array:
    """``jnp.argmax(x, axis=-1)`` as int32, the same index for every input (the first
    maximum; the first NaN where a row has one), by two reductions XLA vectorises: the
    row's maximum, then the least index holding it. XLA:CPU lowers ``jnp.argmax`` to one
    scalar (value, index) reduction, several times slower over a 49,152-token vocabulary
    (docs/studies/argmax-on-cpu.md)."""
    m = jnp.max(x, axis=-1, keepdims=True)                            # NaN if the row has one
    iota = jax.lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1)
    hit = (x == m) | jnp.isnan(x)
    return jnp.min(jnp.where(hit, iota, x.shape[-1]), axis=-1)


def is_finite_row(x: jax.Array) -> jax.Array:
    """[..., V] → [...] bool: every entry of the row is finite."""
    return jnp.all(jnp.isfinite(x), axis=-1)


def _process(logits, temperature, top_k, top_p, greedy: bool, use_top_k: bool,
             use_top_p: bool) -> jax.Array:
    logits = logits.astype(jnp.float32)                               # [..., V]
    finite = is_finite_row(logits)[..., None]                         # [..., 1]
    V = logits.shape[-1]
    if greedy:
        probs = jax.nn.one_hot(argmax(logits), V, dtype=jnp.float32)
        return jnp.where(finite, probs, jnp.nan)
    scaled = logits / temperature
    if use_top_k:
        # k-th largest value via a sort (k is traced, so lax.top_k cannot be used);
        # ties with the k-th value are all kept.
        ascending = jnp.sort(scaled, axis=-1)                          # [..., V]
        idx = jnp.clip(V - top_k, 0, V - 1)
        kth = jnp.take(ascending, idx, axis=-1)[..., None]            # [..., 1]
        scaled = jnp.where(scaled >= kth, scaled, -jnp.inf)
    probs = jax.nn.softmax(scaled, axis=-1)
    if use_top_p:
        # Keep the smallest set of most likely tokens whose mass reaches top_p: a token
        # is kept when the mass strictly before it (in descending order) is < top_p.
        # The first token is always kept; ties with the last kept probability are kept.
        descending = -jnp.sort(-probs, axis=-1)                        # [..., V]
        before = jnp.cumsum(descending, axis=-1) - descending
        n_keep = jnp.maximum(jnp.sum(before < top_p, axis=-1), 1)      # [...]
        threshold = jnp.take_along_axis(descending, (n_keep - 1)[..., None], axis=-1)
        probs = jnp.where(probs >= threshold, probs, 0.0)
        probs = probs / jnp.sum(probs, axis=-1, keepdims=True)
    return jnp.where(finite, probs, jnp.nan)


def logits_to_probs(logits: jax.Array, temperature: float = 1.0, top_k: int = 0,
                    top_p: float = 1.0) -> jax.Array:
    """[..., V] logits → [..., V] fp32 probabilities (temperature, top-k, top-p).

    ``temperature=0`` gives a one-hot on the argmax; ``top_k=0`` and ``top_p=1`` are
    off. Validated eagerly; for traced settings use `SamplingParams`."""
    sp = SamplingParams.make(temperature, top_k, top_p, vocab_size=logits.shape[-1])
    return sp.probs(logits)


def sample(key: jax.Array, probs: jax.Array, greedy: bool = False) -> jax.Array:
    """One token per row of [..., V] probabilities → [...] int32 (argmax when greedy).
    Zero-probability tokens are never drawn."""
    if greedy:
        return argmax(probs)
    logp = jnp.where(probs > 0, jnp.log(jnp.where(probs > 0, probs, 1.0)), -jnp.inf)
    return jax.random.categorical(key, logp, axis=-1).astype(jnp.int32)


def overlap(target_probs: jax.Array, draft_probs: jax.Array) -> jax.Array:
    """β = Σₓ min(target(x), draft(x)): [..., V] × [..., V] → [...]."""
    return jnp.sum(jnp.minimum(target_probs, draft_probs), axis=-1)


def accept_drafts(key: jax.Array, draft_tokens: jax.Array, draft_probs: jax.Array,
                  target_probs: jax.Array, greedy: bool = False) -> jax.Array:
    """The acceptance test for each drafted token.

    draft_tokens [B, K] int32; draft_probs [B, K, V] (a row of zeros = no proposal);
    target_probs [B, K, V] at the same positions. Returns accepted [B, K] bool.
    Greedy: accept iff the draft equals the target's argmax. Otherwise accept with
    probability min(1, p(x)/q(x)), as ``u * q(x) < p(x)`` with u ~ U[0, 1).
    """
    q_x = jnp.take_along_axis(draft_probs, draft_tokens[..., None], axis=-1)[..., 0]   # [B, K]
    proposed = jnp.sum(draft_probs, axis=-1) > 0                                      # [B, K]
    if greedy:
        return proposed & (draft_tokens == argmax(target_probs))
    p_x = jnp.take_along_axis(target_probs, draft_tokens[..., None], axis=-1)[..., 0]  # [B, K]
    u = jax.random.uniform(key, draft_tokens.shape, jnp.float32)
    return proposed & (q_x > 0) & (u * q_x < p_x)


def residual_probs(target_probs: jax.Array, draft_probs: jax.Array) -> jax.Array:
    """max(0, target − draft) renormalised, [..., V]; the target itself where the
    residual is all zero (then rejection had probability zero)."""
    resid = jnp.maximum(target_probs - draft_probs, 0.0)
    mass = jnp.sum(resid, axis=-1, keepdims=True)
    safe = mass > 1e-12
    return jnp.where(safe, resid / jnp.where(safe, mass, 1.0), target_probs)


def sample_residual(key: jax.Array, target_probs: jax.Array, draft_probs: jax.Array,
                    greedy: bool = False) -> jax.Array:
    """Draw from the residual distribution [..., V] → [...] int32. Greedy: the target's
    argmax (the residual of two one-hots that differ is the target's one-hot)."""
    if greedy:
        return argmax(target_probs)
    return sample(key, residual_probs(target_probs, draft_probs))
