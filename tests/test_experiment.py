"""The end-to-end pipeline (measure → fit → predict → compare) on a tiny model: it runs
in seconds, writes every file, and its numbers obey identities that hold whatever the
timings are."""

import json

import numpy as np
import pandas as pd
import pytest

from specsim import analytic, experiment, models
from specsim.experiment import DemoSettings, alpha_by_slot, default_layer_skip, warmup_tokens


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "results"
    target = models.load("tiny-llama", seed=3)
    settings = DemoSettings.quick_settings(
        ks=(2,), kinds=("code", "prose"), temperatures=(0.0,), max_new_tokens=12,
        layer_skip=(0, 2), hardware=("h100-sxm", "tpu-v5e"), sweep_repeats=2,
        out_dir=str(out))
    return experiment.run_demo(settings, target=target, progress=False, log=lambda m: None)


def test_writes_every_file(demo):
    out = demo.settings.out_dir
    for name in ("report.md", "runs.csv", "sweeps.csv", "fits.json", "hardware.csv",
                 "speedup_vs_k.png", "acceptance_by_position.png", "roofline.png",
                 "latency_vs_tokens.png", "environment.json"):
        assert name in demo.files
    report = open(f"{out}/report.md").read()
    assert "MAPE" in report and "tiny-llama" in report
    runs = pd.read_csv(f"{out}/runs.csv")
    # 1 temperature x (autoregressive + 2 drafters x 1 K) x 2 kinds
    assert len(runs) == 1 * 3 * 2
    assert set(json.load(open(f"{out}/fits.json"))) == {"tiny-llama", "tiny-llama-layers2"}


def test_greedy_speculative_text_equals_autoregressive(demo):
    runs = demo.runs
    greedy = runs[runs["temperature"] == 0.0]
    for kind in ("code", "prose"):
        rows = greedy[greedy["kind"] == kind]
        assert rows["text"].nunique() == 1 or rows["text"].eq("").all()
    assert (runs["new_tokens"] == 12).all()


def test_positional_prediction_uses_the_measured_tokens_per_iteration(demo):
    spec = demo.runs[demo.runs["drafter"] != "autoregressive"]
    np.testing.assert_allclose(spec["E_positional"], spec["tokens_per_iteration"], rtol=1e-3)
    np.testing.assert_allclose(spec["E_iid"], analytic.expected_tokens(spec["alpha"], spec["k"]))
    # predictions follow the closed form with the fitted costs
    s = analytic.speedup_from_costs(spec["E_iid"], spec["k"], spec["t_draft"],
                                    spec["t_target_1"], spec["t_verify"])
    np.testing.assert_allclose(spec["pred_speedup_iid"], s)
    assert (spec.loc[spec["drafter"].str.startswith("ngram"), "t_draft"] == 0).all()
    assert np.isfinite(demo.mape()) and demo.mape() >= 0


def test_hardware_predictions_cover_rows_and_this_machine(demo):
    hw = demo.hardware
    assert set(hw["hardware"]) == {"this machine (fit)", "h100-sxm", "tpu-v5e"}
    # n-gram drafting costs nothing in the model: speedup = E t(1) / t(K+1) <= E
    ng = hw[hw["drafter"].str.startswith("ngram")]
    E = analytic.expected_tokens(ng["alpha"], ng["k"])
    assert (ng["pred_speedup"] <= E + 1e-9).all()


def test_alpha_by_slot_counts_prefixes():
    accepted = np.array([[2, 0], [1, -1], [0, -1]])      # -1: row finished
    alpha, rates = alpha_by_slot(accepted, 2)
    assert alpha == pytest.approx(3 / 8)
    np.testing.assert_allclose(rates, [2 / 4, 1 / 2])
    assert analytic.expected_tokens_positional(rates) == pytest.approx(1 + 3 / 4)


def test_helpers():
    assert default_layer_skip(30) == tuple(i for i in range(30) if not 12 <= i < 18)
    assert warmup_tokens(64) == 33 and warmup_tokens(40) == 33 and warmup_tokens(5) == 1


@pytest.mark.parametrize("bad, match", [
    (dict(ks=()), "ks"), (dict(ks=(0,)), "ks"), (dict(drafters=("eagle",)), "drafters"),
    (dict(kinds=("poetry",)), "kinds"), (dict(temperatures=(-1.0,)), "temperatures"),
    (dict(max_new_tokens=0), "max_new_tokens"),
])
def test_bad_settings(bad, match):
    with pytest.raises(ValueError, match=match):
        DemoSettings(**bad)
