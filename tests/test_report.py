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
from specsim.report.overview import headline_section
from specsim.report.sections import _compiler

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
    spec = spec[~spec[S.DRAFTER].str.startswith("instrument")]   # the headline's: deployable
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
    assert f"{h['best']['speedup']:.2f}× measured" in head
    assert "Best drafter you can deploy" in head or "No deployable drafter" in head
    clock = tables[S.RUNS][S.CLOCK].iloc[0] if S.CLOCK in tables[S.RUNS] else "wall"
    assert f"clock: {clock}" in head                  # the CPU clock counts every thread


def test_headline_when_nothing_pays_and_without_baseline(tables):
    runs = tables[S.RUNS].copy()
    spec = runs[S.DRAFTER] != "autoregressive"
    runs.loc[spec, S.MEASURED_SPEEDUP] = 0.5
    md = "\n".join(headline_section(SimpleNamespace(runs=runs)))
    assert "No deployable drafter beat plain decode" in md and "0.50× measured" in md
    assert report.headline(runs[spec]) is None


def test_the_headline_names_a_drafter_a_user_can_deploy():
    """The instrument (set α and c) can be the fastest setting of a demo, yet the
    headline names the best deployable drafter and gives the instrument its role."""
    runs = pd.DataFrame({
        S.DRAFTER: [S.AUTOREGRESSIVE, "instrument:a0.9:L0", "ngram-3", "layer-skip:24/30"],
        S.DRAFTER_KIND: [S.AUTOREGRESSIVE, "instrument", "ngram", "layer-skip"],
        S.TEMPERATURE: 0.0, S.K: [0, 8, 4, 2], S.BATCH: 1, S.KIND: "code",
        S.ALPHA: [np.nan, 0.9, 0.6, 0.5], S.TOKENS_PER_ITERATION: [np.nan, 5.0, 2.5, 1.8],
        S.MEASURED_SPEEDUP: [np.nan, 3.5, 1.6, 1.2], S.PRED_IID: [np.nan, 3.4, 1.5, 1.1],
        S.PRED_POSITIONAL: [np.nan, 3.4, 1.5, 1.1], S.LOOP_OVERHEAD: 1.0,
        S.DECODE_S: [0.8, 0.2, 0.5, 0.6], S.NEW_TOKENS: 40})
    h = report.headline(runs)
    assert h["best"][S.DRAFTER] == "ngram-3" and h["best"]["speedup"] == pytest.approx(1.6)
    assert h["instrument"][S.DRAFTER] == "instrument:a0.9:L0"
    md = "\n".join(headline_section(SimpleNamespace(runs=runs)))
    assert "Best drafter you can deploy: **ngram-3, K = 4" in md
    assert "instrument drafter is not one to deploy" in md and "to test the theory" in md
    assert md.index("ngram-3") < md.index("instrument:a0.9:L0")
    # without a drafter kind column (older tables), the name says which is the instrument
    h = report.headline(runs.drop(columns=[S.DRAFTER_KIND]))
    assert h["best"][S.DRAFTER] == "ngram-3"


def test_one_table_of_prediction_errors_labels_each_prediction():
    """The report's errors come in one table: the prediction before the run, the in-run
    one and the one with the expected acceptance, each labelled, with coverage beside MAPE
    and worst."""
    runs = pd.DataFrame({
        S.DRAFTER: ["ngram-3", "ngram-3", "instrument:a0.9:L0", S.AUTOREGRESSIVE],
        S.DRAFTER_KIND: ["ngram", "ngram", "instrument", S.AUTOREGRESSIVE],
        S.BATCH: 1, S.MEASURED_SPEEDUP: [2.0, 1.0, 1.5, np.nan],
        S.MEASURED_CI_LO: [1.9, 0.95, 1.45, np.nan], S.MEASURED_CI_HI: [2.1, 1.05, 1.55, np.nan],
        S.PREDICTED_SPEEDUP: [2.05, 1.2, 1.5, np.nan], S.PRED_PRIOR: [2.2, 0.9, 1.5, np.nan]})
    t = report.mape_table(runs)
    assert set(t["prediction"]) == {report.PREDICTION_LABELS["prior"],
                                    report.PREDICTION_LABELS["inrun"]}
    prior = t[(t["prediction"] == report.PREDICTION_LABELS["prior"]) & (t["runs"] == "all")]
    assert prior["MAPE %"].item() == pytest.approx(100 * (0.1 + 0.1 + 0) / 3, abs=1e-3)
    assert prior["worst %"].item() == pytest.approx(10.0)
    assert prior["coverage %"].item() == pytest.approx(100 / 3, abs=0.1)   # only the last
    inrun = t[(t["prediction"] == report.PREDICTION_LABELS["inrun"]) & (t["runs"] == "all")]
    assert inrun["coverage %"].item() == pytest.approx(200 / 3, abs=0.1)   # 2.05 and 1.5
    table = report.speedup_table(runs.assign(**{S.TEMPERATURE: 0.0, S.K: 4, S.ALPHA: 0.5,
                                                 S.TOKENS_PER_ITERATION: 2.0,
                                                 S.LOOP_OVERHEAD: 1.0,
                                                 S.PRED_SWEPT: np.nan}))
    assert "pred_swept" not in table and "pred_prior" in table and "ci_lo" in table


def test_the_header_says_what_the_programs_compiled_with():
    assert _compiler({"compiler_options": {"xla_backend_optimization_level": 1}}) == \
        "compiler options xla_backend_optimization_level=1"
    assert _compiler({"compiler_options": {}}) == "compiler options XLA's defaults"
    assert _compiler({}) == "compiler options not recorded"
