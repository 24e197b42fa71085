"""The file pair a trained draft head is stored in: its arrays and head ids in an .npz,
its metadata (with a format tag) in the JSON beside it. Medusa heads and the feature
head share this layout; each names its own keys and format. Both also take their
arrays from a file or a pair (`head_source`) and read the target's output head at
their head ids (`head_rows`)."""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from specsim import atomic
from specsim.errors import InvalidArgument

__all__ = ["save_head_file", "load_head_file", "head_source", "head_rows"]


def save_head_file(path: str | Path, params: dict, keys: tuple[str, ...], head_ids,
                   meta: dict, fmt: str) -> None:
    """Write ``params[k]`` for k in ``keys`` (fp16) and ``head_ids`` (int32) to ``path``
    (.npz) and ``meta`` tagged ``format=fmt`` to the JSON beside it, each atomically."""
    path = Path(path)
    arrays = {k: np.asarray(params[k], np.float16) for k in keys}
    arrays["head_ids"] = np.asarray(head_ids, np.int32)
    atomic.write(path, lambda tmp: np.savez(tmp, **arrays))
    atomic.write_text(path.with_suffix(".json"), json.dumps(dict(meta, format=fmt), indent=1))


def load_head_file(path: str | Path, keys: tuple[str, ...], what: str,
                   train_hint: str) -> tuple[dict, np.ndarray, dict]:
    """(params fp32 for ``keys``, head_ids, metadata) from a `save_head_file` pair.
    ``what`` names the file kind and ``train_hint`` says how to make one, for the
    InvalidArgument raised when the file is absent or lacks a key."""
    path = Path(path)
    if not path.is_file():
        raise InvalidArgument(f"{what} {path} not found ({train_hint})")
    with np.load(path) as z:
        missing = [k for k in keys + ("head_ids",) if k not in z.files]
        if missing:
            raise InvalidArgument(f"{path} is not a {what} file (missing {missing})")
        params = {k: jnp.asarray(z[k], jnp.float32) for k in keys}
        head_ids = np.asarray(z["head_ids"], np.int32)
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    return params, head_ids, meta


def head_source(source, keys: tuple[str, ...], load) -> tuple[dict, np.ndarray]:
    """(params fp32 for ``keys``, head_ids) from ``source``: a saved file's path, read
    by ``load`` (a `load_head_file` wrapper), or a ``(params, head_ids)`` pair."""
    if isinstance(source, (str, Path)):
        params, head_ids, _ = load(source)
        return params, head_ids
    params, head_ids = source
    return {k: jnp.asarray(params[k], jnp.float32) for k in keys}, head_ids


def head_rows(target, head_ids):
    """``head_ids`` checked against ``target``'s vocabulary, and the rows of its output
    head (the embedding when tied) for them: → (head_ids [Vh] int32, head [Vh, D])."""
    cfg = target.cfg
    head_ids = np.asarray(head_ids, np.int32)
    if head_ids.ndim != 1 or not len(head_ids) or head_ids.min() < 0 \
            or head_ids.max() >= cfg.vocab_size:
        raise InvalidArgument(f"head_ids must be token ids in [0, {cfg.vocab_size}) of "
                              f"{cfg.name}")
    if "embed" not in target.params or not cfg.tie_embeddings and "lm_head" not in target.params:
        raise InvalidArgument(f"{cfg.name} has no embedding/head to share with a draft head")
    rows = jnp.asarray(head_ids)
    if cfg.tie_embeddings:
        return head_ids, target.params["embed"][rows]
    return head_ids, jnp.asarray(target.params["lm_head"]).T[rows]
