"""specsim.sampling: logits processing, acceptance test, residual, overlap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsim.sampling import (SamplingParams, accept_drafts, logits_to_probs, overlap,
                              residual_probs, sample, sample_residual, validate_sampling)

LOGITS = jnp.asarray([[2.0, 1.0, 0.5, -1.0, 0.0, 3.0],
                      [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]], jnp.float32)  # [2, V=6]


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_temperature_scales_logits():
    for t in (0.5, 1.0, 1.7):
        got = np.asarray(logits_to_probs(LOGITS, t))
        np.testing.assert_allclose(got, _softmax(np.asarray(LOGITS) / t), rtol=1e-5)
        assert got.dtype == np.float32


def test_temperature_zero_is_one_hot_argmax_without_division():
    got = np.asarray(logits_to_probs(LOGITS, 0.0))
    np.testing.assert_array_equal(got, np.eye(6)[[5, 5]])
    # Huge logits would overflow a division by a tiny temperature; greedy never divides.
    big = jnp.asarray([[1e38, -1e38, 3e38]], jnp.float32)
    np.testing.assert_array_equal(np.asarray(logits_to_probs(big, 0.0)), [[0, 0, 1]])


def test_top_k_keeps_k_largest():
    got = np.asarray(logits_to_probs(LOGITS, 1.0, top_k=2))
    ref = np.zeros_like(got)
    for r, idx in enumerate([[5, 0], [5, 4]]):
        ref[r, idx] = _softmax(np.asarray(LOGITS)[r, idx])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)
    # top_k = V is the same as off
    np.testing.assert_allclose(np.asarray(logits_to_probs(LOGITS, 1.0, top_k=6)),
                               np.asarray(logits_to_probs(LOGITS, 1.0)), rtol=1e-6)


def test_top_p_smallest_set_reaching_mass():
    probs = _softmax(np.asarray(LOGITS[0]))          # sorted: 5, 0, 1, 2, 4, 3
    order = np.argsort(-probs)
    cum = np.cumsum(probs[order])
    for top_p in (0.3, 0.6, 0.9, 0.99):
        n = int(np.searchsorted(cum, top_p) + 1)     # smallest prefix with mass >= top_p
        ref = np.zeros(6)
        ref[order[:n]] = probs[order[:n]] / probs[order[:n]].sum()
        got = np.asarray(logits_to_probs(LOGITS[:1], 1.0, top_p=top_p))[0]
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)


def test_top_k_then_top_p_after_temperature():
    got = np.asarray(logits_to_probs(LOGITS[:1], 2.0, top_k=4, top_p=0.5))[0]
    x = np.asarray(LOGITS[0]) / 2.0
    keep = np.argsort(-x)[:4]
    pk = np.zeros(6)
    pk[keep] = _softmax(x[keep])
    order = np.argsort(-pk)
    n = int(np.searchsorted(np.cumsum(pk[order]), 0.5) + 1)
    ref = np.zeros(6)
    ref[order[:n]] = pk[order[:n]] / pk[order[:n]].sum()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)


def test_nonfinite_logits_give_nan_rows():
    bad = LOGITS.at[1, 2].set(jnp.nan)
    for t in (0.0, 1.0):
        got = np.asarray(logits_to_probs(bad, t, top_p=0.9 if t else 1.0))
        assert np.isfinite(got[0]).all() and np.isnan(got[1]).all()
    inf = LOGITS.at[0, 0].set(jnp.inf)
    assert np.isnan(np.asarray(logits_to_probs(inf, 0.0))[0]).all()


@pytest.mark.parametrize("kwargs, name", [
    (dict(temperature=-0.1), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"), (dict(top_k=-1), "top_k"),
    (dict(top_k=7), "top_k"), (dict(top_k=2.5), "top_k")])
def test_validation_names_the_argument(kwargs, name):
    args = dict(temperature=1.0, top_k=0, top_p=1.0) | kwargs
    with pytest.raises(ValueError, match=name):
        validate_sampling(args["temperature"], args["top_k"], args["top_p"], 6)
    with pytest.raises(ValueError, match=name):
        logits_to_probs(LOGITS, **args)


def test_sample_frequencies_and_zero_mass():
    probs = jnp.asarray([0.5, 0.0, 0.3, 0.2], jnp.float32)
    draws = np.asarray(sample(jax.random.PRNGKey(0), jnp.broadcast_to(probs, (40000, 4))))
    freq = np.bincount(draws, minlength=4) / draws.size
    assert freq[1] == 0
    np.testing.assert_allclose(freq, probs, atol=0.01)
    assert np.asarray(sample(None, probs[None], greedy=True)).tolist() == [0]


def test_overlap_is_one_minus_total_variation():
    rng = np.random.default_rng(1)
    tp, dp = rng.dirichlet(np.ones(9), 5), rng.dirichlet(np.ones(9), 5)
    got = np.asarray(overlap(jnp.asarray(tp), jnp.asarray(dp)))
    np.testing.assert_allclose(got, 1 - 0.5 * np.abs(tp - dp).sum(-1), rtol=1e-5)


def test_residual_renormalised_and_safe_when_zero():
    tp = jnp.asarray([[0.5, 0.3, 0.2, 0.0]])
    dp = jnp.asarray([[0.2, 0.5, 0.2, 0.1]])
    np.testing.assert_allclose(np.asarray(residual_probs(tp, dp)), [[1.0, 0, 0, 0]], atol=1e-6)
    same = np.asarray(residual_probs(tp, tp))           # all-zero residual → target, no NaN
    np.testing.assert_allclose(same, np.asarray(tp))
    none = np.asarray(residual_probs(tp, jnp.zeros_like(tp)))  # no proposal → the target
    np.testing.assert_allclose(none, np.asarray(tp))
    assert np.asarray(sample_residual(None, tp, dp, greedy=True)).tolist() == [0]


def test_accept_rate_is_min_ratio_and_greedy_rule():
    tp = jnp.asarray([0.1, 0.6, 0.3], jnp.float32)
    dp = jnp.asarray([0.4, 0.2, 0.4], jnp.float32)
    n = 60000
    for x, rate in ((0, 0.25), (1, 1.0), (2, 0.75)):
        toks = jnp.full((n, 1), x, jnp.int32)
        acc = np.asarray(accept_drafts(jax.random.PRNGKey(x), toks,
                                       jnp.broadcast_to(dp, (n, 1, 3)),
                                       jnp.broadcast_to(tp, (n, 1, 3))))
        assert abs(acc.mean() - rate) < 4 * np.sqrt(rate * (1 - rate) / n) + 1e-9
    # a zero draft row (no proposal) is never accepted, even where the target likes it
    acc = accept_drafts(jax.random.PRNGKey(0), jnp.asarray([[1]]), jnp.zeros((1, 1, 3)),
                        tp[None, None])
    assert not bool(acc[0, 0])
    # greedy: accept iff the draft is the target's argmax
    one_hot_t = jnp.eye(3)[jnp.asarray([[1, 2]])]
    got = accept_drafts(None, jnp.asarray([[1, 0]]), jnp.eye(3)[jnp.asarray([[1, 0]])],
                        one_hot_t, greedy=True)
    assert np.asarray(got).tolist() == [[True, False]]


def test_sampling_params_is_a_pytree_with_static_switches():
    sp = SamplingParams.make(0.7, 3, 0.9, vocab_size=6)
    leaves, treedef = jax.tree_util.tree_flatten(sp)
    assert len(leaves) == 3 and (sp.greedy, sp.use_top_k, sp.use_top_p) == (False, True, True)
    sp2 = SamplingParams.make(1.3, 2, 0.5, vocab_size=6)
    assert jax.tree_util.tree_structure(sp2) == treedef      # new values, same program
    assert SamplingParams.make(0.0, 3, 0.5, vocab_size=6).greedy


def test_argmax_is_jnp_argmax_for_every_input():
    """`sampling.argmax` (two vectorisable reductions) returns jnp.argmax's index: random
    rows, many ties (the first maximum), NaN (the first NaN), ±inf, all -inf, leading axes
    and integer input."""
    from specsim.sampling import argmax
    rng = np.random.default_rng(0)
    cases = [rng.standard_normal((3, 4, 1000)).astype(np.float32),
             rng.integers(0, 3, (50, 7)).astype(np.float32),               # ties everywhere
             np.array([[1, 3, 3, 2], [np.nan, 1, np.nan, 5], [-np.inf] * 4,
                       [0, np.inf, np.inf, 1], [2, np.nan, np.inf, 9]], np.float32),
             rng.integers(-5, 5, (6, 9)).astype(np.int32)]
    for x in cases:
        got = np.asarray(jax.jit(argmax)(jnp.asarray(x)))
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, np.asarray(jnp.argmax(jnp.asarray(x), axis=-1)))
