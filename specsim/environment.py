"""Every environment variable specsim reads, declared once, and the accessors the code
reads them through (`docs/configuration.md` lists the same table; a test compares them).

Kinds of variable:

- "switch": on unless set to 0, false, off or no (any case, spaces ignored);
- "path": a folder, unset or empty for the default;
- "flag": on only when set to 1;
- "text": read as it is (see its meaning);
- "integer": a positive integer (read by the C++ kernels, not by Python).

No JAX here (the theory side and the command line read these before JAX is imported).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from specsim.errors import InvalidArgument

__all__ = ["Variable", "VARIABLES", "KINDS", "OFF", "declared", "raw", "is_on", "path",
           "cache_root"]

KINDS = ("switch", "path", "flag", "text", "integer")
OFF = ("0", "false", "off", "no")


@dataclass(frozen=True)
class Variable:
    """One environment variable: its ``name``, ``kind`` (one of `KINDS`), ``default``
    (what holds when it is unset, in words) and ``meaning``; ``scope`` is "package" or
    "tests" (read by the test suite's conftest only)."""
    name: str
    kind: str
    default: str
    meaning: str
    scope: str = "package"


VARIABLES: tuple[Variable, ...] = (
    Variable("SPECSIM_CACHE", "path", "~/.cache/specsim",
             "The cache root: dequantised checkpoints, built kernels, trained drafts and "
             "(unless SPECSIM_JAX_CACHE is set) the compilation cache."),
    Variable("SPECSIM_JAX_CACHE", "path", "$SPECSIM_CACHE/jax",
             "The folder of JAX's persistent compilation cache."),
    Variable("SPECSIM_COMPILATION_CACHE", "switch", "on",
             "Whether the command line and notebooks turn JAX's persistent compilation "
             "cache on."),
    Variable("SPECSIM_XLA_OPTIONS", "switch", "on",
             "Whether the engine's programs compile with specsim's XLA:CPU options "
             "(off: XLA's defaults)."),
    Variable("SPECSIM_CPU_KERNEL", "switch", "on",
             "Whether matmul=\"auto\" may use specsim's CPU kernels (off: XLA's dots and "
             "attention)."),
    Variable("SPECSIM_CPU_ATTENTION", "switch", "on",
             "Whether matmul=\"auto\" may use the CPU attention kernel (off: that kernel "
             "alone)."),
    Variable("SPECSIM_KERNEL_THREADS", "integer", "XLA's intra-op pool",
             "The most threads one CPU kernel call uses (1: the calling thread alone)."),
    Variable("SPECSIM_PAPERS_DIR", "path", "the checkout's papers/",
             "The folder of paper READMEs and committed figures."),
    Variable("SPECSIM_FIGURES_DIR", "path", "results/figures",
             "Where notebooks write paper figures (unless regenerating the committed "
             "ones)."),
    Variable("SPECSIM_QUICK", "flag", "off",
             "Notebooks run small grids (the headless test run sets it)."),
    Variable("SPECSIM_TEST_XLA_OPT", "text", "0",
             "\"default\": the test suite compiles at XLA's default optimisation level "
             "instead of LLVM level 0.", "tests"),
    Variable("SPECSIM_TEST_COMPILATION_CACHE", "switch", "on",
             "Whether a test run shares a persistent compilation cache of its own between "
             "its workers.", "tests"),
    Variable("SPECSIM_TEST_JAX_CACHE", "path", "a temporary folder per run",
             "The folder of that test-run cache (set by the run for its workers).",
             "tests"),
)

_BY_NAME = {v.name: v for v in VARIABLES}


def declared(name: str) -> Variable:
    """The declaration of ``name``; an undeclared name is an error naming the allowed
    ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise InvalidArgument(f"name must be a declared environment variable, one of "
                              f"{sorted(_BY_NAME)} (got {name!r})") from None


def raw(name: str) -> str | None:
    """The text of ``name`` as set, None when unset or empty."""
    declared(name)
    value = os.environ.get(name)
    return value if value else None


def is_on(name: str) -> bool:
    """A "switch": True unless set to one of `OFF`; a "flag": True only when set to 1."""
    var = declared(name)
    if var.kind == "switch":
        return os.environ.get(name, "1").strip().lower() not in OFF
    if var.kind == "flag":
        return os.environ.get(name) == "1"
    raise InvalidArgument(f"name must be a switch or a flag; {name} is a {var.kind}")


def path(name: str) -> Path | None:
    """A "path" variable as a `Path`, None when unset or empty."""
    var = declared(name)
    if var.kind != "path":
        raise InvalidArgument(f"name must be a path variable; {name} is a {var.kind}")
    value = raw(name)
    return Path(value) if value is not None else None


def cache_root() -> Path:
    """``$SPECSIM_CACHE``, default ``~/.cache/specsim``."""
    return path("SPECSIM_CACHE") or Path.home() / ".cache" / "specsim"
