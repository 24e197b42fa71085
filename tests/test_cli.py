"""The theory, demo and train-draft subcommands of ``specsim``: printed numbers, CSV, exit
codes, help, the checks of their flags."""

import csv
import re

import numpy as np
import pytest

from specsim import analytic as A
from specsim.cli import build_parser, main, parse_k_values


def test_speedup_table_numbers(capsys):
    assert main(["speedup", "--alpha", "0.6", "0.8", "0.9", "--k", "1-8", "--c", "0.05"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[2:] == [f"K={k}" for k in range(1, 9)]
    rows = {float(line.split()[1]): line for line in out[1:4]}
    assert sorted(rows) == [0.6, 0.8, 0.9]
    for alpha, line in rows.items():
        cells = line.split()[2:]
        values = np.array([float(c.rstrip("*>")) for c in cells])
        np.testing.assert_allclose(values, A.speedup(alpha, np.arange(1, 9), 0.05), atol=5e-4)
        starred = [i for i, c in enumerate(cells) if c.endswith(("*", ">"))]
        assert starred == [int(np.argmax(values))]     # '>': the best K lies beyond K = 8
    assert rows[0.6].split()[2 + 3] == "1.921*"          # K* = 4 at alpha = 0.6, c = 0.05


def test_speedup_csv(tmp_path, capsys):
    path = tmp_path / "sub" / "speedup.csv"
    assert main(["speedup", "--alpha", "0.6", "0.8", "--k", "1,2,4", "8",
                 "--c", "0", "0.1", "--csv", str(path)]) == 0
    assert f"wrote {path}" in capsys.readouterr().out
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 4 * 2
    assert list(rows[0]) == ["alpha", "k", "c", "expected_tokens", "speedup"]
    for r in rows:
        a, k, c = float(r["alpha"]), int(r["k"]), float(r["c"])
        assert k in (1, 2, 4, 8)
        assert float(r["speedup"]) == pytest.approx(float(A.speedup(a, k, c)), rel=1e-15)
        assert float(r["expected_tokens"]) == pytest.approx(float(A.expected_tokens(a, k)),
                                                            rel=1e-15)


def test_optimal_k_prints_k_star_and_speedup(capsys):
    assert main(["optimal-k", "--alpha", "0.6", "0.9", "--c", "0.05", "0.2"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert len(lines) == 4
    for line in lines:
        alpha, c, k_star, s, e = line.split()
        want_k, want_s = A.optimal_k(float(alpha), float(c))
        assert int(k_star) == want_k
        assert float(s) == pytest.approx(float(want_s), abs=1e-4)
        assert float(e) == pytest.approx(float(A.expected_tokens(float(alpha), want_k)), abs=1e-4)
    assert main(["optimal-k", "--alpha", "0.99", "--c", "0.0", "--k-max", "5"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[2] == "5"


def test_k_parsing():
    assert parse_k_values(["1-8"]) == list(range(1, 9))
    assert parse_k_values(["1,2,4", "8", "2-3"]) == [1, 2, 3, 4, 8]
    for bad in (["0-3"], ["5-2"], ["x"], ["1.5"], [","]):
        with pytest.raises(ValueError, match="^k must"):
            parse_k_values(bad)


@pytest.mark.parametrize("argv, message", [
    (["speedup", "--alpha", "1.5", "--k", "2"], "alpha must lie in [0, 1]"),
    (["speedup", "--alpha", "0.5", "--k", "4-2"], "k must"),
    (["speedup", "--alpha", "0.5", "--c", "-1"], "c must be finite and >= 0"),
    (["optimal-k", "--alpha", "0.5", "--c", "0.1", "--k-max", "0"], "k_max must be an integer >= 1"),
])
def test_bad_input_is_one_line_and_exit_code_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"specsim {argv[0]}: error: ") and message in err
    assert "Traceback" not in err


def test_demo_writes_the_analytic_figure_and_table(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--analytic-only", "--out", str(out), "--c", "0.1"]) == 0
    text = capsys.readouterr().out
    png = out / "analytic_speedup.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert f"wrote {png}" in text
    # the optimal-K lines agree with analytic.optimal_k at c = 0.1
    found = re.findall(r"alpha=(\S+)\s+K\*=(\d+)\s+speedup=(\S+)", text)
    assert len(found) == 6
    for alpha, k, s in found:
        want_k, want_s = A.optimal_k(float(alpha), 0.1, k_max=32)
        assert int(k) == want_k and float(s) == pytest.approx(float(want_s), abs=1e-3)


@pytest.mark.parametrize("command", ["speedup", "optimal-k", "demo"])
def test_help_on_every_theory_subcommand(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    assert f"usage: specsim {command}" in capsys.readouterr().out


def test_demo_lists_its_parts_and_refuses_unknown_ones(capsys):
    from specsim.experiment.parts import PARTS

    assert main(["demo", "--list-parts"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(PARTS)
    assert main(["demo", "--parts", "fidelity", "astrology", "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim demo: error: parts must") and "astrology" in err


def test_demo_command_composes_experiment_report_and_plots(tmp_path, capsys, monkeypatch):
    from quiet_machine import quiet_machine
    monkeypatch.setenv("SPECSIM_JAX_CACHE", str(tmp_path / "jax-cache"))
    quiet_machine(monkeypatch)              # the demo's own ceilings: test_experiment.py's
    out = tmp_path / "demo"
    argv = ["demo", "--quick", "--target", "tiny-llama", "--drafters", "ngram", "--k", "2",
            "--kinds", "code", "--temperatures", "0", "--max-new-tokens", "8",
            "--parts", "roofline", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "1/1 measuring the machine's ceilings" in text and f"wrote {out}/" in text
    files = {p.name for p in out.iterdir()}
    assert {"report.md", "sweeps.csv", "ceilings.csv", "fits.json", "roofline.png"} <= files
    assert "runs.csv" not in files                      # the fidelity part did not run
    assert "hardware.csv" not in files                  # nor the hardware part
    with open(out / "sweeps.csv") as f:
        assert len(list(csv.DictReader(f))) > 0          # the part's own sweep is written
    report = (out / "report.md").read_text()
    assert "parts roofline" in report
    assert "## 2–3." not in report                      # no fidelity section without runs


def test_version_matches_the_package_metadata(capsys):
    import tomllib
    from pathlib import Path

    import specsim
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"specsim {specsim.__version__}"
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    assert tomllib.loads(pyproject.read_text())["project"]["version"] == specsim.__version__


def test_optimal_k_and_analytic_demo_share_one_k_limit(tmp_path, capsys):
    c = 0.01                              # alpha 0.95 wants K = 40 here: past 32, below 64
    alphas = ["0.5", "0.6", "0.7", "0.8", "0.9", "0.95"]
    assert 32 < A.optimal_k(0.95, c)[0] < A.DEFAULT_K_MAX
    assert main(["optimal-k", "--alpha", *alphas, "--c", str(c)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(f"(K <= {A.DEFAULT_K_MAX})")
    from_optimal_k = {float(line.split()[0]): int(line.split()[2]) for line in lines[1:]}
    assert main(["demo", "--analytic-only", "--out", str(tmp_path), "--c", str(c)]) == 0
    text = capsys.readouterr().out
    assert f"Optimal K (K <= {A.DEFAULT_K_MAX})" in text
    from_demo = {float(a): int(k) for a, k in re.findall(r"alpha=(\S+)\s+K\*=(\d+)", text)}
    assert from_demo == from_optimal_k and from_demo[0.95] > 32


def test_speedup_says_when_the_best_k_is_outside_the_range(capsys):
    assert main(["speedup", "--alpha", "0.6", "0.9", "--k", "1-8", "--c", "0.05"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {float(line.split()[1]): line for line in out[1:3]}
    k_far, s_far = A.optimal_k(0.9, 0.05)
    assert k_far > 8
    assert "*" not in rows[0.9] and rows[0.9].rstrip().endswith(">")   # edge not starred
    assert rows[0.6].count("*") == 1 and ">" not in rows[0.6]          # K* = 4 is inside
    assert any(f"alpha 0.9, c 0.05: best K = {int(k_far)} (speedup {float(s_far):.3f}), "
               f"outside --k 1..8" in line for line in out)
    assert not any("alpha 0.6" in line for line in out[3:])
    assert main(["speedup", "--alpha", "0.3", "--k", "4-8", "--c", "0.2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "<" in out[1] and "*" not in out[1] and "best K = 1 " in out[-1]
    assert main(["speedup", "--alpha", "0.6", "--k", "1-8", "--c", "0.05"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2              # inside: no note


@pytest.mark.parametrize("flags, message", [
    (["--kind", "medusa", "--width", "8"], "--width does not apply to --kind medusa"),
    (["--kind", "distilled", "--heads", "3"], "--heads applies to --kind medusa only"),
    (["--kind", "feature-head", "--layers", "2"], "--layers applies to --kind distilled only"),
    (["--kind", "medusa", "--head-vocab", "50", "--minutes", "0"], "minutes"),
    (["--kind", "feature-head", "--head-vocab", "50", "--minutes", "0"], "minutes"),
    (["--minutes", "0"], "minutes")])
def test_train_draft_rejects_another_kinds_flags_and_bad_settings(flags, message, tmp_path,
                                                                   capsys):
    """Each kind's own flag applies to it only, and bad settings fail before training
    (tiny-qwen2 has no tokenizer: a training that started would fail on the prompts)."""
    rc = main(["train-draft", "--target", "tiny-qwen2", "--out", str(tmp_path / "d.npz"),
               *flags])
    assert rc == 2 and message in capsys.readouterr().err
