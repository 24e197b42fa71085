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


def test_engine_costs_verify_k_max_plus_one_whenever_a_row_drafts():
    c = R.costs_from_passes(2.0, 3.0, 0.5, k_max=4)
    np.testing.assert_allclose(c.iteration_time(np.arange(5)), [2.0, 3.5, 4.0, 4.5, 5.0])
    f = R.fixed_costs(2.0, {2: 2.4, 4: 3.0}, 0.5, k=2)
    np.testing.assert_allclose(f.iteration_time(np.arange(3)), [2.0, 2.9, 3.4])


def test_goodput_with_a_costly_draft_turns_itself_off_and_equals_autoregressive(tiny):
    """c = 0.9 with the verify a third dearer: even α = 1 cannot pay at K = 1
    (2 tokens for 0.9 + 1.33 > 2 steps), so every iteration plans K = 0, the drafter never
    runs after its prefill, and the output is the target's own."""
    from specsim.decode import generate_autoregressive, generate_speculative
    target, drafter = tiny
    goodput = R.make_policy(R.GOODPUT, 3, R.costs_from_passes(1.0, 4 / 3, 0.9, 3))
    assert P.Goodput(k_max=3, costs=goodput.costs).plan(
        goodput.init(2), 2).tolist() == [0, 0]
    ref = generate_autoregressive(target, PROMPTS, 16, eos_token_id=None)
    res = generate_speculative(target, drafter, PROMPTS, 16, policy=goodput, eos_token_id=None)
    assert res.tokens == ref.tokens
    st = res.stats
    assert (st.k_used[st.active] == 0).all() and (st.drafted[st.active] == 0).all()
    assert res.draft_passes == 1                                   # the prefill only
    assert res.meta["single_token_target_passes"] == res.n_iterations == ref.n_iterations


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


def test_the_part_runs_end_to_end_through_the_cli(tmp_path, capsys, monkeypatch):
    from specsim.cli import main
    monkeypatch.setenv("SPECSIM_JAX_CACHE", str(tmp_path / "jax-cache"))
    out = tmp_path / "demo"
    argv = ["demo", "--quick", "--target", "tiny-llama", "--drafters", "ngram", "layer-skip",
            "--k", "1", "2", "--kinds", "code", "--max-new-tokens", "8", "--parts", "policies",
            "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    assert f"wrote {out}/" in capsys.readouterr().out
    t = pd.read_csv(out / "policies.csv")
    cells = {(d, b) for d, b in zip(t[schema.DRAFTER], t[schema.BATCH])}
    assert cells == {(d, b) for d in ("autoregressive", "ngram-3", "layer-skip:2/3")
                     for b in (1, R.LARGE_BATCH[True])}
    spec = t[t[schema.DRAFTER] != "autoregressive"]
    assert sorted(set(spec[schema.POLICY])) == sorted({"fixed", *R.POLICY_NAMES})
    assert (spec[schema.NEW_TOKENS] == 8 * spec[schema.BATCH]).all()
    for col in (schema.SPEEDUP_VS_AR, schema.SIM_SPEEDUP_VS_AR, schema.SPEEDUP_VS_BEST_FIXED,
                schema.SIM_SPEEDUP_VS_BEST_FIXED, schema.MEAN_K):
        assert np.isfinite(spec[col]).all(), col
    best = spec[(spec[schema.POLICY] == "fixed") & (spec[schema.K] == spec[schema.BEST_FIXED_K])]
    np.testing.assert_allclose(best[schema.SPEEDUP_VS_BEST_FIXED], 1.0)
    assert len(best) == 4 and set(best[schema.K]) <= {1, 2}
    assert "## Draft-length policies" in (out / "report.md").read_text()
