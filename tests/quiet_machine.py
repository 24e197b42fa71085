"""The machine's state a demo records at its start and end, fixed for the end-to-end demo
tests that check other things.

`specsim.experiment.pipeline.machine_state` measures the machine's ceilings (a 1024²
matmul and a 1 GiB copy, seconds of both cores, slowing the other xdist worker too) twice
per demo. The tests that run a demo for its parts' tables never read those numbers; only
the report's machine section shows them. The real measurement stays in
test_experiment.py's demo fixture (which checks the machine summary in fidelity.json), and
`bench.measure_ceilings` is tested in test_bench.py; every other demo test records this
fixed state instead: equal ceilings at the start and the end (no drift, so the machine
never reads busy on their account).
"""

from __future__ import annotations

import os

QUIET = {"matmul_flops_per_s": 1.0e11, "copy_bytes_per_s": 1.0e10, "load_1min": 0.0,
         "cpu_count": os.cpu_count()}


def quiet_machine(monkeypatch) -> None:
    """Make ``monkeypatch`` record `QUIET` for the demo's machine state."""
    from specsim.experiment import pipeline
    monkeypatch.setattr(pipeline, "machine_state", lambda: dict(QUIET))
