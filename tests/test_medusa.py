"""Medusa heads (specsim.drafters.medusa, specsim.train.medusa): the tree they propose
against a NumPy oracle, exact output (greedy equals autoregressive; sampled against the
χ² oracle), training with the target frozen raising each head's held-out agreement,
resuming an interrupted run, files, the CLI and bad arguments."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import chi2
from test_feature_head import HEAD_FAST, _random_prompts, train_head

from specsim import models
from specsim.decode import generate_autoregressive, generate_tree
from specsim.drafters.base import Context
from specsim.drafters.medusa import (init_medusa, load_medusa, medusa_drafter, medusa_logits,
                                     save_medusa)
from specsim.errors import InvalidArgument
from specsim.models.config import TINY_LLAMA, ModelConfig
from specsim.models.transformer import init_params
from specsim.sampling import SamplingParams
from specsim.trees import TokenTree

PROMPTS_4 = [[1, 5, 7, 9, 11], [3, 3], [4, 8, 15, 16, 23, 42, 4, 8, 15, 16, 23],
             [2, 9, 2, 9, 2, 9, 2]]
TREE = TokenTree.from_paths([(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])


def _scaled(params, factor):
    return jax.tree_util.tree_map_with_path(
        lambda path, a: a if "norm" in str(path[-1]) else a * factor, params)


@pytest.fixture(scope="module")
def target():
    cfg = TINY_LLAMA.replace(layer_loop="scan", eos_token_id=None)
    return models.Model(cfg, _scaled(init_params(jax.random.PRNGKey(0), cfg), 12.0))


def _heads(d_model, K, seed=0, scale=0.3):
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    return {"w": scale * jax.random.normal(k1, (K, d_model, d_model)) / np.sqrt(d_model),
            "b": 0.1 * jax.random.normal(k2, (K, d_model))}


def test_the_tree_is_each_heads_top_ranks(target):
    cfg = target.cfg
    head_ids = np.arange(5, cfg.vocab_size)
    d = medusa_drafter(target, (_heads(cfg.d_model, 3), head_ids), TREE)
    z = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (2, cfg.d_model)))
    _, draft = d.propose_tree(jnp.asarray(z), Context(jnp.zeros((2, 4), jnp.int32),
                                                      jnp.asarray([2, 2])),
                              jax.random.PRNGKey(0), SamplingParams.make(0.0))
    # NumPy oracle: u_k = z + silu(z W_k + b_k); logits = u_k E_h^T; rank r = r-th largest
    w, b = (np.asarray(_heads(cfg.d_model, 3)[k], np.float64) for k in ("w", "b"))
    E = (np.asarray(target.params["embed"], np.float64) if cfg.tie_embeddings else
         np.asarray(target.params["lm_head"], np.float64).T)[head_ids]      # output rows
    for row in range(2):
        pre = z[row] @ w + b                                                  # [K, D]
        u = z[row][None] + pre / (1 + np.exp(-pre))
        order = np.argsort(-(u @ E.T), axis=1)
        want = [head_ids[order[dep - 1, r]] for dep, r in zip(TREE.depths, TREE.ranks)]
        assert np.asarray(draft.tokens[row]).tolist() == want
    np.testing.assert_array_equal(draft.probs.sum(-1), 1.0)         # one-hot proposals


def test_greedy_medusa_tree_equals_autoregressive(target):
    prompts = PROMPTS_4                       # ragged: rows of 2 to 11 prompt tokens
    ref = generate_autoregressive(target, prompts, 24)
    d = medusa_drafter(target, (_heads(target.cfg.d_model, 3), np.arange(target.cfg.vocab_size)),
                       TREE)
    res = generate_tree(target, d, prompts, 24)
    assert res.tokens == ref.tokens
    st = res.stats
    assert st.k == TREE.n_nodes and res.draft_passes == res.n_iterations + 1
    assert st.accepted[st.active].max() >= 1


def test_dynamic_medusa_tree_equals_autoregressive_and_keeps_the_best_paths(target):
    """EAGLE-2's rule over the heads: greedy output equals autoregressive decoding at
    batch 1 and 4; the kept nodes are, per row, the N best paths by the sum of the heads'
    log-probabilities among k at depth 1 and k² below the k best of each depth (a NumPy
    oracle); one draft pass per iteration."""
    from specsim.drafters.dynamic_tree import dynamic_tree_drafter

    cfg = target.cfg
    heads = (_heads(cfg.d_model, 3, seed=2, scale=1.0), np.arange(cfg.vocab_size))
    d = dynamic_tree_drafter(medusa_drafter(target, heads), 3, 3, 7)
    for prompts in (PROMPTS_4[2:3], PROMPTS_4):
        ref = generate_autoregressive(target, prompts, 20)
        res = generate_tree(target, d, prompts, 20)
        assert res.tokens == ref.tokens
    assert res.draft_passes == res.n_iterations + 1
    z = np.asarray(jax.random.normal(jax.random.PRNGKey(5), (2, cfg.d_model)), np.float32)
    _, draft = d.propose_tree(jnp.asarray(z), Context(jnp.zeros((2, 4), jnp.int32),
                                                      jnp.asarray([2, 2])),
                              jax.random.PRNGKey(0), SamplingParams.make(0.0))
    lp = np.asarray(jax.nn.log_softmax(medusa_logits(heads[0], _rows(target, heads[1]),
                                                     jnp.asarray(z)), -1), np.float64)
    for row in range(2):
        order = np.argsort(-lp[row], axis=1)                                   # [K, V]
        cands = [((order[0, i],), lp[row, 0, order[0, i]]) for i in range(3)]
        front = cands
        for dep in (1, 2):
            kids = [(p + (order[dep, i],), s + lp[row, dep, order[dep, i]])
                    for p, s in front for i in range(3)]
            cands += kids
            front = sorted(kids, key=lambda c: -c[1])[:3]
        best = sorted(cands, key=lambda c: (-c[1], len(c[0])))[:7]
        parents, toks = np.asarray(draft.parents[row]), np.asarray(draft.tokens[row])
        paths = []
        for j in range(7):
            path, q = [int(toks[j])], int(parents[j])
            while q >= 0:
                path.insert(0, int(toks[q]))
                q = int(parents[q])
            paths.append(tuple(path))
        assert sorted(paths) == sorted(tuple(int(t) for t in p) for p, _ in best)


def _rows(target, head_ids):
    """The target's output rows for ``head_ids`` (tied embedding or lm_head)."""
    cfg = target.cfg
    E = target.params["embed"] if cfg.tie_embeddings else jnp.asarray(target.params["lm_head"]).T
    return E[jnp.asarray(head_ids)]


def test_a_dynamic_medusa_tree_no_deeper_than_the_heads(target):
    from specsim.drafters.dynamic_tree import dynamic_tree_drafter

    d = medusa_drafter(target, (_heads(target.cfg.d_model, 2), np.arange(40)))
    with pytest.raises(InvalidArgument, match=r"^depth must be at most the Medusa heads' K = 2"):
        dynamic_tree_drafter(d, 2, 3, 4)
    with pytest.raises(InvalidArgument, match=r"^n_nodes must be at most"):
        dynamic_tree_drafter(d, 2, 2, 7)


def test_sampled_medusa_tree_is_exact_in_distribution():
    V = 12
    cfg = ModelConfig(name="chi-target", arch="llama", vocab_size=V, d_model=16, n_layers=2,
                      n_heads=2, n_kv_heads=1, head_dim=8, d_ff=24, max_seq_len=32,
                      layer_loop="scan", eos_token_id=None)
    t = models.Model(cfg, _scaled(init_params(jax.random.PRNGKey(1), cfg), 10.0))
    d = medusa_drafter(t, (_heads(16, 2, scale=1.0), np.arange(V)),
                       TokenTree.from_paths([(0,), (1,), (0, 0), (0, 1), (1, 0)]))
    prompt = [3, 7, 3, 7, 3]
    # 30k rows: the size at which test_tree_decode's wrong-residual check fails
    res = generate_tree(t, d, [prompt] * 30_000, 3, temperature=1.0, seed=2)
    toks = np.asarray(res.tokens)
    joint = chi2.exact_joint(t, prompt, 1.0)
    p12 = chi2.chi2_pvalue(chi2.counts(toks, (0, 1), V), joint.sum(2))
    p23 = chi2.chi2_pvalue(chi2.counts(toks, (1, 2), V), joint.sum(0))
    assert p12 > 1e-3 and p23 > 1e-3, (p12, p23)
    assert 0.05 < (res.stats.accepted[res.stats.active] > 0).mean() < 0.95


def test_files_round_trip_and_bad_arguments(tmp_path, target):
    cfg = target.cfg
    params, ids = _heads(cfg.d_model, 2), np.arange(3, 40)
    save_medusa(tmp_path / "m.npz", params, ids, {"note": "x"})
    loaded, ids2, meta = load_medusa(tmp_path / "m.npz")
    np.testing.assert_allclose(loaded["w"], params["w"], atol=2e-3)
    assert ids2.tolist() == ids.tolist() and meta["note"] == "x"
    d = medusa_drafter(target, tmp_path / "m.npz")
    assert d.tree.max_depth == 2 and d.name == "medusa:2"
    with pytest.raises(InvalidArgument, match="tree must be at most as deep"):
        medusa_drafter(target, (params, ids), TokenTree.chain(3))
    with pytest.raises(InvalidArgument, match="width"):
        medusa_drafter(target, (_heads(cfg.d_model + 4, 2), ids))
    with pytest.raises(InvalidArgument, match="head_ids"):
        medusa_drafter(target, (params, [0, cfg.vocab_size]))
    with pytest.raises(InvalidArgument, match="heads"):
        init_medusa(cfg.d_model, 0)
    with pytest.raises(InvalidArgument, match="not found"):
        load_medusa(tmp_path / "none.npz")
    with pytest.raises(InvalidArgument, match="tree drafter's own"):
        generate_tree(target, d, [[1, 2]], 4, tree=TokenTree.chain(2))


# ---- training on a tiny target ---------------------------------------------------------
def _tiny_target():
    """A tiny target with sharp next-token laws and varied greedy continuations (a
    broad or repetitive target leaves the heads nothing to learn)."""
    cfg = TINY_LLAMA.replace(name="tiny-medusa-target", layer_loop="scan", eos_token_id=None)
    return models.Model(cfg, _scaled(init_params(jax.random.PRNGKey(0), cfg), 12.0))


FAST = dict(HEAD_FAST, heads=2)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from specsim.train import medusa
    return train_head(medusa.train_medusa, _tiny_target(),
                      medusa.MedusaConfig(steps=150, **FAST), tmp_path_factory.mktemp("medusa"))


def test_training_lowers_the_loss_and_writes_the_heads(trained):
    from specsim.train.feature_head import _prepare
    from specsim.train.loop import _progress
    target, out, cfg, result = trained
    assert result.finished and result.step == cfg.steps == len(result.losses)
    assert np.mean(result.losses[-10:]) < np.mean(result.losses[:10]) - 0.5
    params, head_ids, meta = load_medusa(out)
    assert params["w"].shape == (cfg.heads, target.cfg.d_model, target.cfg.d_model)
    assert meta["agreement_per_head_heldout_greedy"] == result.agreement
    assert len(result.agreement) == cfg.heads and meta["config"]["heads"] == cfg.heads
    # the labels head k learns from are the target's choices k + 1 tokens after the
    # feature's position: on the greedy rows, its argmax is the sampled token there
    _, _, train, _ = _prepare(target, cfg, out.with_name("data.partial"),
                              _random_prompts(0, 96, target.cfg.vocab_size),
                              _progress(0, False))
    greedy = np.flatnonzero(train.ex[:, 0] % 2 == 0)
    rows, t, _ = train.ex[greedy].T
    _, _, _, teacher_head, _ = train.arrays(greedy)
    for k in range(1, cfg.heads + 1):
        ahead = train.s.tokens[rows, t + 1 + k]
        np.testing.assert_array_equal(np.asarray(teacher_head[:, k - 1, 0]),
                                      train.head_pos[ahead])


def test_the_loss_recovers_planted_heads():
    """Fitting `_loss` to the top choices of known heads on random features reaches
    their choices (the heads start at zero, as in training)."""
    import optax
    from specsim.train.medusa import _loss
    D, K, Vh, M = 16, 2, 30, 512
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    head = jax.random.normal(k1, (Vh, D))
    planted = _heads(D, K, seed=4, scale=3.0)
    z = jax.random.normal(k2, (M, D))
    logp = jax.nn.log_softmax(3 * medusa_logits(planted, head, z), -1)      # [M, K, Vh]
    teacher_logp, teacher_head = jax.lax.top_k(logp, Vh)
    want = np.asarray(teacher_head[..., 0])
    params, opt = init_medusa(D, K), optax.adam(3e-2)
    state = opt.init(params)
    grad = jax.jit(jax.grad(_loss))
    for _ in range(300):
        updates, state = opt.update(grad(params, head, z, teacher_head, teacher_logp), state)
        params = optax.apply_updates(params, updates)
    got = np.asarray(jnp.argmax(medusa_logits(params, head, z), -1))
    start = np.asarray(jnp.argmax(medusa_logits(init_medusa(D, K), head, z), -1))
    assert (got == want).mean() > 0.9 > (start == want).mean() + 0.3


def test_interrupted_training_resumes(trained, tmp_path):
    from specsim.train import medusa
    target, _, cfg, result = trained
    prompts = _random_prompts(0, 96, target.cfg.vocab_size)
    out = tmp_path / "heads.npz"
    r1 = medusa.train_medusa(target, out, dataclasses.replace(cfg, minutes=1e-9),
                             prompts=prompts, progress=False)
    assert not r1.finished and not out.exists() and medusa.checkpoint_dir(out).is_dir()
    r2 = medusa.train_medusa(target, out, cfg, prompts=prompts, progress=False)
    assert r2.finished and out.is_file() and not medusa.checkpoint_dir(out).exists()
    np.testing.assert_allclose(r2.losses, result.losses, rtol=1e-4)

