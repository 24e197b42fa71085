"""Named host tensors <-> the specsim parameter pytree, through a format's name table.

Each checkpoint format (`specsim.models.hf`, `specsim.models.gguf_file`) owns ONE table
mapping its tensor names straight to specsim's: ``{name: (leaf, layer, how)}`` with
``leaf`` a key of `param_shapes` (per layer under "layers"), ``layer`` the layer index
or None for a top-level leaf, and ``how`` the layout change: "" (as stored), "T"
(transpose an ``[out, in]`` matrix to specsim's ``[in, out]``) or "qkv" (GPT-2's fused
``c_attn``, split into q, k, v; leaf "wqkv" or "bqkv"). `assemble` and `disassemble`
are format-neutral: they check every name and shape against the config, so a bad file
raises `CheckpointError` naming it and nothing is half-loaded.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from specsim.errors import CheckpointError
from specsim.models.config import ModelConfig
from specsim.models.transformer import (arrange_layers, param_shapes, stack_layers,
                                        unfuse_projections)

NameTable = dict[str, tuple[str, "int | None", str]]

__all__ = ["NameTable", "assemble", "disassemble", "to_device", "tree_map"]


def tree_map(fn, tree):
    """``fn`` over the leaves of a nested dict (host arrays; no JAX needed)."""
    if isinstance(tree, dict):
        return {k: tree_map(fn, v) for k, v in tree.items()}
    return fn(tree)


def _check_names(tensors, table: NameTable, cfg: ModelConfig, source: str,
                 ignore: Callable[[str], bool]) -> None:
    extra = sorted(k for k in tensors if k not in table and not ignore(k))
    missing = sorted(k for k in table if k not in tensors)
    if missing or extra:
        raise CheckpointError(f"{source}: tensors do not match {cfg.name} ({cfg.arch}, "
                              f"{cfg.n_layers} layers): missing {missing[:6]}"
                              f"{'...' if len(missing) > 6 else ''}, unexpected {extra[:6]}"
                              f"{'...' if len(extra) > 6 else ''}")


def _split_qkv(arr: np.ndarray, name: str, D: int, source: str) -> list[np.ndarray]:
    want = (D, 3 * D) if arr.ndim == 2 else (3 * D,)
    if arr.shape != want:
        raise CheckpointError(f"{source}: {name} has shape {arr.shape}, config implies {want}")
    return np.split(arr, 3, axis=-1)


def assemble(tensors: dict[str, np.ndarray], table: NameTable, cfg: ModelConfig,
             source: str, ignore: Callable[[str], bool] = lambda name: False) -> dict:
    """Host arrays named by ``table`` -> the specsim pytree (host arrays, layers stacked,
    cast to cfg.dtype unless bfloat16), every name and shape checked. ``ignore``: names
    the file may carry that are not parameters."""
    _check_names(tensors, table, cfg, source, ignore)
    shapes = param_shapes(cfg)
    per_layer: dict[str, list] = {k: [None] * cfg.n_layers for k in shapes["layers"]}
    params: dict[str, Any] = {}
    for name, (leaf, layer, how) in table.items():
        arr = np.asarray(tensors[name])
        if how == "qkv":
            prefix = "w" if leaf == "wqkv" else "b"
            for part, sub in zip(_split_qkv(arr, name, cfg.d_model, source), "qkv"):
                per_layer[prefix + sub][layer] = part
            continue
        if how == "T":
            if arr.ndim != 2:
                raise CheckpointError(f"{source}: {name} has shape {arr.shape}, expected a "
                                      f"matrix")
            arr = arr.T
        want = tuple(shapes["layers"][leaf][1:] if layer is not None else shapes[leaf])
        if arr.shape != want:
            raise CheckpointError(f"{source}: {name} has shape {tuple(arr.shape)}, config "
                                  f"implies {want} for {leaf}")
        if layer is None:
            params[leaf] = arr
        else:
            per_layer[leaf][layer] = arr
    params["layers"] = {k: np.stack(v) for k, v in per_layer.items()}
    if cfg.dtype != "bfloat16":
        params = tree_map(lambda a: a.astype(np.dtype(cfg.dtype), copy=False), params)
    return params


def disassemble(params: dict, table: NameTable, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """The inverse of `assemble`: the specsim pytree (fused projections or not) -> host
    arrays named by ``table``."""
    params = unfuse_projections(stack_layers(params), cfg)
    layers = {k: np.asarray(v) for k, v in params["layers"].items()}
    out: dict[str, np.ndarray] = {}
    for name, (leaf, layer, how) in table.items():
        if how == "qkv":
            prefix = "w" if leaf == "wqkv" else "b"
            arr = np.concatenate([layers[prefix + s][layer] for s in "qkv"], axis=-1)
        else:
            arr = layers[leaf][layer] if layer is not None else np.asarray(params[leaf])
            if how == "T":
                arr = arr.T
        out[name] = np.ascontiguousarray(arr)
    return out


def to_device(params: dict, cfg: ModelConfig) -> dict:
    """Host arrays -> device arrays of cfg.dtype, layers laid out for cfg.layer_loop."""
    import jax.numpy as jnp
    dtype = jnp.dtype(cfg.dtype)
    return arrange_layers(tree_map(lambda a: jnp.asarray(a, dtype), params), cfg)
