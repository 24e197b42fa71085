"""specsim.drafters.instrument: the set acceptance is what the loop measures, the output
is the target's greedy output, the cost computation survives compilation, bad settings
are clear errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsim import analytic, decode, models
from specsim.decode import reference_tokens
from specsim.drafters import Context, InstrumentDrafter, instrument_drafter
from specsim.sampling import SamplingParams

MAX_NEW, K, ROWS = 60, 3, 32


@pytest.fixture(scope="module")
def tiny():
    m = models.load("tiny-llama", seed=3)
    return m.with_layer_loop("scan")


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(0)
    return [[int(t) for t in rng.integers(0, 97, n)] for n in rng.integers(2, 9, ROWS)]


@pytest.fixture(scope="module")
def reference(tiny, prompts):
    return reference_tokens(tiny, prompts, MAX_NEW + K + 1)


def _run(tiny, prompts, reference, **kw):
    d = instrument_drafter(tiny, prompts, MAX_NEW, k_max=K, reference=reference, **kw)
    d.check_run(max_new_tokens=MAX_NEW, k=K)
    res = decode.generate_speculative(tiny, d, prompts, MAX_NEW, k=K, eos_token_id=None)
    ref, plens = reference
    for b, p in enumerate(prompts):   # greedy equality with the autoregressive reference
        assert plens[b] == len(p)
        assert res.tokens[b] == ref[b, len(p):len(p) + MAX_NEW].tolist(), f"row {b}"
    return d, res.stats


def _pooled(stats, first: int = 0):
    """(accepted, reached) pooled over draft positions >= first."""
    a = stats.accepted[stats.active]
    j = np.arange(first, stats.k)[:, None]
    return int((a[None] > j).sum()), int((a[None] >= j).sum())


def _within_binomial(successes, n, p, z=4.0):
    sd = np.sqrt(p * (1 - p) / n)
    assert abs(successes / n - p) <= z * sd + 1e-12, (successes / n, p, n)


def test_reference_is_the_greedy_autoregressive_output(tiny, prompts, reference):
    ref, plens = reference
    ar = decode.generate_autoregressive(tiny, prompts[:4], 12, eos_token_id=None)
    for b in range(4):
        assert ref[b, :plens[b]].tolist() == prompts[b]
        assert ref[b, plens[b]:plens[b] + 12].tolist() == ar.tokens[b]


def test_iid_alpha_measured_and_greedy_equal_with_cost_layers(tiny, prompts, reference):
    d, stats = _run(tiny, prompts, reference, alpha=0.7, layers=2, head=True)
    assert d.passes_per_iteration(K) == K
    acc, reached = _pooled(stats)
    assert reached > 1500
    _within_binomial(acc, reached, 0.7)
    # the same compiled program serves another alpha (the rates are a traced child)
    before = decode.TRACE_COUNTS["speculative"]
    _, stats2 = _run(tiny, prompts, reference, alpha=0.3, layers=2, head=True)
    assert decode.TRACE_COUNTS["speculative"] == before
    _within_binomial(*_pooled(stats2), 0.3)


def test_positional_profile_measured(tiny, prompts, reference):
    alphas = [0.9, 0.6, 0.3]
    d, stats = _run(tiny, prompts, reference, alphas=alphas)
    assert d.passes_per_iteration(K) == 0
    a = stats.accepted[stats.active]
    for j, target in enumerate(alphas):
        _within_binomial(int((a > j).sum()), int((a >= j).sum()), target)
    E = analytic.expected_tokens_positional(alphas)
    sd = (a + 1).std() / np.sqrt(a.size)
    assert abs(stats.tokens_per_iteration - E) < 4 * sd


def test_markov_measured(tiny, prompts, reference):
    alpha, rho = 0.6, 0.5
    _, stats = _run(tiny, prompts, reference, alpha=alpha, rho=rho)
    p01, p11 = analytic.markov_transitions(alpha, rho)
    # after an accepted draft the next one is accepted with p11 (not alpha)
    acc, reached = _pooled(stats, first=1)
    _within_binomial(acc, reached, float(p11))
    # the first draft of an iteration: p11 after an accepting start state, else p01
    pi1 = float(analytic.markov_start_probability(alpha, rho, K))
    a0 = stats.accepted[stats.active]
    _within_binomial(int((a0 > 0).sum()), a0.size, (1 - pi1) * float(p01) + pi1 * float(p11))
    assert abs(acc / reached - alpha) > 6 * np.sqrt(alpha * (1 - alpha) / reached)  # not i.i.d.
    a = stats.accepted[stats.active]
    E = float(analytic.expected_tokens_markov(alpha, rho, K))
    sd = (a + 1).std() / np.sqrt(a.size)
    assert abs(stats.tokens_per_iteration - E) < 6 * sd   # rows' iterations are correlated


def _propose_hlo(tiny, prompts, reference, layers, head):
    d = instrument_drafter(tiny, prompts, MAX_NEW, k_max=K, reference=reference, alpha=0.5,
                           layers=layers, head=head)
    B = len(prompts)
    sp = SamplingParams.make(0.0, vocab_size=tiny.cfg.vocab_size)

    def run(d, tokens, length, key):
        state = d.init_state(jnp.zeros((B, 8), jnp.int32), length, 96)
        _, draft = d.propose(state, Context(tokens, length), K, key, sp)
        return draft.tokens

    args = (d, jnp.zeros((B, 96), jnp.int32), jnp.full((B,), 10, jnp.int32),
            jax.random.PRNGKey(0))
    return jax.jit(run).lower(*args).compile().as_text()


def test_cost_computation_survives_compilation(tiny, prompts, reference):
    """The draft step's layers feed the proposal: the compiled program keeps their
    matrix products (and the full head's [D, V] product), and layers=0 has none."""
    D, V = tiny.cfg.d_model, tiny.cfg.vocab_size
    none = _propose_hlo(tiny, prompts, reference, 0, False)
    work = _propose_hlo(tiny, prompts, reference, 2, True)
    assert " dot(" not in none and "convolution(" not in none
    assert work.count(" dot(") >= 5
    assert f"f32[{len(prompts)},1,{V}]" in work or f"f32[{len(prompts)},{V}]" in work


# ---- bad settings ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kw, match", [
    (dict(alpha=1.2), "alpha"), (dict(alpha=-0.1), "alpha"), (dict(alphas=[0.5, 1.5]), "alphas"),
    (dict(alpha=0.5, rho=1.0), "rho"), (dict(alpha=0.9, rho=-0.5), "rho"),
    (dict(alpha=0.5, layers=-1), "layers"), (dict(alpha=0.5, layers=4), "layers"),
    (dict(alpha=0.5, layers=0, head=True), "head"), (dict(), "exactly one"),
    (dict(alpha=0.5, alphas=[0.5]), "exactly one"), (dict(alphas=[]), "alphas"),
])
def test_bad_settings_name_the_argument(tiny, prompts, reference, kw, match):
    with pytest.raises(ValueError, match=match):
        instrument_drafter(tiny, prompts, MAX_NEW, k_max=K, reference=reference, **kw)


def test_short_reference_and_wrong_profile_length(tiny, prompts, reference):
    ref, plens = reference
    with pytest.raises(ValueError, match="reference too short"):
        instrument_drafter(tiny, prompts, MAX_NEW, k_max=K, alpha=0.5,
                           reference=(ref[:, :-3], plens))
    d = instrument_drafter(tiny, prompts, MAX_NEW - 8, k_max=K, alpha=0.5, reference=reference)
    with pytest.raises(ValueError, match="reference too short"):
        d.check_run(max_new_tokens=MAX_NEW + 8, k=K)
    d = instrument_drafter(tiny, prompts, MAX_NEW, k_max=K, alphas=[0.5, 0.5],
                           reference=reference)
    with pytest.raises(ValueError, match="profile"):
        d.check_run(max_new_tokens=MAX_NEW, k=K)
    with pytest.raises(ValueError, match="profile"):      # and at trace time in the loop
        decode.generate_speculative(tiny, d, prompts, MAX_NEW, k=K, eos_token_id=None)


def test_temperature_above_zero_is_refused(tiny, prompts, reference):
    d = instrument_drafter(tiny, prompts, MAX_NEW, k_max=K, alpha=0.5, reference=reference)
    d.check_sampling(0.0)
    d.check_sampling(0)
    for t in (0.5, 1.0):
        with pytest.raises(ValueError, match="temperature must be 0"):
            d.check_sampling(t)
    with pytest.raises(ValueError, match="temperature must be 0"):
        decode.generate_speculative(tiny, d, prompts, MAX_NEW, k=K, temperature=1.0,
                                    eos_token_id=None)


def test_pytree_roundtrip_keeps_settings(tiny, prompts, reference):
    d = instrument_drafter(tiny, prompts, MAX_NEW, k_max=K, alpha=0.25, rho=0.2,
                           reference=reference, layers=1)
    leaves, tree = jax.tree_util.tree_flatten(d)
    back = jax.tree_util.tree_unflatten(tree, leaves)
    assert isinstance(back, InstrumentDrafter) and back.spec == d.spec
    p01, p11 = analytic.markov_transitions(0.25, 0.2)
    np.testing.assert_allclose(np.asarray(back.rates), [p01, p11], rtol=1e-6)


def test_generate_speculative_refuses_eagerly_before_tracing(tiny, prompts, reference):
    """decode calls the drafter's check_run before anything is traced: a run too long for
    the reference, or a temperature above 0, never reaches the compiled program."""
    d = instrument_drafter(tiny, prompts, MAX_NEW - 8, k_max=K, alpha=0.5, reference=reference)
    before = dict(decode.TRACE_COUNTS)
    with pytest.raises(ValueError, match="reference too short"):
        decode.generate_speculative(tiny, d, prompts, MAX_NEW + 8, k=K, eos_token_id=None)
    with pytest.raises(ValueError, match="temperature must be 0"):
        decode.generate_speculative(tiny, d, prompts, MAX_NEW - 8, k=K, temperature=0.7,
                                    eos_token_id=None)
    assert dict(decode.TRACE_COUNTS) == before


@pytest.mark.parametrize("layers,head", [(1, False), (2, False), (2, True)])
def test_cost_config_is_the_shape_of_the_cost_weights(tiny, layers, head):
    """The config the prior's roofline costs a draft step at is the one of the weights
    the step runs: its layers, and the small head unless ``head``."""
    from specsim.drafters.instrument import SMALL_HEAD, _cost_model, cost_config

    params, built = _cost_model(tiny, layers, head)
    cfg = cost_config(tiny.cfg, layers, head)
    assert (cfg.n_layers, cfg.vocab_size) == (built.n_layers, built.vocab_size)
    assert params["embed"].shape[0] == cfg.vocab_size
    assert cfg.vocab_size == (tiny.cfg.vocab_size if head else SMALL_HEAD)


def test_prior_costs_the_instrument_draft_with_its_small_head(tiny):
    """The prediction before the run prices an instrument step of L layers by the bytes
    it reads at the small head's shapes (not the target's full vocabulary head) as a
    share of the target's fitted decode step at the same batch."""
    from types import SimpleNamespace

    from specsim import roofline, schema
    from specsim.drafters.instrument import cost_config
    from specsim.experiment.prior import _draft_time

    tm = lambda cfg, tokens, b, S: 0.01 * b                  # the target's step: 10 ms a row
    state = SimpleNamespace(target=tiny, drafters={})
    row = {schema.DRAFTER_KIND: "instrument", schema.DRAFT_LAYERS: 2, schema.DRAFTER: "i"}
    small = cost_config(tiny.cfg, 2)
    for b in (1, 4):
        want = 0.01 * b * roofline.forward_cost(small, b, 1, 64).bytes \
            / roofline.forward_cost(tiny.cfg, b, 1, 64).bytes
        assert _draft_time(state, row, tm, b, 64, True) == pytest.approx(want, rel=1e-12)
    row[schema.DRAFT_LAYERS] = 0
    assert _draft_time(state, row, tm, 1, 64, True) == 0.0


def test_prior_costs_the_feature_head_by_the_bytes_it_reads(tiny):
    """A feature-head draft step costs the target step's fitted time times the bytes it
    reads (its cell and head rows, fp32) over the bytes of a target pass (the roofline's
    count at the same context); n-gram lookup stays free."""
    from types import SimpleNamespace

    from specsim import roofline, schema
    from specsim.experiment.prior import _draft_time

    tm = lambda cfg, tokens, b, S: 0.01                      # a 10 ms target step
    cell = {"w": np.zeros((3, 5), np.float32), "b": np.zeros(5, np.float32)}
    head = np.zeros((7, tiny.cfg.d_model), np.float32)
    state = SimpleNamespace(target=tiny, drafters={
        "fh": SimpleNamespace(drafter=SimpleNamespace(cell=cell, head=head))})
    row = {schema.DRAFTER_KIND: "feature-head", schema.DRAFTER: "fh"}
    want = 0.01 * 4 * (15 + 5 + 7 * tiny.cfg.d_model) / roofline.forward_cost(
        tiny.cfg, 1, 1, 64).bytes
    assert _draft_time(state, row, tm, 1, 64, True) == pytest.approx(want, rel=1e-12)
    state.drafters["ng"] = SimpleNamespace(drafter=object(), cost_model=None)
    row = {schema.DRAFTER_KIND: "ngram", schema.DRAFTER: "ng"}
    assert _draft_time(state, row, tm, 1, 64, True) == 0.0


def test_quasi_draws_realise_the_set_rates(tiny, prompts, reference):
    """draws="quasi": the run is still exactly the target's greedy output (checked in
    `_run`); in every row the proposals whose leading j drafts are correct number
    n · α_1⋯α_j within 2.5 (a golden-ratio sequence's discrepancy; pseudo-random draws
    stray by about √n); the draws are uniform and their shifts differ between rows."""
    alphas = (0.8, 0.6, 0.4)
    d, stats = _run(tiny, prompts, reference, alphas=alphas, draws="quasi")
    reach = np.cumprod(alphas)
    acc, act = np.asarray(stats.accepted), np.asarray(stats.active)
    for b in range(acc.shape[1]):
        a = acc[:, b][act[:, b]]
        for j in range(K):
            assert abs((a > j).sum() - a.size * reach[j]) <= 2.5, (b, j, a.size)
    B, n = len(prompts), 2000
    state = d.init_state(jnp.zeros((B, 8), jnp.int32), jnp.full((B,), 8, jnp.int32), 96)
    draws = []
    for i in range(n):
        u, shift = d._uniforms(state, K, jax.random.PRNGKey(i))
        state = state._replace(shift=shift, it=state.it + jnp.uint32(1))
        draws.append(np.asarray(u[:, 0]))
    u = np.stack(draws)                                                    # [n, B]
    assert u.min() >= 0.0 and u.max() < 1.0 and not np.allclose(u[:, 0], u[:, 1])
    for q in (0.1, 0.37, 0.5, 0.93):
        np.testing.assert_allclose((u < q).mean(axis=0), q, atol=0.003)


def test_bad_draws_are_clear_errors(tiny, prompts, reference):
    kw = dict(k_max=K, reference=reference, alpha=0.5)
    with pytest.raises(ValueError, match="draws must be one of"):
        instrument_drafter(tiny, prompts, MAX_NEW, draws="sobol", **kw)
    with pytest.raises(ValueError, match="Markov"):
        instrument_drafter(tiny, prompts, MAX_NEW, rho=0.3, draws="quasi", **kw)
