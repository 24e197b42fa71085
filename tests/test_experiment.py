"""The end-to-end pipeline (measure → fit → predict → compare) on a tiny model: it runs
in seconds, writes every file, and its numbers obey identities that hold whatever the
timings are."""

import json

import numpy as np
import pandas as pd
import pytest

from specsim import analytic, experiment, models, report, schema
from specsim.decode import warmup_tokens
from specsim.experiment import DemoSettings, default_layer_skip
from specsim.experiment import parts as registry
from specsim.plots.experiment import demo_figures


def _settings(out, **changes):
    # 64 new tokens: the tiny model decodes a token in tens of microseconds, and at 12 a
    # loaded host could time every run's decode at under its ~1 ms prefill (NaN speedups)
    base = dict(ks=(2,), kinds=("code", "prose"), temperatures=(0.0,), max_new_tokens=64,
                layer_skip=(0, 2), hardware=("h100-sxm", "tpu-v5e"), sweep_repeats=2,
                out_dir=str(out))
    base.update(changes)
    return DemoSettings.quick_settings(**base)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "results"
    target = models.load("tiny-llama", seed=3)
    result = experiment.run_demo(_settings(out), target=target, progress=False,
                                 log=lambda m: None)
    result.files = report.write_demo(result, out, demo_figures(result))
    return result


def test_writes_every_file(demo):
    out = demo.settings.out_dir
    for name in ("report.md", "runs.csv", "sweeps.csv", "fits.json", "hardware.csv",
                 "ceilings.csv", "speedup_table.csv",
                 "speedup_vs_k.png", "acceptance_by_position.png", "roofline.png",
                 "latency_vs_tokens.png", "environment.json"):
        assert name in demo.files
    text = open(f"{out}/report.md").read()
    assert "MAPE" in text and "tiny-llama" in text and "## 4." in text
    from specsim.models import kernels
    used = "kernel" if kernels.use_kernel("auto", 1, "float32") else "xla"
    assert json.load(open(f"{out}/environment.json"))["matmul"] == used
    assert f"matmul {used}" in text
    runs = schema.read_runs(f"{out}/runs.csv")
    # 1 temperature x (autoregressive + 2 drafters x 1 K) x 2 kinds
    assert len(runs) == 1 * 3 * 2
    # the forward fits of both models, and the fit of the target's pass-program sweep
    assert set(json.load(open(f"{out}/fits.json"))) == {"tiny-llama", "tiny-llama-layers2",
                                                        "tiny-llama passes"}
    assert isinstance(demo.runs, pd.DataFrame) and isinstance(demo.sweeps, pd.DataFrame)


def test_greedy_speculative_text_equals_autoregressive(demo):
    runs = demo.runs
    greedy = runs[runs[schema.TEMPERATURE] == 0.0]
    for kind in ("code", "prose"):
        rows = greedy[greedy[schema.KIND] == kind]
        assert rows[schema.TEXT].nunique() == 1 or rows[schema.TEXT].eq("").all()
    assert (runs[schema.NEW_TOKENS] == 64).all() and (runs[schema.BATCH] == 1).all()


def test_per_position_columns_are_counts_of_accepted_prefixes(demo):
    spec = schema.speculative(demo.runs)
    assert schema.position_columns(demo.runs) == [1, 2]
    for _, r in spec.iterrows():
        rates, counts = schema.position_rates(r), schema.position_counts(r)
        # every iteration reaches position 1; position j+1 is reached by those accepted at j
        assert counts[0] == r[schema.ITERATIONS]
        rates = np.nan_to_num(rates)                       # NaN where no iteration got there
        assert counts[1] == pytest.approx(counts[0] * rates[0])
        # α per slot is the mean accepted count over K slots
        accepted = float(np.sum(counts * rates))
        assert r[schema.ALPHA] == pytest.approx(accepted / (2 * counts[0]))


def test_positional_prediction_uses_the_measured_tokens_per_iteration(demo):
    spec = schema.speculative(demo.runs)
    np.testing.assert_allclose(spec[schema.E_POSITIONAL], spec[schema.TOKENS_PER_ITERATION],
                               rtol=1e-3)
    np.testing.assert_allclose(spec[schema.E_IID],
                               analytic.expected_tokens(spec[schema.ALPHA], spec[schema.K]))
    # predictions follow the closed form with the pass times measured in-run
    s = analytic.speedup_from_costs(spec[schema.E_IID], spec[schema.K], spec[schema.T_DRAFT],
                                    spec[schema.T_TARGET_1], spec[schema.T_VERIFY])
    np.testing.assert_allclose(spec[schema.PRED_IID], s)
    # and, with the roofline part run, from the fitted roofline's pass times
    fit_t = demo.fits["tiny-llama"]
    cfg = models.get_preset("tiny-llama")
    for _, r in spec[spec[schema.DRAFTER].str.startswith("ngram")].iterrows():
        k, S = int(r[schema.K]), int(r[schema.CACHE_LEN])
        expected = analytic.speedup_from_costs(
            r[schema.E_EFFECTIVE], k, 0.0, fit_t.predict_forward(cfg, 1, 1, S),
            fit_t.predict_forward(cfg, k + 1, 1, S))
        assert r[schema.PRED_FIT] == pytest.approx(expected)
    assert (spec[schema.T_DRAFT] >= 0).all()
    assert np.isfinite(demo.mape()) and demo.mape() >= 0
    # the report's error columns are the same numbers
    table = report.speedup_table(demo)
    err = 100 * (table["pred_iid"] - table["measured"]) / table["measured"]
    np.testing.assert_allclose(table["err_iid_%"], err)


def test_the_prediction_before_the_run_uses_the_fit_and_calibrated_alpha(demo):
    """pred_speedup_prior: the fitted roofline's pass times and the per-position α of an
    untimed run on the run's prompt; pred_speedup_prior_other_prompts: the same with the α
    of untimed runs on other prompts of the kind; neither reads the timed run."""
    from specsim import simulate
    from specsim.experiment import prior
    from specsim.experiment.decomposition import finite_run_tokens

    spec = schema.speculative(demo.runs)
    cal = demo.tables[schema.ACCEPTANCE_PRIOR]
    assert set(cal[schema.DRAFTER]) == {r for r in spec[schema.DRAFTER]}
    # the roofline fitted to the sweep of the loop's pass programs, read at the context
    # the run's pass programs ran at (the loop's mean)
    from specsim.experiment import pass_sweep
    cfg = models.get_preset("tiny-llama")
    tm = pass_sweep.time_model(demo.fits, cfg)
    assert set(demo.tables[schema.PASS_SWEEP][schema.MODEL]) == {"tiny-llama passes"}
    ng = spec[spec[schema.DRAFTER].str.startswith("ngram")]
    assert len(ng) and (ng[schema.ALPHA_PRIOR_SOURCE] == prior.THIS_PROMPT).all()
    assert set(cal[schema.ALPHA_SOURCE]) == {prior.THIS_PROMPT, prior.OTHER_PROMPTS}
    for _, r in ng.iterrows():
        k, S = int(r[schema.K]), int(r[schema.PASS_CONTEXT])
        assert 2 <= S < int(r[schema.CACHE_LEN])
        for source, col in ((prior.THIS_PROMPT, schema.PRED_PRIOR),
                            (prior.OTHER_PROMPTS, schema.PRED_PRIOR_OTHER)):
            c = cal[(cal[schema.DRAFTER] == r[schema.DRAFTER]) & (cal[schema.KIND] == r[schema.KIND])
                    & (cal[schema.ALPHA_SOURCE] == source)]
            rates = np.nan_to_num(c.sort_values("position")[schema.ALPHA].to_numpy(float)[:k])
            e = finite_run_tokens(simulate.tokens_pmf_positional(rates),
                                  int(r[schema.NEW_TOKENS]) - 1, 1)
            expected = analytic.speedup_from_costs(e, k, 0.0, tm(cfg, 1, 1, S),
                                                   tm(cfg, k + 1, 1, S))
            assert r[col] == pytest.approx(float(expected))
            if source == prior.THIS_PROMPT:
                e_prior = e
        e = e_prior
        if not (np.isfinite(r[schema.MEASURED_SPEEDUP]) and np.isfinite(r[schema.ERR_TOTAL])
                and np.isfinite(r[schema.MEASURED_CI_LO]) and r[schema.MEASURED_CI_LO] > 0):
            continue      # a tiny-model run whose decode time drowned in its prefill's noise
        assert r[schema.ERR_PRIOR] == pytest.approx(
            100 * np.log(r[schema.PRED_PRIOR] / r[schema.MEASURED_SPEEDUP]))
        lo, hi = r[schema.MEASURED_CI_LO], r[schema.MEASURED_CI_HI]
        assert (r[schema.ERR_PRIOR_CI_LO], r[schema.ERR_PRIOR_CI_HI]) == pytest.approx(
            (100 * np.log(r[schema.PRED_PRIOR] / hi), 100 * np.log(r[schema.PRED_PRIOR] / lo)))
        # its miss in three terms that add up: α before the run, fitted costs, in-run miss
        assert r[schema.ERR_PRIOR_ALPHA] == pytest.approx(100 * np.log(e / r[schema.E_EFFECTIVE]))
        assert r[schema.ERR_PRIOR_ALPHA] + r[schema.ERR_PRIOR_FIT] + r[schema.ERR_TOTAL] == \
            pytest.approx(r[schema.ERR_PRIOR])
    # every run carries its interval and rounds; fidelity.json scores both predictions
    ok = spec[spec[schema.MEASURED_CI_LO].notna()]
    assert len(ok) >= len(spec) // 2        # tiny-model runs a loaded host can swallow
    assert (ok[schema.MEASURED_CI_LO] <= ok[schema.MEASURED_SPEEDUP] + 1e-12).all()
    assert (ok[schema.MEASURED_CI_HI] >= ok[schema.MEASURED_SPEEDUP] - 1e-12).all()
    assert (spec[schema.ROUNDS] >= demo.settings.repeats).all()
    f = json.load(open(f"{demo.settings.out_dir}/fidelity.json"))
    assert {"mape_pct", "max_abs_error_pct", "coverage_pct"} <= set(f["prior"])
    assert "coverage_pct" in f and "busy" in f["machine"]


def test_hardware_predictions_cover_rows_and_this_machine(demo):
    hw = demo.hardware
    assert set(hw[schema.HARDWARE_NAME]) == {schema.THIS_MACHINE, "h100-sxm", "tpu-v5e"}
    # n-gram drafting costs nothing in the model: speedup = E t(1) / t(K+1) <= E
    ng = hw[hw[schema.DRAFTER].str.startswith("ngram")]
    E = analytic.expected_tokens(ng[schema.ALPHA], ng[schema.K])
    assert (ng[schema.PRED_SPEEDUP] <= E + 1e-9).all()


@pytest.mark.slow
def test_roofline_part_alone(tmp_path):
    """Slow: the roofline part alone through `run_demo` and `report.write_demo` is the
    default run's test_cli.py::test_demo_command_composes_experiment_report_and_plots,
    which checks the same files and report (no runs.csv or hardware.csv, a sweep, no
    fidelity section); this is its library-level twin."""
    target = models.load("tiny-llama", seed=3)
    result = experiment.run_demo(_settings(tmp_path, parts=("roofline",), drafters=("ngram",)),
                                 target=target, progress=False, log=lambda m: None)
    assert result.runs.empty and result.hardware.empty and not result.sweeps.empty
    files = report.write_demo(result, tmp_path / "out", demo_figures(result))
    assert "runs.csv" not in files and "roofline.png" in files
    assert "## 2–3." not in (tmp_path / "out" / "report.md").read_text()


def test_parts_registry_adds_what_a_part_needs():
    assert [p.name for p in registry.resolve(["hardware"])] == ["roofline", "fidelity", "hardware"]
    assert [p.name for p in registry.resolve(["roofline"])] == ["roofline"]
    for part in registry.PARTS.values():
        assert all(dep in registry.PARTS for dep in part.requires)
    with pytest.raises(ValueError, match="parts must"):
        DemoSettings(parts=("fidelity", "astrology"))


def test_helpers():
    assert default_layer_skip(30) == tuple(i for i in range(30) if not 12 <= i < 18)
    assert warmup_tokens(64) == 33 and warmup_tokens(40) == 33 and warmup_tokens(5) == 1


def test_old_runs_tables_are_upgraded():
    old = pd.DataFrame({"drafter": ["ngram-3"], "k": [2], "per_position": ["[0.5, 0.25]"]})
    new = schema.upgrade_runs(old)
    assert new[schema.alpha_pos(1)].iloc[0] == 0.5 and new[schema.alpha_pos(2)].iloc[0] == 0.25
    assert new[schema.BATCH].iloc[0] == 1 and "per_position" not in new


@pytest.mark.parametrize("bad, match", [
    (dict(ks=()), "ks"), (dict(ks=(0,)), "ks"), (dict(drafters=("eagle",)), "drafters"),
    (dict(kinds=("poetry",)), "kinds"), (dict(temperatures=(-1.0,)), "temperatures"),
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(parts=()), "parts"),
])
def test_bad_settings(bad, match):
    with pytest.raises(ValueError, match=match):
        DemoSettings(**bad)


def test_a_report_without_a_finite_prediction_says_why_instead_of_failing():
    """Runs too short for the timer leave every measured speedup NaN (decode time = time
    less the prefill, not positive): the fidelity headline says so."""
    empty = {"mape_pct": None, "max_abs_error_pct": None, "n_runs": 0}
    assert "not scored" in report.fidelity_headline(empty)
    assert report.fidelity_headline({"mape_pct": 4.21, "max_abs_error_pct": 6.9,
                                     "n_runs": 12}) == (
        "MAPE 4.2%, worst 6.9% over 12 speculative runs")
    assert report.fidelity_headline({"mape_pct": 4.21, "max_abs_error_pct": 6.9,
                                     "coverage_pct": 91.7, "n_runs": 12}) == (
        "MAPE 4.2%, worst 6.9%, coverage 92% over 12 speculative runs")
    assert report.fidelity_headline({"mape_pct": 4.21, "max_abs_error_pct": 6.9,
                                     "coverage_pct": 91.7, "agreement_pct": 100.0,
                                     "n_runs": 12}) == (
        "MAPE 4.2%, worst 6.9%, coverage 92%, agreement 100% over 12 speculative runs")
