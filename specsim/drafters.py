"""Draft proposers for speculative decoding, as pure functions over pytrees.

A drafter is a pytree (its arrays are children, its configuration is static aux data),
so it is passed straight into the compiled loop of `specsim.decode` and a second call
with an equal drafter hits the compile cache. The interface has three methods:

    state = drafter.init_state(prompts [B, P], prompt_lens [B], cache_len S)
    state, draft = drafter.propose(state, context, k, key, sampling)
    state = drafter.commit(state, n_accepted [B], active [B])

``context`` is the loop's token buffer: ``Context(tokens [B, N], length [B])``, holding
prompt + output so far; ``length[b]`` counts the valid tokens of row b and is >= 2
whenever `propose` is called (the first new token comes from the target's prefill).
``draft`` is ``Draft(tokens [B, K] int32, probs [B, K, V] fp32)``: the proposed tokens and
the distribution each was drawn from, after the same temperature/top-k/top-p
processing as the target. A row of zeros in ``probs`` means "no proposal at this
position": the verifier rejects it and samples from the target itself, so a drafter may
propose fewer than K tokens (the n-gram drafter does when there is no match) and stay
exact. A deterministic drafter has a one-hot ``probs``; rejection sampling with a one-hot
draft distribution is still exact.

Model drafters keep a KV cache holding all but the last TWO tokens of the context. Their
first draft step runs the last two tokens (re-writing the second-to-last, which may be a
draft the cache has not seen when every draft was accepted), the other K−1 steps run one
token each (a `lax.scan`). `propose` returns the cache with its length set back to where
it started; `commit` advances it by the n_accepted + 1 tokens the row kept (rolling back
the rejected drafts is just not counting them).

Drafters: `ModelDrafter` (a small model sharing the target's vocabulary; also the
layer-skip self-draft, see `layer_skip_drafter`) and `NGramDrafter` (prompt lookup).
A new drafter (a trained head, a tree) implements the same three methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from specsim.models.config import ModelConfig
from specsim.models.transformer import forward, init_cache, select_layers
from specsim.sampling import SamplingParams

__all__ = ["Context", "Draft", "Drafter", "ModelDrafter", "NGramDrafter", "model_drafter",
           "layer_skip_drafter", "check_drafter"]


class Context(NamedTuple):
    tokens: jax.Array  # [B, N] int32: prompt + output so far, garbage past `length`
    length: jax.Array  # [B] int32: valid tokens per row


class Draft(NamedTuple):
    tokens: jax.Array  # [B, K] int32
    probs: jax.Array   # [B, K, V] fp32; a zero row = no proposal


@runtime_checkable
class Drafter(Protocol):
    """What the speculative loop needs from a drafter (all methods are traced)."""
    vocab_size: int
    name: str

    def init_state(self, prompts: jax.Array, prompt_lens: jax.Array, cache_len: int) -> Any: ...

    def propose(self, state: Any, context: Context, k: int, key: jax.Array,
                sampling: SamplingParams) -> tuple[Any, Draft]: ...

    def commit(self, state: Any, n_accepted: jax.Array, active: jax.Array) -> Any: ...

    def passes_per_iteration(self, k: int) -> int: ...

    def max_cache_len(self) -> int | None: ...


def _gather_last(tokens: jax.Array, length: jax.Array, back: int) -> jax.Array:
    """tokens[b, length[b] - back] for each row → [B]."""
    idx = jnp.clip(length - back, 0, tokens.shape[1] - 1)
    return jnp.take_along_axis(tokens, idx[:, None], axis=1)[:, 0]


# ---- small model / layer-skip ------------------------------------------------------------
@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class ModelDrafter:
    """A draft model: its parameters (children) and config (static). The state is its
    KV cache."""
    params: Any
    cfg: ModelConfig
    name: str = "model"

    def tree_flatten(self):
        return (self.params,), (self.cfg, self.name)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], *aux)

    @property
    def vocab_size(self) -> int:
        return self.cfg.vocab_size

    def passes_per_iteration(self, k: int) -> int:
        return k

    def max_cache_len(self) -> int | None:
        return self.cfg.max_seq_len

    def init_state(self, prompts, prompt_lens, cache_len: int):
        """Prefill the padded prompts [B, P]; keep all but the last token of each row
        (the first generated token is appended by the loop, so the cache then holds all
        but the last two)."""
        cache = init_cache(self.cfg, prompts.shape[0], cache_len)
        _, cache = forward(self.params, self.cfg, prompts, cache)
        return cache._replace(length=prompt_lens - 1)

    def propose(self, state, context: Context, k: int, key, sampling: SamplingParams):
        cache = state
        start = cache.length                                            # [B] = length - 2
        two = jnp.stack([_gather_last(context.tokens, context.length, 2),
                         _gather_last(context.tokens, context.length, 1)], axis=1)  # [B, 2]
        keys = jax.random.split(key, k)
        logits, cache = forward(self.params, self.cfg, two, cache)       # [B, 2, V]
        probs0 = sampling.probs(logits[:, -1])                           # [B, V]
        tok0 = sampling.sample(keys[0], probs0)                          # [B]

        def step(carry, key_i):
            cache, tok = carry
            logits, cache = forward(self.params, self.cfg, tok[:, None], cache)  # [B, 1, V]
            probs = sampling.probs(logits[:, 0])                         # [B, V]
            nxt = sampling.sample(key_i, probs)
            return (cache, nxt), (nxt, probs)

        (cache, _), (toks, probs) = jax.lax.scan(step, (cache, tok0), keys[1:])  # [K-1, B(, V)]
        tokens = jnp.concatenate([tok0[:, None], toks.T], axis=1)        # [B, K]
        probs = jnp.concatenate([probs0[:, None], jnp.swapaxes(probs, 0, 1)], axis=1)  # [B, K, V]
        return cache._replace(length=start), Draft(tokens, probs)

    def commit(self, state, n_accepted, active):
        return state._replace(length=state.length + jnp.where(active, n_accepted + 1, 0))


def _model_parts(model) -> tuple[Any, ModelConfig]:
    if isinstance(model, ModelDrafter):
        return model.params, model.cfg
    return model.params, model.cfg


def model_drafter(model, target=None, name: str | None = None) -> ModelDrafter:
    """A small model (a `specsim.models.Model`) as drafter. With ``target`` given, a
    vocabulary mismatch is a ValueError."""
    params, cfg = _model_parts(model)
    drafter = ModelDrafter(params, cfg, name or f"model:{cfg.name}")
    if target is not None:
        check_drafter(drafter, target.cfg.vocab_size)
    return drafter


def layer_skip_drafter(target, layers=None, name: str | None = None) -> ModelDrafter:
    """The target with only ``layers`` (ids) of its layers: a self-draft sharing the
    target's embedding, final norm and head (the same arrays) and the values of the kept
    layers (gathered once from the stacked weights). Default: the first half of the
    layers (early exit)."""
    cfg = target.cfg
    if layers is None:
        layers = range(max(1, cfg.n_layers // 2))
    params, sub_cfg = select_layers(target.params, cfg, layers)
    ids = tuple(int(i) for i in layers)
    return ModelDrafter(params, sub_cfg, name or f"layer-skip:{len(ids)}/{cfg.n_layers}")


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
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{field} must be a positive integer, got {v!r}")
        if self.min_n > self.n:
            raise ValueError(f"min_n ({self.min_n}) must be <= n ({self.n})")

    def tree_flatten(self):
        return (), (self.vocab_size, self.n, self.min_n, self.name)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*aux)

    def passes_per_iteration(self, k: int) -> int:
        return 0

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
            want = _gather_last(tokens, length, size - s)                # [B] pattern[s]
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


def check_drafter(drafter, vocab_size: int) -> None:
    """Eager compatibility checks between a drafter and a target vocabulary."""
    missing = [m for m in ("init_state", "propose", "commit", "passes_per_iteration",
                           "max_cache_len") if not callable(getattr(drafter, m, None))]
    if missing:
        raise ValueError(f"drafter must implement the Drafter interface; missing {missing}")
    if int(drafter.vocab_size) != int(vocab_size):
        raise ValueError(
            f"drafter vocabulary ({drafter.vocab_size} tokens, {drafter.name}) does not match "
            f"the target's ({vocab_size} tokens); a draft model must share the target's "
            f"tokenizer")
