"""Running the same compiled loop over a device mesh (``jax.sharding``).

    mesh = sharding.make_mesh(data=4, model=2)          # 8 devices
    target = sharding.shard_model(target, mesh)         # tensor-parallel weights
    decode.generate_speculative(target, drafter, prompts, 64, k=4, mesh=mesh)

The mesh has two axes: ``"data"`` shards the batch (data parallel: every row lives on one
data slice), ``"model"`` shards the target's weights tensor-parallel, as in the public
JAX Llama examples (jax-llm-examples, MaxText):

* attention: ``wq``/``wk``/``wv`` by columns, i.e. by head (the columns are head-major,
  h*E + e, so a contiguous slice is a set of whole heads), ``wo`` by rows (the same
  heads); their biases by head. Query head h uses kv head h // R, so slice i of the
  query heads meets slice i of the kv heads: no communication inside attention.
* MLP: ``w_gate``/``w_up`` (``w_fc``) by columns, ``w_down`` (``w_proj``) by rows.
* KV cache [L, B, S, G, E]: batch on ``"data"``, kv heads on ``"model"``.
* embedding and output head: replicated (``vocab=True`` shards them by vocabulary).
* norms, residual-side biases: replicated.

Each layer then needs two all-reduces of its [B, T, D] activations over ``"model"``
(after ``wo`` and after ``w_down``); `specsim.roofline.allreduce_time` prices them.
XLA's SPMD partitioner inserts them: the program is the one of `specsim.decode`, traced
once more for the new input shardings. The drafter is replicated on every device (a
small model or an n-gram lookup is cheap next to the target; a layer-skip draft holds a
replicated copy of its layers).

Validation is eager: an axis that does not divide the heads, kv heads, MLP width or the
batch is an `InvalidArgument` (a ValueError) naming the axis and the sizes.

Multi-host (a GPU cluster or a TPU pod slice)
---------------------------------------------
JAX runs one process per host; every process runs the same script and sees all devices
of the job through ``jax.devices()`` (its own through ``jax.local_devices()``). Start the
runtime before any other JAX call::

    import jax
    jax.distributed.initialize()   # TPU pods, SLURM and Open MPI: arguments found from
                                   # the environment
    # elsewhere (e.g. plain GPU hosts), on every host:
    # jax.distributed.initialize(coordinator_address="10.0.0.1:1234",
    #                            num_processes=4, process_id=<this host's rank 0..3>)
    from specsim import decode, models, sharding
    target = models.load("/shared/checkpoint")        # every process loads the same weights
    mesh = sharding.make_mesh(data=jax.device_count() // 8, model=8)
    result = decode.generate_autoregressive(target, prompts, 64, mesh=mesh)

Keep ``"model"`` within a host (NVLink / ICI neighbours) and ``"data"`` across hosts:
`make_mesh` orders the global device list so that consecutive devices (one host's)
share a data slice. Nothing here assumes one process: arrays are built with
`jax.make_array_from_callback` from the same host data on every process (each process
fills only its own devices), and results are gathered with
`jax.experimental.multihost_utils.process_allgather`, so every process gets the whole
result. Every process must pass the same prompts and seed.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from specsim.errors import InvalidArgument
from specsim.models.config import ModelConfig
from specsim.models.transformer import unfuse_projections

__all__ = ["AXES", "make_mesh", "axis_sizes", "check_mesh", "param_specs", "cache_specs",
           "shard_params", "shard_model", "shard_drafter", "shard_cache", "shard_batch",
           "replicate", "place", "to_host"]

AXES = ("data", "model")

# Weights sharded by output column (last axis) / input row (second-to-last axis).
_COLUMN = ("wq", "wk", "wv", "w_gate", "w_up", "w_fc")
_ROW = ("wo", "w_down", "w_proj")
_BIAS = ("bq", "bk", "bv", "b_fc")  # biases of column-sharded weights


def make_mesh(data: int = 1, model: int = 1, *, devices=None) -> Mesh:
    """A ("data", "model") mesh of ``data * model`` devices (default: the first of
    ``jax.devices()``, all processes' devices in their global order). Consecutive
    devices share a data slice, so ``"model"`` stays within a host."""
    for name, n in (("data", data), ("model", model)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise InvalidArgument(f"mesh axis {name!r} must be a positive integer, got {n!r}")
    devices = list(jax.devices() if devices is None else devices)
    need = int(data) * int(model)
    if need > len(devices):
        raise InvalidArgument(f"a mesh of data={data} x model={model} needs {need} devices, "
                         f"but {len(devices)} are available")
    grid = np.asarray(devices[:need], dtype=object).reshape(int(data), int(model))
    return Mesh(grid, AXES)


def axis_sizes(mesh: Mesh) -> tuple[int, int]:
    """(data, model) sizes of a mesh; ValueError if it is not a `jax.sharding.Mesh` (a
    device name such as "gpu") or lacks those axis names."""
    if not isinstance(mesh, Mesh):
        raise InvalidArgument(f"mesh must be a jax.sharding.Mesh with axes {AXES} (build "
                              f"it with sharding.make_mesh) or None, got {mesh!r} "
                              f"({type(mesh).__name__})")
    if tuple(mesh.axis_names) != AXES:
        raise InvalidArgument(f"mesh axes must be {AXES}, got {tuple(mesh.axis_names)} "
                         f"(build it with sharding.make_mesh)")
    return int(mesh.shape["data"]), int(mesh.shape["model"])


def check_mesh(cfg: ModelConfig, mesh: Mesh, *, batch: int | None = None,
               vocab: bool = False) -> None:
    """Raise a ValueError when an axis of ``mesh`` does not divide what it shards."""
    data, model = axis_sizes(mesh)
    sizes = [("n_heads", cfg.n_heads), ("n_kv_heads", cfg.n_kv_heads), ("d_ff", cfg.d_ff)]
    if vocab:
        sizes.append(("vocab_size", cfg.vocab_size))
    for what, n in sizes:
        if n % model:
            raise InvalidArgument(f"mesh axis 'model' (size {model}) must divide {what} of "
                             f"{cfg.name} ({n}); choose a model axis among "
                             f"{_divisors_of_all(cfg, vocab)}")
    if batch is not None and batch % data:
        raise InvalidArgument(f"mesh axis 'data' (size {data}) must divide the batch ({batch} "
                         f"prompts); pad the batch or choose another data axis")


def _divisors_of_all(cfg: ModelConfig, vocab: bool) -> list[int]:
    ns = [cfg.n_heads, cfg.n_kv_heads, cfg.d_ff] + ([cfg.vocab_size] if vocab else [])
    return [d for d in range(1, min(ns) + 1) if all(n % d == 0 for n in ns)]


# ---- partition specs -----------------------------------------------------------------------
def _spec(name: str, ndim: int, vocab: bool) -> P:
    """The spec of one parameter; ``ndim`` includes a leading L axis when stacked."""
    if name in _COLUMN:
        return P(*([None] * (ndim - 1)), "model")
    if name in _ROW:
        return P(*([None] * (ndim - 2)), "model", None)
    if name in _BIAS:
        return P(*([None] * (ndim - 1)), "model")
    if vocab and name == "embed":        # [V, D]
        return P("model", None)
    if vocab and name == "lm_head":      # [D, V]
        return P(None, "model")
    return P()


def param_specs(params: dict, *, vocab: bool = False) -> Any:
    """A pytree like ``params`` holding each leaf's `PartitionSpec` (stacked [L, ...] or
    per-layer layers alike)."""
    def leaf_spec(path, leaf):
        name = next((p.key for p in reversed(path) if hasattr(p, "key")), "")
        return _spec(str(name), np.ndim(leaf), vocab)
    return jax.tree_util.tree_map_with_path(leaf_spec, params)


def cache_specs() -> tuple[P, P]:
    """(spec of k and v [L, B, S, G, E], spec of length [B])."""
    return P(None, "data", None, "model", None), P("data")


# ---- placement ---------------------------------------------------------------------------------
def _put(x, sharding: NamedSharding):
    """``x`` (host or device data, the same on every process) as a global array with
    ``sharding``; kept as is when it already has it."""
    if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(sharding, x.ndim):
        return x
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return jax.device_put(x, sharding)          # a global array: reshard in place
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def shard_params(params: dict, cfg: ModelConfig, mesh: Mesh, *, vocab: bool = False) -> dict:
    """``params`` placed tensor-parallel on ``mesh`` (see the module docstring). Over a
    ``"model"`` axis of more than one device, fused projections (``w_qkv``,
    ``w_gate_up``) are split back into their parts first: a column slice of the fused
    matrix would cut across q, k and v rather than take whole heads of each."""
    check_mesh(cfg, mesh, vocab=vocab)
    if axis_sizes(mesh)[1] > 1:
        params = unfuse_projections(params, cfg)
    specs = param_specs(params, vocab=vocab)
    return jax.tree_util.tree_map(lambda x, s: _put(x, NamedSharding(mesh, s)), params, specs)


def shard_model(model, mesh: Mesh, *, vocab: bool = False):
    """A `specsim.models.Model` with its weights placed tensor-parallel on ``mesh``
    (projections unfused over a "model" axis of more than one device, see `shard_params`)."""
    cfg = model.cfg
    if axis_sizes(mesh)[1] > 1:
        cfg = cfg.replace(fused_projections=False)
    return model.replace(cfg=cfg, params=shard_params(model.params, model.cfg, mesh,
                                                      vocab=vocab))


def replicate(tree, mesh: Mesh):
    """Every array leaf of ``tree`` replicated on all devices of ``mesh``."""
    full = NamedSharding(mesh, P())
    return jax.tree_util.tree_map(lambda x: _put(x, full), tree)


def shard_drafter(drafter, mesh: Mesh):
    """A drafter (any pytree: a model drafter's weights, or none for n-gram lookup)
    replicated on every device of ``mesh``."""
    return replicate(drafter, mesh)


def shard_batch(x, mesh: Mesh):
    """An array with a leading batch axis, sharded on ``"data"`` (other axes whole)."""
    data, _ = axis_sizes(mesh)
    if np.shape(x)[0] % data:
        raise InvalidArgument(f"mesh axis 'data' (size {data}) must divide the batch "
                         f"({np.shape(x)[0]})")
    return _put(x, NamedSharding(mesh, P("data", *([None] * (np.ndim(x) - 1)))))


def shard_cache(cache, mesh: Mesh):
    """A `KVCache` with batch on ``"data"`` and kv heads on ``"model"``."""
    kv, length = cache_specs()
    return cache._replace(k=_put(cache.k, NamedSharding(mesh, kv)),
                          v=_put(cache.v, NamedSharding(mesh, kv)),
                          length=_put(cache.length, NamedSharding(mesh, length)))


def place(mesh: Mesh, model, *, batch: tuple, replicated: tuple, drafter=None):
    """Everything one generation call passes to its compiled program, placed on ``mesh``:
    → (params, batch arrays sharded on "data", replicated values, drafter). Validates the
    mesh against the model and the batch first."""
    check_mesh(model.cfg, mesh, batch=int(np.shape(batch[0])[0]))
    params = shard_params(model.params, model.cfg, mesh)
    placed_batch = tuple(shard_batch(x, mesh) for x in batch)
    placed_rep = replicate(tuple(replicated), mesh)
    return params, placed_batch, placed_rep, (None if drafter is None
                                              else shard_drafter(drafter, mesh))


def to_host(tree):
    """Every array leaf of ``tree`` as a whole NumPy array on every process (gathered
    across processes when the array spans more than this process's devices)."""
    def get(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            from jax.experimental import multihost_utils
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)
    return jax.tree_util.tree_map(get, tree)
