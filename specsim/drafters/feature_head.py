"""A draft head that reads the target's own features (EAGLE-style, without attention).

The target's final-normed hidden state ĥ_t is what its head turns into the distribution
of token t+1; the verify pass computes it for every position anyway. This drafter
starts from the feature at the position that produced the last kept token x and rolls
a small recurrent cell forward:

    z₀ = ĥ_t                          (handed over by the target's verify pass)
    z_j = z_{j-1} + W_out · (silu(W_gate u_j) ⊙ W_in u_j),
    u_j = [rms(z_{j-1}) · n₁ ; rms(e(x_j)) · n₂]      (x₁ = x, then the drafts)
    draft j ~ softmax(z_j · Eₕᵀ)

where e is the target's (frozen, shared) embedding and Eₕ its rows for the head
vocabulary (FR-Spec; tokens outside get draft probability exactly zero, so they are
never proposed and verification stays exact). Trained by `specsim.train.feature_head`
to make z_j follow the target's own ĥ_{t+j} and its next-token choice.

The loop hands the features over through one extra method, ``observe``; a drafter
says it wants them with ``reads_target_hidden = True`` (see `specsim.drafters`):

    state = observe(state, hidden [B, T, D], index [B], active [B])

Shapes: B batch, D model, W cell width, V vocab, Vh head vocabulary, K drafts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from specsim.drafters.base import Context, Draft, check_drafter, gather_last
from specsim.drafters.distilled import _HeadSampling
from specsim.drafters.head_file import head_rows, head_source, load_head_file, save_head_file
from specsim.drafters.policy_draft import stepwise_draft
from specsim.errors import InvalidArgument
from specsim.sampling import SamplingParams

__all__ = ["FeatureHeadDrafter", "feature_head_drafter", "cell", "init_cell", "CELL_KEYS",
           "HEAD_FILE", "load_cell", "save_cell"]

CELL_KEYS = ("w_in", "w_gate", "w_out", "n1", "n2")   # [2D, W], [2D, W], [W, D], [D], [D]
HEAD_FILE = "feature_head.npz"
FORMAT = "specsim-feature-head-v1"


def _rms(x, scale, eps):
    x32 = x.astype(jnp.float32)
    return x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + eps) * scale


def cell(p: dict, embed, z, tok, eps: float = 1e-5):
    """One step of the draft cell: z [B, D], tok [B] int32 → z' [B, D]."""
    u = jnp.concatenate([_rms(z, p["n1"], eps), _rms(embed[tok], p["n2"], eps)], -1)  # [B, 2D]
    return z + (jax.nn.silu(u @ p["w_gate"]) * (u @ p["w_in"])) @ p["w_out"]


def init_cell(key, d_model: int, width: int) -> dict:
    """A fresh cell: random input projections, a zero output projection (so an untrained
    cell keeps z₀, i.e. proposes the target's own next-token choice again)."""
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 1:
        raise ValueError(f"width must be a positive integer, got {width!r}")
    k1, k2 = jax.random.split(key)
    scale = (2 * d_model) ** -0.5
    return {"w_in": jax.random.normal(k1, (2 * d_model, width)) * scale,
            "w_gate": jax.random.normal(k2, (2 * d_model, width)) * scale,
            "w_out": jnp.zeros((width, d_model), jnp.float32),
            "n1": jnp.ones((d_model,), jnp.float32), "n2": jnp.ones((d_model,), jnp.float32)}


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class FeatureHeadDrafter:
    """cell: the trained cell (`CELL_KEYS`); embed [V, D]: the target's embedding;
    head [Vh, D]: its rows for ``head_ids`` [Vh] int32 (sorted). State: z₀ [B, D]."""
    cell: Any
    embed: Any
    head: Any
    head_ids: Any
    name: str = "feature-head"
    eps: float = 1e-5

    reads_target_hidden = True

    def tree_flatten(self):
        return (self.cell, self.embed, self.head, self.head_ids), (self.name, self.eps)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    @property
    def vocab_size(self) -> int:
        return int(self.embed.shape[0])

    def passes_per_iteration(self, k: int) -> int:
        return k

    def max_cache_len(self) -> int | None:
        return None

    def init_state(self, prompts, prompt_lens, cache_len: int):
        return jnp.zeros((prompts.shape[0], self.embed.shape[1]), jnp.float32)   # [B, D]

    def observe(self, state, hidden, index, active):
        """Keep the target's feature hidden[b, index[b]] (the position whose
        distribution produced row b's last kept token) for the active rows."""
        z = jnp.take_along_axis(hidden, index[:, None, None], axis=1)[:, 0]      # [B, D]
        return jnp.where(active[:, None], z.astype(jnp.float32), state)

    def _head(self, sampling: SamplingParams) -> _HeadSampling:
        return _HeadSampling(sampling, self.head_ids, self.vocab_size)

    def _logits(self, z):
        return jnp.einsum("bd,vd->bv", z, self.head)                           # [B, Vh]

    def _probs(self, z, sampling: SamplingParams):
        return self._head(sampling).probs(self._logits(z))                      # [B, V]

    def propose(self, state, context: Context, k: int, key, sampling: SamplingParams):
        x = gather_last(context.tokens, context.length, 1)                       # [B]

        def step(carry, key_j):
            z, tok = carry
            z = cell(self.cell, self.embed, z, tok, self.eps)
            probs = self._probs(z, sampling)
            nxt = sampling.sample(key_j, probs)
            return (z, nxt), (nxt, probs)

        _, (toks, probs) = jax.lax.scan(step, (state, x), jax.random.split(key, k))
        return state, Draft(toks.T, jnp.swapaxes(probs, 0, 1))                  # [B, K(, V)]

    def propose_policy(self, state, context: Context, k: int, key, sampling: SamplingParams,
                       policy, k_plan):
        """Draft up to k slots per row under a draft-length policy: one cell step per
        slot, the steps past the first only while some row is still drafting
        (`specsim.drafters.policy_draft.stepwise_draft`). k_plan [B] int32 → (state,
        PolicyDraft)."""
        x = gather_last(context.tokens, context.length, 1)                       # [B]

        def step(z, tok):
            z = cell(self.cell, self.embed, z, tok, self.eps)
            return z, self._logits(z)

        _, pd = stepwise_draft(lambda: step(state, x), step, k, key, self._head(sampling),
                                  policy, k_plan, self.vocab_size)
        return state, pd

    def commit(self, state, n_accepted, active):
        return state                      # the next feature arrives through `observe`


# ---- files -----------------------------------------------------------------------------------
def save_cell(path: str | Path, cell_params: dict, head_ids, meta: dict) -> None:
    """Write the cell (fp16, it is small) and head ids to ``path`` (an .npz) and ``meta``
    to the JSON beside it, each atomically (`specsim.drafters.head_file`)."""
    save_head_file(path, cell_params, CELL_KEYS, head_ids, meta, FORMAT)


def load_cell(path: str | Path) -> tuple[dict, np.ndarray, dict]:
    """(cell params fp32, head_ids, metadata) from a `save_cell` file."""
    return load_head_file(path, CELL_KEYS, "feature head",
                          "train one with `specsim train-draft --kind feature-head`")


def feature_head_drafter(target, source, name: str | None = None) -> FeatureHeadDrafter:
    """The drafter for ``target`` (a `specsim.models.Model`) from a trained cell: a
    `save_cell` path, or ``(cell params, head_ids)``. The cell's width and the head
    vocabulary must fit the target (model width, token ids in its vocabulary)."""
    cell_params, head_ids = head_source(source, CELL_KEYS, load_cell)
    cfg = target.cfg
    D, V = cfg.d_model, cfg.vocab_size
    if cell_params["w_in"].shape[0] != 2 * D or cell_params["w_out"].shape[1] != D:
        raise InvalidArgument(f"the feature head was trained for model width "
                              f"{cell_params['w_out'].shape[1]}, the target {cfg.name} has {D}")
    head_ids, head = head_rows(target, head_ids)
    drafter = FeatureHeadDrafter(cell_params, target.params["embed"], head, jnp.asarray(head_ids),
                                 name or f"feature-head:{len(head_ids)}",
                                 float(cfg.norm_eps))
    check_drafter(drafter, V)
    return drafter
