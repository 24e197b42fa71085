"""Model drafters: a small model sharing the target's vocabulary, and the layer-skip
self-draft (the target with a subset of its layers). The state is the draft's KV cache."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from specsim.drafters.base import Context, Draft, check_drafter, gather_last
from specsim.drafters.policy_draft import stepwise_draft
from specsim.models.config import ModelConfig
from specsim.models.transformer import forward, init_cache, select_layers
from specsim.sampling import SamplingParams

__all__ = ["ModelDrafter", "model_drafter", "layer_skip_drafter"]


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
        two = jnp.stack([gather_last(context.tokens, context.length, 2),
                         gather_last(context.tokens, context.length, 1)], axis=1)  # [B, 2]
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

    def propose_policy(self, state, context: Context, k: int, key, sampling: SamplingParams,
                       policy, k_plan):
        """Draft up to k slots per row under a draft-length policy (see
        `specsim.drafters.policy_draft.stepwise_draft`): the first pass (the last two tokens)
        always runs, the others only while some row is still drafting. k_plan [B] int32
        → (state, PolicyDraft)."""
        cache = state
        start = cache.length                                            # [B]
        two = jnp.stack([gather_last(context.tokens, context.length, 2),
                         gather_last(context.tokens, context.length, 1)], axis=1)  # [B, 2]

        def first():
            logits, c = forward(self.params, self.cfg, two, cache)       # [B, 2, ·]
            return c, logits[:, -1]

        def step(c, tok):
            logits, c = forward(self.params, self.cfg, tok[:, None], c)   # [B, 1, ·]
            return c, logits[:, 0]

        cache, pd = stepwise_draft(first, step, k, key, sampling, policy, k_plan,
                                      self.cfg.vocab_size)
        return cache._replace(length=start), pd

    def commit(self, state, n_accepted, active):
        return state._replace(length=state.length + jnp.where(active, n_accepted + 1, 0))

    def sync(self, state, context: Context, width: int = 8):
        """Bring the cache back to its invariant (all but the last two context tokens)
        after iterations in which the policy loop skipped the drafter (no row planned a
        draft; see `specsim.policy_engine.draft`): run the missing context tokens through
        the draft in passes of ``width`` tokens, rewriting only true context tokens at
        their own positions (a row already in step rewrites its last ``width`` tokens,
        which changes nothing). → (state, passes [] int32; 0 when no row is behind)."""
        N = context.tokens.shape[1]
        end = context.length - 2                                         # [B]

        def behind(carry):
            return jnp.any(carry[0].length < end)

        def catch_up(carry):
            cache, n = carry
            start = jnp.maximum(jnp.minimum(cache.length, end - width), 0)  # [B]
            idx = jnp.clip(start[:, None] + jnp.arange(width, dtype=jnp.int32)[None], 0, N - 1)
            toks = jnp.take_along_axis(context.tokens, idx, axis=1)        # [B, W]
            _, cache2 = forward(self.params, self.cfg, toks, cache._replace(length=start))
            length = jnp.where(cache.length < end, jnp.minimum(start + width, end),
                               cache.length)
            return cache2._replace(length=length), n + 1

        return jax.lax.while_loop(behind, catch_up, (state, jnp.int32(0)))


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
