"""Tree speculative decoding (specsim.decode.tree_loop, tree_verify, specsim.drafters.tree,
specsim.models.masked_forward).

Oracles: the masked forward with a causal mask is the plain forward; the chain as a
one-child tree gives `generate_speculative`'s tokens and statistics; greedy tree decoding
equals greedy autoregressive decoding token for token for every tree builder; the
verifier's path and cache moves against hand-worked trees; sampled acceptance follows
the target's law (χ² against the exact joint, with a wrong residual rule failing it).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import chi2
from test_decode import (CHI_PROMPT, V_SMALL, chi_models, target,  # noqa: F401
                         tiny_drafters)  # the shared tiny target and chi² pair

from specsim.decode import TRACE_COUNTS, generate_autoregressive, generate_speculative
from specsim.decode.tree_loop import generate_tree
from specsim.decode.tree_loop import tree_loop
from specsim.decode.tree_verify import (dynamic_tables, greedy_path, move_path, path_nodes,
                                        sampled_path, tree_nonfinite, tree_tables)
from specsim.drafters import (NGramDrafter, feature_head_drafter,
                              model_drafter, quantized_self_drafter)
from specsim.drafters.base import Context
from specsim.drafters.dynamic_tree import dynamic_tree_drafter
from specsim.drafters.feature_head import init_cell
from specsim.drafters.tree import NGramTreeDrafter, branches_tree, draw_children
from specsim.errors import InvalidArgument
from specsim.models.masked_forward import block_mask, forward_masked
from specsim.models.transformer import forward_hidden, init_cache
from specsim.sampling import SamplingParams
from specsim.trees import (PositionalAcceptance, TokenTree, acceptance_counts,
                           measured_acceptance, select_best_nodes, simulate_tree)
from shared_cache import shared_cache_env

MAX_NEW = 24
PROMPTS_4 = [[1, 5, 7, 9, 11], [3, 3], [4, 8, 15, 16, 23, 42, 4, 8, 15, 16, 23],
             [2, 9, 2, 9, 2, 9, 2]]
PROMPTS_1 = [[6, 1, 8, 0, 3, 3, 9]]


@pytest.fixture(scope="module")
def drafters(target):
    return {**tiny_drafters(target),
            "quantized": quantized_self_drafter(target, 8),
            "feature-head": _feature_head(target, head_ids=np.arange(target.cfg.vocab_size - 10))}


def _feature_head(target, head_ids, seed=3):
    """A feature head with a random cell (its output projection non-zero, so it does
    not just repeat the target's choice) over ``head_ids``."""
    cell = init_cell(jax.random.PRNGKey(seed), target.cfg.d_model, 16)
    cell["w_out"] = 0.05 * jax.random.normal(jax.random.PRNGKey(seed + 1), cell["w_out"].shape)
    return feature_head_drafter(target, (cell, head_ids))


@pytest.fixture(scope="module")
def reference(target):
    return {1: generate_autoregressive(target, PROMPTS_1, MAX_NEW),
            4: generate_autoregressive(target, PROMPTS_4, MAX_NEW)}


# ---- the masked forward ----------------------------------------------------------------
def test_masked_forward_with_causal_mask_is_forward(target):
    cfg, params = target.cfg, target.params
    tokens = jnp.asarray([[5, 9, 2, 7], [1, 1, 3, 8]], jnp.int32)
    cache = init_cache(cfg, 2, 16)
    _, cache = forward_hidden(params, cfg, jnp.asarray([[4, 4, 6], [2, 8, 3]]), cache)
    cache = cache._replace(length=jnp.asarray([3, 2], jnp.int32))
    want, wcache = forward_hidden(params, cfg, tokens, cache)
    slots = cache.length[:, None] + jnp.arange(4)[None]
    causal = np.tril(np.ones((4, 4), bool))
    got, gcache = forward_masked(params, cfg, tokens, cache, slots, slots,
                                 block_mask(cache.length, causal))
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(gcache.k, wcache.k, atol=2e-5, rtol=2e-5)
    assert (np.asarray(gcache.length) == [3, 2]).all()       # the caller sets the length


def test_tree_pass_gives_each_node_its_own_path(target):
    """A node's hidden state in a tree pass is the one the plain forward gives its path."""
    cfg, params = target.cfg, target.params
    tree = TokenTree.from_parents([-1, -1, 0, 1, 1])        # root → 0 → 2; root → 1 → 3, 4
    toks = np.asarray([7, 11, 13, 17, 19])
    t = tree_tables(tree, 1)
    ctx = jnp.asarray([[4, 4, 6]], jnp.int32)
    cache = init_cache(cfg, 1, 16)
    _, cache = forward_hidden(params, cfg, ctx, cache)
    root = jnp.asarray([[9]], jnp.int32)
    start = cache.length
    slots = start[:, None] + jnp.arange(6)[None]
    h, _ = forward_masked(params, cfg, jnp.concatenate([root, toks[None]], 1), cache, slots,
                          start[:, None] + t.positions,
                          block_mask(start, t.verify_mask))
    for node in range(5):
        path = [9] + toks[tree.path_to(node)].tolist()
        full, _ = forward_hidden(params, cfg, jnp.asarray([[4, 4, 6] + path]),
                                 init_cache(cfg, 1, 16))
        np.testing.assert_allclose(h[0, node + 1], full[0, -1], atol=2e-5, rtol=2e-5)


_BIT_FOR_BIT = """
import jax, jax.numpy as jnp, numpy as np
from specsim.decode.tree_verify import tree_tables
from specsim.models.config import TINY_LLAMA
from specsim.models.masked_forward import block_mask, forward_masked
from specsim.models.quantize import quantize_params
from specsim.models.transformer import forward_hidden, init_cache, init_params
from specsim.trees import TokenTree

cfg = TINY_LLAMA.replace(layer_loop="scan")
fp32 = jax.tree_util.tree_map_with_path(
    lambda path, a: a if "norm" in str(path[-1]) else a * 12.0,
    init_params(jax.random.PRNGKey(0), cfg))
tree = TokenTree.from_parents([-1, -1, 0, 1, 1, 2])     # root -> 0 -> 2 -> 5; root -> 1 -> 3, 4
toks = np.asarray([7, 11, 13, 17, 19, 23])
t = tree_tables(tree, 1)
for weights in WEIGHTS:
    params = fp32 if weights == "fp32" else quantize_params(fp32, cfg, 4, 12,
                                                             activations="int8")
    _, cache = forward_hidden(params, cfg, jnp.asarray([[4, 4, 6]], jnp.int32),
                              init_cache(cfg, 1, 16))
    start = cache.length
    h, _ = forward_masked(params, cfg, jnp.concatenate([jnp.asarray([[9]]), toks[None]], 1),
                          cache, start[:, None] + jnp.arange(7)[None],
                          start[:, None] + t.positions, block_mask(start, t.verify_mask))
    differ = []
    for node in range(6):
        path = [9] + toks[tree.path_to(node)].tolist()
        step_cache = cache
        for tok in path:
            out, step_cache = forward_hidden(params, cfg, jnp.asarray([[tok]], jnp.int32),
                                             step_cache)
        chain, _ = forward_hidden(params, cfg, jnp.asarray([path], jnp.int32), cache)
        if not np.array_equal(np.asarray(h[0, node + 1]), np.asarray(out[0, -1])):
            differ.append(("tree pass", node))
        if not np.array_equal(np.asarray(chain[0, -1]), np.asarray(out[0, -1])):
            differ.append(("chain pass", node))
    print(f"{weights}:", "bit for bit" if not differ else f"differs from the steps at {differ}")
"""
BIT_FOR_BIT_WEIGHTS = ("fp32", "int4, int8 activations")


@pytest.fixture(scope="module")
def bit_for_bit_run():
    """Both weightings in one process at XLA's default optimisation level (their eager
    ops share most compiled programs), each judged by its own test below."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from specsim.models import kernels

    if not kernels.available():
        pytest.skip("no kernel: the tree pass runs XLA's attention")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, XLA_FLAGS="", JAX_PLATFORMS="cpu", PYTHONPATH=str(root))
    # the script runs the forward eagerly, and each call's layer scan is traced afresh
    # and compiled again (the one-token steps and the chains of equal length); read back
    # from the shared cache, the same program runs, not compiled again. The cache's keys
    # hold the XLA flags: nothing compiled at the suite's LLVM level is read here.
    env.update(shared_cache_env())
    return subprocess.run([sys.executable, "-c",
                           f"WEIGHTS = {BIT_FOR_BIT_WEIGHTS!r}\n" + _BIT_FOR_BIT],
                          capture_output=True, text=True, env=env, cwd=root, timeout=600)


@pytest.mark.parametrize("weights", BIT_FOR_BIT_WEIGHTS)
def test_tree_pass_is_a_decode_step_bit_for_bit(weights, bit_for_bit_run):
    """Where the kernels run, each node's hidden state in a tree pass equals, bit for bit,
    the one decode steps over its path give, and a chain verify pass over the path: the
    tree's attention lists a node's context and ancestors and sums them as contiguous
    slots (`kernels.tree_attention`; with XLA's masked attention this fails). Run at
    XLA's default optimisation level, as the engine compiles: at the suite's LLVM level 0
    XLA's fused code differs in the last bit between a one-row and a many-row program (a
    chain verify pass too), which int8 rounding then shows. (With SmolLM2's width XLA's
    norm does so from 8 rows on at any level: docs/trees.md, "The engine".)"""
    proc = bit_for_bit_run
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"{weights}:")]
    assert proc.returncode == 0 and lines == [f"{weights}: bit for bit"], \
        (lines, proc.stderr[-4000:])


# ---- the verifier against hand-worked trees --------------------------------------------
def _onehots(ids, V=6):
    return jax.nn.one_hot(jnp.asarray(ids), V, dtype=jnp.float32)


def test_greedy_path_is_the_deepest_accepted_node_and_the_cache_moves():
    tree = TokenTree.from_parents([-1, -1, 0, 1, 1, 3])           # depths 1 1 2 2 2 3
    t = tree_tables(tree, 3)
    # the same tables computed on the device from the parents alone (a dynamic tree)
    dyn = dynamic_tables(jnp.broadcast_to(jnp.asarray(tree.parents), (3, 6)), 3, 2)
    for name in ("parent_index", "depths", "ancestors", "children", "verify_mask",
                 "positions"):
        np.testing.assert_array_equal(getattr(dyn, name), getattr(t, name), err_msg=name)
    tokens = jnp.asarray([[2, 3, 4, 5, 1, 0],                    # row 0: 1 → 3 → 5 accepted
                          [2, 3, 4, 5, 1, 0],                    # row 1: only node 0
                          [1, 1, 1, 1, 1, 1]])                   # row 2: nothing
    # target argmax at verify indices (root, nodes 0..5)
    top = [[3, 0, 5, 0, 4, 4, 0], [2, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0]]
    p = _onehots(top)
    q = _onehots(tokens)
    best, n_acc, extra = greedy_path(t, tokens, q, p)
    assert best.tolist() == [4, 1, 0] and n_acc.tolist() == [2, 1, 0]
    assert extra.tolist() == [4, 0, 0]
    # a node whose proposal is empty is never accepted
    _, n0, _ = greedy_path(t, tokens, q.at[0, 1].set(0.0), p)
    assert n0.tolist() == [0, 1, 0]
    path = path_nodes(t, best)                                      # [B, 3]
    assert path[0, :2].tolist() == [1, 3] and path[1, :1].tolist() == [0]
    # the verify pass wrote node j at slot start + 1 + j; the path moves to start + depth
    L, S = 2, 12
    k = jnp.broadcast_to(jnp.arange(S, dtype=jnp.float32)[None, None, :, None, None],
                         (L, 3, S, 1, 1))
    start = jnp.asarray([3, 1, 0], jnp.int32)
    cache = move_path(_Cache(k, k + 100), start, path)
    assert np.asarray(cache.k[0, 0, 3:6, 0, 0]).tolist() == [3, 3 + 1 + 1, 3 + 1 + 3]
    assert np.asarray(cache.k[1, 1, 1:3, 0, 0]).tolist() == [1, 1 + 1 + 0]
    assert np.asarray(cache.v[0, 0, 4, 0, 0]) == 105


def test_nonfinite_values_on_the_path_stop_the_row_before_them():
    tree = TokenTree.from_parents([-1, -1, 0])                      # root → 0 → 2; root → 1
    t = tree_tables(tree, 4)
    V = 4
    p = jnp.full((4, 4, V), 0.25)
    q = jnp.full((4, 3, V), 0.25)
    p = p.at[1, 1].set(jnp.nan)            # row 1: the target's law at node 0 (on its path)
    p = p.at[2, 2].set(jnp.nan)            # row 2: at node 1, off its path
    q = q.at[3, 2].set(jnp.inf)            # row 3: node 2's proposal, a child of node 0
    path = jnp.asarray([[0, 2]] * 4, jnp.int32)                      # path 0 → 2
    n_acc = jnp.asarray([2, 2, 2, 0], jnp.int32)
    finite, n_valid = tree_nonfinite(t, q, p, path, n_acc)
    assert finite.tolist() == [True, False, True, True]
    assert n_valid.tolist() == [3, 1, 3, 1]
    finite, n_valid = tree_nonfinite(t, q, p, path, jnp.asarray([2, 0, 2, 1], jnp.int32))
    assert finite.tolist() == [True, True, True, False] and n_valid.tolist() == [3, 1, 3, 1]


class _Cache:
    def __init__(self, k, v):
        self.k, self.v = k, v

    def _replace(self, **kw):
        return _Cache(kw.get("k", self.k), kw.get("v", self.v))


def test_sampled_path_is_exact_and_a_wrong_residual_is_caught():
    """Two levels of multi-candidate rejection sampling, children drawn without
    replacement: the first two emitted tokens follow p_root(t1) p2(t2 | t1) (χ²); keeping
    r unchanged after a rejection (no residual) fails the same test."""
    V, N = 5, 30_000
    rng = np.random.default_rng(3)
    p_root = rng.dirichlet(np.ones(V) * 0.7)
    p2 = rng.dirichlet(np.ones(V) * 0.7, size=V)                   # [t1, V]
    q_root = rng.dirichlet(np.ones(V))
    q2 = rng.dirichlet(np.ones(V), size=V)
    tree = TokenTree.from_top_k([3, 2])                             # 3 + 6 nodes
    t = tree_tables(tree, N)
    sp = SamplingParams.make(1.0, vocab_size=V)
    k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(0), 4)
    tok1, q1 = draw_children(k1, jnp.log(jnp.asarray(q_root, jnp.float32))[None, None]
                             .repeat(N, 0), sp, 3)                  # [N, 1, 3(, V)]
    tok1, q1 = tok1[:, 0], q1[:, 0]
    tok2, q2d = draw_children(k2, jnp.log(jnp.asarray(q2, jnp.float32))[tok1], sp, 2)
    tokens = jnp.concatenate([tok1, tok2.reshape(N, 6)], 1)          # BFS: 3 then 6
    q = jnp.concatenate([q1, q2d.reshape(N, 6, V)], 1)
    p = jnp.concatenate([jnp.broadcast_to(jnp.asarray(p_root, jnp.float32), (N, 1, V)),
                         jnp.asarray(p2, jnp.float32)[tokens[:, :3]],
                         jnp.full((N, 6, V), 1.0 / V)], 1)        # depth-2 nodes: unused
    joint = p_root[:, None] * p2

    def emitted(residual):
        kwargs = {} if residual is None else dict(residual=residual)
        best, n_acc, extra = sampled_path(k3, t, tokens, q, p, **kwargs)
        path = path_nodes(t, best)
        on_path = np.take_along_axis(np.asarray(tokens), np.asarray(path), 1)       # [N, 2]
        first = np.where(n_acc >= 1, on_path[:, 0], extra)
        nxt = jax.random.categorical(k4, jnp.log(jnp.asarray(p2, jnp.float32))[first])
        second = np.where(n_acc >= 2, on_path[:, 1], np.where(n_acc == 1, extra, nxt))
        return chi2.counts(np.stack([first, second], 1), (0, 1), V), n_acc

    counts, n_acc = emitted(None)
    assert chi2.chi2_pvalue(counts, joint) > 1e-3
    assert 0.2 < np.mean(np.asarray(n_acc) >= 1) < 0.99 and np.mean(np.asarray(n_acc) == 2) > 0.05
    wrong, _ = emitted(lambda r, q_j: r)
    assert chi2.chi2_pvalue(wrong, joint) < 1e-6


# ---- the compiled loop -----------------------------------------------------------------
def test_chain_tree_gives_the_speculative_loops_tokens_and_stats(target, drafters, reference):
    d = drafters["layer-skip"]
    spec = generate_speculative(target, d, PROMPTS_4, MAX_NEW, 3)
    tree = generate_tree(target, d, PROMPTS_4, MAX_NEW, tree=TokenTree.chain(3))
    assert tree.tokens == spec.tokens == reference[4].tokens
    assert tree.finish_reason == spec.finish_reason
    for name in ("accepted", "drafted"):
        np.testing.assert_array_equal(getattr(tree.stats, name), getattr(spec.stats, name))
    np.testing.assert_allclose(tree.stats.overlap, spec.stats.overlap, atol=1e-6)
    assert (tree.n_iterations, tree.target_passes, tree.draft_passes) == \
        (spec.n_iterations, spec.target_passes, spec.draft_passes)


# every drafter once; batch 1 (one row, no padding) by a model drafter, the rest at
# batch 4 (ragged prompts)
@pytest.mark.parametrize("name, tree, batch", [
    ("small", TokenTree.from_top_k([3, 2, 1]), 4),
    ("layer-skip", TokenTree.from_paths([(0,), (1,), (2,), (0, 0), (0, 1), (1, 0),
                                         (0, 0, 0), (0, 0, 0, 0)]), 4),
    ("quantized", TokenTree.from_top_k([2, 2, 1]), 1),
    ("feature-head", TokenTree.from_top_k([3, 2, 1]), 4),
    ("ngram", branches_tree(3, 4), 4)])
def test_greedy_tree_equals_autoregressive(target, drafters, reference, name, tree, batch):
    prompts = PROMPTS_1 if batch == 1 else PROMPTS_4
    res = generate_tree(target, drafters[name], prompts, MAX_NEW, tree=tree)
    ref = reference[batch]
    assert res.tokens == ref.tokens and res.finish_reason == ref.finish_reason
    st = res.stats
    a = st.active
    assert st.k == tree.n_nodes and st.overlap.shape[2] == tree.n_nodes
    assert ((st.accepted >= 0) & (st.accepted <= tree.max_depth))[a].all()
    emitted = 1 + np.where(a, st.accepted + 1, 0).sum(0)
    n = np.asarray([len(t) for t in res.tokens])
    assert ((n <= emitted) & (n >= emitted - tree.max_depth)).all()
    if name == "ngram":
        assert res.draft_passes == 0 and st.accepted[a].sum() > 0
    else:
        assert res.draft_passes == res.n_iterations * tree.max_depth + 1
        assert st.accepted[a].mean() > 0
    if name in ("small", "layer-skip", "feature-head"):    # some drafts really are rejected
        assert st.accepted[a].mean() < tree.max_depth


@pytest.mark.parametrize("name, top_k, depth, n_nodes, batch, expand", [
    ("layer-skip", 3, 3, 10, 4, None), ("feature-head", 3, 4, 12, 1, None),
    ("feature-head", 3, 3, 12, 4, 12)])
def test_greedy_dynamic_tree_equals_autoregressive(target, drafters, reference, name, top_k,
                                                   depth, n_nodes, batch, expand):
    prompts = PROMPTS_1 if batch == 1 else PROMPTS_4
    d = dynamic_tree_drafter(drafters[name], top_k, depth, n_nodes, expand=expand)
    res = generate_tree(target, d, prompts, MAX_NEW)
    assert res.tokens == reference[batch].tokens
    st = res.stats
    assert st.k == n_nodes and res.draft_passes == res.n_iterations * depth + 1
    assert 0 < st.accepted[st.active].mean() < depth


@pytest.mark.parametrize("expand, depths", [(None, [1] * 3 + [2] * 9 + [3] * 9),
                                            (5, [1] * 3 + [2] * 9 + [3] * 15)])
def test_dynamic_tree_keeps_the_best_paths_per_row(target, drafters, expand, depths):
    """The device's rerank keeps, per row, the nodes `specsim.trees.select_best_nodes`
    (the host's EAGLE-2 rule) keeps from the same candidates and path scores, as a tree
    with the same parents; rows grow different trees. With ``expand`` 5 the 5 best of
    depth 2's 9 candidates go on (3 · 5 at depth 3)."""
    d = dynamic_tree_drafter(drafters["feature-head"], 3, 3, 7, expand=expand)
    prompts = jnp.asarray([[4, 8, 15, 16], [2, 9, 2, 9]], jnp.int32)
    ctx = Context(prompts, jnp.asarray([4, 4]))
    state = d.init_state(prompts, jnp.asarray([4, 4]), 32)
    state = d.observe(state, jax.random.normal(jax.random.PRNGKey(0), (2, 1, target.cfg.d_model)),
                      jnp.zeros(2, jnp.int32), jnp.ones(2, bool))
    _, draft = d.propose_tree(state, ctx, jax.random.PRNGKey(1), SamplingParams.make(0.0))
    _, tok, score, parent, _, depth = d.candidates(state, ctx)
    assert depth.tolist() == depths and d.n_candidates == len(depths)
    if expand:             # depth 3's parents: the 5 best depth-2 candidates by score
        for b in range(2):
            best = np.argsort(-np.asarray(score[b, 3:12]))[:5] + 3
            assert np.unique(np.asarray(parent[b, 12:])).tolist() == sorted(best.tolist())
    kept_trees = []
    for b in range(2):
        pool = TokenTree.from_parents(np.asarray(parent[b]))
        sub, kept = select_best_nodes(pool, np.exp(np.asarray(score[b], np.float64)), 7)
        np.testing.assert_array_equal(np.asarray(draft.parents[b]), sub.parents)
        np.testing.assert_array_equal(np.asarray(draft.tokens[b]), np.asarray(tok[b])[kept])
        kept_trees.append((sub, np.asarray(draft.tokens[b])))
    assert not (kept_trees[0][0] == kept_trees[1][0]
                and np.array_equal(kept_trees[0][1], kept_trees[1][1]))


def _best_tree_by_brute_force(parents, probs, n):
    """The ancestor-closed sets of ``n`` nodes of the pool (``parents`` [P], parents
    first) with the largest sum of path products of ``probs`` [P], by enumerating every
    set of n nodes: a list of the best ones (kept node indices, sorted)."""
    import itertools
    path = np.empty(len(parents))
    for i, p in enumerate(parents):
        path[i] = probs[i] * (path[p] if p >= 0 else 1.0)
    best, sets = -1.0, []
    for kept in itertools.combinations(range(len(parents)), n):
        if any(parents[i] >= 0 and parents[i] not in kept for i in kept):
            continue
        v = path[list(kept)].sum()
        if v > best + 1e-12:
            best, sets = v, [kept]
        elif v > best - 1e-12:
            sets.append(kept)
    return sets


@pytest.mark.parametrize("top_k, depth, n_nodes", [(3, 2, 5), (2, 3, 6)])
def test_score_temperature_keeps_the_best_tree_of_the_tempered_head(target, top_k, depth,
                                                                    n_nodes):
    """With every head token a child of every expanded node (top_k = the head
    vocabulary) and every candidate expanded, the tree kept at temperature T is the
    ancestor-closed set of n_nodes with the largest sum of path products of
    softmax(log q / T), q the head's probabilities (read off the T = 1 path scores),
    found by enumerating every set; T = 2 keeps another tree than T = 1 here."""
    head = _feature_head(target, head_ids=np.arange(top_k) + 5, seed=11)
    prompts = jnp.asarray([[4, 8, 15, 16]], jnp.int32)
    ctx = Context(prompts, jnp.asarray([4]))
    state = jax.random.normal(jax.random.PRNGKey(2), (1, target.cfg.d_model))
    big = top_k ** (depth - 1)
    d1 = dynamic_tree_drafter(head, top_k, depth, n_nodes, expand=big)
    _, tok, score, parent, _, dep = d1.candidates(state, ctx)
    parent, score = np.asarray(parent[0]), np.asarray(score[0], np.float64)
    logq = score - np.where(parent >= 0, score[np.maximum(parent, 0)], 0.0)
    kept = {}
    for temp in (1.0, 2.0):
        sib = logq / temp
        q = np.empty_like(sib)
        for p in np.unique(parent):                       # softmax over each node's children
            m = parent == p
            q[m] = np.exp(sib[m] - np.logaddexp.reduce(sib[m]))
        oracle = _best_tree_by_brute_force(parent, q, n_nodes)
        d = dynamic_tree_drafter(head, top_k, depth, n_nodes, expand=big, temperature=temp)
        _, draft = d.propose_tree(state, ctx, jax.random.PRNGKey(0), SamplingParams.make(0.0))
        # the kept nodes as token paths, compared with the oracle's
        paths = []
        for i, p in enumerate(np.asarray(draft.parents[0])):
            paths.append((paths[p] if p >= 0 else ()) + (int(draft.tokens[0, i]),))
        pool = []
        for i, p in enumerate(parent):
            pool.append((pool[p] if p >= 0 else ()) + (int(tok[0, i]),))
        assert len(oracle) == 1
        assert sorted(paths) == sorted(pool[i] for i in oracle[0]), temp
        kept[temp] = sorted(paths)
    assert kept[1.0] != kept[2.0]
    with pytest.raises(InvalidArgument, match="^temperature must be a finite number > 0"):
        dynamic_tree_drafter(head, top_k, depth, n_nodes, temperature=0.0)


def test_loop_call_runs_what_generate_runs_and_compiles_once(target, drafters, reference):
    tree = TokenTree.from_top_k([3, 2, 1])
    first = generate_tree(target, drafters["small"], PROMPTS_4, MAX_NEW, tree=tree)
    traced = TRACE_COUNTS["tree"]
    loop = tree_loop(target, drafters["small"], PROMPTS_4, MAX_NEW, tree=tree)
    common = loop.program(*loop.args, **loop.static)[0]
    again = generate_tree(target, drafters["small"], PROMPTS_4, MAX_NEW, tree=tree)
    assert TRACE_COUNTS["tree"] == traced                    # same shapes: no new trace
    assert again.tokens == first.tokens == reference[4].tokens
    for b, p in enumerate(PROMPTS_4):
        n = int(common.length[b])
        assert np.asarray(common.tokens[b, len(p):n]).tolist() == first.tokens[b]


def test_path_ends_count_tries_and_acceptances_by_hand():
    tree = TokenTree.from_top_k([2, 2])     # nodes 0, 1 (depth 1); 2, 3 below 0; 4, 5 below 1
    # ends: the root (both depth-1 ranks tried, rejected), node 1 (rank 0 rejected, rank 1
    # accepted, then both of its children tried), node 5 (…, then rank 1 at depth 2)
    accepted, tried = acceptance_counts(tree, np.asarray([[0, 2], [6, -1]]))
    assert accepted.tolist() == [[0, 2], [0, 1]]
    assert tried.tolist() == [[3, 3], [2, 2]]
    with pytest.raises(InvalidArgument, match="path_end"):
        acceptance_counts(tree, [7])


def test_measured_rates_recover_the_simulators():
    """Path ends from the positional model's simulator give back its rates."""
    tree = TokenTree.from_top_k([3, 2, 1])
    rates = np.asarray([[0.5, 0.4, 0.3], [0.6, 0.5, 0.0], [0.7, 0.0, 0.0]])
    run = simulate_tree(tree, PositionalAcceptance(rates), 200_000, rng=1)
    got = measured_acceptance(tree, run.last_node + 1).rates
    present = np.asarray([[1, 1, 1], [1, 1, 0], [1, 0, 0]], bool)
    np.testing.assert_allclose(got[present], rates[present], atol=0.01)


def test_a_tree_runs_path_ends_agree_with_its_accepted_counts(target, drafters):
    tree = TokenTree.from_top_k([3, 2, 1])
    res = generate_tree(target, drafters["small"], PROMPTS_4, MAX_NEW, tree=tree)
    st = res.stats
    assert st.path_end.shape == st.accepted.shape
    assert ((st.path_end >= 0) == st.active).all()
    depth_of = np.concatenate([[0], tree.depths])
    np.testing.assert_array_equal(depth_of[np.maximum(st.path_end, 0)][st.active],
                                  st.accepted[st.active])
    acc, tried = acceptance_counts(tree, st.path_end)
    assert acc.sum() == st.accepted[st.active].sum()
    assert tried[0, 0] == st.active.sum()


def test_a_wider_tree_accepts_more_per_iteration(target, drafters):
    d = drafters["small"]
    chain = generate_tree(target, d, PROMPTS_4, MAX_NEW, tree=3)
    wide = generate_tree(target, d, PROMPTS_4, MAX_NEW, tree=TokenTree.from_top_k([4, 3, 1]))
    assert wide.tokens == chain.tokens
    assert wide.stats.tokens_per_iteration > chain.stats.tokens_per_iteration


def test_bad_inputs_raise_before_compiling(target, drafters):
    ok = dict(target=target, drafter=drafters["small"], prompts=[[1, 2, 3]], max_new_tokens=8,
              tree=TokenTree.from_top_k([2, 2]))
    before = dict(TRACE_COUNTS)
    cases = [(dict(tree=0), "tree"), (dict(tree=-3), "tree"), (dict(tree="wide"), "tree"),
             (dict(tree=None), "tree must be given"),
             (dict(tree=TokenTree.from_top_k([8, 8, 2])), "tree has 200 nodes"),
             (dict(cache_len=16, tree=TokenTree.from_top_k([3, 3])), "cache_len"),
             (dict(drafter=drafters["ngram"]), "chains below the root"),
             (dict(drafter=NGramTreeDrafter(target.cfg.vocab_size, branches_tree(2, 2)),
                   tree=branches_tree(3, 2)), "tree drafter's own"),
             (dict(max_new_tokens=0), "max_new_tokens"),
             (dict(drafter=dynamic_tree_drafter(drafters["small"], 2, 2, 4)),
              "tree must be None for a dynamic")]
    for change, match in cases:
        with pytest.raises(InvalidArgument, match=match):
            generate_tree(**(ok | change))
    with pytest.raises(InvalidArgument, match="parents"):
        TokenTree.from_parents([0, -1])
    with pytest.raises(InvalidArgument, match=r"^expand must be at least top_k = 2"):
        dynamic_tree_drafter(drafters["feature-head"], 2, 3, 4, expand=1)
    with pytest.raises(InvalidArgument, match=r"^expand must be .* equal to it for a draft"):
        dynamic_tree_drafter(drafters["small"], 2, 3, 4, expand=3)
    for args, match in [((drafters["small"], 2, 3, 11), "n_nodes"),
                        ((drafters["small"], 0, 3, 4), "top_k"),
                        ((drafters["small"], 2, 0, 4), "depth"),
                        ((drafters["small"], 2, 2, 0), "n_nodes"),
                        ((drafters["ngram"], 2, 2, 4), "drafter")]:
        with pytest.raises(InvalidArgument, match=match):
            dynamic_tree_drafter(*args)
    assert dict(TRACE_COUNTS) == before


# ---- sampled, end to end, on a 12-token vocabulary -------------------------------------
@pytest.mark.parametrize("drafter", ["model", "feature-head", "ngram", "dynamic"])
def test_sampled_tree_decoding_is_exact_in_distribution(chi_models, drafter):
    t, d = chi_models
    if drafter == "model":
        dr, tree = model_drafter(d, t), TokenTree.from_top_k([3, 2])
    elif drafter == "feature-head":
        dr, tree = _feature_head(t, np.arange(1, V_SMALL)), TokenTree.from_top_k([2, 2, 1])
    elif drafter == "dynamic":
        dr, tree = dynamic_tree_drafter(model_drafter(d, t), 2, 2, 4), None
    else:
        dr, tree = NGramDrafter(V_SMALL, n=2), branches_tree(2, 2)
    res = generate_tree(t, dr, [CHI_PROMPT] * 30_000, 3, tree=tree, temperature=1.0, seed=5)
    toks = np.asarray(res.tokens)
    joint = chi2.exact_joint(t, CHI_PROMPT, 1.0)
    p12 = chi2.chi2_pvalue(chi2.counts(toks, (0, 1), V_SMALL), joint.sum(2))
    p23 = chi2.chi2_pvalue(chi2.counts(toks, (1, 2), V_SMALL), joint.sum(0))
    assert p12 > 1e-3 and p23 > 1e-3, (p12, p23)
    acc = res.stats.accepted[res.stats.active]
    assert 0.05 < (acc > 0).mean() < 0.95
