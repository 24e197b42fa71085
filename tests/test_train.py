"""Distillation (specsim.train) and the restricted-head drafter (drafters.distilled), on
tiny models: training lowers the held-out KL and raises the acceptance of a real
speculative run; an interrupted run resumes to the same loss curve as an uninterrupted
one; the saved folder loads back with the trained logits; the drafter is exact (greedy
equality, χ² on a 12-token vocabulary) and never proposes a token outside its head."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import chi2

from specsim import drafters, models, train
from specsim.decode import generate_autoregressive, generate_speculative
from specsim.drafters.base import Context
from specsim.models.config import TINY_LLAMA, ModelConfig
from specsim.models.transformer import forward, init_cache, init_params
from specsim.policies import ConfidenceThreshold
from specsim.sampling import SamplingParams
from specsim.train import loop as train_loop
from specsim.train.draft import distill_loss, draft_config, init_draft, layer_ids

TARGET_CFG = TINY_LLAMA.replace(name="tiny-target", n_layers=4, tie_embeddings=True,
                                layer_loop="scan", eos_token_id=None)
FAST = dict(minutes=None, batch=8, n_new=24, gen_batch=32, teacher_top_k=97, lr=1e-2,
            warmup=5, checkpoint_minutes=60.0)    # top-k = V: the loss is the full KL


def _scaled(params, factor):
    return jax.tree_util.tree_map(lambda a: a * factor, params)


@pytest.fixture(scope="module")
def target():
    # embedding, attention output and MLP weights scaled up, so the target's
    # distributions are peaked (a random model at init is nearly uniform, where every
    # draft looks good) yet learnable by a one-layer draft
    params = init_params(jax.random.PRNGKey(0), TARGET_CFG)
    layers = {k: v * 3.0 if k in ("wo", "w_gate", "w_up", "w_gate_up", "w_down") else v
              for k, v in params["layers"].items()}
    return models.Model(TARGET_CFG, dict(params, layers=layers, embed=params["embed"] * 3.0))


def _prompts(seed, n, lo=4, hi=12):
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(3, TARGET_CFG.vocab_size, size=rng.integers(lo, hi))]
            for _ in range(n)]


def _alpha(target, drafter, prompts, temperature=0.0):
    res = generate_speculative(target, drafter, prompts, 24, 3, temperature, seed=3)
    return train.alpha_per_slot(res.stats)


@pytest.fixture(scope="module")
def trained(target, tmp_path_factory):
    out = tmp_path_factory.mktemp("train") / "draft"
    cfg = train.DistillConfig(layers=1, head_vocab=97, steps=150, **FAST)
    result = train.train_draft(target, out, cfg, prompts=_prompts(0, 128), progress=False)
    return out, cfg, result


def _model_of(trainable, frozen, n_layers):
    return models.Model(draft_config(TARGET_CFG, n_layers), {"embed": frozen["embed"], **trainable})


def test_training_lowers_kl_and_raises_alpha(target, trained):
    out, cfg, result = trained
    assert result.finished and result.step == cfg.steps == len(result.losses)
    ids = layer_ids(TARGET_CFG.n_layers, cfg.layers)
    untrained, frozen = init_draft(target, ids)
    # held-out KL on fresh target samples (prompts the training never saw)
    held = train.generate_samples(target, _prompts(99, 32), n_new=24, batch=32, top_j=97,
                                  seed=5)
    head_pos = np.full(TARGET_CFG.vocab_size, -1, np.int32)
    head_pos[result.head_ids] = np.arange(len(result.head_ids))
    batch = train_loop._batch(held, np.arange(32), head_pos)
    dcfg = draft_config(TARGET_CFG, len(ids))
    head = jnp.asarray(result.head_ids)
    kl0 = float(distill_loss(untrained, frozen, head, dcfg, batch)[0])
    kl1 = float(distill_loss(result.trainable, frozen, head, dcfg, batch)[0])
    assert kl1 < 0.5 * kl0, (kl0, kl1)
    # acceptance in a real speculative run at temperature 1, untrained start vs trained
    # draft (greedy decoding of a random tiny target collapses onto one repeated token,
    # which every draft predicts, so temperature 0 cannot tell them apart)
    test = _prompts(7, 32)
    d0 = drafters.distilled_drafter(_model_of(untrained, frozen, len(ids)), target,
                                    head_ids=result.head_ids)
    d1 = drafters.distilled_drafter(out, target)
    a0, a1 = _alpha(target, d0, test, 1.0), _alpha(target, d1, test, 1.0)
    assert a1 > a0 + 0.04, (a0, a1)


def test_saved_folder_loads_back_with_trained_logits(target, trained):
    out, cfg, result = trained
    meta = json.loads((out / train.METADATA_FILE).read_text())
    assert meta["steps"] == cfg.steps and len(meta["loss_curve"]) == cfg.steps
    assert meta["head_ids"] == [int(i) for i in result.head_ids]
    assert meta["layers_from_target"] == [0] and meta["seed"] == cfg.seed
    loaded = models.load(out)
    assert loaded.cfg.n_layers == 1 and loaded.cfg.vocab_size == TARGET_CFG.vocab_size
    tokens = jnp.asarray(_prompts(3, 1, 20, 21), jnp.int32)                 # [1, 20]
    logits, _ = forward(loaded.params, loaded.cfg, tokens, init_cache(loaded.cfg, 1, 20))
    frozen = {"embed": target.params["embed"]}
    want, _ = forward({"embed": frozen["embed"], **result.trainable},
                      draft_config(TARGET_CFG, 1), tokens, init_cache(loaded.cfg, 1, 20))
    np.testing.assert_allclose(np.asarray(logits), np.asarray(want), rtol=1e-5, atol=1e-5)
    assert not train.checkpoint_dir(out).exists()                           # cleaned up


def test_interrupted_training_resumes_to_the_same_curve(target, tmp_path, monkeypatch):
    cfg = train.DistillConfig(layers=1, head_vocab=50, steps=12, **FAST)
    prompts = _prompts(1, 24)
    whole = train.train_draft(target, tmp_path / "whole", cfg, prompts=prompts, progress=False)
    real_make_step = train_loop._make_step

    def interrupting(opt, dcfg):
        step = real_make_step(opt, dcfg)
        calls = []

        def wrapped(*args):
            calls.append(1)
            if len(calls) == 6:
                raise KeyboardInterrupt
            return step(*args)
        return wrapped

    out = tmp_path / "cut"
    monkeypatch.setattr(train_loop, "_make_step", interrupting)
    with pytest.raises(KeyboardInterrupt):
        train.train_draft(target, out, cfg, prompts=prompts, progress=False)
    assert not out.exists()
    progress = json.loads((train.checkpoint_dir(out) / "progress.json").read_text())
    assert progress["step"] == 5
    monkeypatch.setattr(train_loop, "_make_step", real_make_step)
    resumed = train.train_draft(target, out, cfg, prompts=prompts, progress=False)
    assert resumed.finished and resumed.step == 12 and len(resumed.losses) == 12
    np.testing.assert_allclose(resumed.losses, whole.losses, rtol=1e-4, atol=1e-6)
    assert (out / "config.json").is_file() and not train.checkpoint_dir(out).exists()


def test_time_budget_leaves_a_checkpoint_and_no_folder(target, tmp_path):
    cfg = train.DistillConfig(layers=1, head_vocab=50, steps=5, **dict(FAST, minutes=1e-6))
    res = train.train_draft(target, tmp_path / "d", cfg, prompts=_prompts(1, 8), progress=False)
    assert not res.finished and res.step == 0 and not (tmp_path / "d").exists()
    assert (train.checkpoint_dir(tmp_path / "d") / "samples.npz").is_file()


# ---- the restricted-head drafter ----------------------------------------------------------
@pytest.fixture(scope="module")
def small_head(target):
    ids = layer_ids(TARGET_CFG.n_layers, 2)
    trainable, frozen = init_draft(target, ids)
    model = _model_of(trainable, frozen, len(ids))
    head = np.sort(np.random.default_rng(4).choice(TARGET_CFG.vocab_size, 40, replace=False))
    return drafters.distilled_drafter(model, target, head_ids=head), head


def test_drafts_stay_inside_the_head(target, small_head):
    drafter, head = small_head
    prompts = jnp.asarray(_prompts(5, 3, 8, 9), jnp.int32)                  # [3, 8]
    lens = jnp.full((3,), 8, jnp.int32)
    state = drafter.init_state(prompts, lens, 32)
    ctx = Context(jnp.pad(prompts, ((0, 0), (0, 24))), lens)
    sp = SamplingParams.make(1.0, vocab_size=TARGET_CFG.vocab_size)
    _, draft = drafter.propose(state, ctx, 4, jax.random.PRNGKey(0), sp)
    probs = np.asarray(draft.probs)                                         # [3, 4, V]
    outside = np.setdiff1d(np.arange(TARGET_CFG.vocab_size), head)
    assert np.all(probs[..., outside] == 0.0)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    assert np.isin(np.asarray(draft.tokens), head).all()


@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_speculative_equals_autoregressive(target, batch):
    prompts = _prompts(11, batch)
    ref = generate_autoregressive(target, prompts, 20)
    # greedy decoding of the random tiny target repeats a token; the head leaves out the
    # commonest one, so drafts there are rejected and the target supplies it
    common = np.bincount(np.concatenate(ref.tokens)).argmax()
    head = np.setdiff1d(np.arange(TARGET_CFG.vocab_size), [common])
    trainable, frozen = init_draft(target, (0, 1))
    drafter = drafters.distilled_drafter(_model_of(trainable, frozen, 2), target, head_ids=head)
    res = generate_speculative(target, drafter, prompts, 20, 3)
    assert res.tokens == ref.tokens
    assert res.stats.alpha_per_proposal < 1 and common in np.concatenate(res.tokens)


V_SMALL = 12
CHI_PROMPT = [3, 7, 3, 7, 3]


def _exact_joint(model, temperature):
    """p(t1, t2, t3 | prompt) [V, V, V] by enumeration (tests/chi2.py)."""
    return chi2.exact_joint(model, CHI_PROMPT, temperature)


_chi2_pvalue = chi2.chi2_pvalue


# without a policy and under one (temperature is a traced value: one program for all)
@pytest.mark.parametrize("temperature, policy", [
    (0.7, None), (1.0, ConfidenceThreshold(p_min=0.15, k_max=2, k_min=1))])
def test_restricted_head_sampling_is_exact_in_distribution(temperature, policy):
    cfg = ModelConfig(name="chi-target", arch="llama", vocab_size=V_SMALL, d_model=16,
                      n_layers=2, n_heads=2, n_kv_heads=1, head_dim=8, d_ff=24, max_seq_len=32,
                      layer_loop="scan", eos_token_id=None)
    t = models.Model(cfg, _scaled(init_params(jax.random.PRNGKey(1), cfg), 10.0))
    # the draft is the target itself with its head cut to 9 of the 12 tokens: it
    # agrees with the target on the head, so acceptance is the target's head mass and
    # the residual puts out the rest
    head = [0, 2, 3, 4, 5, 6, 7, 8, 9]
    drafter = drafters.distilled_drafter(t, t, head_ids=head)
    # 30k rows: the size at which test_decode's power test (a wrong residual) fails
    res = generate_speculative(t, drafter, [CHI_PROMPT] * 30_000, 3, 2, temperature, seed=11,
                               policy=policy)
    toks = np.asarray(res.tokens)                                            # [N, 3]
    joint = _exact_joint(t, temperature)
    counts = lambda a, b: np.bincount(toks[:, a] * V_SMALL + toks[:, b],  # noqa: E731
                                      minlength=V_SMALL ** 2)
    p12 = _chi2_pvalue(counts(0, 1), joint.sum(2))
    p23 = _chi2_pvalue(counts(1, 2), joint.sum(0))
    assert p12 > 1e-3 and p23 > 1e-3, (p12, p23)
    assert 0.05 < res.stats.alpha_per_proposal < 0.95
    # tokens outside the head do appear (from the residual), so the test has power
    assert np.isin(toks[:, 1:], head, invert=True).mean() > 0.05
    if policy is not None:      # the threshold stops rows: q' is thresholded on the head
        st = res.stats
        assert (st.drafted[st.active] < st.k_used[st.active]).any()


# ---- bad arguments ------------------------------------------------------------------------
@pytest.mark.parametrize("change, match", [
    (dict(minutes=0), "minutes"), (dict(head_vocab=98), "head_vocab"),
    (dict(head_vocab=0), "head_vocab"), (dict(layers=0), "layers"), (dict(layers=5), "layers"),
    (dict(layers=(0, 4)), "layers"), (dict(steps=0), "steps"), (dict(batch=0), "batch")])
def test_bad_settings_are_clear_errors(target, tmp_path, change, match):
    with pytest.raises(ValueError, match=match):
        train.train_draft(target, tmp_path / "d", train.DistillConfig(**change),
                          prompts=_prompts(1, 4), progress=False)
    assert not (tmp_path / "d").exists() and not train.checkpoint_dir(tmp_path / "d").exists()


def test_draft_vocabulary_mismatch_is_a_clear_error(target):
    other = models.load("tiny-qwen2")                 # tied, but another model's head ids
    wrong = models.Model(other.cfg.replace(vocab_size=89),
                         dict(other.params, embed=other.params["embed"][:89]))
    with pytest.raises(ValueError, match="vocabulary"):
        drafters.distilled_drafter(wrong, target)
    with pytest.raises(ValueError, match="head_ids"):
        drafters.distilled_drafter(other, target, head_ids=[0, 97])
