"""A distilled draft with a restricted output head (FR-Spec): a small model whose head
covers only ``head_ids`` (Vh of the V tokens). Its distribution over the head is
scattered into the full vocabulary with probability exactly zero elsewhere, so those
tokens are never proposed and the verifier's rejection sampling stays exact (the
residual max(0, p − q) holds all of the target's mass on them).

Everything else is `ModelDrafter`'s: the KV cache, the two-token first step, commit. The
head is applied by the forward pass itself (``lm_head [D, Vh]``, cfg untied), and
`ModelDrafter.propose` is handed a sampling adapter whose ``probs`` maps [B, Vh]
logits to [B, V] probabilities after the usual temperature/top-k/top-p processing on
the head (the same as processing the full logits with −inf outside it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specsim.drafters.base import check_drafter
from specsim.drafters.model import ModelDrafter
from specsim.models.transformer import arrange_layers

__all__ = ["DistilledDrafter", "distilled_drafter", "METADATA_FILE"]

METADATA_FILE = "specsim_draft.json"


class _HeadSampling(NamedTuple):
    """What `ModelDrafter.propose` and `propose_policy` read of `SamplingParams`
    (probs, sample, greedy; softmax for a greedy draft's confidence), for logits over
    the head vocabulary."""
    sampling: Any
    head_ids: jax.Array   # [Vh] int32
    vocab_size: int

    @property
    def greedy(self) -> bool:
        return self.sampling.greedy

    def probs(self, logits):                                       # [B, Vh] → [B, V]
        return self._scatter(self.sampling.probs(logits))

    def softmax(self, logits):
        """[B, Vh] → [B, V]: the head's temperature-1 law (a greedy draft's confidence)."""
        return self._scatter(jax.nn.softmax(logits.astype(jnp.float32), axis=-1))

    def sample(self, key, probs):
        return self.sampling.sample(key, probs)

    def _scatter(self, head_probs):
        full = jnp.zeros(head_probs.shape[:-1] + (self.vocab_size,), head_probs.dtype)
        return full.at[..., self.head_ids].set(head_probs)


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class DistilledDrafter(ModelDrafter):
    """params hold ``lm_head [D, Vh]`` (the head rows); cfg is untied and keeps the
    target's ``vocab_size``; head_ids [Vh] int32 are the token ids of the head."""
    head_ids: Any = None

    def tree_flatten(self):
        return (self.params, self.head_ids), (self.cfg, self.name)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], aux[0], aux[1], children[1])

    @property
    def head_vocab(self) -> int:
        return int(self.head_ids.shape[0])

    def propose(self, state, context, k, key, sampling):
        head = _HeadSampling(sampling, self.head_ids, self.cfg.vocab_size)
        return ModelDrafter.propose(self, state, context, k, key, head)

    def propose_policy(self, state, context, k, key, sampling, policy, k_plan):
        head = _HeadSampling(sampling, self.head_ids, self.cfg.vocab_size)
        return ModelDrafter.propose_policy(self, state, context, k, key, head, policy, k_plan)


def _read_head_ids(folder: Path | None) -> np.ndarray | None:
    if folder is None or not (folder / METADATA_FILE).is_file():
        return None
    return np.asarray(json.loads((folder / METADATA_FILE).read_text())["head_ids"], np.int64)


def distilled_drafter(source, target=None, *, head_ids=None, name: str | None = None
                      ) -> DistilledDrafter:
    """The drafter of a distilled draft: ``source`` is its folder (as `train_draft`
    writes it; the head vocabulary comes from its ``specsim_draft.json``) or a loaded
    `specsim.models.Model` (then ``head_ids``, or the metadata beside ``model.source``).
    Without any head vocabulary the head is the whole vocabulary. With ``target`` given,
    a vocabulary mismatch is a ValueError."""
    from specsim import models

    if isinstance(source, (str, Path)):
        folder = Path(source)
        if not folder.is_dir():
            raise ValueError(f"source {source!r}: not a draft folder")
        model = models.load(folder)
    else:
        model = source
        folder = Path(model.source) if getattr(model, "source", "") else None
    cfg = model.cfg
    if target is not None and cfg.vocab_size != target.cfg.vocab_size:
        raise ValueError(f"draft vocabulary ({cfg.vocab_size} tokens, {cfg.name}) does not "
                         f"match the target's ({target.cfg.vocab_size} tokens, "
                         f"{target.cfg.name}); the draft must share the target's tokenizer")
    if not cfg.tie_embeddings:
        raise ValueError(f"{cfg.name}: a distilled draft has a tied head (its embedding rows)")
    if head_ids is None:
        head_ids = _read_head_ids(folder)
    ids = np.asarray(head_ids if head_ids is not None else np.arange(cfg.vocab_size))
    if ids.ndim != 1 or ids.size == 0 or ids.min() < 0 or ids.max() >= cfg.vocab_size \
            or len(np.unique(ids)) != ids.size:
        raise ValueError(f"head_ids must be distinct token ids in [0, {cfg.vocab_size - 1}]")
    ids = jnp.asarray(np.sort(ids), jnp.int32)
    run_cfg = cfg.replace(tie_embeddings=False)
    params = arrange_layers(dict(model.params, lm_head=model.params["embed"][ids].T), run_cfg)
    drafter = DistilledDrafter(params, run_cfg, name or f"distilled:{cfg.n_layers}L/"
                               f"{ids.shape[0]}", ids)
    if target is not None:
        check_drafter(drafter, target.cfg.vocab_size)
    return drafter
