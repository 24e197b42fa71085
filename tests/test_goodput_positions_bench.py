"""`benchmarks/goodput_positions.py`: its replay and calibration read a table file and
print what `simulate.replay_positions` gives (checked here on a synthetic file; the
recording runs by command with the real model), and bad arguments are named."""

from __future__ import annotations

import numpy as np
import pytest
from benchmark_script import load

from specsim import policies as P
from specsim import simulate as S


def _table_file(tmp_path):
    rng = np.random.default_rng(0)
    ok = rng.random((3, 19, 4)) < np.array([0.9, 0.2, 0.6])[:, None, None]
    conf = np.where(ok, 0.9, rng.uniform(0.05, 0.5, ok.shape)).astype(np.float16)
    path = tmp_path / "feature-head_20.npz"
    np.savez(path, ok=ok, confidence=conf, names=np.asarray(["a", "b", "c"]),
             drafter="feature-head", new_tokens=20)
    return path, ok, conf


def test_replay_prints_the_replayed_goals(tmp_path, capsys):
    path, ok, conf = _table_file(tmp_path)
    load("goodput_positions").main(["replay", str(path), "--new-tokens", "20",
                                    "--p-min", "0.2", "--hurdle", "0", "--budget", "none",
                                    "0.015"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 20 |")]
    assert len(rows) == 2 and "| off | 0.01 |" in rows[0]
    row = [r for r in rows if "| 0.015 | 0.01 |" in r]      # today's defaults
    costs = P.Costs(t_draft=0.035, t_target=(1.0, 1.65, 1.76, 1.94, 1.94))
    tables = [S.PositionTable(ok=o, confidence=c.astype(float)) for o, c in zip(ok, conf)]
    s = np.asarray([S.replay_positions(P.Goodput(k_max=4, costs=costs), t, costs,
                                       off_draft="paid").speedup for t in tables])
    best = np.asarray([max(S.replay_positions(P.FixedK(k=k), t, costs).speedup
                           for k in range(1, 5)) for t in tables])
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    assert float(cells[5]) == pytest.approx(np.exp(np.log(s).mean()), abs=6e-4)
    assert cells[7] == f"{int((s < 0.98).sum())} ({s.min():.3f})"
    assert cells[8] == f"{int((s / best < 0.97).sum())} ({(s / best).min():.3f})"


def test_calibration_and_bad_arguments(tmp_path, capsys):
    path, _, _ = _table_file(tmp_path)
    bench = load("goodput_positions")
    bench.main(["calibration", str(path)])
    out = capsys.readouterr().out
    assert sum(line.startswith(f"| {j} |") for line in out.splitlines() for j in range(4)) == 4
    with pytest.raises(SystemExit, match="--ratios must give 5 positive ratios"):
        bench.main(["replay", str(path), "--ratios", "1", "2"])
    with pytest.raises(SystemExit) as exc:
        bench.main(["replay", str(path), "--budget", "1.5"])
    assert exc.value.code == 2 and "must be 'none' or a number in [0, 1)" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        bench.main(["record", "--out-dir", str(tmp_path), "--new-tokens", "1"])
    assert exc.value.code == 2 and "--new-tokens must be in 2..300" in capsys.readouterr().err
