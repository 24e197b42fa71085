"""benchmarks/busy_machine.py's arguments and its competing process (the benchmark itself
is run by command: it times the demo's central part)."""

from __future__ import annotations

import threading

import pytest
from benchmark_script import load

from specsim.errors import InvalidArgument


def test_bad_settings_are_refused_before_the_competitor_starts(monkeypatch):
    mod = load("busy_machine")
    started = []
    monkeypatch.setattr(mod.multiprocessing, "get_context",
                        lambda *a: started.append(a) or pytest.fail("a process started"))
    with pytest.raises(InvalidArgument, match="target_half_width"):
        mod.main(["--target-half-width", "0", "--out", "unused"])
    with pytest.raises(InvalidArgument, match="max_rounds"):
        mod.main(["--repeats", "5", "--max-rounds", "2", "--out", "unused"])
    assert started == []


def test_the_competitor_runs_until_told_to_stop():
    mod = load("busy_machine")
    stop = threading.Event()
    t = threading.Thread(target=mod.compete, args=(stop, None), daemon=True)
    t.start()
    t.join(timeout=0.2)
    assert t.is_alive()                 # busy until stopped
    stop.set()
    t.join(timeout=10)
    assert not t.is_alive()
    args = mod.parse_args(["--quick", "--no-competitor", "--time-budget", "90"])
    assert args.quick and args.no_competitor and args.time_budget == 90.0 and args.core == 0


def test_the_competitor_is_a_process_that_stops_when_told(monkeypatch):
    """The benchmark's own way to start it: a spawned process, pinned where the OS allows
    (the child imports the script by name, as it imports ``__main__`` when run)."""
    import importlib
    import multiprocessing
    import sys
    import time

    from benchmark_script import BENCHMARKS

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    mod = importlib.import_module("busy_machine")
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    p = ctx.Process(target=mod.compete, args=(stop, 0), daemon=True)
    p.start()
    try:
        time.sleep(0.5)
        assert p.is_alive()
    finally:
        stop.set()
        p.join(timeout=30)
        sys.modules.pop("busy_machine", None)
    assert p.exitcode == 0
