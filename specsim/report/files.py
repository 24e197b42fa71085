"""The demo's folder: every table, report.md and the figures the command line hands in,
built beside the target and swapped in at the end, so an interrupted run never leaves
a half-written report."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Mapping

from specsim import schema as S
from specsim.report.fidelity import fidelity_summary, has_inrun, machine_summary
from specsim.report.sections import report_md
from specsim.report.tables import speedup_table


def _write_tables(result, folder: Path) -> None:
    for name, table in getattr(result, "tables", {}).items():
        table.to_csv(folder / f"{name}.csv", index=False)
    if not result.runs.empty:
        speedup_table(result).to_csv(folder / "speedup_table.csv", index=False)
    if has_inrun(result.runs):
        f = fidelity_summary(result)
        machine = machine_summary(result)
        if machine:
            f["machine"] = machine
        (folder / f"{S.FIDELITY}.json").write_text(json.dumps(f, indent=1, default=str))
    (folder / "fits.json").write_text(json.dumps(
        {k: v.as_dict() for k, v in result.fits.items()}, indent=1, default=str))
    (folder / "environment.json").write_text(
        json.dumps(result.environment, indent=1, default=str))


def _swap_in(tmp: Path, out_dir: Path) -> None:
    old = None
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_demo(result, out_dir: Path, figures: Mapping[str, object] | None = None) -> list[str]:
    """Write every table, report.md and ``figures`` (file name -> anything with
    ``savefig``, e.g. from `specsim.plots.experiment.demo_figures`) into a fresh folder
    beside ``out_dir`` and swap it in. Returns the file names."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        _write_tables(result, tmp)
        for name, fig in (figures or {}).items():
            fig.savefig(tmp / name, dpi=110)
        (tmp / "report.md").write_text(report_md(result))
        files = sorted(p.name for p in tmp.iterdir())
        _swap_in(tmp, out_dir)
        return files
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
