"""specsim.batching: speedup against batch size and context from a roofline time model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from specsim import analytic, batching, roofline
from specsim.models.config import SMOLLM2_135M, SMOLLM2_360M, ModelConfig
from specsim.plots.batching import speedup_vs_load

TARGET = ModelConfig(name="t-8b", vocab_size=128256, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8,
                     head_dim=128, d_ff=14336, dtype="bfloat16")
DRAFT = ModelConfig(name="d-1b", vocab_size=128256, d_model=2048, n_layers=16, n_heads=32, n_kv_heads=8,
                    head_dim=64, d_ff=8192, dtype="bfloat16")


def test_grid_matches_hand_computation():
    hw = roofline.load_hardware("h100-sxm")
    tm = batching.hardware_time_model(hw, dtype="bfloat16", overhead=2e-5)
    g = batching.speedup_grid(TARGET, DRAFT, tm, [0.7], [3], [8], [256])
    assert len(g) == 1
    r = g.iloc[0]

    def t(cfg, n):  # oracle: roofline by hand from the FLOPs and bytes
        cost = roofline.forward_cost(cfg, batch=8, n_tokens=n, context=256, dtype="bfloat16")
        return 2e-5 + max(cost.flops / hw.peak("bfloat16"), cost.bytes / hw.bandwidth)

    assert r["t_target_1"] == pytest.approx(t(TARGET, 1), rel=1e-12)
    assert r["t_target_verify"] == pytest.approx(t(TARGET, 4), rel=1e-12)
    assert r["t_draft"] == pytest.approx(t(DRAFT, 1), rel=1e-12)
    e = (1 - 0.7**4) / 0.3
    assert r["speedup"] == pytest.approx(e * t(TARGET, 1) / (3 * t(DRAFT, 1) + t(TARGET, 4)), rel=1e-12)


def test_verify_is_free_at_batch_one_and_costs_k_plus_one_when_compute_bound():
    tm = batching.hardware_time_model("h100-sxm")
    g = batching.speedup_grid(TARGET, DRAFT, tm, [0.8], [4], [1, 4096], [128])
    small, large = g[g["batch"] == 1].iloc[0], g[g["batch"] == 4096].iloc[0]
    assert small["verify_ratio"] < 1.02
    assert large["verify_ratio"] == pytest.approx(5.0, rel=0.02)


def test_best_k_is_the_grid_argmax_and_speedup_falls_with_batch():
    tm = batching.hardware_time_model("h100-sxm")
    batches = 2 ** np.arange(0, 13)
    g = batching.speedup_grid(TARGET, DRAFT, tm, [0.6, 0.9], range(1, 9), batches, [128])
    best = batching.best_k(g)
    assert len(best) == 2 * len(batches)
    for _, r in best.iterrows():
        d = g[(g["alpha"] == r["alpha"]) & (g["batch"] == r["batch"])]
        assert r["speedup_opt"] == d["speedup"].max()
        assert r["k_opt"] == d.loc[d["speedup"] == d["speedup"].max(), "k"].min()
    for a in (0.6, 0.9):
        s = best[best["alpha"] == a].sort_values("batch")["speedup_opt"].to_numpy()
        assert np.all(np.diff(s[:9]) <= 1e-12)              # falls up to batch 256
        k = best[best["alpha"] == a].sort_values("batch")["k_opt"].to_numpy()
        assert k[0] >= k[-1] == 1                           # the best K shrinks to 1
    # with free drafts at batch 1 the speedup is at most E(α, K*), and close to it
    b1 = best[best["batch"] == 1]
    assert (b1["speedup_opt"] < analytic.expected_tokens(b1["alpha"].to_numpy(), b1["k_opt"].to_numpy())).all()


def test_break_even_batch_on_short_context_but_not_long():
    tm = batching.hardware_time_model("h100-sxm")
    g = batching.speedup_grid(TARGET, DRAFT, tm, [0.8], range(1, 9), 2 ** np.arange(0, 13), [128, 2048])
    be = batching.break_even(batching.best_k(g), "batch").set_index("context")
    short, long_ = be.loc[128], be.loc[2048]
    assert short["last_paying"] < short["crossing"] < short["first_losing"]
    assert 100 < short["crossing"] < 1000
    # reading the KV cache keeps the verify pass memory-bound: pays on the whole grid
    assert np.isnan(long_["first_losing"]) and long_["last_paying"] == 4096


def test_break_even_interpolates_in_log_space():
    best = pd.DataFrame({"alpha": 0.5, "context": 64, "batch": [1, 2, 4, 8],
                         "speedup_opt": [1.5, 1.2, 0.8, 0.7], "k_opt": 1})
    be = batching.break_even(best, "batch").iloc[0]
    assert be["last_paying"] == 2 and be["first_losing"] == 4
    assert be["crossing"] == pytest.approx(2 * 2**0.5)      # halfway between 1.2 and 0.8 in log2
    never = batching.break_even(best.assign(speedup_opt=[2, 2, 2, 2]), "batch").iloc[0]
    assert np.isnan(never["first_losing"]) and never["last_paying"] == 8
    with pytest.raises(ValueError, match="along"):
        batching.break_even(best, "alpha")


def test_fit_time_model_uses_predict_forward():
    calls = []

    class Stub:
        kind = "max"

        def predict_forward(self, cfg, n_tokens, batch, context, dtype=None):
            calls.append((cfg.name, n_tokens, batch, context))
            return 1e-3 * (1 + 0.01 * n_tokens * batch) if cfg is SMOLLM2_360M else 3e-4

    g = batching.speedup_grid(SMOLLM2_360M, SMOLLM2_135M, batching.fit_time_model(Stub()), [0.75], [2], [3], [16])
    assert ("smollm2-360m", 3, 3, 16) in calls and ("smollm2-135m", 1, 3, 16) in calls
    r = g.iloc[0]
    assert r["speedup"] == pytest.approx((1 + 0.75 + 0.75**2) * 1.03e-3 / (2 * 3e-4 + 1.09e-3))


@pytest.mark.parametrize("kwargs, match", [
    (dict(alpha=[1.2]), "alpha"),
    (dict(ks=[0, 2]), "ks"),
    (dict(batches=[2.5]), "batches"),
    (dict(contexts=[3]), "contexts"),
])
def test_bad_inputs(kwargs, match):
    args = dict(alpha=[0.5], ks=[1, 4], batches=[1], contexts=[64]) | kwargs
    with pytest.raises(ValueError, match=match):
        batching.speedup_grid(SMOLLM2_360M, SMOLLM2_135M, batching.hardware_time_model("h100-sxm"), **args)


def test_figure():
    tm = batching.hardware_time_model("h100-sxm")
    g = batching.speedup_grid(TARGET, DRAFT, tm, [0.8], range(1, 5), [1, 64, 1024], [128])
    fig = speedup_vs_load(g, batching.best_k(g), "batch", k_ref=4)
    assert isinstance(fig, Figure) and len(fig.axes) == 3 and all(a.has_data() for a in fig.axes)
