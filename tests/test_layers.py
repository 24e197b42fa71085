"""The layering of the package, read from the source: every module's imports (function-
local ones included) are walked with `ast`, and the allowed edges are held:

- theory imports no JAX and nothing from models, the engine, measurement or the face;
- models import nothing from the engine (nor measurement or the face);
- nothing but the command line imports `report` or `plots` (each may import itself).

A module that fits no layer fails the test: put it in ``LAYERS`` below (and in the
module map of DESIGN.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "specsim"

LAYERS = {
    "theory": {"analytic", "simulate", "roofline", "fit", "batching", "papers", "validation",
               "errors", "schema", "policies"},
    "models": {"models"},
    "engine": {"sampling", "drafters", "decode", "policy_engine", "train",
               "results", "sharding"},
    "measurement": {"bench", "experiment", "workloads", "pass_costs", "compile_cache"},
    "face": {"report", "plots", "cli"},
}
JAX = {"jax", "jaxlib", "optax", "flax", "jaxtyping"}
FORBIDDEN = {
    "theory": {"models", "engine", "measurement", "face"},
    "models": {"engine", "measurement", "face"},
}
FACE_ONLY = {"report", "plots"}        # importable by cli only


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Absolute dotted names of everything ``path`` imports, anywhere in the file
    (relative imports resolved against its package); for
    ``from a import b`` both ``a`` and ``a.b`` (b may be a module)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _top(dotted: str) -> str | None:
    """The specsim top-level module a dotted name belongs to (None: outside specsim)."""
    parts = dotted.split(".")
    if parts[0] != "specsim" or len(parts) < 2:
        return None
    return parts[1]


def _layer(top: str) -> str | None:
    return next((layer for layer, mods in LAYERS.items() if top in mods), None)


MODULES = sorted(p for p in ROOT.rglob("*.py"))
EDGES = [(_module_name(p), dep) for p in MODULES for dep in sorted(_imports(p))]


def test_every_module_has_a_layer():
    tops = {_top(_module_name(p)) for p in MODULES} - {None}
    unplaced = sorted(t for t in tops if _layer(t) is None)
    assert not unplaced, f"modules in no layer (add them to LAYERS in {__file__}): {unplaced}"


def test_the_walk_sees_function_local_imports():
    src = ROOT / "cli.py"
    assert "specsim.experiment" in _imports(src)        # imported inside _cmd_demo only
    assert any(dep.startswith("specsim.plots") for dep in _imports(src))


def _violations(edges) -> list[str]:
    """One line per forbidden (module, imported name) edge."""
    bad = []
    for mod, dep in edges:
        src, dst = _top(mod), _top(dep)
        src_layer = _layer(src) if src else None
        if src_layer == "theory" and dep.split(".")[0] in JAX:
            bad.append(f"{mod} -> {dep}: theory must not import JAX")
        dst_layer = _layer(dst) if dst else None
        if dst_layer in FORBIDDEN.get(src_layer, ()) and src != dst:
            bad.append(f"{mod} -> {dep}: {src_layer} must not import {dst_layer}")
        if dst in FACE_ONLY and src not in ("cli", dst):
            bad.append(f"{mod} -> {dep}: only specsim.cli may import specsim.{dst}")
    return sorted(set(bad))


def test_layering_holds():
    bad = _violations(EDGES)
    assert not bad, "forbidden imports:\n  " + "\n  ".join(bad)


@pytest.mark.parametrize("mod, dep, message", [
    ("specsim.analytic", "jax.numpy", "theory must not import JAX"),
    ("specsim.fit", "specsim.bench", "theory must not import measurement"),
    ("specsim.models.transformer", "specsim.decode", "models must not import engine"),
    ("specsim.experiment.pipeline", "specsim.report", "only specsim.cli may import"),
    ("specsim.report", "specsim.plots.experiment", "only specsim.cli may import"),
])
def test_a_forbidden_edge_is_reported(mod, dep, message):
    found = _violations([(mod, dep)])
    assert len(found) == 1 and message in found[0] and f"{mod} -> {dep}" in found[0]
