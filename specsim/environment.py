"""Every environment variable specsim reads, declared once in the packaged table
``specsim/data/environment.toml``, and the accessors the code reads them through
(`docs/configuration.md` lists the same table; a test compares them).

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
import tomllib
from dataclasses import dataclass
from pathlib import Path

from specsim.errors import InvalidArgument
from specsim.resources import data_path

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


def _load(path: Path) -> tuple[Variable, ...]:
    """The declarations in the packaged table ``path`` (TOML, one ``[[variable]]`` each),
    checked: a known kind and scope, each name once."""
    with open(path, "rb") as f:
        rows = tomllib.load(f)["variable"]
    variables = tuple(Variable(**row) for row in rows)
    for var in variables:
        if var.kind not in KINDS or var.scope not in ("package", "tests"):
            raise RuntimeError(f"{path}: {var.name} has kind {var.kind!r} and scope "
                               f"{var.scope!r}; allowed kinds {KINDS}, scopes package/tests")
    if len({v.name for v in variables}) != len(variables):
        raise RuntimeError(f"{path} declares a variable twice")
    return variables


VARIABLES: tuple[Variable, ...] = _load(data_path("environment.toml"))
"""The declarations, in the order of ``specsim/data/environment.toml``."""

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
