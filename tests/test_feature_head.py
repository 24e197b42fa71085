"""The feature-head drafter (reads the target's features): exact output, the loop hands
it the right feature (an independent replay of the whole greedy run), its cell against
a NumPy oracle, files and bad arguments."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsim import models
from specsim.decode import generate_autoregressive, generate_speculative
from specsim.drafters import feature_head_drafter
from specsim.drafters.feature_head import init_cell, load_cell, save_cell
from specsim.models.config import TINY_LLAMA
from specsim.models.transformer import forward, forward_hidden, init_cache, init_params, project

from test_decode import (CHI_PROMPT, N_SAMPLES, _chi2_pvalue, _counts,  # noqa: F401
                         _exact_joint, _scaled, chi_models)

MAX_NEW = 24
PROMPTS = [[1, 5, 7, 9, 11], [3, 3], [4, 8, 15, 16, 23, 42, 4, 8, 15, 16, 23]]


@pytest.fixture(scope="module")
def target():
    cfg = TINY_LLAMA.replace(layer_loop="scan", eos_token_id=None)
    return models.Model(cfg, _scaled(init_params(jax.random.PRNGKey(0), cfg), 12.0))


def _cell(cfg, seed=3, width=32, out_scale=0.5):
    p = init_cell(jax.random.PRNGKey(seed), cfg.d_model, width)
    w_out = jax.random.normal(jax.random.PRNGKey(seed + 1), (width, cfg.d_model)) * out_scale
    return dict(p, w_out=w_out)


def _head_ids(cfg, n):
    return np.sort(np.random.default_rng(0).choice(cfg.vocab_size, n, replace=False))


def test_forward_is_project_of_forward_hidden(target):
    cfg, toks = target.cfg, jnp.asarray([PROMPTS[2]], jnp.int32)
    logits, _ = forward(target.params, cfg, toks, init_cache(cfg, 1, 16))
    h, _ = forward_hidden(target.params, cfg, toks, init_cache(cfg, 1, 16))
    np.testing.assert_array_equal(np.asarray(project(target.params, cfg, h)),
                                  np.asarray(logits))


@pytest.mark.parametrize("n_head", [None, 40])
@pytest.mark.parametrize("k", [1, 4])
def test_greedy_output_equals_target(target, n_head, k):
    cfg = target.cfg
    ids = np.arange(cfg.vocab_size) if n_head is None else _head_ids(cfg, n_head)
    drafter = feature_head_drafter(target, (_cell(cfg), ids))
    ref = generate_autoregressive(target, PROMPTS, MAX_NEW)
    res = generate_speculative(target, drafter, PROMPTS, MAX_NEW, k)
    assert res.tokens == ref.tokens


def _np_cell(p, embed, z, tok, eps):
    def rms(x, s):
        return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * s
    u = np.concatenate([rms(z, p["n1"]), rms(embed[tok], p["n2"])], -1)
    g = u @ p["w_gate"]
    return z + ((g / (1 + np.exp(-g))) * (u @ p["w_in"])) @ p["w_out"]


def test_loop_hands_the_feature_that_produced_the_last_token(target):
    """Replay a greedy run independently: at each iteration the drafts are the cell's
    chain from ĥ at the position before the last kept token (computed by one full pass
    over the final sequence) and that token; the accepted counts must match."""
    cfg, k = target.cfg, 3
    ids = np.arange(cfg.vocab_size)
    cell = _cell(cfg, width=24, out_scale=0.05)
    drafter = feature_head_drafter(target, (cell, ids))
    n_accepted = sum(_replay(target, drafter, cell, ids, prompt, k) for prompt in PROMPTS[1:])
    assert n_accepted > 0                                       # some drafts were accepted


class _Alternate:
    """A test policy: every row drafts k_max in even iterations and nothing in odd ones,
    so the loop runs off stretches (`decode.policy_loop.policy_off_loop`) between drafts."""

    def __init__(self, k_max):
        self.k_max = k_max

    def __hash__(self):
        return hash(("alternate", self.k_max))

    def __eq__(self, other):
        return isinstance(other, _Alternate) and other.k_max == self.k_max

    def init(self, batch, xp=np):
        return (xp.zeros((batch,), xp.int32),)

    def plan(self, state, batch, xp=np, active=None):
        return xp.where(state[0] % 2 == 0, self.k_max, 0).astype(xp.int32)

    def keep(self, j, confidence, xp=np):
        return xp.ones(confidence.shape, bool)

    def update(self, state, k_plan, n_accepted, n_proposed, active, xp=np):
        return (xp.where(active, state[0] + 1, state[0]),)


def test_off_iterations_hand_the_feature_on(target):
    """Under a policy with off iterations (run as autoregressive steps) the drafter still
    receives the feature that produced the last token: the same independent replay, with
    no drafts where the policy planned none."""
    cfg, k = target.cfg, 3
    ids = np.arange(cfg.vocab_size)
    cell = _cell(cfg, width=24, out_scale=0.05)
    drafter = feature_head_drafter(target, (cell, ids))
    policy = _Alternate(k)
    n_accepted = sum(_replay(target, drafter, cell, ids, prompt, k, policy)
                     for prompt in PROMPTS[1:])
    assert n_accepted > 0


def _replay(target, drafter, cell, ids, prompt, k, policy=None):
    cfg = target.cfg
    res = generate_speculative(target, drafter, [prompt], MAX_NEW,
                               k if policy is None else None, policy=policy)
    plan = [k] * res.n_iterations if policy is None else list(res.stats.k_used[:, 0])
    if policy is not None:
        assert 0 in plan and k in plan and res.meta["single_token_target_passes"] > 0
    seq = prompt + res.tokens[0]
    h, _ = forward_hidden(target.params, cfg, jnp.asarray([seq], jnp.int32),
                          init_cache(cfg, 1, 64))
    h = np.asarray(h[0], np.float64)                                        # [N, D]
    p = {name: np.asarray(v, np.float64) for name, v in cell.items()}
    embed = np.asarray(target.params["embed"], np.float64)
    head = np.asarray(target.params["lm_head"], np.float64).T[ids] \
        if "lm_head" in target.params else embed[ids]                        # [Vh, D]
    length, expected = len(prompt) + 1, []
    while length < len(seq):
        if plan[len(expected)] == 0:                # an off iteration: one target token
            expected.append(0)
            length += 1
            continue
        z, tok, n_acc = h[length - 2], seq[length - 1], 0
        for j in range(k):
            z = _np_cell(p, embed, z, tok, cfg.norm_eps)
            tok = int(ids[np.argmax(head @ z)])
            if length + j < len(seq) and tok == seq[length + j] and n_acc == j:
                n_acc += 1
        expected.append(n_acc)
        length += n_acc + 1
    got = res.stats.accepted[:, 0]
    assert list(got[:len(expected) - 1]) == expected[:-1]      # the last one is cut by max_new
    return sum(expected)


# one temperature other than 1 (a traced value: every temperature runs the same program)
@pytest.mark.parametrize("temperature, k", [(0.7, 3)])
def test_sampling_is_exact_in_distribution(chi_models, temperature, k):
    t, _ = chi_models
    drafter = feature_head_drafter(t, (_cell(t.cfg, width=8, out_scale=1.0), [0, 2, 3, 5, 7, 11]))
    res = generate_speculative(t, drafter, [CHI_PROMPT] * N_SAMPLES, 3, k, temperature, seed=7)
    toks = np.asarray(res.tokens)                                           # [N, 3]
    joint = _exact_joint(t, temperature)                                    # [V, V, V]
    p12 = _chi2_pvalue(_counts(toks, (0, 1)), joint.sum(2))
    p23 = _chi2_pvalue(_counts(toks, (1, 2)), joint.sum(0))
    assert p12 > 1e-3 and p23 > 1e-3, (p12, p23)
    assert 0.05 < res.stats.alpha_per_proposal < 0.95


def test_tokens_outside_the_head_are_never_proposed(target):
    cfg = target.cfg
    ids = _head_ids(cfg, 10)
    drafter = feature_head_drafter(target, (_cell(cfg), ids))
    h, _ = forward_hidden(target.params, cfg, jnp.asarray([PROMPTS[0]], jnp.int32),
                          init_cache(cfg, 1, 16))
    from specsim.drafters import Context
    from specsim.sampling import SamplingParams
    state = drafter.observe(drafter.init_state(jnp.zeros((1, 5), jnp.int32), None, 16), h,
                            jnp.asarray([4]), jnp.asarray([True]))
    sp = SamplingParams.make(1.0, 0, 1.0, vocab_size=cfg.vocab_size)
    ctx = Context(jnp.asarray([PROMPTS[0] + [0] * 3], jnp.int32), jnp.asarray([5]))
    _, draft = drafter.propose(state, ctx, 6, jax.random.PRNGKey(0), sp)
    outside = np.setdiff1d(np.arange(cfg.vocab_size), ids)
    assert np.all(np.isin(np.asarray(draft.tokens), ids))
    assert float(np.asarray(draft.probs)[..., outside].sum()) == 0.0
    np.testing.assert_allclose(np.asarray(draft.probs).sum(-1), 1.0, rtol=1e-5)


def test_save_load_round_trip(tmp_path, target):
    cfg = target.cfg
    cell, ids = _cell(cfg), _head_ids(cfg, 30)
    save_cell(tmp_path / "head.npz", cell, ids, {"steps": 3})
    back, ids2, meta = load_cell(tmp_path / "head.npz")
    np.testing.assert_array_equal(ids2, ids)
    assert meta["steps"] == 3 and meta["format"].startswith("specsim-feature-head")
    for name in cell:           # stored in fp16
        np.testing.assert_allclose(np.asarray(back[name]), np.asarray(cell[name]),
                                   rtol=1e-3, atol=1e-3)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


def test_bad_arguments_are_clear_errors(tmp_path, target):
    cfg = target.cfg
    with pytest.raises(ValueError, match="not found"):
        feature_head_drafter(target, tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="model width"):
        feature_head_drafter(target, (init_cell(jax.random.PRNGKey(0), cfg.d_model + 8, 4),
                                      [1, 2]))
    with pytest.raises(ValueError, match="head_ids"):
        feature_head_drafter(target, (_cell(cfg), [0, cfg.vocab_size]))
    with pytest.raises(ValueError, match="width"):
        init_cell(jax.random.PRNGKey(0), cfg.d_model, 0)


# ---- training (specsim.train.feature_head) on a tiny target ---------------------------------
def _tiny_target():
    from specsim.models.config import TINY_LLAMA as T
    cfg = T.replace(name="tiny-fh-target", n_layers=2, tie_embeddings=True, layer_loop="scan",
                    eos_token_id=None)
    params = init_params(jax.random.PRNGKey(0), cfg)
    layers = {k: v * 3.0 if k in ("wo", "w_gate", "w_up", "w_gate_up", "w_down") else v
              for k, v in params["layers"].items()}
    return models.Model(cfg, dict(params, layers=layers, embed=params["embed"] * 3.0))


def _random_prompts(seed, n, vocab, lo=4, hi=12):
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(3, vocab, size=rng.integers(lo, hi))]
            for _ in range(n)]


HEAD_FAST = dict(head_vocab=97, teacher_top_k=97, batch=128, lr=1e-2, warmup=5, holdout=16,
                 n_new=24, gen_batch=32, minutes=None, checkpoint_minutes=60.0)
"""Settings of a quick head training on the tiny targets (the feature head's and Medusa's)."""
FH_FAST = dict(HEAD_FAST, width=64, unroll=3)


def train_head(train, target, cfg, folder):
    """(target, out, cfg, result) of the head training ``train`` of ``target`` into
    ``folder/head.npz`` on 96 random prompts."""
    out = folder / "head.npz"
    result = train(target, out, cfg, prompts=_random_prompts(0, 96, target.cfg.vocab_size),
                   progress=False)
    return target, out, cfg, result


@pytest.fixture(scope="module")
def fh_trained(tmp_path_factory):
    from specsim.train import feature_head as fh
    return train_head(fh.train_feature_head, _tiny_target(),
                      fh.FeatureHeadConfig(steps=200, **FH_FAST), tmp_path_factory.mktemp("fh"))


def test_training_raises_alpha_against_the_untrained_cell(fh_trained):
    """Held-out chain α per slot (greedy rows) of the trained cell against the untrained
    start, and a real speculative run at temperature 1 on unseen prompts."""
    from specsim.train import feature_head as fh
    target, out, cfg, result = fh_trained
    assert result.finished and result.step == cfg.steps == len(result.losses)
    assert np.mean(result.losses[-10:]) < np.mean(result.losses[:10]) - 0.5
    cell_params, head_ids, meta = load_cell(out)
    assert meta["alpha_per_slot_heldout_greedy"] == result.alpha_per_slot
    untrained = (init_cell(jax.random.PRNGKey(cfg.seed), target.cfg.d_model, cfg.width), head_ids)
    test = _random_prompts(7, 32, target.cfg.vocab_size)

    def alpha(source):
        res = generate_speculative(target, feature_head_drafter(target, source), test, 24, 3,
                                   1.0, seed=3)
        return res.stats.alpha_per_slot

    a0, a1 = alpha(untrained), alpha(out)
    assert a1 > a0 + 0.05, (a0, a1)


def test_interrupted_training_resumes(fh_trained, tmp_path):
    """A run cut by its time budget leaves a checkpoint and no file; the next call resumes
    and ends on the same loss curve as the uninterrupted run."""
    from specsim.train import feature_head as fh
    target, _, cfg, result = fh_trained
    prompts = _random_prompts(0, 96, target.cfg.vocab_size)
    out = tmp_path / "head.npz"
    short = dataclasses_replace(cfg, minutes=1e-9)
    r1 = fh.train_feature_head(target, out, short, prompts=prompts, progress=False)
    assert not r1.finished and not out.exists() and fh.checkpoint_dir(out).is_dir()
    r2 = fh.train_feature_head(target, out, cfg, prompts=prompts, progress=False)
    assert r2.finished and out.is_file() and not fh.checkpoint_dir(out).exists()
    np.testing.assert_allclose(r2.losses, result.losses, rtol=1e-4)


def dataclasses_replace(obj, **kw):
    import dataclasses
    return dataclasses.replace(obj, **kw)


@pytest.mark.parametrize("kind, change, match", [
    ("feature-head", dict(width=0), "width"), ("feature-head", dict(head_vocab=0), "head_vocab"),
    ("feature-head", dict(minutes=0), "minutes"), ("feature-head", dict(unroll=0), "unroll"),
    ("feature-head", dict(feature_weight=-1.0), "feature_weight"),
    ("medusa", dict(heads=0), "heads"), ("medusa", dict(head_vocab=0), "head_vocab"),
    ("medusa", dict(minutes=0), "minutes")])
def test_bad_training_settings_are_clear_errors(kind, change, match, tmp_path):
    """Both head trainings check their settings before they sample the target."""
    from specsim.train import feature_head as fh, medusa
    train, config, fast = {
        "feature-head": (fh.train_feature_head, fh.FeatureHeadConfig, FH_FAST),
        "medusa": (medusa.train_medusa, medusa.MedusaConfig, dict(HEAD_FAST, heads=2))}[kind]
    with pytest.raises(ValueError, match=match):
        train(_tiny_target(), tmp_path / "h.npz", config(**dict(fast, **change)),
              progress=False)


@pytest.mark.parametrize("policy", ["threshold", "goodput-off"])
def test_greedy_output_equals_target_under_policies(target, policy):
    from specsim import policies
    cfg = target.cfg
    pol = {"threshold": policies.ConfidenceThreshold(p_min=0.3, k_min=1, k_max=4),
           "heuristic": policies.Heuristic(k_init=2, k_max=4),
           "goodput-off": policies.Goodput(k_max=4, costs=policies.Costs.from_ratio(5.0, 4))
           }[policy]
    drafter = feature_head_drafter(target, (_cell(cfg, out_scale=0.05), np.arange(cfg.vocab_size)))
    ref = generate_autoregressive(target, PROMPTS, MAX_NEW)
    res = generate_speculative(target, drafter, PROMPTS, MAX_NEW, policy=pol)
    assert res.tokens == ref.tokens
    if policy == "threshold":
        # greedy confidence is the head's softmax (not the one-hot draft's 1), so rows
        # stop below p_min, and the cell steps only while some row drafts: one pass per
        # slot reached by any row (the first always), plus the prefill's
        st, a = res.stats, res.stats.active
        conf = st.confidence[a]
        assert np.nanmin(conf) < 0.3 < np.nanmax(conf)
        assert (st.drafted[a] < st.k_used[a]).any()
        reached = np.isfinite(st.confidence).sum(2).max(1)              # [I]
        assert res.draft_passes == 1 + np.maximum(reached, 1).sum() < 1 + 4 * res.n_iterations



# ---- judged while speculation is off (policy_engine.judge_off, "paid") ----------------------
def _never_drafting_goodput(period):
    """Goodput that never plans a draft (a draft step costs two target steps, prior 0)
    and judges the feature head on every ``period``-th off iteration (its loss budget
    off: with one it judges only while the bank could still pay for a draft, which
    these never could; that gate is tested in test_policies and test_position_replay)."""
    from specsim import policies as P
    costs = P.Costs.from_ratio(2.0, 3)
    share = 0.0 if period == 0 else costs.t_draft / (period * costs.t_target[0])
    pol = P.Goodput(k_max=3, costs=costs, prior_alpha=0.0, judge_share=share, budget=None)
    assert P.judge_period(pol, "paid") == period
    return pol


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_off_iterations_judge_the_first_draft_every_nth(target, temperature):
    """Oracle: with speculation off throughout, iteration i % 3 == 0 judges the cell's
    first draft from the feature before the last token (one full pass over the final
    sequence, NumPy cell) against the token the step drew (greedy: equal or not), the
    other iterations judge nothing; each judged iteration costs one draft step; the
    output is the autoregressive one token for token (the same key stream)."""
    cfg, period = target.cfg, 3
    ids = np.arange(cfg.vocab_size)
    cell = _cell(cfg, width=24, out_scale=0.05)
    drafter = feature_head_drafter(target, (cell, ids))
    want = generate_autoregressive(target, PROMPTS, MAX_NEW, temperature=temperature, seed=5)
    got = generate_speculative(target, drafter, PROMPTS, MAX_NEW, temperature=temperature,
                               seed=5, policy=_never_drafting_goodput(period))
    blind = generate_speculative(target, drafter, PROMPTS, MAX_NEW, temperature=temperature,
                                 seed=5, policy=_never_drafting_goodput(0))
    assert got.tokens == want.tokens == blind.tokens
    st = got.stats
    assert (st.k_used[st.active] == 0).all() and (blind.stats.off_judged == -1).all()
    judged_its = (st.off_judged >= 0).any(1)
    assert list(np.flatnonzero(judged_its)) == list(range(0, got.n_iterations, period))
    assert got.draft_passes - blind.draft_passes == judged_its.sum()
    if temperature > 0:
        assert set(np.unique(st.off_judged[judged_its])) <= {0, 1}
        return
    p = {name: np.asarray(v, np.float64) for name, v in cell.items()}
    embed = np.asarray(target.params["embed"], np.float64)
    head = np.asarray(target.params["lm_head"], np.float64).T \
        if "lm_head" in target.params else embed
    expect = np.full(st.off_judged.shape, -1)
    for b, (prompt, out) in enumerate(zip(PROMPTS, got.tokens)):
        seq = prompt + out
        h, _ = forward_hidden(target.params, cfg, jnp.asarray([seq], jnp.int32),
                              init_cache(cfg, 1, 64))
        h = np.asarray(h[0], np.float64)
        for i in range(0, len(out) - 1, period):      # iteration i draws out[i + 1]
            n = len(prompt) + i + 1                   # tokens before the step
            z = _np_cell(p, embed, h[n - 2], seq[n - 1], cfg.norm_eps)
            expect[i, b] = int(int(np.argmax(head @ z)) == out[i + 1])
    np.testing.assert_array_equal(st.off_judged, expect)
    assert (expect == 1).any() and (expect == 0).any()


def test_a_judged_sampled_draft_passes_at_the_acceptance_tests_rate(chi_models):
    """Sampling: a judged first draft x ~ q passes with probability Σ_x min(p(x), q(x))
    (the acceptance test's), p the step's distribution: over 20 000 rows, iteration 0
    (the step drawing t2 after t1), grouped by t1, q from the eager cell on the prompt's
    feature and t1, p by enumeration; the count lies within 4 standard deviations."""
    from specsim.drafters import Context
    from specsim.sampling import SamplingParams
    t, _ = chi_models
    cfg, temperature, n = t.cfg, 1.0, 20_000
    ids = [0, 2, 3, 5, 7, 11]
    drafter = feature_head_drafter(t, (_cell(cfg, width=8, out_scale=1.0), ids))
    res = generate_speculative(t, drafter, [CHI_PROMPT] * n, 2, temperature=temperature,
                               seed=11, policy=_never_drafting_goodput(1))
    toks = np.asarray(res.tokens)                                            # [N, 2]
    judged = res.stats.off_judged[0]                                         # [N]
    assert (judged >= 0).all()
    p2 = _exact_joint(t, temperature).sum(2)                                 # [t1, t2]
    p2 = p2 / p2.sum(1, keepdims=True)
    sp = SamplingParams.make(temperature, 0, 1.0, vocab_size=cfg.vocab_size)
    L = len(CHI_PROMPT)
    h, _ = forward_hidden(t.params, cfg, jnp.asarray([CHI_PROMPT], jnp.int32),
                          init_cache(cfg, 1, 16))
    state = drafter.observe(drafter.init_state(jnp.zeros((1, L), jnp.int32), None, 16), h, jnp.asarray([L - 1]),
                            jnp.asarray([True]))
    mean = var = 0.0
    for t1 in range(cfg.vocab_size):
        rows = toks[:, 0] == t1
        if not rows.any():
            continue
        ctx = Context(jnp.asarray([CHI_PROMPT + [t1, 0]], jnp.int32), jnp.asarray([L + 1]))
        _, d = drafter.propose(state, ctx, 1, jax.random.PRNGKey(0), sp)
        q = np.asarray(d.probs[0, 0], np.float64)
        rate = np.minimum(p2[t1], q).sum()
        mean += rows.sum() * rate
        var += rows.sum() * rate * (1 - rate)
    assert 0.05 < mean / n < 0.95
    assert abs(judged.sum() - mean) < 4 * np.sqrt(var), (judged.sum(), mean, var)


@pytest.mark.parametrize("budget", [None, 0.05])
def test_simulation_replays_goodput_judging_the_feature_head(target, budget):
    """Oracle for `simulate.simulate_policy(off_draft="paid")`: replayed on the trace of
    its own run, Goodput judging the feature head on every other off iteration plans,
    proposes and accepts what the engine did, and charges the draft steps the engine
    counted; the run starts off (prior 0), is turned on by what it judged while off, and
    matches plain decoding's tokens. With a budget the judging is charged to the bank,
    in the replay as in the engine."""
    from specsim import policies as P
    from specsim import simulate as S
    from specsim.experiment.policy_runs import trace_from_stats

    cfg = target.cfg
    drafter = feature_head_drafter(target, (_cell(cfg, width=24, out_scale=0.05),
                                            np.arange(cfg.vocab_size)))
    costs = P.Costs.from_ratio(0.05, 3)
    pol = P.Goodput(k_max=3, costs=costs, prior_alpha=0.0,
                    judge_share=costs.t_draft / (2 * costs.t_target[0]), budget=budget)
    prompts = [PROMPTS[1]]
    res = generate_speculative(target, drafter, prompts, 48, policy=pol)
    assert res.tokens == generate_autoregressive(target, prompts, 48).tokens
    st = res.stats
    present = st.k_used >= 0
    assert (st.k_used[present][:1] == 0).all() and (st.k_used[present] > 0).any()
    run = S.simulate_policy(pol, trace_from_stats(st), costs=costs, cost_model="engine",
                            off_draft="paid", new_tokens=48 - 1)   # the engine's allowance
    np.testing.assert_array_equal(run.k_plan[present], st.k_used[present])
    np.testing.assert_array_equal(run.proposed[present], st.drafted[present])
    np.testing.assert_array_equal(run.accepted[present], st.accepted[present])
    judged = (st.off_judged >= 0).any(1)
    assert judged.any() and (np.flatnonzero(judged) % 2 == 0).all()
    # the engine's draft steps: the replay's (judging and drafting) and the prefill's one
    assert res.draft_passes == run.draft_steps.max(1).sum() + 1
