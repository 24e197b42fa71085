"""benchmarks/bench_kernel.py's argument handling (the benchmark itself is run by command)."""

from __future__ import annotations

import pytest
from benchmark_script import load


@pytest.mark.parametrize("argv", [["--widths", "2", "5"], ["--rounds", "0"], ["--widths", "0", "1"]])
def test_bad_arguments_are_refused_before_any_work(argv, capsys):
    mod = load("bench_kernel")
    with pytest.raises(SystemExit):
        mod.main(argv)
    assert "--rounds must be >= 1 and --widths positive, including 1" in capsys.readouterr().err
