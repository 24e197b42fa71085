"""`benchmarks/bench_goodput_goals.py` refuses bad arguments before it loads a model (the
benchmark itself runs by command: it decodes with the real model)."""

from __future__ import annotations

import pytest
from benchmark_script import load


def _bench():
    return load("bench_goodput_goals")


@pytest.mark.parametrize("argv, message", [
    (["--new-tokens", "1"], "--new-tokens must be >= 2"),
    (["--ks", "0", "2"], "--ks positive"),
    (["--ks", "2", "--ratios-1", "1", "1.5"], "--ratios-1 must give k_max + 1 = 3"),
    (["--ratios-4", "2", "2", "2", "2", "2"], "--ratios-4 must give"),
    (["--ratios-1", "1", "1.5", "nan", "2", "2"], "--ratios-1 must give"),
    (["--shipped", "99"], "--shipped must lie in 0.."),
])
def test_bad_arguments_are_named(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        _bench().main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_a_negative_draft_ratio_is_named(capsys):
    with pytest.raises(SystemExit) as exc:
        _bench().main(["--drafter", "layer-skip", "--draft-ratio", "-0.5"])
    assert exc.value.code == 2
    assert "--draft-ratio must be a finite number >= 0 (got -0.5)" in capsys.readouterr().err


@pytest.mark.parametrize("argv, name", [(["--prior-alpha", "1.5"], "prior_alpha"),
                                        (["--budget", "1.5"], "budget"),
                                        (["--budget", "off"], "--budget must be 'none' or"),
                                        (["--judge-share", "-1"], "judge_share")])
def test_goodputs_own_settings_are_checked_by_goodput(argv, name, capsys):
    with pytest.raises(SystemExit) as exc:
        _bench().main(argv)
    assert exc.value.code == 2
    assert name in capsys.readouterr().err
