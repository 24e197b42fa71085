"""specsim.results: the two acceptance rates and per-position counts, against hand counts."""

import numpy as np
import pytest

from specsim import decode
from specsim.results import GenerationResult, ShapePlan, SpeculativeStats, binomial_interval


def _stats():
    # K = 3, two rows. Row 0: accepted 2, 0, 3 with 3 proposals each. Row 1: an n-gram-like
    # drafter proposing 1, 3, then finishing (−1).
    accepted = np.array([[2, 1], [0, 0], [3, -1]])
    drafted = np.array([[3, 1], [3, 3], [3, -1]])
    return SpeculativeStats(3, accepted, drafted, np.full((3, 2, 3), np.nan))


def test_alpha_per_slot_and_per_proposal_by_hand():
    st = _stats()
    # accepted 2+1+0+0+3 = 6 over 5 active iterations × 3 slots = 15; proposed 3+1+3+3+3 = 13
    assert st.alpha_per_slot == pytest.approx(6 / 15)
    assert st.alpha_per_proposal == pytest.approx(6 / 13)


def test_per_position_counts_and_rates_by_hand():
    st = _stats()
    # reached position j (all earlier accepted): j=0: 5 samples; j=1: accepted>=1: 2,1,3 -> 3;
    # j=2: accepted>=2: 2,3 -> 2. Accepted at j: >j: j=0: 3; j=1: 2; j=2: 1.
    np.testing.assert_array_equal(st.per_position_counts, [5, 3, 2])
    np.testing.assert_array_equal(st.per_position_accepted, [3, 2, 1])
    np.testing.assert_allclose(st.per_position_per_slot, [3 / 5, 2 / 3, 1 / 2])
    # proposed at j among those reaching it: row 1 iteration 0 reached j=1 with 1 proposal
    np.testing.assert_array_equal(st.per_position_proposed_counts, [5, 2, 2])
    np.testing.assert_allclose(st.per_position_per_proposal, [3 / 5, 2 / 2, 1 / 2])


def test_per_slot_rates_reproduce_the_run_tokens_per_iteration():
    """E = 1 + Σₖ Πⱼ≤ₖ αⱼ with the per-slot rates equals the measured mean tokens/iteration
    (the identity holds exactly for the empirical rates)."""
    rng = np.random.default_rng(0)
    acc = rng.integers(-1, 5, size=(40, 3))
    st = SpeculativeStats(4, acc, np.where(acc >= 0, 4, -1), np.full((40, 3, 4), np.nan))
    e = 1 + np.cumprod(st.per_position_per_slot).sum()
    assert e == pytest.approx(st.tokens_per_iteration)


def test_empty_stats_give_nan():
    st = SpeculativeStats(2, np.full((1, 1), -1), np.full((1, 1), -1), np.full((1, 1, 2), np.nan))
    assert np.isnan(st.alpha_per_slot) and np.isnan(st.alpha_per_proposal)
    assert np.isnan(st.per_position_per_slot).all()


def test_decode_reexports_results():
    assert decode.GenerationResult is GenerationResult
    assert decode.SpeculativeStats is SpeculativeStats
    assert decode.ShapePlan is ShapePlan


def test_plan_shapes_buckets_and_refuses():
    plan = decode.plan_shapes([[1, 2, 3], [4] * 9], 20, k=3, caps=[(2048, "max_seq_len")])
    # P = prompt_bucket(9) = 16; need = 9 + 20 + 4 = 33 -> S = 64; I = bucket(20) = 32
    assert plan == ShapePlan(padded_prompt=16, cache_len=64, iterations=32)
    assert decode.plan_shapes([9], 20).cache_len == 32            # lengths; no k headroom
    assert decode.plan_shapes([9], 20, cache_len=40).cache_len == 40
    with pytest.raises(ValueError, match="prompt too long.*k \\(3\\) \\+ 1 = 33.*allows 32"):
        decode.plan_shapes([9], 20, k=3, caps=32)
    with pytest.raises(ValueError, match="^cache_len \\(99\\) exceeds max_seq_len"):
        decode.plan_shapes([9], 20, caps=[(64, "max_seq_len")], cache_len=99)
    with pytest.raises(ValueError, match="^max_new_tokens must be a positive integer"):
        decode.plan_shapes([9], 0)


def test_prompt_buckets_are_finer_past_64_tokens():
    from specsim.decode.shapes import prompt_bucket
    got = {n: prompt_bucket(n) for n in (1, 8, 9, 33, 64, 65, 96, 97, 133, 500, 512, 513, 700)}
    assert got == {1: 8, 8: 8, 9: 16, 33: 64, 64: 64, 65: 96, 96: 96, 97: 128, 133: 160,
                   500: 512, 512: 512, 513: 768, 700: 768}
    plan = decode.plan_shapes([[7] * 133], 96, k=4, caps=[(2048, "max_seq_len")])
    assert (plan.padded_prompt, plan.cache_len) == (160, 256)   # 133 + 96 + 5 = 234 -> 256


def test_warmup_tokens_shares_the_iteration_bucket():
    for n in (1, 5, 16, 17, 48, 300, 600):
        w = decode.warmup_tokens(n)
        assert w <= n and decode.bucket(w) == decode.bucket(n)
        assert w == 1 or decode.bucket(w - 1) != decode.bucket(n)


# ---- results that read themselves -------------------------------------------------------------
def test_binomial_interval_is_wilson():
    """Against scipy's own Wilson interval (an independent implementation)."""
    from scipy.stats import binomtest
    x, n = np.array([0, 3, 7, 50, 20]), np.array([10, 5, 9, 200, 20])
    low, high = binomial_interval(x, n)
    for xi, ni, lo, hi in zip(x, n, low, high):
        ci = binomtest(int(xi), int(ni)).proportion_ci(0.95, method="wilson")
        assert (lo, hi) == pytest.approx((ci.low, ci.high), abs=1e-9)
    low, high = binomial_interval(0, 0)
    assert np.isnan(low) and np.isnan(high)


def _long_stats(I=400, B=4, K=5):
    rng = np.random.default_rng(1)
    acc = rng.integers(0, K + 1, size=(I, B))
    acc[I // 2:, 0] = -1
    return SpeculativeStats(K, acc, np.where(acc >= 0, K, -1), np.full((I, B, K), np.nan))


def test_print_stats_is_a_compact_summary_not_arrays():
    """`print(res.stats)` prints a few summary lines, not the per-iteration arrays."""
    st = _long_stats()
    text = str(st)
    assert repr(st) == text == st.summary()
    assert len(text.splitlines()) <= st.k + 6 and "nan" not in text.lower()
    assert f"alpha_per_slot {st.alpha_per_slot:.3g}" in text           # both α's, named
    assert f"alpha_per_proposal {st.alpha_per_proposal:.3g}" in text
    assert f"tokens per iteration {st.tokens_per_iteration:.3g}" in text
    assert "400 iterations" in text
    for j in range(st.k):                                # each position: accepted/reached
        assert f"({st.per_position_accepted[j]}/{st.per_position_counts[j]})" in text
    few = str(_stats())                                  # 5, 3, 2 samples: flagged
    assert few.count("few samples") == 3 and "few samples" not in text


def test_stats_frame_and_html():
    st = _stats()
    df = st.to_frame()
    assert list(df.index) == [1, 2, 3]
    np.testing.assert_array_equal(df["reached"], st.per_position_counts)
    np.testing.assert_allclose(df["alpha_per_slot"], st.per_position_per_slot)
    np.testing.assert_allclose(df["alpha_per_proposal"], st.per_position_per_proposal)
    assert ((df["low"] <= df["alpha_per_slot"]) & (df["alpha_per_slot"] <= df["high"])).all()
    page = st._repr_html_()
    assert "<table" in page and "alpha_per_slot" in page and "Wilson" in page


def test_generation_results_carry_wall_time_and_read_themselves():
    """decode.generate_* measure their wall time with compiling excluded; a second call of
    the same shapes compiles nothing; tokens/s follows from the two."""
    from specsim import models
    m = models.load("tiny-llama")
    runs = [decode.generate_speculative(m, m, [[1, 2, 3], [4, 5]], 12, k=2,
                                        eos_token_id=None) for _ in range(2)]
    runs.append(decode.generate_autoregressive(m, [[1, 2, 3]], 9, eos_token_id=None))
    for res in runs:
        assert res.wall_s > 0 and res.compile_s >= 0
        assert res.tokens_per_s == pytest.approx(res.n_generated / res.wall_s)
        assert res.ms_per_token == pytest.approx(1000 * res.wall_s / res.n_generated)
    assert runs[1].compile_s == 0.0                     # cached program: nothing compiled
    text = str(runs[1])
    assert "tokens/s" in text and "alpha_per_slot" in text and "nan" not in text.lower()
    assert "compile" not in text.splitlines()[1]        # nothing compiled: nothing excluded
    df = runs[0].to_frame()
    assert list(df["new_tokens"]) == [12, 12] and list(df["prompt_length"]) == [3, 2]
    np.testing.assert_array_equal(df["iterations"], runs[0].stats.iterations_per_row)
    assert "<b>GenerationResult</b>" in runs[0]._repr_html_()
    assert "SpeculativeStats" not in str(runs[2])       # autoregressive: no stats section
