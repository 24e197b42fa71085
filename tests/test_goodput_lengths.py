"""`benchmarks/sim_goodput_explore.py --study lengths`: its trace prefixes by run length,
and the committed tables in data/goodput-studies-cpu/ are what replaying the committed
traces prints today (the README's Goodput numbers come from them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from benchmark_script import load

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "sim_goodput_explore.py"
DATA = ROOT / "data" / "goodput-studies-cpu"


def _study():
    return load("sim_goodput_explore")


def test_iterations_for_a_length_and_the_prefix_they_cut():
    m = _study()
    # rows' tokens per iteration: accepted + 1 while present (-1: the row had finished)
    stats = SimpleNamespace(accepted=np.array([[2, 0], [4, 1], [-1, 3], [-1, -1]]))
    # mean tokens per row after each iteration: 2, 5.5, 7.5, 7.5
    assert [m.iterations_for(stats, n) for n in (1, 2, 3, 5.5, 6, 7.5, 100)] == \
        [1, 1, 2, 2, 3, 3, 4]
    from specsim.simulate import AcceptanceTrace
    tr = AcceptanceTrace(np.ones((4, 2, 3), bool), np.full((4, 2, 3), 0.5), np.ones((4, 2), bool))
    cut = m.prefix(tr, 2)
    assert cut.accept.shape == (2, 2, 3) and cut.present.shape == (2, 2)


@pytest.mark.parametrize("name", ["320", "320_shipped1"])
def test_committed_tables_replay_from_the_committed_traces(name):
    table = (DATA / f"lengths_{name}.md").read_text()
    expected = table.split("\n\n", 2)[2]            # after the title and the command
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, str(SCRIPT), "--study", "lengths", "--from-traces",
                          str(DATA / f"traces_{name}.npz")], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=600, check=True).stdout
    assert out.strip() == expected.strip()


def test_saved_traces_load_back_as_they_were(tmp_path):
    m = _study()
    recorded = m.load_traces(DATA / "traces_320_shipped1.npz")
    lens = recorded.pop("lengths")
    m.save_traces(tmp_path / "again.npz", recorded, lens)
    again = m.load_traces(tmp_path / "again.npz")
    assert again.pop("lengths") == lens and again.keys() == recorded.keys()
    for cell, (trace, cut, costs, free) in recorded.items():
        t2, cut2, costs2, free2 = again[cell]
        np.testing.assert_array_equal(t2.accept, trace.accept)
        np.testing.assert_array_equal(t2.confidence, trace.confidence)
        np.testing.assert_array_equal(t2.present, trace.present)
        assert (cut2, costs2, free2) == (cut, costs, free)


def test_bad_options_are_clear_errors():
    m = _study()
    with pytest.raises(SystemExit, match=r"--from-traces goes with --study lengths "
                                         r"\(got --study budget\)"):
        m.main(["--study", "budget", "--from-traces", "x.npz"])
    with pytest.raises(SystemExit, match=r"--save-traces goes with --study lengths"):
        m.main(["--study", "warm", "--save-traces", "x.npz"])
    with pytest.raises(SystemExit, match=r"--shipped-prompt must be in 0\.\.\d+ for code "
                                         r"\(got 100000\)"):
        m.shipped_prompts(None, 100_000)
