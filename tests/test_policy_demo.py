"""The demo's ``policies`` part: its cost model, its table arithmetic, its traces, and
the part end to end through the command line on a tiny model (no wall-clock asserts)."""

import numpy as np
import pandas as pd
import pytest

from specsim import policies as P
from specsim import schema
from specsim import simulate as S
from specsim.experiment import policy_runs as R

PROMPTS = [[1, 5, 7, 9, 11, 5, 7, 9], [3, 3, 4, 8, 15, 16]]


@pytest.fixture(scope="module")
def tiny():
    from specsim import models
    from specsim.drafters import layer_skip_drafter
    target = models.load("tiny-llama").with_layer_loop("scan")
    return target, layer_skip_drafter(target, [0, 1])


def test_engine_costs_verify_as_wide_as_the_plan():
    c = R.costs_from_passes(2.0, {1: 2.2, 2: 2.4, 3: 2.7, 4: 3.0}, 0.5, k_max=4)
    np.testing.assert_allclose(c.iteration_time(np.arange(5)), [2.0, 2.7, 3.4, 4.2, 5.0])
    f = R.fixed_costs(2.0, {2: 2.4, 4: 3.0}, 0.5, k=2)
    np.testing.assert_allclose(f.iteration_time(np.arange(3)), [2.0, 2.9, 3.4])
    with pytest.raises(ValueError, match=r"t_verify_by_k must time every K in 1..4 "
                                         r"\(missing \[1, 3\]\)"):
        R.costs_from_passes(2.0, {2: 2.4, 4: 3.0}, 0.5, k_max=4)


def test_the_large_batch_mixes_kinds_of_work():
    from specsim.experiment.settings import DemoSettings
    two = DemoSettings(kinds=("extraction", "code"))
    assert R.grid(two) == [("extraction", 1), ("code", 1), (R.MIXED, R.LARGE_BATCH[False])]
    assert R.mixed_kinds(two, 6) == ["extraction", "code", "json", "prose", "extraction",
                                     "code"]
    assert R.mixed_kinds(DemoSettings(kinds=("prose",)), 4) == ["prose", "code", "json",
                                                               "extraction"]


def test_goodput_with_a_costly_draft_turns_itself_off():
    """c = 0.9 with the verify a third dearer: even α = 1 cannot pay (K + 1 tokens for
    0.9 K + 4/3 > K + 1 target steps), so the part's Goodput plans K = 0 from its prior
    and from a history of all drafts accepted. What the engine does then (plain
    autoregressive steps, the drafter never run, not even its prefill, the same output)
    is tested on a model drafter in test_policies."""
    goodput = R.make_policy(R.GOODPUT, 3, R.costs_from_passes(1.0, dict.fromkeys((1, 2, 3), 4 / 3),
                                                                 0.9, 3))
    t = goodput.costs.iteration_time(np.arange(4))                     # [K_max + 1]
    assert (np.arange(1, 5) / t < 1 / t[0]).sum() == 3                 # by hand: K >= 1 loses
    assert goodput.plan(goodput.init(2), 2).tolist() == [0, 0]
    sure = (np.full((2, 3), 1e6, np.float32),) * 2                    # accepted = reached
    assert goodput.alpha_estimate(sure).min() > 0.999
    rich = tuple(np.full_like(x, 1e6) for x in goodput.init(2)[2:])     # not the budget
    assert goodput.plan(sure + rich, 2).tolist() == [0, 0]


def test_ngram_trace_replays_the_recorded_fixed_k_run(tiny):
    from specsim.decode import generate_speculative
    from specsim.drafters import NGramDrafter
    target, _ = tiny
    res = generate_speculative(target, NGramDrafter(target.cfg.vocab_size, n=2), PROMPTS, 16,
                               policy=P.FixedK(k=3), eos_token_id=None)
    trace = R.trace_from_stats(res.stats)
    run = S.simulate_policy(P.FixedK(k=3), trace)
    a = res.stats.active
    np.testing.assert_array_equal(run.accepted[a], res.stats.accepted[a])
    # a threshold replay proposes exactly the slots the lookup filled
    thr = S.simulate_policy(R.make_policy(R.THRESHOLD, 3, None), trace)
    np.testing.assert_array_equal(thr.proposed[a], res.stats.drafted[a])


def test_speedups_against_the_baseline_and_the_best_fixed_k():
    rows = []
    for kind, ar in (("code", 1.0), ("prose", 2.0)):
        rows.append({schema.DRAFTER: "autoregressive", schema.KIND: kind, schema.BATCH: 1,
                     schema.POLICY: "autoregressive", schema.K: 0, schema.DECODE_S: ar,
                     schema.NEW_TOKENS: 10, schema.SIM_SPEEDUP_VS_AR: np.nan})
        for k, t, sim in ((1, ar / 1.5, 1.4), (2, ar / 2.0, 1.8), (3, ar / 1.8, 1.9)):
            rows.append({schema.DRAFTER: "d", schema.KIND: kind, schema.BATCH: 1,
                         schema.POLICY: "fixed", schema.K: k, schema.DECODE_S: t,
                         schema.NEW_TOKENS: 10, schema.SIM_SPEEDUP_VS_AR: sim})
        rows.append({schema.DRAFTER: "d", schema.KIND: kind, schema.BATCH: 1,
                     schema.POLICY: "goodput", schema.K: 3, schema.DECODE_S: ar / 2.1,
                     schema.NEW_TOKENS: 10, schema.SIM_SPEEDUP_VS_AR: 2.0})
    from specsim.experiment.parts.policies import add_speedups
    out = add_speedups(pd.DataFrame(rows))
    g = out[out[schema.POLICY] == "goodput"]
    np.testing.assert_allclose(g[schema.SPEEDUP_VS_AR], 2.1)
    np.testing.assert_allclose(g[schema.SPEEDUP_VS_BEST_FIXED], 2.1 / 2.0)
    np.testing.assert_allclose(g[schema.SIM_SPEEDUP_VS_BEST_FIXED], 2.0 / 1.8)  # K = 2's replay
    assert (out.loc[out[schema.DRAFTER] == "d", schema.BEST_FIXED_K] == 2).all()
    assert schema.WITHIN_3PCT_OF_BEST not in out           # no rounds given: no verdict
    # paired rounds: the per-round ratio against the best fixed K (K = 2, rows 2 and 7),
    # its range and the verdict on >= 0.97, by hand
    table = pd.DataFrame(rows)
    per_round = {i: np.full(3, t / 10) for i, t in enumerate(table[schema.DECODE_S])}
    per_round[4] = per_round[2] / np.array([1.0, 0.96, 1.1])     # code goodput: noise
    per_round[9] = per_round[7] / np.array([0.9, 0.95, 0.92])    # prose goodput: no
    out = add_speedups(table, per_round)
    g = out[out[schema.POLICY] == "goodput"]
    np.testing.assert_allclose(g[schema.VS_BEST_LOW], [0.96, 0.9])
    np.testing.assert_allclose(g[schema.VS_BEST_HIGH], [1.1, 0.95])
    assert g[schema.WITHIN_3PCT_OF_BEST].tolist() == ["noise", "no"]
    f = out[out[schema.POLICY] == "fixed"]
    np.testing.assert_allclose(f[schema.VS_BEST_LOW], f[schema.SPEEDUP_VS_BEST_FIXED])
    assert f[schema.WITHIN_3PCT_OF_BEST].tolist() == ["no", "yes", "no"] * 2   # 0.75, 1, 0.9
    # against plain decoding, per round (the autoregressive rows 0 and 5; K = 2 runs at
    # 2x): code goodput 2 * [1, 0.96, 1.1], prose 2 * [0.9, 0.95, 0.92]; >= 0.98 throughout
    np.testing.assert_allclose(g[schema.VS_AR_LOW], [2 * 0.96, 2 * 0.9])
    np.testing.assert_allclose(g[schema.VS_AR_HIGH], [2 * 1.1, 2 * 0.95])
    assert g[schema.WITHIN_2PCT_OF_AR].tolist() == ["yes", "yes"]
    # a plain-decoding round faster than the policy's in one round only: noise
    per_round[4] = per_round[0] / np.array([1.0, 0.97, 1.02])
    per_round[9] = per_round[5] / np.array([0.9, 0.95, 0.97])
    out = add_speedups(table, per_round)
    g = out[out[schema.POLICY] == "goodput"]
    np.testing.assert_allclose(g[schema.VS_AR_LOW], [0.97, 0.9])
    assert g[schema.WITHIN_2PCT_OF_AR].tolist() == ["noise", "no"]
    from specsim.report.policies import _round_verdicts, policy_goals

    goals = policy_goals(type("R", (), {"tables": {schema.POLICIES: out}})())
    assert goals["goodput_rounds_vs_ar"] == {"yes": 0, "noise": 1, "no": 1}
    assert "in every timed round in 0 cells, in some (noise) in 1, in none in 1." in \
        _round_verdicts(goals)[1]


def test_baselines_timed_in_more_turns_take_the_median_of_each_round():
    from specsim.experiment.parts.policies import baseline_rounds

    samples = [[1.0, 2.0], [5.0, 6.0], [3.0, 3.0]]
    again = [0, 2, 0, 2]                              # jobs 0 and 2, two extra turns each
    extra = [[1.4, 2.6], [2.0, 9.0], [0.1, 2.8], [4.0, 1.0]]
    got = baseline_rounds(samples, again, extra)
    assert got == [[1.0, 2.6], [5.0, 6.0], [3.0, 3.0]]    # medians of (own, extra, extra)
    got = baseline_rounds(samples, [0], [[3.0, 0.0]])
    assert got[0] == [2.0, 1.0] and got[1:] == samples[1:]   # median of two: their mean
    assert baseline_rounds(samples, [], []) == samples


def test_cross_fitted_best_k_is_ranked_on_the_other_rounds():
    from specsim.experiment.parts.policies import cross_fitted_best

    t = [[1.0, 1.2, 1.1], [1.1, 1.0, 1.15]]     # by hand: medians of the other two rounds
    np.testing.assert_allclose(cross_fitted_best(t), [1.1, 1.2, 1.15])
    np.testing.assert_allclose(cross_fitted_best([[1.0], [0.9]]), [0.9])   # one round
    with pytest.raises(ValueError, match="fixed_rounds"):
        cross_fitted_best([])


def test_cross_fitting_removes_the_winners_curse():
    """The oracle: two Ks of equal speed, each round's time lognormal with σ = 5%. The
    best K chosen and measured on the same rounds reads fast (by σ/√π ≈ 2.8% with one
    round, the closed form for the least of two normals); ranked on the other rounds it
    reads unbiased (simulation, 4000 cells of 4 rounds)."""
    from specsim.experiment.parts.policies import cross_fitted_best

    rng = np.random.default_rng(0)
    sigma, n = 0.05, 4000
    t = np.exp(sigma * rng.standard_normal((n, 2, 4)))
    cross = np.mean([np.mean(np.log(cross_fitted_best(c))) for c in t])
    same = np.mean([np.log(c[np.argmin(np.median(c, axis=1))]).mean() for c in t])
    one = np.mean(np.log(t[:, :, 0].min(axis=1)))
    assert abs(cross) < 0.003                                   # unbiased
    assert same < -0.01                                         # the winner's curse
    assert one == pytest.approx(-sigma / np.sqrt(np.pi), abs=0.003)


def test_the_part_runs_end_to_end_through_the_cli(tmp_path, capsys, monkeypatch):
    from quiet_machine import quiet_machine
    from specsim.cli import main
    monkeypatch.setenv("SPECSIM_JAX_CACHE", str(tmp_path / "jax-cache"))
    quiet_machine(monkeypatch)              # the demo's own ceilings: test_experiment.py's
    out = tmp_path / "demo"
    # one drafter (the model drafter: caches, draft cost, its prefill); n-gram lookup
    # under every policy is covered in test_policies
    argv = ["demo", "--quick", "--target", "tiny-llama", "--drafters", "layer-skip",
            "--k", "1", "2", "--kinds", "code", "--max-new-tokens", "6", "--parts", "policies",
            "--policy-max-new-tokens", "8", "--no-progress", "--out", str(out)]
    assert main(argv + ["--loop-repeats", "0"]) == 2          # refused before running
    assert "loop_repeats" in capsys.readouterr().err and not out.exists()
    assert main(argv + ["--loop-repeats", "3"]) == 0
    assert f"wrote {out}/" in capsys.readouterr().out
    t = pd.read_csv(out / "policies.csv")
    cells = {(d, b) for d, b in zip(t[schema.DRAFTER], t[schema.BATCH])}
    assert cells == {(d, b) for d in ("autoregressive", "layer-skip:2/3")
                     for b in (1, R.LARGE_BATCH[True])}
    assert set(t[t[schema.BATCH] > 1][schema.KIND]) == {R.MIXED}
    spec = t[t[schema.DRAFTER] != "autoregressive"]
    assert sorted(set(spec[schema.POLICY])) == sorted({"fixed", *R.POLICY_NAMES})
    assert (spec[schema.NEW_TOKENS] == 8 * spec[schema.BATCH]).all()   # the part's length
    for col in (schema.SPEEDUP_VS_AR, schema.SIM_SPEEDUP_VS_AR, schema.SPEEDUP_VS_BEST_FIXED,
                schema.SIM_SPEEDUP_VS_BEST_FIXED, schema.MEAN_K):
        assert np.isfinite(spec[col]).all(), col
    best = spec[(spec[schema.POLICY] == "fixed") & (spec[schema.K] == spec[schema.BEST_FIXED_K])]
    assert len(best) == 2 and set(best[schema.K]) <= {1, 2}
    # the goal's verdict from the paired rounds (each row against, round by round, the
    # fixed K the other rounds rank fastest): in every round one fixed row is that K
    lo, hi = spec[schema.VS_BEST_LOW], spec[schema.VS_BEST_HIGH]
    assert (lo <= spec[schema.SPEEDUP_VS_BEST_FIXED]).all()
    assert (spec[schema.SPEEDUP_VS_BEST_FIXED] <= hi).all()
    for _, fixed in spec[spec[schema.POLICY] == "fixed"].groupby(schema.BATCH):
        assert fixed[schema.VS_BEST_HIGH].max() >= 1 and fixed[schema.VS_BEST_LOW].min() <= 1
    want = np.where(lo >= 0.97, "yes", np.where(hi < 0.97, "no", "noise"))
    assert (spec[schema.WITHIN_3PCT_OF_BEST] == want).all()
    lo, hi = spec[schema.VS_AR_LOW], spec[schema.VS_AR_HIGH]
    assert (lo <= hi).all() and np.isfinite(lo).all()
    want = np.where(lo >= 0.98, "yes", np.where(hi < 0.98, "no", "noise"))
    assert (spec[schema.WITHIN_2PCT_OF_AR] == want).all()
    assert "## Draft-length policies" in (out / "report.md").read_text()
    # each run's loop program is timed alone (its prefills run untimed before it): the
    # only prefill inside a timed loop is a draft model's that a policy loop primes late
    # (Goodput's), and it is removed where the loop drafted
    late = spec[schema.POLICY].isin([p for p in R.POLICY_NAMES if p.startswith("goodput")])
    for (kind, batch), cell in t.groupby([schema.KIND, schema.BATCH]):
        ar = cell[cell[schema.DRAFTER] == "autoregressive"].iloc[0]
        assert ar[schema.PREFILL_S] == 0 and ar[schema.DECODE_S] == ar[schema.TIME_S]
        others = cell[cell[schema.DRAFTER] != "autoregressive"]
        primed = late.loc[others.index] & (others[schema.DRAFT_PASSES] > 0)
        assert (others[primed][schema.PREFILL_S] > 0).all()
        assert (others[~primed][schema.PREFILL_S] == 0).all()
        # the cost model on each run's own passes: plain decoding's 7 steps are its
        # baseline (speedup 1); the fixed-K program's iterations at K + 1 tokens and its
        # draft steps (less the draft model's prefill), from the table's own columns
        assert ar[schema.OWN_COST_SPEEDUP] == pytest.approx(1.0)
        fixed = others[others[schema.POLICY] == "fixed"]
        own = fixed[schema.ITERATIONS] * fixed[schema.T_VERIFY] + \
            (fixed[schema.DRAFT_PASSES] - 1) * fixed[schema.T_DRAFT]
        np.testing.assert_allclose(fixed[schema.OWN_COST_SPEEDUP],
                                   7 * fixed[schema.T_TARGET_1] / own, rtol=1e-9)
        np.testing.assert_allclose(fixed[schema.LOOP_OVERHEAD],
                                   fixed[schema.DECODE_S] / own, rtol=1e-9)
        assert np.isfinite(cell[[schema.OWN_COST_SPEEDUP, schema.LOOP_OVERHEAD]].to_numpy()).all()
    text = (out / "report.md").read_text()
    assert "Of it, the replay's decisions against each run's own" in text


def test_paired_pass_costs_are_ratios_to_the_step_of_the_same_round():
    """Goodput's pre-round costs: the geometric mean over rounds of each pass's ratio to
    the batch's target step in the same round, times that step's median; a round that
    slows every call alike moves nothing."""
    from specsim.experiment.parts.policies import _paired
    keys = [("target_1", 1), ("verify", 1, 3), ("draft", "ngram", 1), ("target_1", 8),
            ("verify", 8, 2)]
    slow = np.array([1.0, 3.0, 1.0, 2.0])                        # per-round slow-downs
    samples = [4 * 0.02 * slow, 4 * 0.03 * slow, 16 * 0.001 * slow, [0.5, 0.7, 0.6, 0.9],
               [1.0, 1.4, 1.2, 1.8]]
    got = _paired(keys, samples, [4, 4, 16, 1, 1])
    np.testing.assert_allclose(got[("verify", 1, 3)] / got[("target_1", 1)], 1.5)
    np.testing.assert_allclose(got[("verify", 8, 2)], 0.65 * 2)
    np.testing.assert_allclose(got[("draft", "ngram", 1)] / got[("target_1", 1)], 0.05)
    np.testing.assert_allclose(got[("target_1", 1)], 0.02 * np.median(slow))
    np.testing.assert_allclose(got[("target_1", 8)], 0.65)
    noisy = [4 * 0.02 * slow, 4 * 0.03 * slow * np.array([1.1, 1.0, 0.9, 1.0])]
    ratio = _paired(keys[:2], noisy, [4, 4])
    np.testing.assert_allclose(ratio[("verify", 1, 3)] / ratio[("target_1", 1)],
                               1.5 * np.exp(np.mean(np.log([1.1, 1.0, 0.9, 1.0]))))
