"""specsim's XLA:CPU kernels for decode steps and verify passes: a small-M matmul at the
memory bound, and attention over the KV cache in place.

    from specsim.models import kernels
    kernels.available()                     # built and registered here? (builds once)
    y = kernels.small_matmul(x, w)          # x [..., K] @ w [K, N]
    y = kernels.small_matmul(x, w, layer=i) # x @ w[i] for stacked w [L, K, N], no copy
    y = kernels.small_matmul(x, e, transposed=True)   # x @ e.T, e [N, K] as it lies
    y = kernels.small_matmul_int8(x, qw)    # x @ ŵ, int8 with one scale per column
    y = kernels.small_matmul_quantized(x, qw)  # any QuantizedWeight: int8, int4 in groups
    o = kernels.cache_attention(q, k_all, v_all, i, positions)  # layer i's cache in place
    o = kernels.tree_attention(q, k_all, v_all, i, start, rows)  # a token tree's pass

Why. A decode step reads every weight once, and XLA:CPU does so well below the machine's
read bandwidth: a one-row dot is a matrix-vector emitter on one core, a dot of 2 to 5
rows (a verify pass) goes to a GEMM library that reads small-M weights slowly, and under
``lax.scan`` each layer's weights are first copied out of the stacked array (see
docs/studies/cpu-matmul-kernel.md). The kernel (``small_matmul.cc``, C++ through the XLA FFI)
reads each weight byte once for all rows, takes the stacked array and the layer index as
they are, and splits the columns over XLA's intra-op thread pool (``SPECSIM_KERNEL_THREADS``
caps the threads per call, a positive integer, anything else ignored; 1: the calling
thread alone). int8 weights with one scale per output column are read as int8 bytes;
int4 (two per byte) and grouped int8 weights (``grouped_matmul.cc``) as their packed
bytes, unpacked in registers, each group's sum times its scales (plus, for asymmetric
formats, the row's group sum of x times the group's offsets); with int8 activations (a
format choice, `quantize.ACTIVATIONS`) x is rounded to int8 per group and each group's
products are summed in integers (AVX512-VNNI, or a portable loop giving the same bits).
Row m's result does not depend on the number of rows, so a verify pass agrees with a
decode step bit for bit.

Attention (``cache_attention.cc``). Under ``lax.scan`` XLA copies each layer's keys and
values out of the stacked [L, B, S, G, E] cache before its dots, and its dots attend all S
preallocated slots. The kernel reads layer i's keys and values where they lie, and only
the slots up to each query's position: scores 8 slots at a time, the softmax with a
vectorised exp, the values with the sums in registers, parallel over (row, kv head). A
query's result does not depend on T, the batch or the threads, so a verify pass and a
decode step agree bit for bit here too. `forward` uses it for every pass where the
kernels run ("auto"), prefill included (it halves a 133-token prefill against XLA's
attention over the whole cache, docs/studies/cpu-attention-kernel.md), float32 caches
only; ``SPECSIM_CPU_ATTENTION=0`` turns it off alone. A token tree's pass
(`tree_attention`) gives each query the list of slots it attends, its context and its
ancestors, summed as the same number of contiguous slots, so a tree node agrees bit for
bit with a decode step over its path. Derivatives are XLA's attention's.

Where it runs: `forward` and `project` use it when ``cfg.matmul`` allows (`use_kernel`):
"auto" (the default) on a single-device CPU process for a float32 model and at most
`MAX_ROWS` rows, or any number of rows for weights with int8 activations on a CPU with
VNNI (`integer_products`); "kernel" insists (a clear error if it cannot run); "xla" never.
``SPECSIM_CPU_KERNEL=0`` turns "auto" off from the shell. GPUs, TPUs, meshes of several
devices, and prefill and training (many rows) of float weights run XLA's dots. On the
CPU clock (the demo's default) a step on two threads costs about twice its wall time:
both threads count.

Building: on first use the sources (and their headers ``kernel_common.h`` and
``matmul_common.h``) are compiled with the machine's C++ compiler
(``$CXX``, else ``c++`` or ``g++``; `_FLAGS`, about 3 s) into one library in
``kernels/`` under the specsim cache root (``$SPECSIM_CACHE``, default
``~/.cache/specsim``), named by a hash of the sources, the jaxlib version, the compiler and
the CPU's flags, written to a temporary file and renamed, so concurrent builds are safe
and a later process loads it at once. If there is no compiler, or the build fails,
"auto" warns once and runs XLA's dots.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings
from functools import lru_cache, partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specsim.environment import cache_root, is_on
from specsim.errors import InvalidArgument
from specsim.models.config import MATMULS

__all__ = ["MATMULS", "MAX_ROWS", "integer_products", "ENV_SWITCH", "TARGET", "TARGET_INT8",
           "available", "unavailable_reason", "use_kernel", "small_matmul", "small_matmul_int8",
           "small_matmul_quantized", "TARGET_GROUPED", "takes_quantized", "library_path",
           "ATTENTION_SWITCH", "use_attention_kernel",
           "cache_attention", "tree_attention"]

# At most this many rows (batch x new tokens) go to the kernel; more are a GEMM that XLA
# does well (prefill, training): the kernel is faster up to about 12 rows and slower from
# 16 (`benchmarks/bench_kernel.py`; see docs/studies/cpu-matmul-kernel.md).
MAX_ROWS = 8
ENV_SWITCH = "SPECSIM_CPU_KERNEL"
ATTENTION_SWITCH = "SPECSIM_CPU_ATTENTION"
TARGET = "specsim_small_matmul"
TARGET_INT8 = "specsim_small_matmul_int8"
TARGET_GROUPED = "specsim_small_matmul_grouped"
TARGET_ATTENTION = "specsim_cache_attention"
TARGET_TREE_ATTENTION = "specsim_tree_attention"
_HERE = Path(__file__).parent
_SOURCES = (_HERE / "small_matmul.cc", _HERE / "grouped_matmul.cc",
            _HERE / "cache_attention.cc")
_HEADERS = (_HERE / "kernel_common.h", _HERE / "matmul_common.h")
# -ffp-contract=off: the source fuses multiply-adds itself (see fma8 there), the compiler none
_FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-std=c++17", "-shared", "-fPIC", "-w")

_state: dict = {}          # "ok": bool, "reason": str (why not), "path": Path


def _compiler() -> str | None:
    cxx = os.environ.get("CXX")
    return cxx if cxx else (shutil.which("c++") or shutil.which("g++"))


@lru_cache(maxsize=1)
def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    import platform
    return platform.machine() + platform.processor()


def library_path(cxx: str | None = None) -> Path:
    """Where the built kernels live (or will): ``kernels/`` under the cache root, named by
    the sources, jaxlib, the compiler and this CPU."""
    import jaxlib
    key = "\n".join([*(p.read_text() for p in _SOURCES + _HEADERS), " ".join(_FLAGS),
                     jaxlib.__version__, cxx or _compiler() or "", _cpu_flags()])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_root() / "kernels" / f"specsim-kernels-{digest}.so"


def _build(cxx: str, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    cmd = [cxx, *_FLAGS, f"-I{jax.ffi.include_dir()}", *map(str, _SOURCES), "-o", tmp]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _load() -> bool:
    if "ok" in _state:
        return _state["ok"]
    try:
        cxx = _compiler()
        if cxx is None:
            raise RuntimeError("no C++ compiler found ($CXX, c++, g++)")
        path = library_path(cxx)
        if not path.exists():
            _build(cxx, path)
        lib = ctypes.cdll.LoadLibrary(str(path))
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.SpecsimSmallMatmul),
                                    platform="cpu")
        jax.ffi.register_ffi_target(TARGET_INT8,
                                    jax.ffi.pycapsule(lib.SpecsimSmallMatmulInt8),
                                    platform="cpu")
        jax.ffi.register_ffi_target(TARGET_GROUPED,
                                    jax.ffi.pycapsule(lib.SpecsimSmallMatmulGrouped),
                                    platform="cpu")
        jax.ffi.register_ffi_target(TARGET_ATTENTION,
                                    jax.ffi.pycapsule(lib.SpecsimCacheAttention),
                                    platform="cpu")
        jax.ffi.register_ffi_target(TARGET_TREE_ATTENTION,
                                    jax.ffi.pycapsule(lib.SpecsimTreeAttention),
                                    platform="cpu")
        _state.update(ok=True, reason="", path=path, lib=lib)
    except Exception as e:                              # noqa: BLE001 - reported, not raised
        _state.update(ok=False, reason=f"{type(e).__name__}: {e}")
    return _state["ok"]


def available() -> bool:
    """True when the kernel is built (building it now if need be) and registered with
    XLA:CPU in this process."""
    return _load()


def unavailable_reason() -> str:
    """Why `available` is False ("" when it is True)."""
    _load()
    return _state["reason"]


def _kernels_run(matmul: str, dtype, env: str = ENV_SWITCH) -> bool:
    """Whether specsim's kernels may run under ``matmul`` (a `ModelConfig.matmul`) for
    ``dtype``, decided while tracing. "kernel" raises where "auto" would fall back: not a
    single CPU device, not float32, or the kernels unavailable. ``env``: the switch that
    turns "auto" off from the shell."""
    if matmul == "xla":
        return False
    if matmul not in MATMULS:
        raise InvalidArgument(f"matmul must be one of {MATMULS}, got {matmul!r}")
    forced = matmul == "kernel"
    why = None
    if jax.default_backend() != "cpu" or jax.device_count() != 1:
        why = (f"it runs on one CPU device only (backend {jax.default_backend()!r}, "
               f"{jax.device_count()} devices)")
    elif jnp.dtype(dtype) != jnp.float32:
        why = f"it takes float32 only, got {jnp.dtype(dtype).name}"
    elif not forced and not (is_on(ENV_SWITCH) and is_on(env)):
        return False
    elif not _load():
        if not forced and not _state.get("warned"):
            _state["warned"] = True
            warnings.warn(f"specsim's CPU kernels are unavailable ({_state['reason']}); "
                          f"running XLA's dots", RuntimeWarning, stacklevel=4)
        why = f"the kernel is unavailable: {_state['reason']}"
    if why is not None:
        if forced:
            raise InvalidArgument(f"matmul='kernel' cannot run here: {why}; use 'auto' or 'xla'")
        return False
    return True


def use_kernel(matmul: str, rows: int, dtype, weights=()) -> bool:
    """Whether a matmul of ``rows`` rows of ``dtype`` runs the kernel under ``matmul``
    (a `ModelConfig.matmul`), decided while tracing: "auto" up to `MAX_ROWS` rows, and at
    any number of rows when every one of ``weights`` (the matmuls' weights) sums in
    integers (`integer_products`); "kernel" always (an error where it cannot run), "xla"
    never."""
    return _kernels_run(matmul, dtype) and (
        matmul == "kernel" or rows <= MAX_ROWS or integer_products(weights))


def integer_products(weights) -> bool:
    """True when ``weights`` is not empty, every one is a `QuantizedWeight` the kernel
    takes with int8 activations, and the CPU has AVX512-VNNI: the kernel then sums
    int8 × int4/int8 products in integers, faster than XLA's dots over the dequantised
    weights at any number of rows (a prefill too; docs/studies/int4.md)."""
    from specsim.models.quantize import is_quantized

    weights = list(weights)
    return (bool(weights) and "avx512_vnni" in _cpu_flags().split()
            and all(is_quantized(w) and w.activations == "int8" and takes_quantized(w)
                    for w in weights))


def use_attention_kernel(matmul: str, new_tokens: int, dtype) -> bool:
    """Whether attention of ``new_tokens`` new tokens per row over a ``dtype`` cache runs
    `cache_attention` under ``matmul``: "auto" for any number (decode steps, verify
    passes, prefill; ``SPECSIM_CPU_ATTENTION=0`` turns it off alone), "kernel" always,
    "xla" never."""
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, (int, np.integer)) \
            or new_tokens < 1:
        raise InvalidArgument(f"new_tokens must be an integer >= 1, got {new_tokens!r}")
    return _kernels_run(matmul, dtype, ATTENTION_SWITCH)


def _call(x2, w3, layer, transposed: bool):
    M = x2.shape[0]
    N = w3.shape[1] if transposed else w3.shape[2]
    return jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct((M, N), jnp.float32),
                            vmap_method="sequential")(x2, w3, layer, transposed=transposed)


@partial(jax.custom_jvp, nondiff_argnums=(3,))
def _matmul(x2, w3, layer, transposed):
    return _call(x2, w3, layer, transposed)


@_matmul.defjvp
def _matmul_jvp(transposed, primals, tangents):
    """Derivatives by XLA's dots (the kernel is forward-only): y = x @ W_l."""
    x2, w3, layer = primals
    dx, dw, _ = tangents
    y = _matmul(x2, w3, layer, transposed)
    wl, dwl = w3[layer], dw[layer]
    if transposed:
        wl, dwl = wl.T, dwl.T
    return y, dx @ wl + x2 @ dwl


def _require_kernel() -> None:
    if not _load():
        raise InvalidArgument(f"specsim's CPU matmul kernel is unavailable: {_state['reason']}")


def _stacked(arrays: tuple, layer, name: str):
    """(arrays as [L, ...], layer index as an int32 scalar): a per-layer matrix (layer None)
    gains a leading axis of 1; a stacked one keeps its own."""
    a = arrays[0]
    if layer is None:
        if a.ndim != 2:
            raise InvalidArgument(f"{name} must be [K, N] without a layer, got shape {a.shape}")
        return tuple(x[None] for x in arrays), jnp.int32(0)
    if a.ndim != 3:
        raise InvalidArgument(f"{name} must be stacked [L, K, N] with a layer, got shape "
                              f"{a.shape}")
    return arrays, jnp.asarray(layer, jnp.int32).reshape(())


def _rows(x, K: int, what: str):
    """x [..., K] float32 → (x as [M, K], its leading shape)."""
    if x.shape[-1] != K:
        raise InvalidArgument(f"x's last axis ({x.shape[-1]}) must equal {what} ({K})")
    if x.dtype != jnp.float32:
        raise InvalidArgument(f"the kernel takes float32 x, got {x.dtype}")
    return x.reshape(-1, K), x.shape[:-1]


def small_matmul(x, w, layer=None, *, transposed: bool = False):
    """x [..., K] @ w → [..., N] in float32 by the kernel (an error where `available`
    is False).

    w: [K, N], or stacked [L, K, N] with ``layer`` (a traced or Python int; clamped to
    [0, L), as ``w[layer]`` under jit). ``transposed``: w is [N, K] ([L, N, K]) and the
    product is x @ w.T (the tied head over the embedding as it lies)."""
    _require_kernel()
    x = jnp.asarray(x)
    (w,), layer = _stacked((jnp.asarray(w),), layer, "w")
    if w.dtype != jnp.float32:
        raise InvalidArgument(f"the kernel takes float32 x and w, got {x.dtype} and {w.dtype}")
    K = w.shape[2] if transposed else w.shape[1]
    x2, lead = _rows(x, K, f"w's contraction axis; w shape {w.shape}, transposed={transposed}")
    y = _matmul(x2, w, layer, transposed)
    return y.reshape(*lead, y.shape[-1])


def takes_quantized(qw) -> bool:
    """Whether `small_matmul_quantized` takes this `QuantizedWeight`: int8 or int4 in the
    layout of `specsim.models.quantize` (every format `quantize_weight` makes)."""
    try:
        _check_quantized(qw)
    except InvalidArgument:
        return False
    return True


def _per_column_int8(qw) -> bool:
    return (qw.bits == 8 and qw.group_size == qw.shape[-2] and qw.offsets is None
            and qw.activations == "fp32")


def _check_quantized(qw) -> None:
    """InvalidArgument naming what is wrong unless ``qw`` is a `QuantizedWeight` the
    kernels take: int8 values [..., Din/(8/bits), Dout], fp32 scales [..., Din/g, Dout],
    bits 8 or 4, g (``group_size``) dividing Din, even for 4 bits; offsets None or fp32
    like scales; activations one of `quantize.ACTIVATIONS`."""
    from specsim.models.quantize import BITS, QuantizedWeight, check_activations
    if not isinstance(qw, QuantizedWeight):
        raise InvalidArgument(f"qw must be a QuantizedWeight, got {type(qw).__name__}")
    if qw.bits not in BITS:
        raise InvalidArgument(f"qw.bits must be one of {BITS}, got {qw.bits!r}")
    values, scales = qw.values, qw.scales
    if values.ndim not in (2, 3) or values.dtype != jnp.int8:
        raise InvalidArgument(f"qw.values must be int8 [Din, Dout] or stacked [L, Din, Dout] "
                              f"(Din/2 rows for 4 bits), got {values.dtype} {values.shape}")
    din, g = qw.shape[-2], qw.group_size
    if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 1 or din % g \
            or (qw.bits == 4 and g % 2):
        raise InvalidArgument(f"qw.group_size must be a positive integer dividing the input "
                              f"dimension {din}" + (" and even for 4 bits" if qw.bits == 4 else "")
                              + f", got {g!r}")
    want = (*values.shape[:-2], din // g, values.shape[-1])
    if tuple(scales.shape) != want:
        raise InvalidArgument(f"qw.scales must be [..., Din/group_size, Dout] = {list(want)} "
                              f"for values {values.shape} and group_size {g}, got "
                              f"{tuple(scales.shape)}")
    offsets = qw.offsets
    if offsets is not None and (tuple(offsets.shape) != want
                                or jnp.dtype(offsets.dtype) != jnp.float32):
        raise InvalidArgument(f"qw.offsets must be None or float32 like qw.scales "
                              f"{list(want)}, got {jnp.dtype(offsets.dtype).name} "
                              f"{tuple(offsets.shape)}")
    check_activations(qw.activations, g)


def _call_int8(x2, q3, s3, layer):
    return jax.ffi.ffi_call(TARGET_INT8, jax.ShapeDtypeStruct((x2.shape[0], q3.shape[2]),
                                                              jnp.float32),
                            vmap_method="sequential")(x2, q3, s3, layer)


@jax.custom_jvp
def _matmul_int8(x2, q3, s3, layer):
    return _call_int8(x2, q3, s3, layer)


@_matmul_int8.defjvp
def _matmul_int8_jvp(primals, tangents):
    """Derivatives by XLA's dots, in x and in the scales (the int8 values have none)."""
    x2, q3, s3, layer = primals
    dx, _, ds, _ = tangents
    y = _matmul_int8(x2, q3, s3, layer)
    ql = q3[layer].astype(jnp.float32)                                 # [K, N]
    return y, dx @ (ql * s3[layer]) + (x2 @ ql) * ds[layer]


def small_matmul_int8(x, qw, layer=None):
    """x [..., K] @ ŵ → [..., N] float32 for an int8 `QuantizedWeight` with one scale per
    output column (`takes_quantized`), dequantised inside the kernel: (x @ q) * scale,
    reading the int8 bytes. ``qw``: values [K, N] (scales [1, N]), or stacked [L, K, N]
    ([L, 1, N]) with ``layer``."""
    _require_kernel()
    _check_quantized(qw)
    if not _per_column_int8(qw):
        raise InvalidArgument(f"the int8 kernel takes int8 weights with one scale per output "
                              f"column, got bits={qw.bits}, group_size={qw.group_size}")
    (q, sc), layer = _stacked((jnp.asarray(qw.values), jnp.asarray(qw.scales, jnp.float32)),
                              layer, "qw")
    x2, lead = _rows(jnp.asarray(x), q.shape[1], "qw's input axis")
    y = _matmul_int8(x2, q, sc, layer)
    return y.reshape(*lead, y.shape[-1])


def _call_grouped(x2, q3, s3, o3, layer, bits: int, activations: str, portable: bool):
    """o3: the offsets, or None (the scales stand in for the buffer, unread)."""
    has = o3 is not None
    return jax.ffi.ffi_call(TARGET_GROUPED, jax.ShapeDtypeStruct((x2.shape[0], q3.shape[2]),
                                                                 jnp.float32),
                            vmap_method="sequential")(
        x2, q3, s3, o3 if has else s3, layer, bits=np.int32(bits), has_offsets=np.int32(has),
        int8_activations=np.int32(activations == "int8"), portable=np.int32(portable))


@partial(jax.custom_jvp, nondiff_argnums=(5, 6, 7))
def _matmul_grouped(x2, q3, s3, o3, layer, bits, activations, portable):
    return _call_grouped(x2, q3, s3, o3, layer, bits, activations, portable)


@_matmul_grouped.defjvp
def _matmul_grouped_jvp(bits, activations, portable, primals, tangents):
    """Derivatives by XLA's dots, in x, the scales and the offsets (the integer values
    have none): y = x @ ŵ = Σ_g (x_g @ q_g) * scale_g (+ (Σ x_g) * offset_g) is linear in
    x and in (scales, offsets) together; int8 activations (x̂ for x) pass x's derivative
    straight through their rounding, as `quantize.quantize_activations` does."""
    from specsim.models.quantize import QuantizedWeight, dequantize, quantized_matmul
    x2, q3, s3, o3, layer = primals
    dx, _, ds, do, _ = tangents
    y = _matmul_grouped(x2, q3, s3, o3, layer, bits, activations, portable)
    g = x2.shape[1] // s3.shape[1]
    ql = q3[layer]
    at = (lambda a: None if a is None else a[layer])                   # noqa: E731
    return y, (dx @ dequantize(QuantizedWeight(ql, s3[layer], bits, g, at(o3)))
               + quantized_matmul(x2, QuantizedWeight(ql, ds[layer], bits, g, at(do),
                                                      activations)))


def small_matmul_quantized(x, qw, layer=None, *, portable: bool = False):
    """x [..., K] @ ŵ → [..., N] float32 for any `QuantizedWeight` of
    `specsim.models.quantize` (`takes_quantized`), read as its stored bytes by the kernel
    (an error where `available` is False). int8 with one scale per output column:
    `small_matmul_int8`. In groups (int4 packed two per byte, grouped int8):
    y = Σ_g (x_g @ q_g) * scale_g (+ (Σ x_g) * offset_g), the values unpacked in registers
    (``grouped_matmul.cc``).
    With int8 activations (``qw.activations``): x̂ @ ŵ, each row's x rounded to int8 per
    group (`quantize.quantize_activations`) and each group's products summed in integers
    (VNNI where the CPU has it; ``portable``: the ISA-independent loop, the same results).
    ``qw``: values [K or K/2, N] (scales [K/g, N]), or stacked [L, ...] with ``layer``
    (clamped to [0, L) as ``w[layer]`` under jit)."""
    _require_kernel()
    _check_quantized(qw)
    if _per_column_int8(qw):
        return small_matmul_int8(x, qw, layer)
    arrays = (jnp.asarray(qw.values), jnp.asarray(qw.scales, jnp.float32))
    if qw.offsets is not None:
        arrays += (jnp.asarray(qw.offsets),)
    (q, sc, *off), layer = _stacked(arrays, layer, "qw.values")
    x2, lead = _rows(jnp.asarray(x), qw.shape[-2], "qw's input dimension")
    y = _matmul_grouped(x2, q, sc, off[0] if off else None, layer, qw.bits, qw.activations,
                        bool(portable))
    return y.reshape(*lead, y.shape[-1])


def _call_attention(q, k_all, v_all, layer, positions):
    return jax.ffi.ffi_call(TARGET_ATTENTION, jax.ShapeDtypeStruct(q.shape, jnp.float32),
                            vmap_method="sequential")(q, k_all, v_all, layer, positions)


def _attention_operands(name: str, q, k_all, v_all):
    """q, k_all, v_all as arrays, checked for `cache_attention` and `tree_attention`."""
    q, k_all, v_all = jnp.asarray(q), jnp.asarray(k_all), jnp.asarray(v_all)
    if q.ndim != 4 or k_all.ndim != 5 or k_all.shape != v_all.shape:
        raise InvalidArgument(f"{name} takes q [B, T, H, E] and k_all, v_all "
                              f"[L, B, S, G, E] alike; got q {q.shape}, k_all {k_all.shape}, "
                              f"v_all {v_all.shape}")
    B, T, H, E = q.shape
    G = k_all.shape[3]
    if k_all.shape[1] != B or k_all.shape[4] != E or H % G:
        raise InvalidArgument(f"{name}: q {q.shape} does not fit the cache "
                              f"{k_all.shape} (batch, head size, and H a multiple of G)")
    if any(a.dtype != jnp.float32 for a in (q, k_all, v_all)):
        raise InvalidArgument(f"the kernel takes float32 q, k_all and v_all, got {q.dtype}, "
                              f"{k_all.dtype} and {v_all.dtype}")
    return q, k_all, v_all


def cache_attention(q, k_all, v_all, layer, positions):
    """Attention of new tokens over layer ``layer`` of the KV cache, read in place, by the
    kernel (``cache_attention.cc``; an error where `available` is False). Forward only:
    `specsim.models.transformer` gives it XLA's derivatives.

    q [B, T, H, E] float32 (query heads in order, H a multiple of G); k_all, v_all
    [L, B, S, G, E] float32; layer an int (traced or Python; clamped to [0, L) as
    ``k_all[layer]`` under jit); positions [B, T] int32, query t of row b at
    positions[b, t], attending slots 0..positions[b, t] (at most S). Returns [B, T, H*E]
    float32, heads in order; a row with no slot to attend (a negative position) is NaN."""
    _require_kernel()
    q, k_all, v_all = _attention_operands("cache_attention", q, k_all, v_all)
    positions = jnp.asarray(positions)
    B, T, H, E = q.shape
    if positions.shape != (B, T) or not jnp.issubdtype(positions.dtype, jnp.integer):
        raise InvalidArgument(f"positions must be integer [B, T] = [{B}, {T}], got "
                              f"{positions.dtype} {positions.shape}")
    layer = jnp.asarray(layer, jnp.int32).reshape(())
    out = _call_attention(q, k_all, v_all, layer, positions.astype(jnp.int32))
    return out.reshape(B, T, H * E)


def tree_attention(q, k_all, v_all, layer, start, rows):
    """`cache_attention` for a token tree: query t of row b attends the slots before
    ``start[b]`` and, of the W slots from ``start[b]`` on, slot ``start[b] + u`` where
    ``rows[b, t, u]`` (its ancestors and itself); slots past S are dropped. The slots a
    query attends are summed in slot order exactly as that many contiguous slots would
    be, so a node's output equals a decode step's over its path moved to contiguous
    slots, bit for bit. Forward only.

    q [B, T, H, E], k_all, v_all [L, B, S, G, E] float32; layer an int; start [B] int;
    rows [B, T, W] bool. Returns [B, T, H*E] float32; a query with no slot is NaN."""
    _require_kernel()
    q, k_all, v_all = _attention_operands("tree_attention", q, k_all, v_all)
    B, T, H, E = q.shape
    start, rows = jnp.asarray(start), jnp.asarray(rows)
    if start.shape != (B,) or not jnp.issubdtype(start.dtype, jnp.integer):
        raise InvalidArgument(f"start must be integer [B] = [{B}], got {start.dtype} "
                              f"{start.shape}")
    if rows.ndim != 3 or rows.shape[:2] != (B, T) or rows.dtype != jnp.bool_:
        raise InvalidArgument(f"rows must be bool [B, T, W] = [{B}, {T}, W], got "
                              f"{rows.dtype} {rows.shape}")
    layer = jnp.asarray(layer, jnp.int32).reshape(())
    out = jax.ffi.ffi_call(TARGET_TREE_ATTENTION, jax.ShapeDtypeStruct(q.shape, jnp.float32),
                           vmap_method="sequential")(q, k_all, v_all, layer,
                                                     start.astype(jnp.int32),
                                                     rows.astype(jnp.int8))
    return out.reshape(B, T, H * E)
