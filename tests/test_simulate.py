"""specsim.simulate: Monte-Carlo against the closed forms (means within 4 standard errors,
whole distributions by chi-squared), a literal position-by-position Markov oracle,
replay of masks, and the wall-time simulation against speedup_from_costs."""

import numpy as np
import pytest
from scipy import stats

from specsim import analytic as A
from specsim import simulate as S

N = 200_000


def _chi2_pvalue(samples: np.ndarray, pmf: np.ndarray) -> float:
    """Pearson chi-squared of integer samples in 1..len(pmf) against pmf; bins with
    expected count < 5 are merged into their neighbour."""
    observed = np.bincount(samples - 1, minlength=pmf.size).astype(float)
    expected = pmf * samples.size
    obs, exp = [], []
    o_acc = e_acc = 0.0
    for o, e in zip(observed, expected):
        o_acc, e_acc = o_acc + o, e_acc + e
        if e_acc >= 5:
            obs.append(o_acc)
            exp.append(e_acc)
            o_acc = e_acc = 0.0
    if obs:
        obs[-1] += o_acc
        exp[-1] += e_acc
    assert o_acc == 0 or obs, "no bins"
    if len(obs) < 2:
        return 1.0
    exp = np.array(exp) * (sum(obs) / sum(exp))        # remove float drift in the total
    return float(stats.chisquare(obs, exp).pvalue)


def _batch_se(x: np.ndarray, batches: int = 100) -> float:
    """Standard error of the mean from batch means (valid for correlated sequences)."""
    means = x[: x.size // batches * batches].reshape(batches, -1).mean(axis=1)
    return float(means.std(ddof=1) / np.sqrt(batches))


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 0.8, 0.95, 1.0])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_iid_mean_and_distribution_match_closed_form(alpha, k):
    tokens = S.simulate_iid(alpha, k, N, rng=int(alpha * 1000) + k)
    assert tokens.dtype == np.int64 and tokens.shape == (N,)
    assert tokens.min() >= 1 and tokens.max() <= k + 1
    exact = float(A.expected_tokens(alpha, k))
    if alpha in (0.0, 1.0):
        assert (tokens == exact).all()
        return
    se = tokens.std(ddof=1) / np.sqrt(N)
    assert abs(tokens.mean() - exact) < 4 * se
    assert _chi2_pvalue(tokens, S.tokens_pmf(alpha, k)) > 1e-4


def test_chi_squared_rejects_the_wrong_law():
    # The test above has power: a 2% shift in alpha is detected.
    tokens = S.simulate_iid(0.80, 4, N, rng=1)
    assert _chi2_pvalue(tokens, S.tokens_pmf(0.80, 4)) > 1e-4
    assert _chi2_pvalue(tokens, S.tokens_pmf(0.78, 4)) < 1e-6


@pytest.mark.parametrize("alphas", [[0.9, 0.8, 0.7, 0.6, 0.5], [0.5, 1.0, 0.9], [0.99]])
def test_positional_mean_and_distribution(alphas):
    tokens = S.simulate_positional(alphas, N, rng=3)
    se = tokens.std(ddof=1) / np.sqrt(N)
    assert abs(tokens.mean() - float(A.expected_tokens_positional(alphas))) < 4 * se
    assert _chi2_pvalue(tokens, S.tokens_pmf_positional(alphas)) > 1e-4


def test_pmfs_are_normalised_and_have_the_closed_form_means():
    for alpha in (0.0, 0.4, 0.9, 1.0):
        for k in (1, 2, 6):
            pmf = S.tokens_pmf(alpha, k)
            assert pmf.shape == (k + 1,) and pmf.min() >= 0
            assert pmf.sum() == pytest.approx(1.0, abs=1e-14)
            assert pmf @ np.arange(1, k + 2) == pytest.approx(float(A.expected_tokens(alpha, k)))
            for rho in (0.0, 0.3, 0.9):
                pm = S.tokens_pmf_markov(alpha, rho, k)
                assert pm.sum() == pytest.approx(1.0, abs=1e-14)
                assert pm @ np.arange(1, k + 2) == pytest.approx(
                    float(A.expected_tokens_markov(alpha, rho, k)), rel=1e-12)
    np.testing.assert_allclose(S.tokens_pmf(0.5, 3), [0.5, 0.25, 0.125, 0.125])
    np.testing.assert_allclose(S.tokens_pmf_positional([0.9, 0.5]), [0.1, 0.45, 0.45])
    np.testing.assert_allclose(S.tokens_pmf([0.5, 0.8], 2), [[0.5, 0.25, 0.25],
                                                             [0.2, 0.16, 0.64]])


def _markov_reference(alpha, rho, k, n_iterations, rng):
    """Literal simulation of the model definition, one position at a time.

    Every generated position carries an indicator from the two-state chain; an iteration
    reads the indicators of its K draft positions, keeps the leading accepts, and the
    rejected draft's position (or the bonus token's) is the last one it consumes.
    Returns (tokens per iteration, all indicators)."""
    p01, p11 = (float(p) for p in A.markov_transitions(alpha, rho))
    state = rng.random() < alpha                 # start from the stationary position law
    indicators, tokens = [], []
    u = iter(rng.random(n_iterations * (k + 1) + 1))
    for _ in range(n_iterations):
        t = 0
        while True:
            state = next(u) < (p11 if state else p01)   # indicator of the next position
            indicators.append(state)
            t += 1
            if not state or t == k + 1:          # rejected draft, or the bonus position
                break
        tokens.append(t)
    return np.array(tokens), np.array(indicators)


@pytest.mark.parametrize("alpha, rho, k", [(0.8, 0.5, 4), (0.6, -0.3, 3), (0.9, 0.8, 6),
                                           (0.7, 0.0, 5)])
def test_markov_simulator_matches_literal_reference_and_closed_form(alpha, rho, k):
    exact = float(A.expected_tokens_markov(alpha, rho, k))
    pmf = S.tokens_pmf_markov(alpha, rho, k)
    fast = S.simulate_markov(alpha, rho, k, N, rng=11)
    ref, ind = _markov_reference(alpha, rho, k, 40_000, np.random.default_rng(12))
    # the reference chain has the stated stationary rate and lag-1 correlation
    assert abs(ind.mean() - alpha) < 4 * _batch_se(ind.astype(float))
    if 0 < alpha < 1:
        x = ind.astype(float)
        assert abs(np.corrcoef(x[:-1], x[1:])[0, 1] - rho) < 0.03
    for tokens in (fast, ref):
        assert abs(tokens.mean() - exact) < 4 * _batch_se(tokens)
        freq = np.bincount(tokens - 1, minlength=k + 1) / tokens.size
        for j in range(k + 1):                          # every bin within 4 batch-SE
            hit = (tokens == j + 1).astype(float)
            assert abs(freq[j] - pmf[j]) < 4 * _batch_se(hit) + 1e-12


def test_markov_edges_and_rho_zero_is_iid():
    assert (S.simulate_markov(1.0, 0.3, 5, 1000, rng=0) == 6).all()
    assert (S.simulate_markov(0.0, 0.3, 5, 1000, rng=0) == 1).all()
    tokens = S.simulate_markov(0.7, 0.0, 4, N, rng=5)
    assert _chi2_pvalue(tokens, S.tokens_pmf(0.7, 4)) > 1e-4


def test_replay_counts_the_accepted_prefix_only():
    masks = np.array([[1, 1, 0, 1],
                      [0, 1, 1, 1],
                      [1, 1, 1, 1],
                      [1, 0, 0, 0]], dtype=bool)
    np.testing.assert_array_equal(S.replay_masks(masks), [3, 1, 5, 2])
    np.testing.assert_array_equal(S.replay_masks(masks.astype(np.int8)), [3, 1, 5, 2])


def test_replay_of_simulated_masks_equals_the_iid_simulator():
    # simulate_iid draws one [n, K] block of uniforms; replaying the same masks agrees.
    masks = np.random.default_rng(9).random((5000, 6)) < 0.7
    np.testing.assert_array_equal(S.replay_masks(masks), S.simulate_iid(0.7, 6, 5000, rng=9))


def test_wall_time_by_hand():
    w = S.wall_time(np.array([3, 1, 5, 2]), 8, 4, t_draft=0.1, t_target_1=1.0,
                    t_target_verify=1.2)
    assert int(w.iterations) == 3 and int(w.tokens) == 9
    assert float(w.time) == pytest.approx(3 * (4 * 0.1 + 1.2))
    assert float(w.speedup) == pytest.approx(9 * 1.0 / 4.8)
    assert float(w.tokens_per_s) == pytest.approx(9 / 4.8)
    # runs on leading axes
    w2 = S.wall_time(np.array([[1, 1, 1, 1], [5, 5, 5, 5]]), 3, 4, t_draft=0.0,
                     t_target_1=1.0, t_target_verify=1.0)
    np.testing.assert_array_equal(w2.iterations, [3, 1])
    np.testing.assert_allclose(w2.speedup, [1.0, 5.0])
    with pytest.raises(ValueError, match="too few iterations"):
        S.wall_time(np.array([1, 2]), 10, 4, t_draft=0.1, t_target_1=1.0, t_target_verify=1.0)


def test_simulated_generation_converges_to_speedup_from_costs():
    alpha, k, t_d, t_1, t_v = 0.75, 5, 0.04, 1.0, 1.3
    w = S.simulate_generation(alpha, k, 20_000, t_draft=t_d, t_target_1=t_1,
                              t_target_verify=t_v, n_runs=40, rng=2)
    assert w.speedup.shape == (40,) and (w.tokens >= 20_000).all()
    expected = float(A.speedup_from_costs(A.expected_tokens(alpha, k), k, t_d, t_1, t_v))
    se = w.speedup.std(ddof=1) / np.sqrt(40)
    assert abs(w.speedup.mean() - expected) < 4 * se + 1e-3 * expected / 20   # + overshoot bias
    assert expected == pytest.approx(w.speedup.mean(), rel=0.01)


def test_seeding_is_reproducible():
    a = S.simulate_markov(0.8, 0.4, 5, 10_000, rng=3)
    np.testing.assert_array_equal(a, S.simulate_markov(0.8, 0.4, 5, 10_000, rng=3))
    assert not np.array_equal(S.simulate_iid(0.5, 4, 1000, rng=1),
                              S.simulate_iid(0.5, 4, 1000, rng=2))


BAD = [
    (S.simulate_iid, (1.5, 3, 10), "alpha"),
    (S.simulate_iid, ([0.5, 0.6], 3, 10), "alpha"),
    (S.simulate_iid, (0.5, 0, 10), "k"),
    (S.simulate_iid, (0.5, 3, 0), "n_iterations"),
    (S.simulate_iid, (0.5, 3, 2.5), "n_iterations"),
    (S.simulate_positional, ([0.5, -0.1], 10), "alphas"),
    (S.simulate_positional, (np.full((2, 2), 0.5), 10), "alphas"),
    (S.simulate_markov, (0.5, 1.0, 3, 10), "rho"),
    (S.simulate_markov, (0.5, 0.2, True, 10), "k"),
    (S.replay_masks, (np.ones(4, bool),), "accept_masks"),
    (S.replay_masks, (np.array([[0, 2]]),), "accept_masks"),
    (S.tokens_pmf, (0.5, 0), "k"),
    (S.tokens_pmf_positional, ([1.1],), "alphas"),
]


@pytest.mark.parametrize("fn, args, name", BAD,
                         ids=[f"{f.__name__}-{n}-{i}" for i, (f, _, n) in enumerate(BAD)])
def test_bad_input_raises_value_error_naming_the_argument(fn, args, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        fn(*args)


def test_bad_wall_time_costs():
    tokens = np.array([2, 2, 2])
    for kwargs, name in [(dict(t_draft=-1, t_target_1=1, t_target_verify=1), "t_draft"),
                         (dict(t_draft=0, t_target_1=0, t_target_verify=1), "t_target_1"),
                         (dict(t_draft=0, t_target_1=1, t_target_verify=np.inf),
                          "t_target_verify")]:
        with pytest.raises(ValueError, match=rf"^{name}\b"):
            S.wall_time(tokens, 4, 2, **kwargs)
    with pytest.raises(ValueError, match="tokens_per_iteration"):
        S.wall_time(np.array([2, 7]), 4, 2, t_draft=0, t_target_1=1, t_target_verify=1)
