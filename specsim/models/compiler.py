"""The XLA options specsim compiles its programs with, and `jit`, which applies them.

    from specsim.models.compiler import jit
    @jit(static_argnames=("cfg",))             # jax.jit, plus `options()` at first use
    def program(params, tokens, *, cfg): ...

    SPECSIM_XLA_OPTIONS=0 specsim demo --quick   # compile with XLA's defaults instead

On XLA:CPU, `CPU_OPTIONS`:

- ``xla_cpu_use_fusion_emitters=False``: XLA's elemental emitters for loop fusions. Its
  newer MLIR fusion emitters build an MLIR context and a rewrite-pattern set per fusion;
  a speculative policy program holds hundreds of fusions, and a profile of its compile
  had a large share of the time in that setup and in the kernel clearing the pages it
  allocates.
- ``xla_backend_optimization_level=1``: LLVM's -O1 instead of -O2 for the code XLA
  emits. specsim's matmuls run in its own CPU kernel (`specsim.models.kernels`) and its
  attention in XLA's library dots, so what LLVM optimises is the elementwise fusions
  around them. Level 0 is not it: its unvectorised loops make a multi-token pass
  several times slower.

With these options a forward pass runs in the time it takes with XLA's defaults and
compiles in a fraction of it (see docs/studies/compiler-options.md).

Every program of the engine (`specsim.decode`, `forward`'s prefill) and of the
measurements that fit its cost model (`specsim.pass_costs`, `specsim.bench`'s sweep)
goes through `jit`, so the pass costs are compiled as the runs they predict. Training
steps and the machine-ceiling probes use `jax.jit` as it is. Other backends get no
options: their compilers are not XLA:CPU's.

An option the user set in ``XLA_FLAGS`` is left to that flag (the tests compile at
optimisation level 0 that way), an option this jaxlib does not know is dropped (each is
probed once by compiling a one-line program), and ``SPECSIM_XLA_OPTIONS=0`` (or false,
off, no) turns them all off.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

from specsim.environment import is_on

__all__ = ["CPU_OPTIONS", "ENV_SWITCH", "options", "jit"]

CPU_OPTIONS: dict[str, Any] = {
    "xla_cpu_use_fusion_emitters": False,
    "xla_backend_optimization_level": 1,
}
ENV_SWITCH = "SPECSIM_XLA_OPTIONS"


def _set_in_xla_flags(name: str) -> bool:
    return any(f.lstrip("-").split("=", 1)[0] == name
               for f in os.environ.get("XLA_FLAGS", "").split())


@functools.cache
def _known(name: str, value) -> bool:
    """Whether this jaxlib's compiler accepts the option (a one-line program compiled)."""
    import jax

    try:
        jax.jit(lambda x: x + 1, compiler_options={name: value}).lower(0.0).compile()
    except Exception as err:            # jaxlib raises JaxRuntimeError: No such compile option
        if "compile option" in str(err):
            return False
        raise
    return True


def options(backend: str | None = None) -> dict[str, Any]:
    """The compiler options for ``backend`` (default: JAX's default backend): `CPU_OPTIONS`
    on "cpu", less those ``XLA_FLAGS`` sets and those this jaxlib does not know; ``{}``
    elsewhere or when ``$SPECSIM_XLA_OPTIONS`` says off."""
    if not is_on(ENV_SWITCH):
        return {}
    if backend is None:
        import jax

        backend = jax.default_backend()
    if backend != "cpu":
        return {}
    return {k: v for k, v in CPU_OPTIONS.items()
            if not _set_in_xla_flags(k) and _known(k, v)}


class _Jit:
    """``jax.jit(fun, **kwargs)`` built at first use with ``compiler_options=options()``,
    so that importing a module that defines programs does not start JAX's backends."""

    def __init__(self, fun: Callable, kwargs: dict):
        self._fun, self._kwargs, self._jitted = fun, kwargs, None
        functools.update_wrapper(self, fun)

    @property
    def jitted(self):
        if self._jitted is None:
            import jax

            self._jitted = jax.jit(self._fun, compiler_options=options() or None,
                                   **self._kwargs)
        return self._jitted

    def __call__(self, *args, **kwargs):
        return self.jitted(*args, **kwargs)

    def __getattr__(self, name):                # lower, trace, clear_cache, eval_shape
        if name.startswith("_"):    # private and dunder names are never jax.jit's; and an
            raise AttributeError(name)  # instance without _jitted (copy) must not recurse
        return getattr(self.jitted, name)


def jit(fun: Callable | None = None, **kwargs):
    """`jax.jit` with specsim's compiler options (`options`); usable as ``@jit`` or
    ``@jit(static_argnames=...)``. The options are chosen at the first call, lowering or
    attribute read, from the default backend then."""
    if fun is None:
        return functools.partial(jit, **kwargs)
    if "compiler_options" in kwargs:
        raise TypeError("jit: compiler_options are specsim's (`options`); use jax.jit")
    return _Jit(fun, kwargs)
