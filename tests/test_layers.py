"""The layering of the package, read from the source: every module's imports (function-
local ones included) are walked with `ast`, and the allowed edges are held:

- theory imports no JAX and nothing from models, the engine, measurement or the face;
- models import nothing from the engine (nor measurement or the face);
- nothing but the command line imports `report` or `plots` (each may import itself);
- the import graph of specsim's modules has no cycle (`test_no_import_cycle`);
- no module is longer than `MAX_MODULE_LINES` (one concept a module).

A module that fits no layer fails the test: put it in ``LAYERS`` below (and in the
module map of docs/design.md).

The same file checks that `docs/configuration.md` lists exactly the environment
variables `specsim.environment` declares and exactly the flags of every ``specsim``
subcommand."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "specsim"

LAYERS = {
    "theory": {"analytic", "simulate", "finite_run", "roofline", "fit", "batching", "papers", "validation",
               "errors", "schema", "policies", "environment", "atomic", "resources", "interrupt",
               "presets", "iteration_cost", "published", "published_page", "what_if", "trees"},
    "models": {"models"},
    "engine": {"sampling", "drafters", "decode", "policy_engine", "train",
               "results", "sharding"},
    "measurement": {"bench", "experiment", "workloads", "pass_costs", "compile_cache",
                    "cache_usage"},
    "face": {"report", "plots", "cli"},
}
JAX = {"jax", "jaxlib", "optax", "flax", "jaxtyping"}
MAX_MODULE_LINES = 700
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


def _import_statements(path: Path, skip_type_checking: bool = False):
    """(module, names) of every import anywhere in ``path``, relative ones resolved
    against its package: ``import a.b`` gives ("a.b", ()), ``from a import b, c`` gives
    ("a", ("b", "c")); imports under ``if TYPE_CHECKING:`` left out when
    ``skip_type_checking``."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    skipped = set()
    for node in ast.walk(tree) if skip_type_checking else ():
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            yield from ((a.name, ()) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            yield base, tuple(a.name for a in node.names)


def _imports(path: Path) -> set[str]:
    """Absolute dotted names of everything ``path`` imports, anywhere in the file
    (relative imports resolved against its package); for
    ``from a import b`` both ``a`` and ``a.b`` (b may be a module)."""
    out: set[str] = set()
    for base, names in _import_statements(path):
        out.add(base)
        out.update(f"{base}.{n}" for n in names)
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
    src = ROOT / "cli" / "demo.py"
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


# ---- no import cycle -----------------------------------------------------------------------
def _read_modules(path: Path) -> set[str]:
    """The specsim modules ``path`` reads when it runs, each import resolved to the most
    specific module it names: ``import a.b`` and ``from a.b import x`` read ``a.b``;
    ``from a import b`` reads the submodule ``a.b`` where there is one, else the package
    ``a`` (its ``__init__``). Module-level and function-level imports both count (a
    function-level import still runs, only later); imports under ``if TYPE_CHECKING:``
    do not (they never run). A package's own ``__init__`` running before its submodule
    is not an edge: every package whose ``__init__`` re-exports its submodules would
    otherwise be a cycle with each of them."""
    out: set[str] = set()
    for base, names in _import_statements(path, skip_type_checking=True):
        out.update((f"{base}.{n}" if f"{base}.{n}" in MODULE_NAMES else base for n in names)
                   if names else (base,))
    return {m for m in out if m in MODULE_NAMES}


MODULE_NAMES = {_module_name(p) for p in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module (or a
    module reading itself), each sorted: Tarjan's algorithm, iteratively."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    out.append(sorted(component))
    return out


def test_no_import_cycle():
    """No cycle in the graph of specsim's modules, where module a reads module b when it
    imports b anywhere in its source, at module level or inside a function (a
    function-level import still runs, only later, so it does not break a cycle); imports
    under ``if TYPE_CHECKING:`` never run and do not count (`_read_modules`)."""
    graph = {_module_name(p): _read_modules(p) - {_module_name(p)} for p in MODULES}
    cycles = _cycles(graph)
    assert not cycles, "import cycles (break each; see _read_modules for what counts):\n  " + \
        "\n  ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set(), "c": {"c"}}) == [["c"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_walk_resolves_submodules_and_skips_type_checking():
    assert "specsim.decode.calls" in _read_modules(ROOT / "decode" / "__init__.py")
    assert "specsim.drafters.base" in _read_modules(ROOT / "decode" / "speculative.py")
    assert "specsim.drafters" not in _read_modules(ROOT / "decode" / "speculative.py")


# ---- docs/configuration.md mirrors the environment variables and the flags ----------------
CONFIGURATION = ROOT.parent / "docs" / "configuration.md"


def _doc_sections() -> dict[str, list[str]]:
    """{heading: the first cell of each table row under it} of docs/configuration.md."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in CONFIGURATION.read_text().splitlines():
        if line.startswith("#"):
            current = line.lstrip("#").strip()
            sections[current] = []
        elif line.startswith("|") and current is not None:
            cell = line.split("|")[1].strip()
            if cell and not set(cell) <= set("-: "):
                sections[current].append(cell)
    return sections


def _names(cells, prefix: str) -> set[str]:
    """The `code` names starting with ``prefix`` in table cells."""
    return {part for cell in cells for part in cell.replace(",", " ").split("`")
            if part.startswith(prefix)}


def test_configuration_lists_every_environment_variable():
    from specsim import environment

    documented = _names(_doc_sections()["Environment variables"], "SPECSIM_")
    declared = {v.name for v in environment.VARIABLES}
    assert documented == declared, (
        f"docs/configuration.md and specsim.environment disagree: only in the doc "
        f"{sorted(documented - declared)}, only declared {sorted(declared - documented)}")
    assert all(v.kind in environment.KINDS and v.scope in ("package", "tests")
               for v in environment.VARIABLES)


def test_every_specsim_variable_the_code_names_is_declared():
    import re

    from specsim import environment

    declared = {v.name for v in environment.VARIABLES}
    named, macros = set(), set()
    for path in [*MODULES, *ROOT.rglob("*.h"), *ROOT.rglob("*.cc"),
                 ROOT.parent / "tests" / "conftest.py"]:
        text = path.read_text()
        named.update(re.findall(r"SPECSIM_[A-Z_]*[A-Z]", text))
        macros.update(re.findall(r"#\s*define\s+(SPECSIM_[A-Z_]*[A-Z])", text))
    named -= macros                     # a C preprocessor macro is no environment variable
    assert named <= declared, f"undeclared in specsim.environment: {sorted(named - declared)}"


def _parser_flags() -> dict[str, set[str]]:
    import argparse

    from specsim.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {o for a in p._actions if not isinstance(a, argparse._HelpAction)
                   for o in a.option_strings}
            for name, p in sub.choices.items()}


def test_configuration_lists_every_command_line_flag():
    sections = _doc_sections()
    flags = _parser_flags()
    assert "demo" in flags
    for command, options in flags.items():
        heading = f"`specsim {command}`"
        assert heading in sections, f"docs/configuration.md has no section {heading}"
        documented = _names(sections[heading], "--") | _names(sections[heading], "-")
        documented = {d for d in documented if d.startswith("-")}
        assert documented == options, (
            f"specsim {command}: docs/configuration.md and the parser disagree: only in "
            f"the doc {sorted(documented - options)}, only in the parser "
            f"{sorted(options - documented)}")


def test_the_environment_accessors_read_as_declared(monkeypatch):
    from specsim import environment
    from specsim.errors import InvalidArgument

    for value, on in (("0", False), (" Off ", False), ("no", False), ("1", True), ("", True)):
        monkeypatch.setenv("SPECSIM_CPU_KERNEL", value)
        assert environment.is_on("SPECSIM_CPU_KERNEL") is on
    monkeypatch.delenv("SPECSIM_CPU_KERNEL")
    assert environment.is_on("SPECSIM_CPU_KERNEL")
    monkeypatch.setenv("SPECSIM_QUICK", "yes")
    assert not environment.is_on("SPECSIM_QUICK")
    monkeypatch.setenv("SPECSIM_QUICK", "1")
    assert environment.is_on("SPECSIM_QUICK")
    monkeypatch.setenv("SPECSIM_CACHE", "")
    assert environment.cache_root() == Path.home() / ".cache" / "specsim"
    monkeypatch.setenv("SPECSIM_CACHE", "/tmp/somewhere")
    assert environment.cache_root() == Path("/tmp/somewhere")
    with pytest.raises(InvalidArgument, match="name must be a declared environment variable"):
        environment.raw("SPECSIM_NOT_A_VARIABLE")
    with pytest.raises(InvalidArgument, match="switch or a flag"):
        environment.is_on("SPECSIM_CACHE")
    with pytest.raises(InvalidArgument, match="path variable"):
        environment.path("SPECSIM_QUICK")


def test_no_module_is_over_the_line_limit():
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by concept): {long}"
