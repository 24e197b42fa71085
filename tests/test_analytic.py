"""specsim.analytic: closed forms against published numbers, exact arithmetic, brute force
and their own inverses; every bad input raises a ValueError naming the argument."""

import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from specsim import analytic as A

# --- Leviathan et al. 2023, Table 1 (c = c_hat = 0): (alpha, gamma, ops, speed) ----------

TABLE_1 = [(0.6, 2, 1.53, 1.96), (0.7, 3, 1.58, 2.53), (0.8, 2, 1.23, 2.44),
           (0.8, 5, 1.63, 3.69), (0.9, 2, 1.11, 2.71), (0.9, 10, 1.60, 6.86)]


@pytest.mark.parametrize("alpha, k, ops, speed", TABLE_1)
def test_leviathan_table_1(alpha, k, ops, speed):
    assert round(float(A.speedup(alpha, k, 0.0)), 2) == speed
    assert round(float(A.ops_factor(alpha, k, 0.0)), 2) == ops


def test_table_1_vectorised_in_one_call():
    alpha, k, ops, speed = map(np.array, zip(*TABLE_1))
    np.testing.assert_array_equal(np.round(A.speedup(alpha, k, 0.0), 2), speed)
    np.testing.assert_array_equal(np.round(A.ops_factor(alpha, k, 0.0), 2), ops)


# --- expected tokens ----------------------------------------------------------------------

def _exact_e(alpha: float, k: int) -> float:
    """sum_{i<=K} alpha^i in exact rational arithmetic on the float's exact value."""
    a = Fraction(alpha)
    return float(sum(a ** i for i in range(k + 1)))


@pytest.mark.parametrize("alpha", [0.0, 1e-30, 0.1, 0.5, 0.75, 0.9, 0.999, 1 - 1e-6,
                                   1 - 1e-9, 1 - 1e-12, 1 - 3e-13, 1 - 2.0 ** -50,
                                   np.nextafter(1.0, 0.0)])
@pytest.mark.parametrize("k", [1, 2, 7, 64, 500])
def test_expected_tokens_matches_exact_rational_sum(alpha, k):
    got = float(A.expected_tokens(alpha, k))
    assert got == pytest.approx(_exact_e(alpha, k), rel=4e-15, abs=0)


def test_expected_tokens_is_exactly_k_plus_one_at_alpha_one():
    k = np.arange(1, 100)
    e = A.expected_tokens(1.0, k)
    assert e.dtype == np.float64
    np.testing.assert_array_equal(e, k + 1.0)


def test_expected_tokens_near_one_is_smooth_where_naive_ratio_is_not():
    # The textbook ratio loses ~4 of 16 digits at 1 - 1e-12; the implementation keeps them.
    alpha, k = 1 - 1e-12, 8
    naive = (1 - alpha ** (k + 1)) / (1 - alpha)
    exact = _exact_e(alpha, k)
    assert abs(naive - exact) > 1e-12 * exact         # the trap is real
    assert float(A.expected_tokens(alpha, k)) == pytest.approx(exact, rel=1e-15)


def test_expected_tokens_broadcasts_and_returns_scalars_for_scalars():
    e = A.expected_tokens(np.array([0.5, 0.8])[:, None], np.array([1, 2, 3]))
    assert e.shape == (2, 3)
    np.testing.assert_allclose(e[1], [1.8, 2.44, 2.952], rtol=1e-14)
    assert np.ndim(A.expected_tokens(0.5, 3)) == 0
    assert float(A.expected_tokens(0.5, 3)) == 1.875
    # integral floats are accepted as draft lengths
    assert float(A.expected_tokens(0.5, 3.0)) == 1.875


def test_positional_expected_tokens():
    assert float(A.expected_tokens_positional([0.9, 0.5])) == pytest.approx(1 + 0.9 + 0.45)
    assert float(A.expected_tokens_positional([0.0, 1.0, 1.0])) == 1.0
    rates = np.array([[0.8] * 5, [0.3] * 5])                   # [2, K=5]
    np.testing.assert_allclose(A.expected_tokens_positional(rates),
                               A.expected_tokens([0.8, 0.3], 5), rtol=1e-14)


def test_markov_model_reduces_to_iid_and_has_the_stated_stationary_rate():
    for alpha in (0.0, 0.3, 0.8, 1.0):
        for k in (1, 4, 9):
            assert float(A.expected_tokens_markov(alpha, 0.0, k)) == pytest.approx(
                float(A.expected_tokens(alpha, k)), rel=1e-13)
    alpha, rho = np.array([0.2, 0.7, 0.9]), np.array([-0.2, 0.4, 0.8])
    p01, p11 = A.markov_transitions(alpha, rho)
    np.testing.assert_allclose(p01 / (1 - p11 + p01), alpha, rtol=1e-14)
    np.testing.assert_allclose(p11 - p01, rho, atol=1e-15)
    # Positive correlation clusters rejections: an iteration tends to start right after
    # one, so fewer tokens per iteration than i.i.d. at the same stationary rate.
    assert A.expected_tokens_markov(0.8, 0.5, 6) < A.expected_tokens(0.8, 6)


def test_rho_bounds_are_where_the_transitions_stay_probabilities():
    """At the lower bound one transition probability hits 0 or 1; just below it one
    leaves [0, 1] and markov_transitions refuses."""
    alpha = np.array([0.0, 0.2, 0.5, 0.8, 1.0])
    lower, upper = A.rho_bounds(alpha)
    np.testing.assert_allclose(lower, [0.0, -0.25, -1.0, -0.25, 0.0])
    np.testing.assert_array_equal(upper, 1.0)
    for a, lo in zip(alpha[1:-1], lower[1:-1]):
        p01, p11 = A.markov_transitions(a, lo)
        assert min(p01, p11, 1 - p01, 1 - p11) == pytest.approx(0.0, abs=1e-12)
        with pytest.raises(ValueError, match="^rho must lie in"):
            A.markov_transitions(a, lo - 1e-6)


def test_markov_start_probability_is_the_stationary_start_state():
    """pi1 against a direct simulation of the start-state chain over iterations: from
    state 1 an iteration ends in state 1 iff all K drafts and the bonus position accept."""
    alpha, rho, k = 0.7, 0.4, 3
    p01, p11 = A.markov_transitions(alpha, rho)
    # transition of the start state between iterations: to 1 iff K accepts then an accept
    to1 = np.array([p01 * p11 ** k, p11 ** (k + 1)])                   # from 0, from 1
    P = np.array([[1 - to1[0], to1[0]], [1 - to1[1], to1[1]]])
    w, v = np.linalg.eig(P.T)
    stat = np.real(v[:, np.argmin(abs(w - 1))])
    stat /= stat.sum()
    assert float(A.markov_start_probability(alpha, rho, k)) == pytest.approx(stat[1], rel=1e-12)


# --- speedup forms --------------------------------------------------------------------------

def test_speedup_from_costs_matches_constant_cost_form():
    alpha, k, c = 0.75, np.arange(1, 9), 0.07
    e = A.expected_tokens(alpha, k)
    np.testing.assert_allclose(A.speedup_from_costs(e, k, t_draft=c * 2.0, t_target_1=2.0,
                                                    t_target_verify=2.0),
                               A.speedup(alpha, k, c), rtol=1e-14)
    # verify that costs 1.5x a single step: 3 tokens per iteration, 2 drafts at 0.1
    assert float(A.speedup_from_costs(3.0, 2, 0.1, 1.0, 1.5)) == pytest.approx(3.0 / 1.7)
    assert float(A.speedup_from_costs(1.0, 4, 0.0, 1.0, 1.0)) == 1.0


def test_optimal_k_equals_brute_force_over_a_grid_with_edges():
    rng = np.random.default_rng(7)
    alpha = np.concatenate([rng.random(3000), [0, 0, 0, 1, 1, 1, 1, 0.5, 1 - 1e-9]])
    c = np.concatenate([rng.random(3000) * 0.6, [0, 0.3, 2, 0, 0.5, 1, 3, 0, 0.01]])
    for k_max in (1, 2, 3, 5, 17, 64):
        k_star, s_star = A.optimal_k(alpha, c, k_max=k_max)
        all_s = A.speedup(alpha[:, None], np.arange(1, k_max + 1), c[:, None])
        np.testing.assert_allclose(s_star, all_s.max(axis=1), rtol=1e-13)
        assert ((1 <= k_star) & (k_star <= k_max)).all()
        np.testing.assert_allclose(A.speedup(alpha, k_star, c), s_star, rtol=1e-15)
    # the edges follow the documented tie-breaking
    k_star, _ = A.optimal_k([0.0, 1.0, 1.0, 1.0, 0.6], [0.1, 0.5, 1.0, 3.0, 0.0], k_max=10)
    np.testing.assert_array_equal(k_star, [1, 10, 1, 1, 10])


def test_optimal_k_with_a_k_max_per_point():
    rng = np.random.default_rng(8)
    alpha, c = rng.random(2000), rng.random(2000) * 0.3
    k_max = rng.integers(1, 40, 2000)
    k_star, s_star = A.optimal_k(alpha, c, k_max=k_max)
    assert (k_star <= k_max).all()
    for i in range(0, 2000, 97):
        brute = A.speedup(alpha[i], np.arange(1, k_max[i] + 1), c[i])
        assert s_star[i] == pytest.approx(brute.max(), rel=1e-13)


def test_optimal_k_known_values_and_broadcasting():
    k_star, s = A.optimal_k(np.array([0.6, 0.8, 0.9])[:, None], np.array([0.05, 0.2]),
                            k_max=np.array([64, 64]))
    assert k_star.shape == (3, 2)
    np.testing.assert_array_equal(k_star, [[4, 2], [8, 4], [13, 7]])
    assert s[0, 0] == pytest.approx(2.3056 / 1.2, abs=1e-4)


def test_break_even_alpha():
    k = np.array([1, 2, 4, 8, 32])
    a = A.break_even_alpha(k, 0.1)
    np.testing.assert_allclose(A.speedup(a, k, 0.1), 1.0, rtol=1e-13)
    assert float(A.break_even_alpha(1, 0.37)) == pytest.approx(0.37, rel=1e-15)  # 1+a = 1+c
    assert float(A.break_even_alpha(2, 0.5)) == pytest.approx((np.sqrt(5) - 1) / 2, rel=1e-14)
    assert float(A.break_even_alpha(5, 0.0)) == 0.0
    assert float(A.break_even_alpha(5, 1.0)) == 1.0
    assert np.isinf(A.break_even_alpha(5, 1.5))
    # S > 1 exactly above the threshold
    assert A.speedup(a + 1e-6, k, 0.1).min() > 1 > A.speedup(a - 1e-6, k, 0.1).max()


def test_inverses_known_values():
    assert float(A.alpha_from_expected_tokens(1.0, 4)) == 0.0
    assert float(A.alpha_from_expected_tokens(5.0, 4)) == 1.0
    assert float(A.alpha_from_expected_tokens(1.875, 3)) == pytest.approx(0.5, rel=1e-15)
    assert float(A.implied_cost_ratio(0.8, 4, A.speedup(0.8, 4, 0.07))) == pytest.approx(0.07)
    assert float(A.implied_cost_ratio(0.8, 4, A.expected_tokens(0.8, 4))) == 0.0


# --- acceptance rates -------------------------------------------------------------------------

def test_acceptance_rate_is_one_minus_total_variation():
    target = np.array([0.6, 0.3, 0.1])
    draft = np.array([0.3, 0.3, 0.4])
    assert float(A.acceptance_rate(target, draft)) == pytest.approx(0.7)
    assert float(A.acceptance_rate(target, draft)) == pytest.approx(
        1 - 0.5 * np.abs(target - draft).sum())
    assert float(A.acceptance_rate(target, target)) == pytest.approx(1.0)
    assert float(A.acceptance_rate([1.0, 0.0], [0.0, 1.0])) == 0.0
    # batched: [2, V] against [V]
    both = A.acceptance_rate(np.stack([target, draft]), draft)
    np.testing.assert_allclose(both, [0.7, 1.0])


def test_lenient_acceptance_rate_formula_and_monte_carlo():
    target = np.array([0.6, 0.3, 0.1])
    draft = np.array([0.3, 0.3, 0.4])
    # sum_x min(draft, target / l) at l = 0.5: 0.3 + 0.3 + 0.2
    assert float(A.acceptance_rate(target, draft, lenience=0.5)) == pytest.approx(0.8)
    assert float(A.acceptance_rate(target, draft, lenience=1e-9)) == pytest.approx(1.0)
    # the same number written as (1/l) sum_x min(target, l draft)
    for l in (0.9, 0.5, 0.25):
        assert float(A.acceptance_rate(target, draft, lenience=l)) == pytest.approx(
            np.minimum(target, l * draft).sum() / l)
    rates = [float(A.acceptance_rate(target, draft, lenience=l)) for l in (1, .8, .5, .2)]
    assert rates == sorted(rates)
    # the rule itself: x ~ draft, accept with probability min(1, target(x) / (l draft(x)))
    rng = np.random.default_rng(0)
    n, l = 200_000, 0.5
    x = rng.choice(3, size=n, p=draft)
    accepted = rng.random(n) < np.minimum(1.0, target[x] / (l * draft[x]))
    se = np.sqrt(0.8 * 0.2 / n)
    assert abs(accepted.mean() - 0.8) < 4 * se


# --- property tests ---------------------------------------------------------------------------

alphas = st.floats(0.0, 1.0, allow_nan=False)
ks = st.integers(1, 200)
cs = st.floats(0.0, 2.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(alphas, alphas, ks)
def test_expected_tokens_rises_with_alpha_and_is_bounded(a1, a2, k):
    lo, hi = sorted((a1, a2))
    e_lo, e_hi = float(A.expected_tokens(lo, k)), float(A.expected_tokens(hi, k))
    assert 1.0 <= e_lo <= e_hi * (1 + 1e-15) <= (k + 1) * (1 + 1e-15)


@settings(max_examples=200, deadline=None)
@given(alphas, ks)
def test_expected_tokens_rises_with_k(alpha, k):
    assert A.expected_tokens(alpha, k + 1) >= A.expected_tokens(alpha, k)


@settings(max_examples=200, deadline=None)
@given(alphas, ks, cs)
def test_speedup_bounded_by_k_plus_one_and_by_e(alpha, k, c):
    s = float(A.speedup(alpha, k, c))
    assert 0 < s <= float(A.expected_tokens(alpha, k)) <= k + 1


@settings(max_examples=150, deadline=None)
@given(alphas, cs, st.integers(1, 80))
@example(alpha=1.0 - 2.0 ** -53, c=0.5, k_max=2)   # d below an ulp of c: found by hypothesis
def test_optimal_k_is_never_beaten(alpha, c, k_max):
    k_star, s_star = A.optimal_k(alpha, c, k_max=k_max)
    assert 1 <= k_star <= k_max
    assert A.speedup(alpha, np.arange(1, k_max + 1), c).max() <= s_star * (1 + 1e-13)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 0.999999), ks)
def test_alpha_round_trips_through_expected_tokens(alpha, k):
    back = float(A.alpha_from_expected_tokens(A.expected_tokens(alpha, k), k))
    # E changes by at least dE/dalpha >= 1 per unit alpha, so alpha is recovered to the
    # resolution of E near that alpha; in practice ~1e-15 absolute.
    assert back == pytest.approx(alpha, abs=1e-12 * k)


@settings(max_examples=200, deadline=None)
@given(alphas, ks, cs)
def test_cost_ratio_round_trips_through_speedup(alpha, k, c):
    back = float(A.implied_cost_ratio(alpha, k, A.speedup(alpha, k, c)))
    assert back == pytest.approx(c, rel=1e-10, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 64), st.floats(0.0, 1.0))
def test_break_even_gives_speedup_one(k, c):
    a = float(A.break_even_alpha(k, c))
    assert 0.0 <= a <= 1.0
    assert float(A.speedup(a, k, c)) == pytest.approx(1.0, rel=1e-12)


# --- validation -------------------------------------------------------------------------------

BAD = [
    (A.expected_tokens, (1.2, 3), "alpha"),
    (A.expected_tokens, (-0.1, 3), "alpha"),
    (A.expected_tokens, (np.nan, 3), "alpha"),
    (A.expected_tokens, (np.array([0.5, np.nan]), 3), "alpha"),
    (A.expected_tokens, (True, 3), "alpha"),
    (A.expected_tokens, ("0.5", 3), "alpha"),
    (A.expected_tokens, (0.5, 0), "k"),
    (A.expected_tokens, (0.5, -2), "k"),
    (A.expected_tokens, (0.5, 2.5), "k"),
    (A.expected_tokens, (0.5, np.inf), "k"),
    (A.expected_tokens, (0.5, True), "k"),
    (A.expected_tokens, (0.5, np.array([True, False])), "k"),
    (A.expected_tokens, (np.ones(3) * 0.5, np.arange(1, 5)), "alpha, k"),
    (A.expected_tokens_positional, ([0.5, 1.5],), "alphas"),
    (A.expected_tokens_positional, (np.zeros((2, 0)),), "alphas"),
    (A.speedup, (0.5, 3, -0.1), "c"),
    (A.speedup, (0.5, 3, np.inf), "c"),
    (A.speedup, (0.5, 3, np.nan), "c"),
    (A.speedup, (np.ones(2) * 0.5, 3, np.ones(3)), "alpha, k, c"),
    (A.speedup_from_costs, (0.5, 3, 0.1, 1.0, 1.0), "expected_tokens"),
    (A.speedup_from_costs, (5.0, 3, 0.1, 1.0, 1.0), "expected_tokens"),
    (A.speedup_from_costs, (2.0, 3, -0.1, 1.0, 1.0), "t_draft"),
    (A.speedup_from_costs, (2.0, 3, 0.1, 0.0, 1.0), "t_target_1"),
    (A.speedup_from_costs, (2.0, 3, 0.1, 1.0, np.nan), "t_target_verify"),
    (A.optimal_k, (0.5, 0.1, 0), "k_max"),
    (A.optimal_k, (0.5, 0.1, 4.5), "k_max"),
    (A.optimal_k, (1.5, 0.1), "alpha"),
    (A.optimal_k, (0.5, -1.0), "c"),
    (A.ops_factor, (0.5, 3, -1.0), "c_hat"),
    (A.break_even_alpha, (0, 0.1), "k"),
    (A.break_even_alpha, (3, -0.1), "c"),
    (A.alpha_from_expected_tokens, (0.9, 3), "expected_tokens"),
    (A.alpha_from_expected_tokens, (4.5, 3), "expected_tokens"),
    (A.implied_cost_ratio, (0.5, 3, 0.0), "speedup"),
    (A.implied_cost_ratio, (0.5, 3, 3.0), "speedup"),      # > E(0.5, 3) = 1.875
    (A.implied_cost_ratio, (0.5, 3.5, 1.0), "k"),
    (A.markov_transitions, (0.8, 1.0), "rho"),
    (A.markov_transitions, (0.8, -0.5), "rho"),            # p01 = 0.8 * 1.5 > 1
    (A.markov_transitions, (0.2, -0.5), "rho"),            # p11 = 0.2 - 0.4 < 0
    (A.expected_tokens_markov, (0.8, 0.2, 0), "k"),
    (A.acceptance_rate, ([0.5, 0.6], [0.5, 0.5]), "target_probs"),
    (A.acceptance_rate, ([0.5, 0.5], [1.5, -0.5]), "draft_probs"),
    (A.acceptance_rate, ([0.5, 0.5], [np.nan, 0.5]), "draft_probs"),
    (A.acceptance_rate, (np.ones(3) / 3, np.ones(2) / 2), "target_probs, draft_probs"),
    (A.acceptance_rate, (0.5, 0.5), "target_probs"),
]


@pytest.mark.parametrize("fn, args, name", BAD,
                         ids=[f"{f.__name__}-{n}-{i}" for i, (f, _, n) in enumerate(BAD)])
def test_bad_input_raises_value_error_naming_the_argument(fn, args, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        fn(*args)


@pytest.mark.parametrize("lenience", [0.0, -0.5, 1.5, np.nan])
def test_bad_lenience(lenience):
    with pytest.raises(ValueError, match=r"^lenience must be a scalar in \(0, 1\]"):
        A.acceptance_rate([0.5, 0.5], [0.5, 0.5], lenience=lenience)


def test_range_is_stated_in_messages():
    with pytest.raises(ValueError, match=r"alpha must lie in \[0, 1\] \(got 1.2\)"):
        A.speedup(1.2, 3, 0.1)
    with pytest.raises(ValueError, match=r"k must be an integer >= 1 \(got 0\)"):
        A.speedup(0.5, 0, 0.1)
    with pytest.raises(ValueError, match=r"c must be finite and >= 0 \(got -0.1\)"):
        A.speedup(0.5, 3, -0.1)


def test_theory_modules_import_without_jax():
    code = ("import sys, specsim.analytic, specsim.simulate; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib')); "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
