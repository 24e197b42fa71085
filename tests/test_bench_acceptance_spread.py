"""benchmarks/acceptance_spread.py's arguments (the benchmark itself runs by command)."""

from __future__ import annotations

import pytest
from benchmark_script import load


def test_arguments_and_refusals():
    mod = load("acceptance_spread")
    args = mod.parse_args(["--kinds", "json", "prose", "--prompts", "3", "--k", "2"])
    assert args.kinds == ["json", "prose"] and args.prompts == 3 and args.k == 2
    assert mod.parse_args([]).kinds == ["code", "extraction"]
    with pytest.raises(ValueError, match="kinds"):
        mod.parse_args(["--kinds", "poetry"])
    for flag in ("--prompts", "--k", "--max-new-tokens", "--prompt-tokens"):
        with pytest.raises(ValueError, match=flag.lstrip("-").replace("-", "_")):
            mod.parse_args([flag, "0"])
