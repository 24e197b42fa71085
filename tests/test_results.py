"""specsim.results: the two acceptance rates and per-position counts, against hand counts."""

import numpy as np
import pytest

from specsim import decode
from specsim.results import GenerationResult, ShapePlan, SpeculativeStats


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
    assert st.alpha == st.alpha_per_proposal


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
    np.testing.assert_array_equal(st.per_position_acceptance, st.per_position_per_proposal)


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
    # P = bucket(9, 8) = 16; need = 9 + 20 + 4 = 33 -> S = 64; I = bucket(20) = 32
    assert plan == ShapePlan(padded_prompt=16, cache_len=64, iterations=32)
    assert decode.plan_shapes([9], 20).cache_len == 32            # lengths; no k headroom
    assert decode.plan_shapes([9], 20, cache_len=40).cache_len == 40
    with pytest.raises(ValueError, match="prompt too long.*k \\(3\\) \\+ 1 = 33.*allows 32"):
        decode.plan_shapes([9], 20, k=3, caps=32)
    with pytest.raises(ValueError, match="^cache_len \\(99\\) exceeds max_seq_len"):
        decode.plan_shapes([9], 20, caps=[(64, "max_seq_len")], cache_len=99)
    with pytest.raises(ValueError, match="^max_new_tokens must be a positive integer"):
        decode.plan_shapes([9], 0)


def test_warmup_tokens_shares_the_iteration_bucket():
    for n in (1, 5, 16, 17, 48, 300, 600):
        w = decode.warmup_tokens(n)
        assert w <= n and decode.bucket(w) == decode.bucket(n)
        assert w == 1 or decode.bucket(w - 1) != decode.bucket(n)
