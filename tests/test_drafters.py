"""specsim.drafters: n-gram lookup, model and layer-skip drafters, the interface."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsim import models
from specsim.drafters import (Context, Draft, Drafter, ModelDrafter, NGramDrafter,
                              check_drafter, layer_skip_drafter, model_drafter)
from specsim.models.transformer import forward, init_cache
from specsim.sampling import SamplingParams

GREEDY = SamplingParams.make(0.0, vocab_size=97)


def _ctx(rows, N=24):
    tokens = np.zeros((len(rows), N), np.int32)
    for b, r in enumerate(rows):
        tokens[b, :len(r)] = r
    return Context(jnp.asarray(tokens), jnp.asarray([len(r) for r in rows], jnp.int32))


def _propose_ngram(rows, k, n=3, min_n=1, V=20):
    d = NGramDrafter(V, n, min_n)
    _, draft = d.propose(d.init_state(None, None, 0), _ctx(rows), k, None, GREEDY)
    return np.asarray(draft.tokens), np.asarray(draft.probs)


def test_ngram_proposes_continuation_of_most_recent_match():
    #              0  1  2  3  4  5  6  7  8  9 10
    rows = [[5, 6, 7, 8, 9, 5, 6, 7, 1, 5, 6],   # last 2 = (5, 6): latest earlier match ends at 6
            [3, 4, 5, 3, 4, 5, 3, 4]]            # (5,3,4) matches ending at 4 → 5, 3, 4
    toks, probs = _propose_ngram(rows, 3, n=3)
    # row 0: trigram (1,5,6) has no earlier match; bigram (5,6) last matched at 5..6 → 7,1,5
    assert toks[0].tolist() == [7, 1, 5]
    assert toks[1].tolist() == [5, 3, 4]
    np.testing.assert_array_equal(probs, np.eye(20)[toks])      # one-hot: deterministic draft


def test_ngram_short_continuation_and_no_match_are_no_proposals():
    rows = [[1, 2, 3, 1, 2],      # (1,2) matched at 0..1; continuation 3,1,2 then the end
            [7, 8, 9, 10]]        # no repeated token at all: nothing to propose
    toks, probs = _propose_ngram(rows, 5, n=2)
    assert toks[0, :3].tolist() == [3, 1, 2]
    proposed = probs.sum(-1) > 0
    assert proposed.tolist() == [[True, True, True, False, False], [False] * 5]


def test_ngram_respects_min_n_and_ignores_garbage_past_length():
    rows = [[4, 9, 4]]                         # only a unigram match (4 at 0 → 9)
    toks, probs = _propose_ngram(rows, 2, n=3, min_n=1)
    assert toks[0, 0] == 9 and probs[0, 0].sum() == 1
    _, probs2 = _propose_ngram(rows, 2, n=3, min_n=2)
    assert probs2.sum() == 0
    ctx = _ctx([[4, 9, 4, 4, 4]])               # tokens past length 3 must not be matched
    ctx = Context(ctx.tokens, jnp.asarray([3], jnp.int32))
    d = NGramDrafter(20, 2, 2)
    assert int(d.match(ctx, 2)[0]) == -1


@pytest.mark.parametrize("kwargs", [dict(n=0), dict(n=2, min_n=3), dict(vocab_size=0)])
def test_ngram_bad_config(kwargs):
    with pytest.raises(ValueError):
        NGramDrafter(**(dict(vocab_size=10) | kwargs))


@pytest.fixture(scope="module")
def tiny():
    m = models.load("tiny-llama", seed=3)
    return m.replace(cfg=m.cfg.replace(layer_loop="scan"))


def test_model_drafter_matches_forward_and_rolls_back(tiny):
    d = model_drafter(tiny, tiny)
    prompt = jnp.asarray([[1, 5, 7, 9, 11, 0, 0, 0], [1, 3, 8, 0, 0, 0, 0, 0]], jnp.int32)
    lens = jnp.asarray([5, 3], jnp.int32)
    state = jax.jit(d.init_state, static_argnums=2)(prompt, lens, 32)
    assert np.asarray(state.length).tolist() == [4, 2]
    # the loop appends the first generated token, then the cache holds all but two
    rows = [[1, 5, 7, 9, 11, 42], [1, 3, 8, 17]]
    ctx = _ctx(rows, N=32)
    propose = jax.jit(d.propose, static_argnums=2)
    state, draft = propose(state, ctx, 3, jax.random.PRNGKey(0), GREEDY)
    assert np.asarray(state.length).tolist() == [4, 2]           # rolled back to the start
    # oracle: greedy continuation from a full (uncached) forward of the padded context
    full = jax.jit(lambda toks: forward(tiny.params, tiny.cfg, toks,
                                        init_cache(tiny.cfg, 2, 32))[0])
    seqs = np.asarray(ctx.tokens).copy()
    lengths = np.asarray(ctx.length).copy()
    for j in range(3):
        logits = np.asarray(full(jnp.asarray(seqs)))              # [2, 32, V]
        for b in range(2):
            nxt = int(np.argmax(logits[b, lengths[b] - 1]))
            assert int(draft.tokens[b, j]) == nxt
            assert float(draft.probs[b, j, nxt]) == 1.0
            seqs[b, lengths[b]] = nxt
            lengths[b] += 1
    state = d.commit(state, jnp.asarray([3, 0]), jnp.asarray([True, False]))
    assert np.asarray(state.length).tolist() == [8, 2]


def test_model_drafter_vocab_mismatch_and_interface(tiny):
    small = models.Model(tiny.cfg.replace(vocab_size=89), tiny.params)  # vocab 89 ≠ 97
    with pytest.raises(ValueError, match="vocabulary"):
        model_drafter(small, tiny)
    with pytest.raises(ValueError, match="vocabulary"):
        check_drafter(NGramDrafter(50), tiny.cfg.vocab_size)
    with pytest.raises(ValueError, match="interface"):
        check_drafter(object(), 97)
    for d in (model_drafter(tiny, tiny), NGramDrafter(97), layer_skip_drafter(tiny, [0])):
        assert isinstance(d, Drafter)
        check_drafter(d, 97)


def test_layer_skip_shares_weights(tiny):
    d = layer_skip_drafter(tiny, [0, 2])
    assert d.cfg.n_layers == 2 and d.cfg.vocab_size == tiny.cfg.vocab_size
    assert d.params["embed"] is tiny.params["embed"]             # the same array
    np.testing.assert_array_equal(np.asarray(d.params["layers"]["w_qkv"][1]),
                                  np.asarray(tiny.params["layers"]["w_qkv"][2]))
    assert layer_skip_drafter(tiny).cfg.n_layers == 1            # default: first half
    with pytest.raises(ValueError):
        layer_skip_drafter(tiny, [0, 5])


def test_drafters_are_pytrees_with_static_config(tiny):
    d = model_drafter(tiny)
    leaves, treedef = jax.tree_util.tree_flatten(d)
    assert len(leaves) == len(jax.tree_util.tree_leaves(tiny.params))
    again = jax.tree_util.tree_unflatten(treedef, leaves)
    assert isinstance(again, ModelDrafter) and again.cfg == tiny.cfg
    assert jax.tree_util.tree_leaves(NGramDrafter(97, 2)) == []
    assert jax.tree_util.tree_structure(NGramDrafter(97, 2)) == \
        jax.tree_util.tree_structure(NGramDrafter(97, 2))
    assert isinstance(Draft(jnp.zeros((1, 1)), jnp.zeros((1, 1, 2))), tuple)
