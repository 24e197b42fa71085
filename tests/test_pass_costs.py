"""specsim.pass_costs: the timed programs run the run's shapes (one trace per shape),
return positive medians with spreads, and the prediction is the closed form."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsim import analytic, bench, finite_run, models, pass_costs, simulate
from specsim.drafters import NGramDrafter, layer_skip_drafter
from specsim.models.transformer import forward, init_cache

B, S, K, STEPS = 3, 64, 3, 2


@pytest.fixture(scope="module")
def tiny():
    m = models.load("tiny-llama", seed=5)
    return m.with_layer_loop("scan")


@pytest.fixture(scope="module")
def calls(tiny):
    before = dict(pass_costs.TRACE_COUNTS)
    c = pass_costs.pass_calls(tiny, layer_skip_drafter(tiny, [0]), batch=B, cache_len=S, k=K,
                              steps=STEPS)
    return c, before


def _hlo(call):
    return call.lower().as_text()


def test_one_trace_per_shape(tiny, calls):
    c, before = calls
    for name in ("target_1", "verify", "draft"):
        assert pass_costs.TRACE_COUNTS[name] == before.get(name, 0) + 1
    again = pass_costs.pass_calls(tiny, layer_skip_drafter(tiny, [0]), batch=B, cache_len=S,
                                  k=K, steps=STEPS)
    for name in ("target_1", "verify", "draft"):
        assert pass_costs.TRACE_COUNTS[name] == before.get(name, 0) + 1
    again.verify(), again.target_1()
    assert pass_costs.TRACE_COUNTS["verify"] == before.get("verify", 0) + 1


def test_programs_run_the_run_shapes(tiny, calls):
    c, _ = calls
    cfg = tiny.cfg
    V, L, G, E = cfg.vocab_size, cfg.n_layers, cfg.n_kv_heads, cfg.head_dim
    cache = f"tensor<{L}x{B}x{S}x{G}x{E}xf32>"
    one, verify = _hlo(c.target_1), _hlo(c.verify)
    assert cache in one and cache in verify                  # the run's cache slots S
    assert f"tensor<{B}x1x{V}xf32>" in one                   # one token per pass
    assert f"tensor<{B}x{K + 1}x{V}xf32>" in verify          # K+1 positions per pass
    assert f"tensor<{B}x{K + 1}x{V}xf32>" not in one
    assert f"tensor<{B}x{S}xi32>" in one                     # the [B, N] token buffer
    draft = _hlo(c.draft)
    assert f"tensor<1x{B}x{S}x{G}x{E}xf32>" in draft          # the one-layer draft cache


def test_target_step_is_the_greedy_step(tiny):
    """One autoregressive step writes argmax(forward(last token)) where the next step
    reads it (oracle: the model's own forward at the same cache state)."""
    c = pass_costs.pass_calls(tiny, None, batch=B, cache_len=S, k=K, steps=1)
    tokens, cache = jax.tree_util.tree_map(jnp.copy, c.target_1.state)
    length = c.target_1.args[2]
    last = jnp.take_along_axis(tokens, (length - 1)[:, None], axis=1)
    logits, _ = forward(tiny.params, tiny.cfg, last, cache)
    want = np.asarray(jnp.argmax(logits[:, 0], -1))
    got = np.asarray(c.target_1())                                  # the sampled tokens
    np.testing.assert_array_equal(got, want)
    written = jnp.take_along_axis(c.target_1.state[0], (length - 1)[:, None], axis=1)
    np.testing.assert_array_equal(np.asarray(written)[:, 0], want)


def test_state_is_donated_not_copied(tiny, calls):
    """The caches are updated in place call after call, as inside the loop: the
    compiled programs alias the state to their output and copy no [L, B, S, G, E] cache
    (a non-donated cache is copied on entry to every call)."""
    c, _ = calls
    cfg = tiny.cfg
    shape = f"f32[{cfg.n_layers},{B},{S},{cfg.n_kv_heads},{cfg.head_dim}]"
    for call in (c.target_1, c.verify):
        hlo = call.lower().compile().as_text()
        assert "input_output_alias" in hlo.splitlines()[0]
        copies = [l for l in hlo.splitlines() if f"= {shape}" in l and " copy(" in l]
        assert copies == []
        before = call.state[1].k.unsafe_buffer_pointer()
        call()
        assert call.state[1].k.unsafe_buffer_pointer() == before
    # the same program without donation copies the cache: the check can fail
    plain = jax.jit(pass_costs._target_1_program.__wrapped__,
                    static_argnames=("cfg", "steps"))
    hlo = plain.lower(c.target_1.state, *c.target_1.args, **c.target_1.static).compile().as_text()
    assert any(f"= {shape}" in l and " copy(" in l for l in hlo.splitlines())


def test_costs_from_interleaved_times(tiny, calls):
    c, _ = calls
    times = {n: [] for n in ("target_1", "verify", "draft")}
    for _ in range(3):
        for n in times:
            times[n].append(bench.time_calls(getattr(c, n), repeats=1, warmup=0).median)
    costs = pass_costs.PassCosts.from_times(c, times["target_1"], times["verify"],
                                            times["draft"])
    assert costs.t_target_1.median == pytest.approx(np.median(times["target_1"]) / STEPS)
    assert costs.t_draft.median == pytest.approx(np.median(times["draft"]) / (STEPS * K))
    for st in (costs.t_target_1, costs.t_verify, costs.t_draft):
        assert st.median > 0 and st.repeats == 3 and st.q75 >= st.median >= st.q25
    assert costs.iteration_s == pytest.approx(K * costs.t_draft.median + costs.t_verify.median)
    assert costs.cost_ratio == pytest.approx(costs.t_draft.median / costs.t_target_1.median)


def test_free_drafter_and_bad_arguments(tiny):
    c = pass_costs.pass_calls(tiny, NGramDrafter(tiny.cfg.vocab_size), batch=1, cache_len=S,
                              k=K, steps=1)
    assert c.draft is not None
    none = pass_costs.pass_calls(tiny, None, batch=1, cache_len=S, k=K, steps=1)
    assert none.draft is None
    costs = pass_costs.PassCosts.from_times(none, [0.2], [0.3])
    assert costs.draft_s == 0.0 and costs.iteration_s == pytest.approx(0.3)
    with pytest.raises(ValueError, match="cache_len"):
        pass_costs.pass_calls(tiny, None, batch=1, cache_len=16, k=4, steps=4)
    with pytest.raises(ValueError, match="batch"):
        pass_costs.pass_calls(tiny, None, batch=0, cache_len=S, k=K)
    for bad in (1, 2.5, True):
        with pytest.raises(ValueError, match="context must be an integer >= 2"):
            pass_costs.pass_calls(tiny, None, batch=1, cache_len=S, k=K, context=bad)
    with pytest.raises(ValueError, match=r"context \(30\)"):
        pass_costs.pass_calls(tiny, None, batch=1, cache_len=32, k=4, steps=1, context=30)


def test_passes_run_at_the_context_asked(tiny):
    """A pass program's cache holds ``context`` tokens (its length, set back every step)
    and it reads its last token there; S/2 without one."""
    half = pass_costs.pass_calls(tiny, None, batch=B, cache_len=S, k=K, steps=1,
                                 pieces=("target_1",))
    at = pass_costs.pass_calls(tiny, None, batch=B, cache_len=S, k=K, steps=1,
                               pieces=("target_1",), context=5)
    for call, ctx in ((half, S // 2), (at, 5)):
        np.testing.assert_array_equal(np.asarray(call.target_1.args[2]), np.full(B, ctx))
        call.target_1()
        np.testing.assert_array_equal(np.asarray(call.target_1.state[1].length),
                                      np.full(B, ctx - 1))


def test_iteration_is_the_loop_body(tiny):
    """The iteration program runs propose, the target pass over the last token and the
    drafts, and greedy acceptance in the loop's order: its first iteration accepts the
    leading drafts that equal the target's argmax (oracle: the drafter's own proposal
    and the model's forward at the same state), and it donates all three states."""
    from specsim.drafters.base import Context
    from specsim.sampling import SamplingParams

    drafter = layer_skip_drafter(tiny, [0])
    c = pass_costs.pass_calls(tiny, drafter, batch=B, cache_len=S, k=K, steps=1,
                              pieces=("iteration",))
    assert c.target_1 is None and c.verify is None and c.draft is None
    call = c.iteration
    tokens, cache, dstate = jax.tree_util.tree_map(jnp.copy, call.state)
    length = call.args[3]
    sp = SamplingParams.make(0.0, 0, 1.0, vocab_size=tiny.cfg.vocab_size)
    key = jax.random.split(call.args[4], 4)[1]
    _, draft = drafter.propose(dstate, Context(tokens, length), K, key, sp)
    last = jnp.take_along_axis(tokens, (length - 1)[:, None], axis=1)
    logits, _ = forward(tiny.params, tiny.cfg, jnp.concatenate([last, draft.tokens], 1), cache)
    same = np.asarray(jnp.argmax(logits[:, :K], -1) == draft.tokens)
    want = np.cumprod(same, axis=1).sum(axis=1)
    stats = call()
    np.testing.assert_array_equal(np.asarray(stats.accepted)[0], want)
    np.testing.assert_array_equal(np.asarray(stats.drafted)[0], K)
    before = call.state[1].k.unsafe_buffer_pointer()
    call()
    assert call.state[1].k.unsafe_buffer_pointer() == before
    with pytest.raises(ValueError, match="pieces"):
        pass_costs.pass_calls(tiny, drafter, batch=1, cache_len=S, k=K, pieces=("loop",))
    none = pass_costs.pass_calls(tiny, None, batch=1, cache_len=S, k=K, steps=1,
                                 pieces=("verify", "iteration"))
    assert none.iteration is None and none.verify is not None


def test_prediction_is_the_closed_form():
    E, k, t1, tv, td, r = 3.1, 4, 0.030, 0.041, 0.002, 0.0015
    got = pass_costs.predict_speedup(E, k, t1, tv, td, residual=r)
    assert got == pytest.approx(analytic.speedup_from_costs(E, k, td, t1, tv + r))
    assert got == pytest.approx(E * t1 / (k * td + tv + r))
    # with constant costs (verify = one target step, no residual) it is Thm 3.8
    alpha, c = 0.8, 0.05
    got = pass_costs.predict_speedup(analytic.expected_tokens(alpha, k), k, 1.0, 1.0, c)
    assert got == pytest.approx(analytic.speedup(alpha, k, c))
    with pytest.raises(ValueError, match="residual"):
        pass_costs.predict_speedup(E, k, t1, tv, td, residual=-1e-3)


def test_expected_iterations_against_simulation():
    k, n = 4, 47
    # every iteration yields K+1 tokens: exactly ceil(n / (K+1)) iterations
    assert finite_run.expected_iterations(np.eye(k + 1)[k], n, 4) == pytest.approx(10)
    alpha = 0.7
    pmf = simulate.tokens_pmf(alpha, k)
    rng = np.random.default_rng(0)
    draws = simulate.simulate_iid(alpha, k, 200_000, rng=rng)
    # iterations to reach n tokens, row by row, then the max over batches of 4 rows
    csum = np.cumsum(draws)
    per_row, start, offset = [], 0, 0      # iterations each row of n tokens takes
    for _ in range(4000):
        i = int(np.searchsorted(csum[start:] - offset, n)) + 1
        per_row.append(i)
        offset, start = csum[start + i - 1], start + i
    per_row = np.asarray(per_row)
    got1 = finite_run.expected_iterations(pmf, n, 1)
    assert abs(per_row.mean() - got1) < 4 * per_row.std() / np.sqrt(per_row.size)
    mx = per_row.reshape(-1, 4).max(1)
    got4 = finite_run.expected_iterations(pmf, n, 4)
    assert abs(mx.mean() - got4) < 4 * mx.std() / np.sqrt(mx.size)
    assert got4 > got1 > n / analytic.expected_tokens(alpha, k)
    with pytest.raises(ValueError, match="pmf"):
        finite_run.expected_iterations([0.5, 0.6], n)


def _iterations_by_enumeration(pmf, n, batch):
    """P(max over rows of the iterations to reach n tokens = i), by enumerating every
    sequence of per-iteration yields of one row (an oracle independent of the DP)."""
    import itertools
    one = collections.Counter()
    for seq in itertools.product(range(1, len(pmf) + 1), repeat=n):   # n yields suffice
        p = float(np.prod([pmf[j - 1] for j in seq]))
        reached = int(np.searchsorted(np.cumsum(seq), n)) + 1     # first i with sum >= n
        one[reached] += p
    cdf1 = np.cumsum([one.get(i, 0.0) for i in range(n + 1)])
    return np.diff(cdf1 ** batch, prepend=0.0)


def test_iterations_pmf_against_enumeration():
    pmf = [0.2, 0.5, 0.3]
    for n, batch in ((5, 1), (5, 3), (6, 2)):
        got = finite_run.iterations_pmf(pmf, n, batch)
        want = _iterations_by_enumeration(pmf, n, batch)
        m = max(got.size, want.size)
        assert np.allclose(np.pad(got, (0, m - got.size)), np.pad(want, (0, m - want.size)),
                           atol=1e-12)
        assert finite_run.expected_iterations(pmf, n, batch) == pytest.approx(
            float(np.arange(want.size) @ want))
