"""Medusa heads: K small heads on the target's last hidden state, each guessing one
token further ahead, proposing a static token tree.

The target's final-normed feature ĥ_t (the one that produced the last kept token, the
tree's root, handed over by ``observe`` as for the feature head) feeds K residual
blocks; head k predicts the token k positions after the root through the target's own
(frozen) output rows for a head vocabulary:

    u_k = ĥ_t + silu(ĥ_t W_k + b_k),      q_k = softmax(u_k · Eₕᵀ)      (k = 1..K)

A node at depth d with rank r is head d's r-th most probable token (Medusa's static
tree: the candidates at a depth do not depend on the path above them). All heads run in
one step. The candidates are deterministic given ĥ_t, so each node's proposal is a
one-hot and the tree verification stays exact at any temperature. Trained with the
target frozen by `specsim.train.medusa` (``specsim train-draft --kind medusa``).

Shapes: B batch, D model, K heads, Vh head vocabulary, V vocab, C tree nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from specsim.drafters.base import Context
from specsim.drafters.head_file import head_rows, head_source, load_head_file, save_head_file
from specsim.drafters.tree import TreeDraft
from specsim.errors import InvalidArgument
from specsim.sampling import SamplingParams
from specsim.trees.tree import TokenTree

__all__ = ["MedusaDrafter", "medusa_drafter", "medusa_logits", "init_medusa", "save_medusa",
           "load_medusa", "MEDUSA_KEYS", "DEFAULT_MEDUSA_TREE"]

MEDUSA_KEYS = ("w", "b")            # [K, D, D], [K, D]
FORMAT = "specsim-medusa-v1"
DEFAULT_MEDUSA_TREE = ((0,), (1,), (2,), (3,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1),
                       (0, 0, 0, 0))
"""A small sparse tree in Medusa's rank-path format: 10 nodes, depth 4."""


def init_medusa(d_model: int, heads: int) -> dict:
    """Zero blocks (Medusa's start): every head begins as the target's own head."""
    if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or heads < 1:
        raise InvalidArgument(f"heads must be a positive integer (got {heads!r})")
    return {"w": jnp.zeros((heads, d_model, d_model), jnp.float32),
            "b": jnp.zeros((heads, d_model), jnp.float32)}


def medusa_logits(params: dict, head, z):
    """Every head's logits over the head vocabulary: z [..., D] → [..., K, Vh]."""
    u = z[..., None, :] + jax.nn.silu(jnp.einsum("...d,kde->...ke", z, params["w"])
                                      + params["b"])
    return jnp.einsum("...kd,vd->...kv", u, head)


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class MedusaDrafter:
    """params: `MEDUSA_KEYS`; head [Vh, D]: the target's output rows for ``head_ids``
    [Vh]; ``tree``: the static tree it proposes (depth <= K). State: ĥ [B, D]."""
    params: Any
    head: Any
    head_ids: Any
    vocab_size: int
    tree: TokenTree
    name: str = "medusa"

    reads_target_hidden = True

    def tree_flatten(self):
        return (self.params, self.head, self.head_ids), (self.vocab_size, self.tree, self.name)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    @property
    def heads(self) -> int:
        """K: the deepest a tree of these heads goes."""
        return int(self.params["w"].shape[0])

    def passes_per_iteration(self) -> int:
        return 1

    def max_cache_len(self):
        return None

    def init_state(self, prompts, prompt_lens, cache_len: int):
        return jnp.zeros((prompts.shape[0], self.head.shape[1]), jnp.float32)

    def observe(self, state, hidden, index, active):
        z = jnp.take_along_axis(hidden, index[:, None, None], axis=1)[:, 0]
        return jnp.where(active[:, None], z.astype(jnp.float32), state)

    def propose_tree(self, state, context: Context, key, sampling: SamplingParams):
        tree = self.tree
        logits = medusa_logits(self.params, self.head, state)                 # [B, K, Vh]
        r = int(tree.ranks.max()) + 1
        _, top = jax.lax.top_k(logits[:, :tree.max_depth], r)                 # [B, D, r]
        top = jnp.asarray(self.head_ids)[top]
        tokens = top[:, tree.depths - 1, tree.ranks].astype(jnp.int32)       # [B, C]
        return state, TreeDraft(tokens, jax.nn.one_hot(tokens, self.vocab_size,
                                                       dtype=jnp.float32))

    def commit_tree(self, state, path, n_accepted, active):
        return state                        # the next feature arrives through `observe`


def save_medusa(path: str | Path, params: dict, head_ids, meta: dict) -> None:
    """Write the heads (fp16) and head ids to ``path`` (.npz) and ``meta`` to the JSON
    beside it, each atomically (`specsim.drafters.head_file`)."""
    save_head_file(path, params, MEDUSA_KEYS, head_ids, meta, FORMAT)


def load_medusa(path: str | Path) -> tuple[dict, np.ndarray, dict]:
    """(heads fp32, head_ids, metadata) from a `save_medusa` file."""
    return load_head_file(path, MEDUSA_KEYS, "Medusa heads",
                          "train them with `specsim train-draft --kind medusa`")


def medusa_drafter(target, source, tree: TokenTree | None = None,
                   name: str | None = None) -> MedusaDrafter:
    """Medusa heads for ``target`` from a `save_medusa` path or ``(params, head_ids)``,
    proposing ``tree`` (default `DEFAULT_MEDUSA_TREE` cut to the heads' depth)."""
    params, head_ids = head_source(source, MEDUSA_KEYS, load_medusa)
    cfg = target.cfg
    K, D = params["w"].shape[0], params["w"].shape[1]
    if D != cfg.d_model or params["w"].shape[2] != D or params["b"].shape != (K, D):
        raise InvalidArgument(f"the Medusa heads were trained for model width {D}, the target "
                              f"{cfg.name} has {cfg.d_model}")
    head_ids, head = head_rows(target, head_ids)
    if tree is None:
        tree = TokenTree.from_paths([p for p in DEFAULT_MEDUSA_TREE if len(p) <= K])
    if not isinstance(tree, TokenTree):
        raise InvalidArgument(f"tree must be a specsim.trees.TokenTree (got {tree!r})")
    if tree.max_depth > K:
        raise InvalidArgument(f"tree must be at most as deep as the heads (K = {K}); got "
                              f"depth {tree.max_depth}")
    if tree.max_rank + 1 > len(head_ids):
        raise InvalidArgument(f"tree ranks must be below the head vocabulary "
                              f"({len(head_ids)} tokens); got rank {tree.max_rank}")
    return MedusaDrafter(params, head, jnp.asarray(head_ids), cfg.vocab_size, tree,
                         name or f"medusa:{K}")
