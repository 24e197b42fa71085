"""The demo's central part on a busy machine: the roofline sweep and the instrument part
(α × K × draft cost at batch 1, paired rounds) while a CPU-bound process competes for
one core, reporting what the demo reports: the prediction before the run and the
in-run prediction (MAPE, worst, coverage), the machine's state and, where the machine
was too busy for the stated precision, the warning.

    python benchmarks/busy_machine.py               # the full demo's grid, competitor on
    python benchmarks/busy_machine.py --quick       # the quick grid
    python benchmarks/busy_machine.py --no-competitor   # the same on the quiet machine

Writes report.md, runs.csv, fidelity.json (with the machine's state) under ``--out``
(default results/busy-machine). Any other ``specsim demo`` timing flag can be given
(``--time-budget``, ``--max-rounds``, ``--target-half-width``, ``--repeats``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
from pathlib import Path


DEFAULT_BUDGET_S = 300.0
"""The full grid's time budget here: the roofline and instrument parts only."""


def compete(stop, core: int | None) -> None:
    """Keep one core busy with integer arithmetic until ``stop`` is set."""
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    x = 1
    while not stop.is_set():
        for _ in range(100_000):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the quick demo's grid")
    p.add_argument("--no-competitor", action="store_true",
                   help="run without the competing process (the quiet reference)")
    p.add_argument("--core", type=int, default=0,
                   help="the core the competing process is pinned to (default 0)")
    p.add_argument("--out", default="results/busy-machine", help="output folder")
    p.add_argument("--time-budget", type=float, default=None,
                   help="wall seconds by which the timed rounds end (default 300; --quick "
                        "150): the instrument part alone would otherwise take the whole "
                        "demo's budget")
    p.add_argument("--max-rounds", type=int, default=None)
    p.add_argument("--target-half-width", type=float, default=None)
    p.add_argument("--repeats", type=int, default=None)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    budget = args.time_budget if args.time_budget is not None else (
        None if args.quick else DEFAULT_BUDGET_S)
    changes = {k: v for k, v in (("time_budget_s", budget),
                                 ("max_rounds", args.max_rounds),
                                 ("target_half_width", args.target_half_width),
                                 ("repeats", args.repeats)) if v is not None}
    from specsim import experiment, report

    # settings first: a bad argument fails before any process starts
    settings = experiment.DemoSettings.demo(quick=args.quick, parts=("roofline", "instrument"),
                                            out_dir=args.out, **changes)
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    competitor = None
    if not args.no_competitor:
        competitor = ctx.Process(target=compete, args=(stop, args.core), daemon=True)
        competitor.start()
    try:
        experiment.enable_compilation_cache()
        result = experiment.run_demo(settings, progress=False)
    finally:
        stop.set()
        if competitor is not None:
            competitor.join(timeout=5)
            if competitor.is_alive():
                competitor.terminate()
    result.files = report.write_demo(result, Path(args.out))
    f = report.fidelity_summary(result)
    machine = report.machine_summary(result)
    print(f"competing process: {'none' if args.no_competitor else f'one, on core {args.core}'}")
    print(report.summary_table(result))
    if f.get("prior", {}).get("n_runs"):
        print(f"prediction before the run: {report.fidelity_headline(f['prior'])}")
    print(f"in-run prediction: {report.fidelity_headline(f)}")
    if machine:
        print(json.dumps({k: machine[k] for k in ("drift", "cpu_over_wall",
                                                   "baseline_spread_pct", "converged", "runs",
                                                   "busy")}, indent=1, default=str))
    print(f"wrote {args.out}/ in {result.environment['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
