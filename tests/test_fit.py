"""specsim.fit: a fit recovers known parameters from synthetic noisy timings, reports
honest errors, refuses what it cannot fit, and inverts the speedup closed form."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from specsim import fit
from specsim.models.config import TINY_LLAMA
from specsim.roofline import forward_cost, forward_costs, predict_time

T0, P, W = 2e-4, 5e10, 1e10


def _synthetic(m=60, noise=0.02, seed=0, p=math.inf):
    """Passes whose FLOPs and bytes vary independently over 3-4 decades, so that both
    ceilings and the overhead are visible; lognormal noise of ``noise`` relative sd."""
    rng = np.random.default_rng(seed)
    flops = 10 ** rng.uniform(6, 10, m)
    bytes_ = 10 ** rng.uniform(5, 8.5, m)
    t = fit.roofline_time(flops, bytes_, T0, P, W, p) * np.exp(rng.normal(0, noise, m))
    return flops, bytes_, t


def test_fit_recovers_known_parameters():
    flops, bytes_, t = _synthetic()
    f = fit.fit_roofline(flops, bytes_, t)
    # 2% noise on 45 fitted points: ceilings within 5%, overhead within 15%
    assert f.peak_flops == pytest.approx(P, rel=0.05)
    assert f.bandwidth == pytest.approx(W, rel=0.05)
    assert f.t0 == pytest.approx(T0, rel=0.15)
    # the standard errors are honest: truth within 4 of them
    assert abs(f.peak_flops - P) < 4 * f.peak_flops_se
    assert abs(f.bandwidth - W) < 4 * f.bandwidth_se
    assert abs(f.t0 - T0) < 4 * f.t0_se
    assert f.r2 > 0.99 and f.mape_train < 4 and f.mape_heldout < 4
    assert f.n_train == 45 and f.n_heldout == 15 and len(f.heldout_index) == 15


def test_fit_is_exact_without_noise_and_held_out_is_deterministic():
    flops, bytes_, t = _synthetic(m=20, noise=0.0)
    a = fit.fit_roofline(flops, bytes_, t, seed=3)
    b = fit.fit_roofline(flops, bytes_, t, seed=3)
    assert a.heldout_index == b.heldout_index
    assert a.peak_flops == pytest.approx(P, rel=1e-5) and a.bandwidth == pytest.approx(W, rel=1e-5)
    assert a.t0 == pytest.approx(T0, rel=1e-4)
    assert a.mape_heldout < 1e-3
    assert fit.fit_roofline(flops, bytes_, t, seed=4).heldout_index != a.heldout_index


def test_smooth_fit_recovers_blend():
    flops, bytes_, t = _synthetic(m=80, noise=0.01, p=2.5, seed=1)
    f = fit.fit_roofline(flops, bytes_, t, kind="smooth")
    assert f.peak_flops == pytest.approx(P, rel=0.08)
    assert f.bandwidth == pytest.approx(W, rel=0.08)
    assert f.p == pytest.approx(2.5, rel=0.25)
    hard = fit.fit_roofline(flops, bytes_, t, kind="max")
    assert f.mape_train < hard.mape_train          # the blend is the right model here


def test_unidentified_ceiling_is_reported_as_unidentified():
    # every point memory-bound: the data say nothing about the compute ceiling
    rng = np.random.default_rng(2)
    bytes_ = 10 ** rng.uniform(6, 8, 30)
    flops = bytes_ * 0.1
    t = (T0 + bytes_ / W) * np.exp(rng.normal(0, 0.01, 30))
    f = fit.fit_roofline(flops, bytes_, t)
    assert f.bandwidth == pytest.approx(W, rel=0.05)
    assert f.unidentified == ("peak_flops",) and math.isnan(f.peak_flops_se)
    assert f.bandwidth_se < 0.05 * W and f.t0_se < 0.5 * T0      # the rest is determined
    text = f.summary()
    assert "peak      = unidentified" in text and "inf" not in text
    assert not f.identified


def test_identified_fit_says_so():
    f = fit.fit_roofline(*_synthetic())
    assert f.identified and not (f.unidentified or f.at_bound or f.degenerate)
    assert "unidentified" not in f.summary() and "WARNING" not in f.summary()


def test_bandwidth_never_exceeds_the_measured_ceiling():
    flops, bytes_, t = _synthetic(m=40, noise=0.01, seed=5)
    # a cap above the truth does not bind: the fit is unchanged and identified
    free = fit.fit_roofline(flops, bytes_, t, max_bandwidth=3 * W, max_peak_flops=3 * P)
    assert free.bandwidth == pytest.approx(W, rel=0.05) and free.at_bound == ()
    # a cap below what the points demand binds: W sits on it, marked, without an error
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fit.PoorFitWarning)
        capped = fit.fit_roofline(flops, bytes_, t, max_bandwidth=0.5 * W)
    assert capped.bandwidth <= 0.5 * W * (1 + 1e-9)
    assert capped.bandwidth == pytest.approx(0.5 * W, rel=1e-5)
    assert capped.at_bound == ("bandwidth",) and math.isnan(capped.bandwidth_se)
    assert capped.max_bandwidth == 0.5 * W
    assert any(n.startswith("bandwidth on its measured cap") for n in capped.degenerate)
    assert "at the measured ceiling" in capped.summary() and "inf" not in capped.summary()
    with pytest.raises(ValueError, match="max_bandwidth"):
        fit.fit_roofline(flops, bytes_, t, max_bandwidth=-1.0)


def test_ceiling_bounds_from_a_ceilings_table():
    table = pd.DataFrame({"device": ["cpu:0", "cpu:0"], "matmul_flops_per_s": [1e11, 2e11],
                          "copy_bytes_per_s": [4e10, 3e10]})
    assert fit.ceiling_bounds(table) == {"max_peak_flops": 2e11, "max_bandwidth": 4e10}
    with pytest.raises(ValueError, match="copy_bytes_per_s"):
        fit.ceiling_bounds(table.drop(columns="copy_bytes_per_s"))
    flops, bytes_, t = _synthetic(m=30)
    df = pd.DataFrame({"flops": flops, "bytes": bytes_, "time_s": t})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fit.PoorFitWarning)
        f = fit.fit_sweep(df, **fit.ceiling_bounds(table.assign(copy_bytes_per_s=0.4 * W)))
    assert f.bandwidth <= 0.4 * W * (1 + 1e-9) and "bandwidth" in f.at_bound


def test_zero_overhead_is_degenerate_not_a_number():
    rng = np.random.default_rng(7)
    flops, bytes_ = 10 ** rng.uniform(6, 10, 40), 10 ** rng.uniform(5, 8.5, 40)
    t = fit.roofline_time(flops, bytes_, 0.0, P, W) * np.exp(rng.normal(0, 0.01, 40))
    f = fit.fit_roofline(flops, bytes_, t)
    assert f.t0 < fit.T0_NEGLIGIBLE * t.min()
    assert "t0" in f.unidentified and math.isnan(f.t0_se)
    assert f.degenerate[0].startswith("t0 ≈ 0")
    assert f.bandwidth == pytest.approx(W, rel=0.05)             # the rest still fits
    text = f.summary()
    assert "≈ 0" in text and "inf" not in text and "e-1" not in text.split("\n")[1]


def test_smooth_fit_of_a_sum_puts_p_on_its_lower_bound():
    """Compute and memory time that add (p = 1) drive the blend exponent to its bound."""
    rng = np.random.default_rng(8)
    flops, bytes_ = 10 ** rng.uniform(6, 10, 60), 10 ** rng.uniform(5, 8.5, 60)
    t = T0 + flops / P + bytes_ / W
    f = fit.fit_roofline(flops, bytes_, t, kind="smooth")
    assert f.p == pytest.approx(fit.P_RANGE[0], rel=1e-6) and "p" in f.at_bound
    assert any(n.startswith("p at") and "add" in n for n in f.degenerate)
    assert f.bandwidth == pytest.approx(W, rel=0.02) and f.peak_flops == pytest.approx(P, rel=0.02)


def test_poor_fit_warns_below_the_stated_r2():
    rng = np.random.default_rng(9)
    flops, bytes_ = 10 ** rng.uniform(8, 9, 30), 10 ** rng.uniform(7, 8, 30)
    t = 0.05 * np.exp(rng.normal(0, 0.3, 30))          # times unrelated to the work
    with pytest.warns(fit.PoorFitWarning, match=f"below {fit.MIN_R2}"):
        f = fit.fit_roofline(flops, bytes_, t)
    assert f.r2 < fit.MIN_R2 and "WARNING" in f.summary() and not f.identified
    with warnings.catch_warnings():                    # a good fit is silent
        warnings.simplefilter("error", fit.PoorFitWarning)
        fit.fit_roofline(*_synthetic())


def test_predict_and_to_hardware_agree_with_predict_time():
    flops, bytes_, t = _synthetic(m=30)
    f = fit.fit_roofline(flops, bytes_, t)
    cost = forward_cost(TINY_LLAMA, 2, 8, 64)
    hw = f.to_hardware("this-cpu", dtype="float32")
    assert predict_time(hw, cost, overhead=f.t0) == pytest.approx(f.predict(cost.flops, cost.bytes))
    assert predict_time(f, cost, overhead=f.t0) == pytest.approx(f.predict(cost.flops, cost.bytes))
    got = f.predict_forward(TINY_LLAMA, np.array([1, 8]), 2, 64)
    assert got[1] == pytest.approx(f.predict(cost.flops, cost.bytes))
    assert "GFLOP/s" in f.summary()


def test_fit_sweep_from_dataframe():
    pts = [(n, b, c) for n in (1, 2, 4, 8, 16, 32, 64) for b in (1, 4) for c in (64, 128)]
    n, b, c = (np.array(x) for x in zip(*pts))
    fl, by = forward_costs(TINY_LLAMA, n, b, c)
    df = pd.DataFrame({"n_tokens": n, "batch": b, "context": c,
                       "time_s": fit.roofline_time(fl, by, 1e-5, 1e9, 2e8)})
    with pytest.raises(ValueError, match="cfg"):
        fit.fit_sweep(df)
    f = fit.fit_sweep(df, TINY_LLAMA)
    assert f.peak_flops == pytest.approx(1e9, rel=1e-3) and f.bandwidth == pytest.approx(2e8, rel=1e-3)
    df["flops"], df["bytes"] = fl, by
    assert fit.fit_sweep(df).bandwidth == pytest.approx(f.bandwidth)


@pytest.mark.parametrize("times, match", [
    ([1.0, 2.0], "times"),                                    # 2 points, 3 parameters
    ([1.0, float("nan"), 2.0, 3.0, 4.0], "times"),
    ([1.0, 0.0, 2.0, 3.0, 4.0], "times"),
    ([1.0, -2.0, 2.0, 3.0, 4.0], "times")])
def test_refusals(times, match):
    m = len(times)
    with pytest.raises(ValueError, match=match):
        fit.fit_roofline(np.full(m, 1e9), np.full(m, 1e8), times, holdout=0)


def test_refusals_other_arguments():
    with pytest.raises(ValueError, match="flops"):
        fit.fit_roofline([1e9, -1, 1e9, 1e9], [1e8] * 4, [1.0] * 4, holdout=0)
    with pytest.raises(ValueError, match="same length"):
        fit.fit_roofline([1e9] * 4, [1e8] * 3, [1.0] * 4)
    with pytest.raises(ValueError, match="holdout"):
        fit.fit_roofline([1e9] * 5, [1e8] * 5, [1.0] * 5, holdout=1.0)
    with pytest.raises(ValueError, match="times: 4 points"):     # 1 held out leaves 3 < 4
        fit.fit_roofline([1e9] * 4, [1e8] * 4, [1.0] * 4, kind="smooth", holdout=0.25)
    with pytest.raises(ValueError, match="kind"):
        fit.fit_roofline([1e9] * 4, [1e8] * 4, [1.0] * 4, kind="min")


# ---- (alpha, c) ------------------------------------------------------------------------------
def test_speedup_model_matches_analytic():
    analytic = pytest.importorskip("specsim.analytic")
    k = np.arange(1, 9)
    for a, c in ((0.0, 0.1), (0.6, 0.05), (0.95, 0.3), (1.0, 0.02)):
        np.testing.assert_allclose(fit.speedup_model(a, k, c), analytic.speedup(a, k, c))


def test_fit_speedup_recovers_alpha_and_c():
    k = np.arange(1, 7)
    exact = fit.fit_speedup(k, fit.speedup_model(0.55, k, 0.3))
    assert exact.alpha == pytest.approx(0.55, rel=1e-5) and exact.c == pytest.approx(0.3, rel=1e-5)
    np.testing.assert_allclose(exact.predict(k), fit.speedup_model(0.55, k, 0.3), rtol=1e-6)
    rng = np.random.default_rng(0)
    s = fit.speedup_model(0.8, k, 0.1) * np.exp(rng.normal(0, 0.003, k.size))
    joint = fit.fit_speedup(k, s)
    # the joint inverse is ill-conditioned (see fit_speedup): the curve is reproduced to
    # the noise, and it is at least as close to the data as the truth is
    assert joint.mape < 0.5 and joint.r2 > 0.999
    truth_sse = np.sum((np.log(fit.speedup_model(0.8, k, 0.1)) - np.log(s)) ** 2)
    fit_sse = np.sum((np.log(joint.predict(k)) - np.log(s)) ** 2)
    assert fit_sse <= truth_sse
    assert 0.6 < joint.alpha < 0.95
    # with alpha measured, c is well determined
    known = fit.fit_speedup(k, s, alpha=0.8)
    assert known.alpha == 0.8 and known.alpha_se == 0
    assert known.c == pytest.approx(0.1, rel=0.03)
    assert abs(known.c - 0.1) < 4 * known.c_se


def test_fit_speedup_refusals():
    with pytest.raises(ValueError, match="speedup"):
        fit.fit_speedup([2, 2, 2], [1.5, 1.6, 1.4])            # one distinct K
    with pytest.raises(ValueError, match="speedup"):
        fit.fit_speedup([1, 2], [1.5, float("nan")])
    with pytest.raises(ValueError, match="k"):
        fit.fit_speedup([0, 2], [1.5, 1.6])
    with pytest.raises(ValueError, match="alpha"):
        fit.fit_speedup([1, 2], [1.5, 1.6], alpha=1.5)


def test_speedup_fit_without_spare_points_prints_unidentified_not_inf():
    """Two points, two parameters: an exact fit, no errors. Not necessarily the (α, c)
    that drew them: S at K = 1 and 3 from (0.7, 0.1) is also drawn exactly by
    (0.6714, 0.0815); which root scipy lands on from the fit's starting points differs
    between scipy versions, so the check is the exact fit, not the root."""
    k = np.array([1.0, 3.0])
    s = fit.speedup_model(0.7, k, 0.1)
    f = fit.fit_speedup(k, s)
    np.testing.assert_allclose(fit.speedup_model(f.alpha, k, f.c), s, rtol=1e-9)
    assert 0.6 < f.alpha < 0.75 and math.isinf(f.c_se)
    text = f.summary()
    assert "unidentified" in text and "inf" not in text


def test_the_roofline_part_caps_its_fits_at_the_measured_ceilings():
    """The demo's roofline part fits each sweep under the ceilings it measured: a copy
    ceiling below the bandwidth the passes imply holds W at the cap (reported as at its
    bound) in the form it keeps, where the uncapped fit goes past it."""
    from types import SimpleNamespace
    from specsim.experiment.parts.roofline import fit_model_sweep
    flops, bytes_, t = _synthetic(m=40)
    df = pd.DataFrame({"flops": flops, "bytes": bytes_, "time_s": t})
    state = SimpleNamespace(settings=SimpleNamespace(seed=0), log=lambda msg: None)
    ceilings = pd.DataFrame({"matmul_flops_per_s": [2 * P], "copy_bytes_per_s": [0.5 * W]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fit.PoorFitWarning)
        free = fit_model_sweep(state, "m", df)
        capped = fit_model_sweep(state, "m", df, ceilings)
    assert free.bandwidth > 0.9 * W
    assert capped.bandwidth <= 0.5 * W * (1 + 1e-9) and "bandwidth" in capped.at_bound
    assert capped.peak_flops <= 2 * P * (1 + 1e-9)


def test_best_form_is_refitted_on_every_point():
    """`fit_sweep_best` chooses the form by held-out error and refits it on all points:
    the returned fit trains on every point and keeps the selection's held-out error."""
    flops, bytes_, t = _synthetic(m=12, noise=0.03, seed=4)
    df = pd.DataFrame({"flops": flops, "bytes": bytes_, "time_s": t})
    best, tried = fit.fit_sweep_best(df, holdout=0.25, seed=1)
    chosen = min(tried.values(), key=lambda f: f.mape_heldout)
    assert best.kind == chosen.kind and best.n_train == 12 and chosen.n_train == 9
    assert best.mape_heldout == chosen.mape_heldout and best.n_heldout == 3
    assert best.heldout_index == chosen.heldout_index
    full = fit.fit_sweep(df, kind=chosen.kind, holdout=0.0, seed=1)
    assert best.bandwidth == full.bandwidth and best.t0 == full.t0
    # too few points for any held-out fit: no fit, each form's error kept
    none, errors = fit.fit_sweep_best(df.iloc[:3], holdout=0.25)
    assert none is None and all(isinstance(e, ValueError) for e in errors.values())
