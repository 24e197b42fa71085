"""`benchmarks/bench_auto_widths.py` refuses bad arguments before it loads a model (the
benchmark itself runs by command: it times compiles and decoding)."""

from __future__ import annotations

import pytest
from benchmark_script import load


def _bench():
    return load("bench_auto_widths")


@pytest.mark.parametrize("argv, message", [
    (["--batch", "0"], "--batch must be an integer >= 1 (got 0)"),
    (["--k-max", "-1"], "--k-max must be an integer >= 1 (got -1)"),
    (["--compiles", "0"], "--compiles must be an integer >= 1 (got 0)"),
    (["--kind", "poetry"], "--kind must be one of"),
    (["--drafter", "feature-head"], "invalid choice: 'feature-head'"),
])
def test_bad_arguments_are_named(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        _bench().main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
