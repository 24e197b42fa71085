"""The in-run cost model and the demo's instrument and batch parts: the decomposition adds
up, scores follow their definition, bad settings are clear errors, α shares one compiled
program, and the parts run end to end through the CLI on a tiny model."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from specsim import analytic, schema as S
from specsim.errors import InvalidArgument
from specsim.experiment import DemoSettings
from specsim.experiment.decomposition import decompose, fidelity_summary, finite_run_tokens
from specsim.experiment.parts.batch import crossing


def _case(rng):
    k = int(rng.integers(1, 9))
    n, iters = 47, int(rng.integers(6, 40))
    return dict(e_model=float(rng.uniform(1, k + 1)), n_tokens=n, iterations=iters, k=k,
                t_ar=float(rng.uniform(1.0, 2.0)), t_spec=float(rng.uniform(0.3, 1.5)),
                prefill=float(rng.uniform(0, 0.1)), prefill_spec=float(rng.uniform(0, 0.2)),
                t_target_1=float(rng.uniform(0.01, 0.03)), t_verify=float(rng.uniform(0.01, 0.05)),
                t_draft=float(rng.uniform(0, 0.01)))


@pytest.mark.parametrize("seed", range(5))
def test_decomposition_adds_up(seed):
    c = _case(np.random.default_rng(seed))
    row = decompose(**c)
    # measured: decode time ratio, independent of the factorisation
    measured = (c["t_ar"] - c["prefill"]) / (c["t_spec"] - c["prefill_spec"])
    assert row[S.MEASURED_SPEEDUP] == pytest.approx(measured, rel=1e-12)
    # predicted: the closed form with measured costs and the run's own n / I
    e_eff = c["n_tokens"] / c["iterations"]
    pred = e_eff * c["t_target_1"] / (c["k"] * c["t_draft"] + c["t_verify"])
    assert row[S.PREDICTED_SPEEDUP] == pytest.approx(pred, rel=1e-12)
    assert S.DECOMPOSITION == (S.ERR_COST, S.ERR_OVERHEAD)
    terms = [row[t] for t in S.DECOMPOSITION]
    assert sum(terms) == pytest.approx(row[S.ERR_TOTAL], abs=1e-9)
    assert math.prod(math.exp(t / 100) for t in terms) == pytest.approx(pred / measured, rel=1e-9)
    assert row[S.LOOP_OVERHEAD] == pytest.approx(math.exp(row[S.ERR_OVERHEAD] / 100))
    # with the expected acceptance (E_model) instead: its miss is the in-run one plus the
    # acceptance model's term
    expected = row[S.PRED_EXPECTED_ACCEPTANCE]
    assert expected == pytest.approx(pred * c["e_model"] / e_eff, rel=1e-12)
    assert row[S.ERR_ACCEPTANCE] == pytest.approx(100 * math.log(c["e_model"] / e_eff))
    assert 100 * math.log(expected / measured) == pytest.approx(
        row[S.ERR_TOTAL] + row[S.ERR_ACCEPTANCE], abs=1e-9)


@pytest.mark.parametrize("bad, match", [(dict(t_draft=-1e-3), "t_draft"),
                                        (dict(iterations=0), "iterations"),
                                        (dict(t_verify=0.0), "t_verify")])
def test_decompose_refuses_bad_inputs(bad, match):
    with pytest.raises(InvalidArgument, match=match):
        decompose(**{**_case(np.random.default_rng(0)), **bad})


def test_a_run_no_longer_than_its_prefill_is_not_measured():
    """On a tiny model the decode time can drown in the noise of the prefill call: a
    negative decode time is no measurement (NaN), never a negative speedup."""
    case = _case(np.random.default_rng(3))
    row = decompose(**{**case, "prefill": case["t_ar"] + 0.01})
    assert math.isnan(row[S.MEASURED_SPEEDUP]) and math.isnan(row[S.ERR_TOTAL])
    assert math.isnan(row[S.ERR_OVERHEAD]) and math.isfinite(row[S.PREDICTED_SPEEDUP])
    row = decompose(**{**case, "prefill_spec": case["t_spec"]})
    assert math.isnan(row[S.MEASURED_SPEEDUP])


def test_finite_run_tokens_against_simulation():
    rng = np.random.default_rng(1)
    alpha, k, n, batch = 0.7, 4, 30, 4
    pmf = [(1 - alpha) * alpha ** (j - 1) for j in range(1, k + 1)] + [alpha ** k]
    draws = rng.choice(np.arange(1, k + 2), p=pmf, size=(4000, batch, n))
    iters = (np.cumsum(draws, axis=2) < n).sum(axis=2) + 1           # [trials, batch]
    sim = n / iters.max(axis=1).mean()
    assert finite_run_tokens(pmf, n, batch) == pytest.approx(sim, rel=0.01)
    assert finite_run_tokens(pmf, n, 1) < analytic.expected_tokens(alpha, k)


def test_fidelity_summary_follows_its_definition():
    runs = pd.DataFrame({S.DRAFTER: ["a", "b", "c", S.AUTOREGRESSIVE],
                         S.DRAFTER_KIND: ["instrument", "instrument", "ngram", "x"],
                         S.BATCH: [1, 4, 1, 1], S.MEASURED_SPEEDUP: [2.0, 1.0, 1.25, 1.0],
                         S.PREDICTED_SPEEDUP: [2.1, 0.9, 1.25, 9.0]})
    f = fidelity_summary(runs)
    assert f["n_runs"] == 3
    assert f["mape_pct"] == pytest.approx(100 * (0.05 + 0.1 + 0) / 3, abs=1e-3)
    assert f["max_abs_error_pct"] == pytest.approx(10.0)
    assert f["by_drafter"]["instrument"]["n_runs"] == 2
    assert f["by_batch"]["4"]["mape_pct"] == pytest.approx(10.0)


def test_crossing_interpolates_in_log_batch():
    assert crossing([1, 4, 16], [2.0, 1.5, 1.2]) == math.inf
    assert crossing([1, 4, 16], [0.9, 0.8, 0.7]) == 1.0
    # speedup 1.5 at 4, 0.5 at 16: halfway in log between them
    assert crossing([16, 1, 4], [0.5, 2.0, 1.5]) == pytest.approx(8.0)


@pytest.mark.parametrize("kw, match", [
    (dict(instrument_alphas=(0.5, 1.2)), "instrument_alphas"),
    (dict(batch_alphas=(-0.1,)), "batch_alphas"),
    (dict(instrument_costs=(-0.25,)), "instrument_costs"),
    (dict(batches=(0,)), "batches"),
    (dict(clock="sundial"), "clock"),
    (dict(drafter_prompt_tokens=-1), "drafter_prompt_tokens"),
    (dict(batch_max_new_tokens=-8), "batch_max_new_tokens"),
    (dict(shared_repeats=0), "shared_repeats"),
    (dict(loop_repeats=0), "loop_repeats"),
    (dict(policy_max_new_tokens=-1), "policy_max_new_tokens"),
    (dict(policy_max_new_tokens=1), "policy_max_new_tokens"),
    (dict(parts=("policies",), max_new_tokens=1), "policy_max_new_tokens"),
    (dict(repeats=4, max_rounds=3), "max_rounds"),
    (dict(target_half_width=0.0), "target_half_width"),
    (dict(busy_drift=1.5), "busy_drift"),
    (dict(time_budget_s=-1.0), "time_budget_s"),
    (dict(calibration_prompts=0), "calibration_prompts"),
    (dict(pass_sets=0), "pass_sets must be a positive integer")])
def test_bad_settings_are_clear_errors(kw, match):
    with pytest.raises(InvalidArgument, match=match):
        DemoSettings(**kw)


def test_quick_real_drafters_share_the_instruments_cache():
    """The real drafters' prompts (64 tokens, quick and full) fit the instrument's cache,
    so its pass programs are reused, not compiled again; 120-token prompts would not."""
    from types import SimpleNamespace

    from specsim.experiment.inrun import group_cache_len

    target = SimpleNamespace(cfg=SimpleNamespace(max_seq_len=8192))
    for quick, prompt, same in ((True, None, True), (False, None, True), (False, 120, False)):
        s = DemoSettings.demo(quick=quick)
        n = s.drafter_prompt_tokens if prompt is None else prompt
        real = group_cache_len(target, [[0] * n], s.max_new_tokens, max(s.ks))
        inst = group_cache_len(target, [[0] * s.prompt_tokens], s.max_new_tokens,
                               max(s.instrument_ks))
        assert (real == inst) is same


def test_batched_rows_are_longer_in_the_instruments_cache():
    """The full demo's batched rows are longer than batch 1's (the slowest of 16 rows ends
    the run: a noisier draw) yet fit the instrument's cache; quick keeps one length."""
    from types import SimpleNamespace

    from specsim.experiment.inrun import group_cache_len

    target = SimpleNamespace(cfg=SimpleNamespace(max_seq_len=8192))
    full, quick = DemoSettings.demo(), DemoSettings.demo(quick=True)
    assert full.batch_max_new_tokens > full.max_new_tokens and quick.batch_max_new_tokens == 0
    rows = [[0] * full.prompt_tokens]
    assert (group_cache_len(target, rows, full.batch_max_new_tokens, max(full.batch_ks))
            == group_cache_len(target, rows, full.max_new_tokens, max(full.instrument_ks)))


def test_the_policies_part_runs_longer_unless_the_caller_sets_the_length():
    """The full demo's policies part decodes 80 tokens (a policy that learns needs room
    to); a caller's max_new_tokens alone sets it too; quick keeps max_new_tokens; an
    explicit policy_max_new_tokens wins."""
    assert DemoSettings().policy_max_new_tokens == 0
    assert DemoSettings.demo().policy_max_new_tokens == 80
    assert DemoSettings.demo(max_new_tokens=24).policy_max_new_tokens == 0
    assert DemoSettings.demo(quick=True).policy_max_new_tokens == 0
    assert DemoSettings.demo(max_new_tokens=24, policy_max_new_tokens=50) \
        .policy_max_new_tokens == 50
    assert DemoSettings.demo(quick=True, policy_max_new_tokens=50).policy_max_new_tokens == 50


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    """The instrument and batch parts through the CLI on tiny-llama (α shared by programs)."""
    from quiet_machine import quiet_machine
    from specsim import decode
    from specsim.cli import main

    out = tmp_path_factory.mktemp("demo") / "demo"
    before = decode.TRACE_COUNTS["speculative"]
    argv = ["demo", "--parts", "instrument", "batch", "--target", "tiny-llama",
            "--alphas", "0.7", "0.9", "--instrument-k", "2", "4", "--draft-costs", "0",
            "--batches", "1", "2", "--max-new-tokens", "12", "--repeats", "1",
            "--kinds", "code", "prose", "--drafters", "ngram", "--no-progress",
            "--out", str(out)]
    with pytest.MonkeyPatch.context() as mp:
        quiet_machine(mp)                   # the demo's own ceilings: test_experiment.py's
        assert main(argv) == 0
    traced = decode.TRACE_COUNTS["speculative"] - before
    return out, traced


def test_parts_write_the_contract(demo_dir):
    out, _ = demo_dir
    runs = pd.read_csv(out / "runs.csv")
    S.require(runs, S.CONTRACT)
    spec = S.speculative(runs)
    # instrument: 2 α x 2 K at batch 1 (reused by the batch part); batch 2: the batch
    # part's default α 0.9, K 4
    assert len(spec) == 5 and len(runs) == 7           # one baseline per batch
    assert sorted(spec[S.BATCH].unique()) == [1, 2]
    terms = spec[list(S.DECOMPOSITION)].sum(axis=1, skipna=False)
    ok = spec[S.ERR_TOTAL].notna() & terms.notna()
    np.testing.assert_allclose(terms[ok], spec.loc[ok, S.ERR_TOTAL], atol=1e-6)
    assert (spec[S.MEASURED_INPUTS].str.endswith("t_target_1;t_verify;t_draft")).all()
    assert (spec[S.MEASURED_INPUTS].str.startswith("alpha_pos_1;alpha_pos_2")).all()
    assert spec[S.PRED_SET_ALPHA].notna().all()
    clock = spec[S.CLOCK].iloc[0]                           # the demo's clock drives the row
    np.testing.assert_allclose(spec[S.MEASURED_BY_CLOCK[clock]], spec[S.MEASURED_SPEEDUP])
    np.testing.assert_allclose(spec[S.PREDICTED_BY_CLOCK[clock]], spec[S.PREDICTED_SPEEDUP])
    assert spec[list(S.PREDICTED_BY_CLOCK.values())].notna().all().all()
    # a measured speedup is NaN only where the decode time did not exceed the prefill's,
    # which 12 tokens of tiny-llama on a loaded machine can do on the wall clock
    measured = spec[list(S.MEASURED_BY_CLOCK.values())].to_numpy()
    assert (np.isnan(measured) | (measured > 0)).all()
    assert spec.loc[spec[S.DECODE_S] <= 0, S.MEASURED_SPEEDUP].isna().all()
    f = json.loads((out / "fidelity.json").read_text())
    # scored: every run whose decode time exceeded its prefill's (all 5 but a rare one
    # whose 12 tiny-llama tokens a loaded machine's noise swallows, as above)
    scored = np.isfinite(spec[S.MEASURED_SPEEDUP]) & np.isfinite(spec[S.PREDICTED_SPEEDUP])
    assert f["n_runs"] == int(scored.sum()) >= 4 and set(f["by_batch"]) == {"1", "2"}
    assert set(f["by_clock"]) == {"wall", "cpu"} and f["clock"] == "cpu"
    assert {"mape_pct", "max_abs_error_pct"} <= set(f["by_drafter"]["instrument"])
    assert f["acceptance_draw"]["n_runs"] == len(spec)
    assert (spec[S.ERR_ACCEPTANCE_DRAW_LO] <= spec[S.ERR_ACCEPTANCE_DRAW_HI]).all()
    files = {p.name for p in out.iterdir()}
    assert {"speedup_surface.png", "predicted_vs_measured_band.png", "break_even.csv",
            "report.md"} <= files
    assert "in-run costs" in (out / "report.md").read_text()


def test_alpha_shares_one_compiled_program(demo_dir):
    _, traced = demo_dir
    # instrument: one program per K (2), α traced; batch 2: one per K (2) -> 4, not 8
    assert traced <= 4          # 8 if α were static configuration


def test_blocks_share_a_baseline_and_passes_among_runs_of_one_rows_and_k():
    """Runs of one set of rows and one K share a block (the baseline, then each run, then
    t_target(1), t_verify(K+1) and each cost key's draft step), at most
    ``runs_per_baseline`` runs a block, split evenly, one cost key's runs together."""
    from specsim.experiment.inrun import Group, SpecRun, blocks

    def run(rows, k, cost):
        return SpecRun(name=f"{cost}", drafter_kind="instrument", drafter=None, k=k,
                       kind="code", rows=rows, cost_key=cost)

    a, b = ((1, 2),), ((3, 4),)
    runs = [run(a, 2, "L0"), run(a, 4, "L0"), run(a, 2, "L8"), run(a, 2, "L0"),
            run(a, 2, "L8"), run(b, 2, "L0"), run(a, 2, "L0")]
    group = Group(temperature=0.0, cache_len=128, max_new_tokens=8, runs=tuple(runs))
    got = blocks(group, 3)
    # (a, K 2): five runs, L0 first -> 3 + 2; (a, K 4): one; (b, K 2): one
    assert [blk.runs for blk in got] == [(0, 3, 6), (2, 4), (1,), (5,)]
    assert got[0].keys == (("ar", a), ("spec", 0), ("spec", 3), ("spec", 6), ("target_1",),
                           ("verify", 2), ("iteration", "L0", 2))
    assert got[1].keys[-3:] == (("target_1",), ("verify", 2), ("iteration", "L8", 2))
    assert got[3].keys[0] == ("ar", b)
    # every run in exactly one block; one run a block gives the one-baseline-per-run design
    assert sorted(i for blk in got for i in blk.runs) == list(range(7))
    assert [blk.runs for blk in blocks(group, 1)] == [(0,), (3,), (6,), (2,), (4,), (1,), (5,)]
    mixed = blocks(group, 6)[0]
    assert mixed.runs == (0, 3, 6, 2, 4) and mixed.keys[-2:] == (("iteration", "L0", 2),
                                                                 ("iteration", "L8", 2))


def test_pass_sets_go_around_a_blocks_loops_and_a_round_averages_them():
    """With several pass sets a round, half run before the block's loops and the rest
    after, the loops back to back between them, the verify pass in the outermost set on
    each side only; a run's pass time in a round is the mean of its program's calls."""
    from specsim.experiment.inrun import Group, SpecRun, _run_times, blocks

    rows = ((1, 2),)
    runs = tuple(SpecRun(name=str(i), drafter_kind="x", drafter=None, k=2, kind="code",
                         rows=rows, cost_key="a") for i in range(3))
    group = Group(temperature=0.0, cache_len=64, max_new_tokens=8, runs=runs)
    passes = (("target_1",), ("verify", 2), ("iteration", "a", 2))
    light = (("target_1",), ("iteration", "a", 2))           # what the prediction reads
    loops = (("ar", rows), ("spec", 0), ("spec", 1), ("spec", 2))
    (four,) = blocks(group, 3, pass_sets=4)
    assert four.keys == passes + light + loops + light + passes
    (three,) = blocks(group, 3, pass_sets=3)
    assert three.keys == passes + loops + light + passes
    (eight,) = blocks(group, 3, pass_sets=8)
    assert eight.keys == passes + light * 3 + loops + light * 3 + passes
    assert eight.keys.count(("verify", 2)) == 2 and eight.keys.count(("target_1",)) == 8
    assert blocks(group, 3, pass_sets=2)[0].keys == passes + loops + passes
    assert blocks(group, 3)[0].keys == loops + passes        # one set: after the loops
    # call j took j + 1 seconds (wall) in each of two rounds
    per_call = [[[j + 1.0, 0.0]] * 2 for j in range(len(four.keys))]
    t = _run_times(group, four, 1, per_call)
    for role, key in (("target_1", ("target_1",)), ("verify", ("verify", 2))):
        calls = [j + 1.0 for j, k in enumerate(four.keys) if k == key]
        assert t[role].shape == (2, 2) and t[role][0, 0] == np.mean(calls)
    assert t["spec"][1, 0] == four.keys.index(("spec", 1)) + 1.0


def test_passes_run_at_the_loops_mean_context():
    """A group's pass programs run where its loops spend their steps on average: the mean
    prompt length plus half the decode tokens, less where the cache has no room."""
    from specsim.experiment.inrun import Group, SpecRun, loop_context, pass_context

    def group(lengths, n, S, k=2):
        runs = tuple(SpecRun(name="x", drafter_kind="x", drafter=None, k=k, kind="code",
                             rows=tuple(tuple(range(m)) for m in lengths), cost_key="a")
                     for _ in range(2))
        return Group(temperature=0.0, cache_len=S, max_new_tokens=n, runs=runs)

    assert loop_context(group([28], 40, 128)) == 48          # 28 + 39 / 2 = 47.5
    assert loop_context(group([20, 30], 11, 64)) == 30       # mean 25, + 5
    assert pass_context(group([28], 40, 128), 4) == 48
    # 56 slots: 48 + 4 passes of 3 + 3 > 56, so the context that fits
    assert pass_context(group([28], 40, 56), 4) == 56 - 4 * 3 - 3


def test_each_run_reads_its_own_call_and_the_block_shared_ones():
    """A run's roles come from its block: the shared baseline and t_target(1),
    t_verify(K+1), its own loop and its own cost key's iteration program; its measured speedup
    is the baseline's loop time over its own."""
    from specsim.experiment.inrun import Group, SpecRun, _run_times, blocks, measured_statistic

    rows = ((1, 2),)
    runs = tuple(SpecRun(name=c, drafter_kind="x", drafter=None, k=2, kind="code", rows=rows,
                         cost_key=c) for c in ("a", "b", "a"))
    group = Group(temperature=0.0, cache_len=64, max_new_tokens=8, runs=runs)
    (block,) = blocks(group, 3)
    # call j of the block took j + 1 seconds in every one of three rounds (wall, cpu)
    per_call = [[[j + 1.0, 2 * (j + 1.0)]] * 3 for j in range(len(block.keys))]
    where = {key: j + 1.0 for j, key in enumerate(block.keys)}
    for i, run in enumerate(runs):
        t = _run_times(group, block, i, per_call)
        assert t["ar"].shape == (3, 2) and t["ar"][0, 0] == where[("ar", rows)]
        assert t["spec"][0, 0] == where[("spec", i)]
        assert t["target_1"][0, 0] == where[("target_1",)]
        assert t["verify"][0, 0] == where[("verify", 2)]
        assert t["iteration"][0, 1] == 2 * where[("iteration", run.cost_key, 2)]
        m = {role: v[:, 0] for role, v in t.items()}
        np.testing.assert_allclose(measured_statistic(m), where[("ar", rows)]
                                   / where[("spec", i)])
    assert np.isnan(measured_statistic({"ar": np.array(1.0), "spec": np.array(0.0)}))


def test_times_in_baseline_units_pair_each_ratio_round_by_round():
    """By hand: the machine runs round 3 three times slower; the run's loop hits a burst
    in round 2. Per round the speedup is 2, 1.667, 2: paired, its median is 2; the ratio
    of raw medians takes the baseline's round 2 and the run's round 2 beside round 3's
    speed and reads 1.667."""
    from specsim.experiment import inrun

    ar, spec = np.array([2.0, 2.1, 6.0]), np.array([1.0, 1.26, 3.0])
    assert np.median(ar) / np.median(spec) == pytest.approx(2.1 / 1.26)
    t = inrun.in_baseline_units({"ar": ar, "spec": spec, "target_1": ar / 4})
    np.testing.assert_allclose(t["ar"], [2.1] * 3)            # the baseline's median
    np.testing.assert_allclose(t["target_1"], [2.1 / 4] * 3)  # a call that swings with it
    med = {role: np.median(v) for role, v in t.items()}
    assert inrun.measured_statistic(med) == pytest.approx(2.0)
    two = inrun.in_baseline_units({"ar": np.stack([ar, 2 * ar], 1),     # [rounds, clocks]
                                   "spec": np.stack([spec, 2 * spec], 1)})
    np.testing.assert_allclose(two["spec"][:, 1], 2 * t["spec"])


def test_paired_speedups_are_closer_to_the_truth_and_their_intervals_cover():
    """Synthetic rounds: the machine's speed swings by 20% (log-sd) from round to round
    for every call of the round, and each call adds 5% of its own; true speedup 1.5, 8
    rounds. From times in baseline units the measured speedup strays less from 1.5 (RMS
    of its log error) than the ratio of raw medians, which can take its two medians
    from rounds of different speeds, and its interval holds 1.5 in about 95% of trials."""
    from specsim.experiment import inrun, intervals

    rng = np.random.default_rng(7)
    hits, paired_err, raw_err = 0, [], []
    for trial in range(200):
        swing = np.exp(0.2 * rng.standard_normal(8))
        ar = 3.0 * swing * np.exp(0.05 * rng.standard_normal(8))
        spec = 2.0 * swing * np.exp(0.05 * rng.standard_normal(8))
        iv = intervals.bootstrap(inrun.in_baseline_units({"ar": ar, "spec": spec}),
                                 inrun.measured_statistic, draws=300, seed=trial,
                                 positive=True)
        hits += iv.contains(1.5)
        paired_err.append(math.log(iv.value / 1.5))
        raw_err.append(math.log(np.median(ar) / np.median(spec) / 1.5))
    rms = lambda x: float(np.sqrt(np.mean(np.square(x))))
    assert rms(paired_err) < 0.8 * rms(raw_err)
    assert hits >= 0.9 * 200


def test_a_block_is_as_wide_as_its_widest_run():
    """A block converges only when every run's interval is within the target: a run
    without an interval (NaN) makes the block infinitely wide, never converged."""
    from specsim.experiment.inrun import widest_half_width

    assert widest_half_width([0.01, 0.04, 0.02]) == 0.04
    assert widest_half_width([0.01, math.nan]) == math.inf
    assert widest_half_width([math.nan, 0.01]) == math.inf


def _acceptance_terms_by_loop(n, k, alpha, runs, seed):
    """100 ln(E_model / (n / I)) of ``runs`` single-row runs of the i.i.d. acceptance
    process, simulated one draft at a time (the oracle of the vectorised simulator)."""
    from specsim import simulate

    rng = np.random.default_rng(seed)
    errs = []
    for _ in range(runs):
        reached, accepted, tokens, iters = np.zeros(k), np.zeros(k), 0, 0
        while tokens < n:
            a = 0
            while a < k:
                reached[a] += 1
                if rng.random() >= alpha:
                    break
                accepted[a] += 1
                a += 1
            tokens, iters = tokens + a + 1, iters + 1
        rates = np.where(reached > 0, accepted / np.maximum(reached, 1), 0.0)
        e_model = finite_run_tokens(simulate.tokens_pmf_positional(rates), n, 1)
        errs.append(100 * math.log(e_model / (n / iters)))
    return np.asarray(errs)


def test_the_acceptance_term_is_the_runs_own_draw_without_bias():
    """E_model, from a run's own per-position rates (a finite run of n tokens), against
    the run's n / I over simulated runs of the i.i.d. acceptance process: no bias (mean
    log error within 0.6%), a spread of a few per cent at K 4 (the draw of one 39-token
    run, which no timing interval holds)."""
    errs = _acceptance_terms_by_loop(39, 4, 0.7, 600, 4)
    assert abs(np.mean(errs)) < 0.6
    assert 1.5 < np.std(errs) < 5.0


def test_acceptance_term_draws_match_the_loop():
    """The vectorised simulator of the acceptance term (`finite_run.acceptance_term_draws`)
    against the draft-by-draft oracle: same mean and spread within their sampling error;
    at batch 16 the slowest row's draw is wider; certain acceptance has no draw."""
    from specsim import finite_run

    n, k, alpha = 39, 4, 0.7
    oracle = _acceptance_terms_by_loop(n, k, alpha, 800, 5)
    got = finite_run.acceptance_term_draws(np.full(k, alpha), n, 1, draws=800, rng=6)
    assert abs(got.mean() - oracle.mean()) < 4 * math.hypot(got.std(), oracle.std()) / math.sqrt(800)
    assert got.std() == pytest.approx(oracle.std(), rel=0.15)
    wide = finite_run.acceptance_term_draws(np.full(k, alpha), n, 16, draws=200, rng=7)
    assert wide.std() > got.std()
    sure = finite_run.acceptance_term_draws(np.ones(k), n, 4, draws=5, rng=0)
    np.testing.assert_allclose(sure, 0.0, atol=1e-9)     # ceil(39 / 5) iterations, always
    with pytest.raises(ValueError, match="rates"):
        finite_run.acceptance_term_draws([[0.5]], n)
    with pytest.raises(ValueError, match="n_tokens"):
        finite_run.acceptance_term_draws([0.5], 0)


def test_draw_summary_follows_its_definition():
    from specsim.experiment.decomposition import draw_summary

    spec = pd.DataFrame({S.ERR_ACCEPTANCE: [1.0, -3.0, 0.5, 2.0],
                         S.ERR_ACCEPTANCE_DRAW_LO: [-2.0, -2.0, -1.0, np.nan],
                         S.ERR_ACCEPTANCE_DRAW_HI: [2.0, 4.0, 1.0, np.nan],
                         S.MEASURED_HALF_WIDTH: [0.01, 0.04, 0.02, 0.01],
                         S.ERR_TOTAL: [1.0, -3.0, 0.5, 0.0],
                         S.ERR_TOTAL_CI_LO: [1.0, -4.0, 2.0, -1.0],
                         S.ERR_TOTAL_CI_HI: [4.0, -2.0, 4.0, 1.0]})
    d = draw_summary(spec)
    assert d["n_runs"] == 3
    assert d["acceptance_in_range_pct"] == pytest.approx(100 * 2 / 3, abs=0.1)
    assert d["draw_half_width_median_pct"] == pytest.approx(2.0)       # of 2, 3, 1
    assert d["measured_half_width_median_pct"] == pytest.approx(2.0)   # of 1, 4, 2
    assert d["draw_wider_than_measured_pct"] == pytest.approx(100 / 3, abs=0.1)
    # the expected acceptance's errors 2, -6, 1 are off the draw's midpoints (0, 1, 0)
    # by 2, 7, 1 against hypot(1.5, 2) = 2.5, hypot(1, 3), hypot(1, 1): two agree
    assert d["agreement_with_draw_pct"] == pytest.approx(100 * 2 / 3, abs=0.1)


def test_timed_calls_give_back_the_measured_speedups(demo_dir):
    """timed_calls.csv holds every timed call of the rounds: each block's calls once a
    round, in the order they ran, and each run's measured speedup recomputed from them
    (its baseline over its loop, round by round) is the runs table's, by either clock."""
    from specsim.experiment import timed_calls

    out, _ = demo_dir
    calls = timed_calls.read(out)
    assert (calls[["wall_s", "cpu_s"]].to_numpy(float) > 0).all()
    for _, g in calls.groupby("group"):
        assert sorted(g["order"]) == list(range(len(g)))        # one order per group
        assert g["batch"].nunique() == 1
        for _, b in g.groupby("block"):
            per_round = b.groupby("round").size()
            assert per_round.nunique() == 1                     # the same calls each round
            assert list(per_round.index) == list(range(len(per_round)))
            first = b[b["round"] == 0].sort_values("order")["call"].tolist()
            if len(per_round) > 1:                              # every second round reversed
                second = b[b["round"] == 1].sort_values("order")["call"].tolist()
                assert second == first[::-1]
            assert first.count("ar") == 1 and "target_1" in first and "spec" in first
    runs = S.speculative(pd.read_csv(out / "runs.csv"))
    for clock in ("cpu", "wall"):
        got = timed_calls.measured_speedups(calls, clock)
        keys = [S.BATCH, S.DRAFTER, S.KIND, S.K]
        both = runs.merge(got, on=keys, suffixes=("", "_calls"), validate="one_to_one")
        assert len(both) == len(runs)
        np.testing.assert_allclose(both[S.MEASURED_SPEEDUP + "_calls"],
                                   both[S.MEASURED_BY_CLOCK[clock]], rtol=1e-9)
    with pytest.raises(InvalidArgument, match="clock"):
        timed_calls.measured_speedups(calls, "gpu")
