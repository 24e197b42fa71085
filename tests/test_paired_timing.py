"""Paired, adaptive timing and its intervals: the order a round runs (a recording fake
clock), when rounds stop, the bootstrap interval against the sampling spread of known
synthetic timings, coverage, the busy-machine verdict and the prediction before the
run. No wall-clock time is asserted anywhere."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from specsim import schema as S
from specsim.errors import InvalidArgument
from specsim.experiment import intervals, paired
from specsim.experiment.machine import machine_summary
from specsim.experiment.settings import DemoSettings


class FakeClock:
    """A clock that only moves when a call says how long it took, and a log of calls."""

    def __init__(self):
        self.now = 0.0
        self.log: list[str] = []

    def __call__(self) -> float:
        return self.now

    def call(self, label: str, seconds: float):
        def run():
            self.log.append(label)
            self.now += seconds
        return run


def _units(clock, n_units=3):
    roles = ("baseline", "run", "passes")
    return [[clock.call(f"{u}:{role}", 0.1 * (u + 1) + 0.01 * j) for j, role in enumerate(roles)]
            for u in range(n_units)], roles


def test_a_round_times_each_run_with_its_own_baseline_and_passes():
    clock = FakeClock()
    units, roles = _units(clock)
    res = paired.paired_rounds(units, np.random.default_rng(0), min_rounds=4, max_rounds=4,
                               budget_s=1e9, converged=lambda u, s: False, clock=clock,
                               timer=clock)
    assert len(clock.log) == 4 * 3 * 3
    orders = []
    for r in range(4):                    # every round: every unit once, its calls in order
        block = clock.log[9 * r: 9 * (r + 1)]
        units_in_round = [block[3 * i].split(":")[0] for i in range(3)]
        assert sorted(units_in_round) == ["0", "1", "2"]
        for i, u in enumerate(units_in_round):
            assert block[3 * i: 3 * i + 3] == [f"{u}:{role}" for role in roles]
        orders.append(tuple(units_in_round))
    assert len(set(orders)) > 1                        # the units' order is drawn anew
    # each sample is the call's own time by the clock, one per round
    for u in range(3):
        for j in range(3):
            np.testing.assert_allclose(res.samples[u][j], [0.1 * (u + 1) + 0.01 * j] * 4)
    assert res.rounds == [4, 4, 4] and res.stopped == [paired.MAX_ROUNDS] * 3
    assert [(int(a.split(":")[0]), roles.index(a.split(":")[1])) for a in clock.log] == res.order


def test_alternate_rounds_run_each_unit_forwards_then_backwards():
    """ABBA: a unit's calls in their order, then reversed, round after round; each sample
    still lands with its own call, and a cost that depends only on a call's place in the
    unit falls on every call alike over a pair of rounds."""
    clock = FakeClock()
    units, roles = _units(clock)
    res = paired.paired_rounds(units, np.random.default_rng(0), min_rounds=4, max_rounds=4,
                               budget_s=1e9, converged=lambda u, s: False, clock=clock,
                               timer=clock, alternate=True)
    for r in range(4):
        block = clock.log[9 * r: 9 * (r + 1)]
        for i in range(3):
            u = block[3 * i].split(":")[0]
            want = [f"{u}:{role}" for role in roles]
            assert block[3 * i: 3 * i + 3] == (want[::-1] if r % 2 else want)
    for u in range(3):
        for j in range(3):
            np.testing.assert_allclose(res.samples[u][j], [0.1 * (u + 1) + 0.01 * j] * 4)
    assert [(int(a.split(":")[0]), roles.index(a.split(":")[1])) for a in clock.log] == res.order

    class PlaceClock(FakeClock):
        """The first call of each round (of one two-call unit) pays 0.05 s more."""

        def call(self, label, seconds):
            def run():
                first = len(self.log) % 2 == 0
                self.log.append(label)
                self.now += seconds + (0.05 if first else 0.0)
            return run

    for alternate, spread in ((False, 0.05), (True, 0.0)):
        clock = PlaceClock()
        units = [[clock.call("0:a", 0.1), clock.call("0:b", 0.1)]]
        res = paired.paired_rounds(units, np.random.default_rng(0), min_rounds=4, max_rounds=4,
                                   budget_s=1e9, converged=lambda u, s: False, clock=clock,
                                   timer=clock, alternate=alternate)
        means = [np.mean(res.samples[0][j]) for j in range(2)]
        assert means[0] - means[1] == pytest.approx(spread)


def test_rounds_stop_when_a_run_converges_or_the_budget_is_spent():
    clock = FakeClock()
    units, _ = _units(clock)
    # unit 0 converges at once (after the least rounds); the others never do
    res = paired.paired_rounds(units, np.random.default_rng(1), min_rounds=2, max_rounds=50,
                               budget_s=10.0, converged=lambda u, s: u == 0, clock=clock,
                               timer=clock)
    assert res.stopped[0] == paired.CONVERGED and res.rounds[0] == 2
    assert res.stopped[1:] == [paired.BUDGET, paired.BUDGET]
    # the units cost 0.33, 0.63 and 0.93 s a round: after 2 rounds of all three (3.78 s)
    # units 1 and 2 went on (1.56 s a round) while a round of both fitted in 10 s (three
    # more: 8.46 s); then only what still fits, the first by priority (default: unit
    # order): unit 1 twice more (9.09, 9.72 s), unit 2 no more
    assert res.rounds[1:] == [7, 5] and res.elapsed_s == pytest.approx(9.72)
    assert [u for u, _ in res.order[-6:]] == [1] * 6           # the last two rounds: unit 1
    # the least rounds run even when the budget is already spent
    clock = FakeClock()
    units, _ = _units(clock)
    res = paired.paired_rounds(units, np.random.default_rng(1), min_rounds=3, max_rounds=9,
                               budget_s=0.0, converged=lambda u, s: False, clock=clock,
                               timer=clock)
    assert res.rounds == [3, 3, 3] and res.stopped == [paired.BUDGET] * 3


def test_a_short_budget_goes_to_the_widest_unit_first():
    """When the time left does not afford a round of every unit, the unit of highest
    priority (the widest interval) runs; a unit that reaches max_rounds leaves."""
    clock = FakeClock()
    units, _ = _units(clock)
    width = {0: 0.2, 1: 0.05, 2: 0.5}
    res = paired.paired_rounds(units, np.random.default_rng(2), min_rounds=2, max_rounds=4,
                               budget_s=5.0, converged=lambda u, s: False,
                               priority=lambda u, s: width[u], clock=clock, timer=clock)
    # 2 rounds of all (3.78 s); 1.22 s left: unit 2 (0.93 s) first, then nothing fits
    assert res.rounds == [2, 2, 3] and res.elapsed_s == pytest.approx(4.71)
    assert res.stopped == [paired.BUDGET] * 3
    # with the budget to spare each unit stops at max_rounds, and NaN ranks first
    clock = FakeClock()
    units, _ = _units(clock)
    res = paired.paired_rounds(units, np.random.default_rng(2), min_rounds=2, max_rounds=3,
                               budget_s=1e9, converged=lambda u, s: False,
                               priority=lambda u, s: math.nan, clock=clock, timer=clock)
    assert res.rounds == [3, 3, 3] and res.stopped == [paired.MAX_ROUNDS] * 3


def test_a_prepared_call_has_its_preparation_timed_apart():
    """A call with ``prepare`` (a staged loop) runs it just before the timed call; its
    clock readings go to ``prepared``, not into the call's sample."""
    clock = FakeClock()

    class Staged:
        def prepare(self):
            clock.log.append("prepare")
            clock.now += 0.5

        def __call__(self):
            clock.log.append("loop")
            clock.now += 0.2

    res = paired.paired_rounds([[Staged(), clock.call("pass", 0.1)]], np.random.default_rng(0),
                               min_rounds=2, max_rounds=2, budget_s=1e9,
                               converged=lambda u, s: False, clock=clock, timer=clock)
    assert clock.log == ["prepare", "loop", "pass"] * 2
    np.testing.assert_allclose(res.samples[0][0], [0.2, 0.2])
    np.testing.assert_allclose(res.prepared[0][0], [0.5, 0.5])
    assert res.prepared[0][1] == []


def test_paired_rounds_refuse_bad_settings():
    for kw, match in ((dict(min_rounds=0), "min_rounds"), (dict(max_rounds=1), "max_rounds"),
                      (dict(budget_s=-1.0), "budget_s")):
        args = dict(min_rounds=2, max_rounds=4, budget_s=1.0, converged=lambda u, s: True)
        with pytest.raises(InvalidArgument, match=match):
            paired.paired_rounds([[lambda: None]], np.random.default_rng(0), **{**args, **kw})


def test_the_interval_matches_the_known_spread_of_a_ratio_of_medians():
    """Rounds of two lognormal timings (σ = 0.1 each, independent): the median of n draws
    has a log-sd of about sqrt(π/2) σ / sqrt(n), so the ratio of medians has sqrt(π) σ /
    sqrt(n), and a 95% interval a half-width of about 1.96 times that."""
    rng = np.random.default_rng(7)
    n, sigma = 400, 0.1
    num = 2.0 * np.exp(rng.normal(0, sigma, n))
    den = 1.0 * np.exp(rng.normal(0, sigma, n))
    iv = intervals.ratio_of_medians(num, den, seed=3)
    assert iv.value == pytest.approx(np.median(num) / np.median(den))
    expected = 1.96 * math.sqrt(math.pi) * sigma / math.sqrt(n)
    assert iv.half_width == pytest.approx(expected, rel=0.3)
    assert iv.contains(2.0)


def test_the_interval_covers_the_true_ratio_about_as_often_as_it_says():
    """Over many synthetic experiments of 30 rounds, the 95% interval holds the true
    ratio of medians (2.0) in roughly 95% of them."""
    rng = np.random.default_rng(11)
    hits = 0
    trials = 200
    for t in range(trials):
        num = 2.0 * np.exp(rng.normal(0, 0.08, 30))
        den = np.exp(rng.normal(0, 0.08, 30))
        hits += intervals.ratio_of_medians(num, den, draws=500, seed=t).contains(2.0)
    assert 0.85 <= hits / trials <= 0.99


def test_resampling_whole_rounds_keeps_a_drift_that_hits_both_out_of_the_interval():
    """A drift of the machine that scales whole rounds (±30%) moves both timings of a
    round alike: resampling whole rounds (the same rounds for both) gives a far tighter
    interval than resampling each timing on its own would."""
    rng = np.random.default_rng(5)
    drift = np.exp(rng.normal(0, 0.3, 40))
    num = 1.5 * drift * np.exp(rng.normal(0, 0.01, 40))
    den = drift * np.exp(rng.normal(0, 0.01, 40))
    paired_iv = intervals.bootstrap({"n": num, "d": den}, lambda m: m["n"] / m["d"], seed=0)
    a = intervals.resample_medians({"n": num}, seed=1)["n"][1]
    b = intervals.resample_medians({"d": den}, seed=2)["d"][1]
    lo, hi = np.percentile(a / b, [2.5, 97.5])
    assert paired_iv.half_width < 0.25 * (hi - lo) / 2 / paired_iv.value
    assert paired_iv.contains(1.5)


def test_few_rounds_give_at_least_the_student_t_interval():
    """Over 3 rounds a percentile bootstrap spans little more than the rounds' range; the
    interval is widened to mean ± t(0.975, 2) · sd / √3 of the per-round values (centred
    on the statistic), and one round gives no interval at all."""
    iv = intervals.interval(1.1, [1.05, 1.1, 1.15], [1.0, 1.1, 1.2])
    h = 4.302652729911275 * 0.1 / math.sqrt(3)
    assert (iv.lo, iv.hi) == pytest.approx((1.1 - h, 1.1 + h))
    assert iv.half_width == pytest.approx(h / 1.1)
    wide = intervals.interval(1.1, [0.5, 2.0], [1.0, 1.1, 1.2])     # the bootstrap's, wider
    assert (wide.lo, wide.hi) == pytest.approx((0.5375, 1.9625))
    one = intervals.interval(1.1, [1.1], [1.1])
    assert math.isnan(one.lo) and math.isnan(one.half_width)      # never "converged"
    # a statistic of series whose rounds agree exactly has no width
    flat = intervals.ratio_of_medians([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert (flat.lo, flat.value, flat.hi) == (2.0, 2.0, 2.0)


def test_a_positive_statistic_takes_its_student_t_interval_on_the_log():
    """A ratio whose rounds spread widely keeps a lower bound above zero: with
    ``positive`` the Student-t interval is value · exp(± t · sd(log rounds) / √n)."""
    rounds = [0.2, 1.0, 3.0]
    linear = intervals.interval(1.0, [0.9, 1.1], rounds)
    assert linear.lo < 0                                   # what a linear interval gives
    iv = intervals.interval(1.0, [0.9, 1.1], rounds, positive=True)
    h = 4.302652729911275 * np.log(rounds).std(ddof=1) / math.sqrt(3)
    assert (iv.lo, iv.hi) == pytest.approx((math.exp(-h), math.exp(h)))
    assert iv.lo > 0
    ratio = intervals.ratio_of_medians([0.2, 1.0, 3.0], [1.0, 1.0, 1.0])
    assert ratio.lo > 0 and ratio.contains(1.0)


def test_bootstrap_refuses_unpaired_series():
    with pytest.raises(InvalidArgument, match="same rounds"):
        intervals.resample_medians({"a": [1.0, 2.0], "b": [1.0]})
    with pytest.raises(InvalidArgument, match="level"):
        intervals.bootstrap({"a": [1.0]}, lambda m: m["a"], level=1.5)


def test_coverage_arithmetic():
    pred = [1.0, 2.0, 3.0, np.nan, 5.0]
    lo = [0.9, 2.1, 2.5, 1.0, np.nan]
    hi = [1.1, 2.5, 3.0, 2.0, 6.0]
    # the first and third are inside (an end counts), the second is not; NaN rows drop out
    assert intervals.coverage(pred, lo, hi) == pytest.approx(2 / 3)
    assert math.isnan(intervals.coverage([np.nan], [1.0], [2.0]))
    assert intervals.Interval(2.0, 1.9, 2.1).half_width == pytest.approx(0.05)
    assert intervals.Interval(0.0, -1.0, 1.0).half_width == math.inf


def _runs(half_widths, settings):
    n = len(half_widths)
    return pd.DataFrame({
        S.DRAFTER: ["ngram-3"] * n, S.KIND: "code", S.K: 4, S.BATCH: 1,
        S.MEASURED_HALF_WIDTH: half_widths, S.ROUNDS: 5,
        S.STOPPED: [paired.CONVERGED if h <= settings.target_half_width else paired.BUDGET
                    for h in half_widths],
        S.CPU_OVER_WALL: 1.6, S.BASELINE_SPREAD: 4.0})


def test_the_machine_is_called_too_busy_when_runs_do_not_converge_or_ceilings_move():
    s = DemoSettings()
    env = {"machine_start": {"matmul_flops_per_s": 100e9, "copy_bytes_per_s": 20e9},
           "machine_end": {"matmul_flops_per_s": 97e9, "copy_bytes_per_s": 20.5e9}}
    quiet = machine_summary(env, _runs([0.01] * 9 + [0.05], s), s)
    assert quiet["busy"] == [] and quiet["converged"] == 9 and len(quiet["unconverged"]) == 1
    assert quiet["unconverged"][0]["stopped"] == paired.BUDGET
    assert quiet["drift"]["matmul_flops_per_s"] == pytest.approx(-0.03)
    busy = machine_summary(env, _runs([0.01] * 7 + [0.05] * 3, s), s)
    assert len(busy["busy"]) == 1 and "3 of 10 runs (30%)" in busy["busy"][0]
    env["machine_end"]["matmul_flops_per_s"] = 80e9
    moved = machine_summary(env, _runs([0.01] * 10, s), s)
    assert len(moved["busy"]) == 1 and "matmul ceiling moved by -20%" in moved["busy"][0]
    # the copy ceiling's drift is reported, not judged
    env["machine_end"].update(matmul_flops_per_s=99e9, copy_bytes_per_s=26e9)
    copy = machine_summary(env, _runs([0.01] * 10, s), s)
    assert copy["busy"] == [] and copy["drift"]["copy_bytes_per_s"] == pytest.approx(0.3)
    env["machine_end"]["copy_bytes_per_s"] = 20.5e9
    # the report says it in plain words, beside the errors
    from specsim.report.fidelity import busy_lines

    result = SimpleNamespace(runs=_runs([0.01] * 7 + [0.05] * 3, s), settings=s,
                             environment=env)
    text = "\n".join(busy_lines(result))
    assert "too busy to measure to ±3%" in text and "3 of 10 runs" in text
    result.runs = _runs([0.01] * 10, s)
    env["machine_end"]["matmul_flops_per_s"] = 99e9
    assert busy_lines(result) == []


def test_each_in_run_part_gets_its_share_of_the_time_left():
    from specsim.experiment.state import DemoState

    s = DemoSettings(parts=("instrument", "fidelity", "batch"), time_budget_s=300.0,
                     reserve_s=10.0)
    state = DemoState(settings=s, target=None, drafters={}, prompts={}, cache_len=128,
                      environment={})
    state.parts_left = ["instrument", "fidelity", "batch"]
    state.started = __import__("time").perf_counter()       # nothing spent yet
    # later groups: fidelity 1 and batch 2, 10 s each held back; shares 0.4 / 1.0
    assert state.timing_budget("instrument") == pytest.approx(0.4 * 270, rel=1e-3)
    state.parts_left = ["batch"]
    # the batch part's first of two groups: half of what is left
    assert state.timing_budget("batch", 2) == pytest.approx(0.5 * 290, rel=1e-3)
    state.started -= 1000                                   # past the budget: no rounds
    assert state.timing_budget("batch", 1) == 0.0


def test_prior_rates_come_from_the_set_alpha_or_an_untimed_run():
    from specsim.experiment import prior

    row = {S.K: 3, S.ALPHA_SET: 0.7, S.DRAFTER: "instrument:a0.7:L0", S.KIND: "code",
           S.TEMPERATURE: 0.0}
    rates, source = prior.prior_rates(row, None)
    np.testing.assert_allclose(rates, [0.7] * 3) and None
    assert source == prior.SET
    cal = pd.DataFrame({S.DRAFTER: "ngram-3", S.KIND: "code", S.TEMPERATURE: 0.0,
                        S.ALPHA_SOURCE: [prior.THIS_PROMPT] * 4 + [prior.OTHER_PROMPTS] * 4,
                        "position": [1, 2, 3, 4] * 2,
                        S.ALPHA: [0.6, 0.5, 0.0, np.nan, 0.3, 0.2, 0.1, 0.05]})
    row = {S.K: 4, S.ALPHA_SET: np.nan, S.DRAFTER: "ngram-3", S.KIND: "code",
           S.TEMPERATURE: 0.0}
    rates, source = prior.prior_rates(row, cal)
    # a position calibration never reached counts as 0 (it adds nothing to E)
    np.testing.assert_allclose(rates, [0.6, 0.5, 0.0, 0.0])
    assert source == prior.THIS_PROMPT
    rates, source = prior.prior_rates(row, cal, prior.OTHER_PROMPTS)
    np.testing.assert_allclose(rates, [0.3, 0.2, 0.1, 0.05])
    assert source == prior.OTHER_PROMPTS
    rates, source = prior.prior_rates({**row, S.KIND: "prose"}, cal)
    assert np.isnan(rates).all() and source == ""
    with pytest.raises(ValueError, match="source must be"):
        prior.prior_rates(row, cal, "the run")


def test_the_pass_sweep_covers_every_batch_and_width_the_in_run_parts_run():
    """The roofline the prediction before the run reads is fitted to the loop's passes at
    the batches and verify widths the runs will have, at their cache lengths."""
    from specsim.experiment import pass_sweep
    from specsim.experiment.inrun import group_cache_len
    from specsim.experiment.state import DemoState

    target = SimpleNamespace(cfg=SimpleNamespace(max_seq_len=8192))
    s = DemoSettings.demo()
    state = DemoState(settings=s, target=target, drafters={}, prompts={"code": [0] * 200},
                      cache_len=256, environment={})
    plan = pass_sweep.plan(state)
    inst = group_cache_len(target, [[0] * s.prompt_tokens], s.max_new_tokens,
                           max(s.instrument_ks))
    real = group_cache_len(target, [[0] * s.drafter_prompt_tokens], s.max_new_tokens,
                           max(s.ks))
    by_cache = {(b, S): (ctx, ks) for (b, S, ctx), ks in plan.items()}
    assert len(by_cache) == len(plan)
    assert set(s.instrument_ks) | set(s.batch_ks) | set(pass_sweep.FIT_KS) <= by_cache[(1, inst)][1]
    assert set(s.ks) <= by_cache[(1, real)][1]
    # at the loops' mean context, the prompt and half the decode tokens; the demo's
    # instrument and real drafters share one cache at batch 1, so their mean
    ctx_inst = s.prompt_tokens + (s.max_new_tokens - 1) / 2
    ctx_real = s.drafter_prompt_tokens + (s.max_new_tokens - 1) / 2
    assert inst == real and by_cache[(1, inst)][0] == round((ctx_inst + ctx_real) / 2)
    b4 = next(ctx for (b, _), (ctx, _) in by_cache.items() if b == 4)
    assert b4 == round(s.prompt_tokens + (s.batch_max_new_tokens - 1) / 2)
    for b in s.batches:
        if b > 1:    # its runs' widths, and enough widths for each side of the row split
            assert set(s.batch_ks) | {1, 2, 4} <= next(ks for (bb, _), (_, ks) in by_cache.items()
                                                       if bb == b)
    # no in-run part: nothing to sweep
    state = DemoState(settings=DemoSettings(parts=("roofline",)), target=target, drafters={},
                      prompts={"code": [0] * 50}, cache_len=128, environment={})
    assert pass_sweep.plan(state) == {}


def test_score_counts_coverage_and_agreement_by_hand():
    """Coverage: the prediction inside the measured interval; agreement: 0 inside the
    error's interval (the in-run prediction and the one given the run's acceptance).
    Four runs worked by hand."""
    from specsim.experiment.decomposition import score

    d = pd.DataFrame({S.PREDICTED_SPEEDUP: [2.0, 2.0, 2.0, 2.0],
                      S.MEASURED_SPEEDUP: [2.0, 1.9, 2.1, 1.5],
                      S.MEASURED_CI_LO: [1.95, 1.85, 2.05, 1.4],
                      S.MEASURED_CI_HI: [2.05, 1.95, 2.15, 1.6],
                      S.ERR_TOTAL_CI_LO: [-1.0, -0.5, -9.0, 20.0],
                      S.ERR_TOTAL_CI_HI: [1.0, 10.0, -0.1, 35.0]})
    sc = score(d)
    assert sc["coverage_pct"] == 25.0 and sc["agreement_pct"] == 50.0 and sc["n_runs"] == 4
    assert sc["mape_pct"] == pytest.approx(100 * (0 + 0.1 / 1.9 + 0.1 / 2.1 + 0.5 / 1.5) / 4,
                                           abs=1e-3)
    d[S.PRED_PRIOR] = d[S.PREDICTED_SPEEDUP]
    assert score(d, S.PRED_PRIOR)["agreement_pct"] is None
    # with the expected acceptance, the error's interval is the in-run one plus the
    # acceptance term (a constant of the run): shifted by -2, -2, +1, -25
    d[S.PRED_EXPECTED_ACCEPTANCE] = d[S.PREDICTED_SPEEDUP]
    d[S.ERR_ACCEPTANCE] = [-2.0, -2.0, 1.0, -25.0]
    # intervals [-3, -1], [-2.5, 8], [-8, 0.9], [-5, 10]: three hold 0
    assert score(d, S.PRED_EXPECTED_ACCEPTANCE)["agreement_pct"] == 75.0
    assert score(d.drop(columns=[S.ERR_ACCEPTANCE]),
                 S.PRED_EXPECTED_ACCEPTANCE)["agreement_pct"] is None


def test_the_prior_reads_the_fit_where_the_runs_passes_ran():
    """The prediction before the run prices a run's passes at the context its pass
    programs ran at; a table from before that column, at half the cache."""
    from specsim.experiment import prior

    assert prior._pass_context({S.PASS_CONTEXT: 48, S.CACHE_LEN: 128}) == 48
    assert prior._pass_context({S.PASS_CONTEXT: math.nan, S.CACHE_LEN: 128}) == 64
    assert prior._pass_context({S.CACHE_LEN: 256}) == 128
