"""specsim.report: report.md opens with a headline (plain decode speed, the best setting
and its speedup), checked against the committed CPU demo's runs table by hand."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from specsim import report
from specsim import schema as S

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo-cpu"


@pytest.fixture(scope="module")
def tables():
    return report.read_demo_tables(DEMO)


def test_headline_numbers_by_hand(tables):
    runs = tables[S.RUNS]
    h = report.headline(runs)
    ar = runs[runs[S.DRAFTER] == "autoregressive"]
    for p in h["plain"]:
        rows = ar[(ar[S.TEMPERATURE] == p[S.TEMPERATURE]) & (ar[S.BATCH] == 1)]
        per_token = np.median(rows[S.DECODE_S] / rows[S.NEW_TOKENS])
        assert p["ms_per_token"] == pytest.approx(1e3 * per_token)
        assert p["tokens_per_s"] == pytest.approx(1 / per_token)
    spec = runs[runs[S.DRAFTER] != "autoregressive"]
    mean = spec.groupby([S.DRAFTER, S.TEMPERATURE, S.K])[S.MEASURED_SPEEDUP].mean()
    (drafter, temp, k), best = mean.idxmax(), mean.max()
    b = h["best"]
    assert (b[S.DRAFTER], b[S.TEMPERATURE], b[S.K]) == (drafter, temp, k)
    assert b["speedup"] == pytest.approx(best)
    same = spec[(spec[S.DRAFTER] == drafter) & (spec[S.TEMPERATURE] == temp) & (spec[S.K] == k)]
    assert (b["speedup_min"], b["speedup_max"]) == pytest.approx(
        (same[S.MEASURED_SPEEDUP].min(), same[S.MEASURED_SPEEDUP].max()))
    plain = next(p for p in h["plain"] if p[S.TEMPERATURE] == temp)
    assert b["ms_per_token"] == pytest.approx(plain["ms_per_token"] / best)


def _result(tables):
    env = json.loads((DEMO / "environment.json").read_text())
    settings = SimpleNamespace(quick=False, parts=("roofline", "fidelity"), kinds=("code",),
                               hardware_dtype="bfloat16")
    return SimpleNamespace(runs=tables[S.RUNS], settings=settings, environment=env,
                           ceilings=pd.DataFrame(), fits={}, hardware=pd.DataFrame())


def test_report_md_opens_with_the_headline(tables):
    md = report.report_md(_result(tables))
    sections = [line for line in md.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Headline"
    head = md.split("## Headline", 1)[1].split("\n## ", 1)[0]
    h = report.headline(tables[S.RUNS])
    assert f"{h['plain'][0]['ms_per_token']:.1f} ms/token" in head
    assert f"{h['best']['speedup']:.2f}× measured" in head and "Best setting" in head
    clock = tables[S.RUNS][S.CLOCK].iloc[0] if S.CLOCK in tables[S.RUNS] else "wall"
    assert f"clock: {clock}" in head                  # the CPU clock counts every thread


def test_headline_when_nothing_pays_and_without_baseline(tables):
    runs = tables[S.RUNS].copy()
    spec = runs[S.DRAFTER] != "autoregressive"
    runs.loc[spec, S.MEASURED_SPEEDUP] = 0.5
    md = "\n".join(report._headline_section(SimpleNamespace(runs=runs)))
    assert "No setting beat plain decode" in md and "0.50× measured" in md
    assert report.headline(runs[spec]) is None


def test_mape_line_says_what_was_not_measured():
    """Without the roofline part's sweep the swept-cost prediction is NaN in every row:
    the MAPE line says it was not measured (and how to measure it), never "nan%"."""
    runs = pd.DataFrame({S.DRAFTER: ["ngram-3", "ngram-3", S.AUTOREGRESSIVE],
                         S.MEASURED_SPEEDUP: [2.0, 1.0, 1.0],
                         S.PRED_IID: [2.2, 0.9, np.nan], S.PRED_POSITIONAL: [2.0, 1.05, np.nan],
                         S.PRED_SWEPT: [np.nan, np.nan, np.nan]})
    line = report._mape_line(runs)
    assert "nan" not in line.lower()
    assert line.startswith("i.i.d. α 10.0%, per-position α 2.5% (fitted costs)")
    assert "not measured (it needs the roofline part's sweep: --parts roofline)" in line
    runs = runs.assign(**{S.TEMPERATURE: 0.0, S.K: 4, S.BATCH: 1, S.ALPHA: 0.5,
                          S.TOKENS_PER_ITERATION: 2.0, S.LOOP_OVERHEAD: 1.0})
    table = report.speedup_table(runs)              # the unmeasured columns are left out
    assert "pred_swept" not in table and "err_swept_%" not in table and "pred_iid" in table
    assert f"MAPE {S.PRED_SWEPT}" not in report.error_summary(runs)
    runs[S.PRED_SWEPT] = [1.0, 1.0, np.nan]
    assert report._mape_line(runs).endswith("sweep's measured pass times 25.0%")
    assert "err_swept_%" in report.speedup_table(runs)
    assert f"MAPE {S.PRED_SWEPT}" in report.error_summary(runs)


def test_the_header_says_what_the_programs_compiled_with():
    assert report._compiler({"compiler_options": {"xla_backend_optimization_level": 1}}) == \
        "compiler options xla_backend_optimization_level=1"
    assert report._compiler({"compiler_options": {}}) == "compiler options XLA's defaults"
    assert report._compiler({}) == "compiler options not recorded"
