"""The draft being distilled: a few of the target's layers (copied, then trained), the
target's embedding (frozen, shared) and final norm (copied, trained), and an output
head restricted to a head vocabulary of the most frequent tokens (FR-Spec): the rows
of the tied embedding for those tokens. Tokens outside the head get draft probability
exactly zero, so they are never proposed and verification stays exact.

Parameter split (pytrees):
    trainable = {"layers": {name: [L, ...] stacked}, "final_norm_scale": [D]}
    frozen    = {"embed": [V, D]}
    head_ids  [Vh] int32, sorted token ids of the head vocabulary

Shapes: B batch, T positions, G generated positions, J teacher top-k, D model,
V vocab, Vh head vocabulary.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specsim.models.config import ModelConfig
from specsim.models.transformer import forward, init_cache, select_layers, stack_layers

__all__ = ["layer_ids", "head_vocabulary", "init_draft", "draft_config", "full_params",
           "restricted_params", "hidden_states", "distill_loss"]


def layer_ids(n_target: int, layers: int | Sequence[int]) -> tuple[int, ...]:
    """The target layers the draft copies: a count N (the first N layers, an early exit,
    which starts closer to the target than a skip to the last layer:
    docs/studies/draft-layer-choice.md) or explicit ids."""
    if isinstance(layers, (int, np.integer)) and not isinstance(layers, bool):
        n = int(layers)
        if not 1 <= n <= n_target:
            raise ValueError(f"layers must be in [1, {n_target}] (the target's layer count), "
                             f"got {n}")
        return tuple(range(n))
    ids = tuple(int(i) for i in layers)
    if not ids or len(set(ids)) != len(ids) or min(ids) < 0 or max(ids) >= n_target:
        raise ValueError(f"layers must be distinct ids in [0, {n_target - 1}], got {ids}")
    return ids


def head_vocabulary(token_lists, vocab_size: int, n: int, always: Sequence[int] = ()
                    ) -> np.ndarray:
    """The ``n`` most frequent token ids in ``token_lists`` (ties and unseen tokens
    ordered by id: BPE ids follow merge order, a proxy for corpus frequency), plus
    ``always`` (e.g. EOS). Returns sorted int32 ids [n]."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= vocab_size:
        raise ValueError(f"head_vocab must be an integer in [1, {vocab_size}] (the target's "
                         f"vocabulary), got {n!r}")
    counts = np.zeros(vocab_size, np.int64)
    for toks in token_lists:
        np.add.at(counts, np.asarray(toks, np.int64), 1)
    boost = np.zeros(vocab_size, np.int64)
    boost[list(always)] = 1
    order = np.lexsort((np.arange(vocab_size), -counts, -boost))          # boost, count, id
    return np.sort(order[:int(n)]).astype(np.int32)


def draft_config(target_cfg: ModelConfig, n_layers: int) -> ModelConfig:
    """The saved draft's config: the target's shape with ``n_layers`` layers, tied head."""
    return target_cfg.replace(n_layers=n_layers, name=f"{target_cfg.name}-distilled{n_layers}",
                              tie_embeddings=True, layer_loop="scan")


def init_draft(target, layers: Sequence[int]) -> tuple[dict, dict]:
    """(trainable, frozen) copied from ``target`` (a `specsim.models.Model`)."""
    if not target.cfg.tie_embeddings or target.cfg.arch != "llama":
        raise ValueError(f"the distilled draft needs a llama-family target with tied "
                         f"embeddings, got {target.cfg.name} ({target.cfg.arch}, "
                         f"tie_embeddings={target.cfg.tie_embeddings})")
    sub, _ = select_layers(target.params, target.cfg, layers)
    stacked = stack_layers(sub)["layers"]
    trainable = {"layers": jax.tree_util.tree_map(jnp.array, stacked),  # copies
                 "final_norm_scale": jnp.array(target.params["final_norm_scale"])}
    return trainable, {"embed": target.params["embed"]}


def full_params(trainable: dict, frozen: dict) -> dict:
    """The parameter pytree of the saved (tied, full-vocabulary) draft."""
    return {"embed": frozen["embed"], **trainable}


def restricted_params(params: dict, head_ids) -> dict:
    """A tied-head parameter pytree with its head cut to ``head_ids``: lm_head [D, Vh];
    run it with ``cfg.replace(tie_embeddings=False)``."""
    return dict(params, lm_head=params["embed"][jnp.asarray(head_ids)].T)


def hidden_states(trainable: dict, frozen: dict, cfg: ModelConfig, tokens) -> jax.Array:
    """Final-normed hidden states [B, T, D] of the draft over whole sequences: the
    forward pass with an identity head (cfg untied), so no vocabulary-sized product is
    paid at positions that have no teacher."""
    D = cfg.d_model
    params = dict(full_params(trainable, frozen), lm_head=jnp.eye(D, dtype=jnp.float32))
    B, T = tokens.shape
    h, _ = forward(params, cfg.replace(tie_embeddings=False), tokens, init_cache(cfg, B, T))
    return h


def distill_loss(trainable, frozen, head_ids, cfg: ModelConfig, batch) -> tuple[jax.Array, dict]:
    """KL(target ‖ draft) over the teacher's top-J tokens plus one "rest" bucket,
    averaged over valid generated positions.

    batch: tokens [B, T], pos [B, G] (the positions predicting generated tokens),
    teacher_head [B, G, J] (head index of each teacher token, −1 outside the head),
    teacher_logp [B, G, J], mask [B, G]. The teacher's mass beyond its top J goes into
    the rest bucket, matched by the draft's mass on head tokens outside the teacher's
    top J (without it the draft learns to be sharper than the target, which lowers
    acceptance when sampling); teacher tokens outside the head are dropped and the
    rest renormalised (the draft cannot propose them). This KL on a partition is a
    lower bound of the full one. Returns (loss, {"kl", "top1"}): top1 is the agreement
    of the draft's argmax with the teacher's top token (greedy acceptance)."""
    h = hidden_states(trainable, frozen, cfg, batch["tokens"])            # [B, T, D]
    h = jnp.take_along_axis(h, batch["pos"][..., None], axis=1)           # [B, G, D]
    head = frozen["embed"][head_ids]                                      # [Vh, D]
    logq = jax.nn.log_softmax(jnp.einsum("bgd,vd->bgv", h, head), axis=-1)  # [B, G, Vh]
    idx = batch["teacher_head"]
    inside = idx >= 0                                                     # [B, G, J]
    p_top = jnp.exp(batch["teacher_logp"])
    p_rest = jnp.clip(1.0 - p_top.sum(-1), 0.0, 1.0)                      # [B, G]
    p = jnp.where(inside, p_top, 0.0)
    z = p.sum(-1) + p_rest
    p, p_rest = p / z[..., None], p_rest / z                              # renormalised
    q = jnp.where(inside, jnp.exp(jnp.take_along_axis(logq, jnp.maximum(idx, 0), -1)), 0.0)
    q_rest = jnp.clip(1.0 - q.sum(-1), 1e-12, 1.0)
    tiny = 1e-30
    kl = jnp.sum(jnp.where(p > 0, p * (jnp.log(p + tiny) - jnp.log(q + tiny)), 0.0), -1)
    kl = kl + jnp.where(p_rest > 0, p_rest * (jnp.log(p_rest + tiny) - jnp.log(q_rest)), 0.0)
    mask = batch["mask"] & inside.any(-1)
    n = jnp.maximum(mask.sum(), 1)
    loss = jnp.sum(jnp.where(mask, kl, 0.0)) / n
    top1 = jnp.sum(jnp.where(mask, jnp.argmax(logq, -1) == idx[..., 0], False)) / n
    return loss, {"kl": loss, "top1": top1}
