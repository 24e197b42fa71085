"""The pure-JAX transformer: cached decoding, chunked prefill, ragged batches, the two
layer loops and layer selection agree with a full forward pass; bad inputs raise."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsim.models import (KVCache, check_headroom, check_tokens, forward, init_cache,
                            init_params, prefill, select_layers)
from specsim.models.config import TINY_GPT2, TINY_LLAMA, TINY_QWEN2, ModelConfig

CONFIGS = [TINY_LLAMA, TINY_QWEN2, TINY_GPT2]
ATOL = 2e-5
S = 16  # one cache size throughout, so that compiled shapes are shared between tests
step = jax.jit(forward, static_argnums=1)


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: c.name)
def model(request):
    cfg = request.param
    return cfg, init_params(jax.random.PRNGKey(0), cfg)


def _ids(cfg, batch, n, seed=0):
    return np.random.default_rng(seed).integers(0, cfg.vocab_size, (batch, n)).astype(np.int32)


def _full(params, cfg, ids, cache_len=S):
    cache = init_cache(cfg, ids.shape[0], cache_len)
    return step(params, cfg, jnp.asarray(ids), cache)


def test_shapes_and_cache_advance(model):
    cfg, params = model
    ids = _ids(cfg, 2, 7)
    logits, cache = _full(params, cfg, ids, S)
    assert logits.shape == (2, 7, cfg.vocab_size) and logits.dtype == jnp.float32
    assert cache.k.shape == (cfg.n_layers, 2, S, cfg.n_kv_heads, cfg.head_dim)
    np.testing.assert_array_equal(np.asarray(cache.length), [7, 7])
    assert np.all(np.isfinite(np.asarray(logits)))
    # Slots past the written ones stay untouched (zero).
    assert not np.any(np.asarray(cache.k[:, :, 7:]))


def test_causal(model):
    """Changing a later token leaves the logits of earlier positions unchanged."""
    cfg, params = model
    ids = _ids(cfg, 2, 12)
    ids[1] = ids[0]
    ids[1, 6] = (ids[0, 6] + 1) % cfg.vocab_size
    logits, _ = _full(params, cfg, ids, S)
    a, b = np.asarray(logits[0]), np.asarray(logits[1])
    np.testing.assert_allclose(a[:6], b[:6], atol=ATOL)
    assert np.abs(a[6:] - b[6:]).max() > 1e-4


def test_cached_decoding_equals_full_forward(model):
    cfg, params = model
    ids = _ids(cfg, 2, 12, seed=1)
    full, _ = _full(params, cfg, ids, S)
    logits, cache = prefill(params, cfg, ids[:, :5], init_cache(cfg, 2, S))
    outs = [logits]
    for t in range(5, 12):
        logits, cache = step(params, cfg, jnp.asarray(ids[:, t:t + 1]), cache)
        outs.append(logits)
    np.testing.assert_allclose(np.asarray(jnp.concatenate(outs, 1)), np.asarray(full),
                               atol=ATOL)
    np.testing.assert_array_equal(np.asarray(cache.length), [12, 12])


@pytest.mark.parametrize("chunk", [1, 4, 64])
def test_chunked_prefill_equals_one_pass(model, chunk):
    cfg, params = model
    ids = _ids(cfg, 2, 11, seed=2)
    one, c1 = prefill(params, cfg, ids, init_cache(cfg, 2, S))
    chunked, c2 = prefill(params, cfg, ids, init_cache(cfg, 2, S), chunk=chunk)
    np.testing.assert_allclose(np.asarray(chunked), np.asarray(one), atol=ATOL)
    np.testing.assert_allclose(np.asarray(c2.k), np.asarray(c1.k), atol=ATOL)
    np.testing.assert_allclose(np.asarray(c2.v), np.asarray(c1.v), atol=ATOL)


def test_ragged_batch_equals_rows_one_by_one(model):
    """Rows at different lengths (as after accepting different numbers of drafts, with
    stale entries past each length) give the logits each row gets alone."""
    cfg, params = model
    lengths, T = [5, 11, 2], 4
    prompt = _ids(cfg, 3, 11, seed=3)
    new = _ids(cfg, 3, T, seed=4)
    _, cache = prefill(params, cfg, prompt, init_cache(cfg, 3, S))
    cache = cache._replace(length=jnp.asarray(lengths, jnp.int32))  # reject the rest
    batched, out_cache = step(params, cfg, jnp.asarray(new), cache)
    np.testing.assert_array_equal(np.asarray(out_cache.length), np.asarray(lengths) + T)
    for b, n in enumerate(lengths):
        # Row b alone, from scratch, padded at the end to one shape (causality, tested
        # above, makes the padding irrelevant to the positions compared).
        row = np.zeros((1, 15), np.int32)
        row[0, :n + T] = np.concatenate([prompt[b, :n], new[b]])
        alone, _ = _full(params, cfg, row, S)
        np.testing.assert_allclose(np.asarray(batched[b]), np.asarray(alone[0, n:n + T]),
                                   atol=ATOL)


def test_scan_and_unroll_agree(model):
    cfg, params = model
    ids = _ids(cfg, 2, 5, seed=5)
    results = {}
    from specsim.models.transformer import unstack_layers
    for loop, p in (("scan", params), ("unroll", unstack_layers(params))):
        c = cfg.replace(layer_loop=loop)
        _, cache = prefill(p, c, ids, init_cache(c, 2, S))
        results[loop] = step(p, c, jnp.asarray(ids[:, :2]), cache)
    (la, ca), (lb, cb) = results["scan"], results["unroll"]
    np.testing.assert_allclose(np.asarray(la), np.asarray(lb), atol=ATOL)
    np.testing.assert_allclose(np.asarray(ca.k), np.asarray(cb.k), atol=ATOL)
    np.testing.assert_allclose(np.asarray(ca.v), np.asarray(cb.v), atol=ATOL)


def test_select_layers(model):
    cfg, params = model
    ids = _ids(cfg, 2, 12, seed=6)
    everything, cfg_all = select_layers(params, cfg, range(cfg.n_layers))
    assert cfg_all.n_layers == cfg.n_layers
    np.testing.assert_allclose(np.asarray(_full(everything, cfg_all, ids)[0]),
                               np.asarray(_full(params, cfg, ids)[0]), atol=ATOL)
    sub, sub_cfg = select_layers(params, cfg, [cfg.n_layers - 1, 0])
    assert sub_cfg.n_layers == 2 and sub["embed"] is params["embed"]
    np.testing.assert_array_equal(np.asarray(sub["layers"]["w_qkv"][0]),
                                  np.asarray(params["layers"]["w_qkv"][-1]))
    # The sub-model is the same as a 2-layer model built from those layers by hand.
    manual = dict(params, layers={k: jnp.stack([v[-1], v[0]])
                                  for k, v in params["layers"].items()})
    logits_sub, cache = _full(sub, sub_cfg, ids)
    np.testing.assert_allclose(np.asarray(logits_sub),
                               np.asarray(_full(manual, sub_cfg, ids)[0]), atol=ATOL)
    assert cache.k.shape[0] == 2
    assert np.abs(np.asarray(logits_sub - _full(params, cfg, ids)[0])).max() > 1e-4
    for bad in ([], [0, 0], [cfg.n_layers], [-1]):
        with pytest.raises(ValueError, match="layer_ids"):
            select_layers(params, cfg, bad)


def test_bfloat16_runs_close_to_float32():
    cfg = TINY_LLAMA
    params = init_params(jax.random.PRNGKey(1), cfg)
    c16 = cfg.replace(dtype="bfloat16")
    p16 = jax.tree_util.tree_map(lambda a: a.astype(jnp.bfloat16), params)
    ids = _ids(cfg, 2, 12)
    ref, _ = _full(params, cfg, ids)
    got, cache = _full(p16, c16, ids)
    assert cache.k.dtype == jnp.bfloat16 and got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=0.05)


def test_bad_inputs():
    cfg = TINY_LLAMA
    params = init_params(jax.random.PRNGKey(0), cfg)
    cache = init_cache(cfg, 2, 8)
    with pytest.raises(ValueError, match="tokens must lie in"):
        prefill(params, cfg, np.full((2, 3), cfg.vocab_size), cache)
    with pytest.raises(ValueError, match="tokens must lie in"):
        check_tokens(np.array([[-1]]), cfg)
    with pytest.raises(ValueError, match="integer token ids"):
        prefill(params, cfg, np.zeros((2, 3), np.float32), cache)
    with pytest.raises(ValueError, match="KV cache holds 8"):
        prefill(params, cfg, np.zeros((2, 9), np.int32), cache)
    with pytest.raises(ValueError, match="shape"):
        prefill(params, cfg, np.zeros((3,), np.int32), cache)
    with pytest.raises(ValueError, match="batch"):
        prefill(params, cfg, np.zeros((3, 2), np.int32), cache)
    with pytest.raises(ValueError, match="chunk"):
        prefill(params, cfg, np.zeros((2, 2), np.int32), cache, chunk=0)
    with pytest.raises(ValueError, match="KV cache"):
        check_headroom(cache._replace(length=jnp.asarray([6, 2], jnp.int32)), 3)
    check_headroom(cache._replace(length=jnp.asarray([5, 2], jnp.int32)), 3)
    for batch, cache_len in ((0, 4), (1, 0), (True, 4), (1.5, 4)):
        with pytest.raises(ValueError):
            init_cache(cfg, batch, cache_len)
    with pytest.raises(ValueError, match="learned positions"):
        init_cache(TINY_GPT2, 1, TINY_GPT2.max_seq_len + 1)
    with pytest.raises(ValueError, match="n_kv_heads"):
        TINY_LLAMA.replace(n_kv_heads=4)
    with pytest.raises(ValueError, match="arch"):
        TINY_LLAMA.replace(arch="mamba")
    with pytest.raises(ValueError, match="d_model"):
        TINY_LLAMA.replace(d_model=0)
    with pytest.raises(ValueError, match="rope_scaling"):
        from specsim.models.transformer import rope_inv_freq
        rope_inv_freq(TINY_LLAMA.replace(rope_scaling=(("rope_type", "yarn"),)))
    assert isinstance(hash(TINY_LLAMA), int) and isinstance(cache, KVCache)
    assert isinstance(TINY_LLAMA, ModelConfig)


@pytest.mark.parametrize("loop", ["unroll", "scan"])
def test_per_layer_and_stacked_layouts_agree(model, loop):
    """Each loop over its own layout gives the numbers of the tiny presets' scan."""
    from specsim.models.transformer import arrange_layers, stack_layers, unstack_layers
    cfg, params = model
    assert cfg.layer_loop == "scan" and isinstance(params["layers"], dict)
    c = cfg.replace(layer_loop=loop)
    ids = _ids(cfg, 2, 12, seed=8)
    arranged = arrange_layers(params, c)
    assert isinstance(arranged["layers"], tuple if loop == "unroll" else dict)
    ref, ref_cache = _full(params, cfg, ids)
    got, got_cache = _full(arranged, c, ids)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=ATOL)
    np.testing.assert_allclose(np.asarray(got_cache.k), np.asarray(ref_cache.k), atol=ATOL)
    per_layer = unstack_layers(params)
    assert isinstance(per_layer["layers"], tuple) and len(per_layer["layers"]) == cfg.n_layers
    back = stack_layers(per_layer)
    for k, v in params["layers"].items():
        np.testing.assert_array_equal(np.asarray(back["layers"][k]), np.asarray(v))
    assert isinstance(arrange_layers(per_layer, cfg.replace(layer_loop="scan"))["layers"], dict)
    unroll = cfg.replace(layer_loop="unroll")
    sub, sub_cfg = select_layers(per_layer, unroll, [cfg.n_layers - 1, 0])
    assert sub["layers"][0] is per_layer["layers"][-1]
    ref_sub, _ = _full(*select_layers(params, cfg, [cfg.n_layers - 1, 0]), ids)
    np.testing.assert_allclose(np.asarray(_full(sub, sub_cfg, ids)[0]), np.asarray(ref_sub),
                               atol=ATOL)
    with pytest.raises(ValueError, match="layers"):
        forward(per_layer, unroll.replace(n_layers=cfg.n_layers + 1), jnp.asarray(ids),
                init_cache(cfg.replace(n_layers=cfg.n_layers + 1), 2, S))


def test_forward_refuses_a_layout_that_does_not_match_the_loop():
    """Stacked layers under "unroll" (or per-layer ones under "scan") would run a slow
    path; forward refuses them, naming the fix."""
    from specsim import models
    from specsim.errors import ConfigError
    from specsim.models.transformer import unstack_layers
    cfg = TINY_LLAMA
    params = init_params(jax.random.PRNGKey(0), cfg)                  # stacked, for scan
    ids = jnp.asarray(_ids(cfg, 1, 3))
    unroll = cfg.replace(layer_loop="unroll")
    with pytest.raises(ConfigError, match=r"stacked layers but cfg.layer_loop is 'unroll'"
                                          r".*Model.with_layer_loop\('unroll'\)"):
        forward(params, unroll, ids, init_cache(unroll, 1, 8))
    with pytest.raises(ValueError, match=r"per-layer layers but cfg.layer_loop is 'scan'"):
        forward(unstack_layers(params), cfg, ids, init_cache(cfg, 1, 8))
    # the fix the message names works, and init_params lays out for the config it gets
    m = models.Model(cfg, params).with_layer_loop("unroll")
    logits, _ = step(m.params, m.cfg, ids, init_cache(m.cfg, 1, 8))
    ref, _ = step(params, cfg, ids, init_cache(cfg, 1, 8))
    np.testing.assert_allclose(np.asarray(logits), np.asarray(ref), atol=ATOL)
    assert isinstance(init_params(jax.random.PRNGKey(0), unroll)["layers"], tuple)


@pytest.mark.parametrize("G,T", [(1, 1), (2, 1), (3, 5), (2, 16)])
def test_pairs_attention_equals_grouped_attention(G, T):
    """The decode-time attention that reads the cache in place (all kv-head pairs, then
    the diagonal) gives the grouped einsum's numbers, ragged positions included."""
    from specsim.models.attention import attention_grouped, attention_pairs
    cfg = TINY_LLAMA.replace(n_heads=2 * G, n_kv_heads=G)
    B, S_, E = 2, 23, cfg.head_dim
    kq, kk, kv = jax.random.split(jax.random.PRNGKey(G * 100 + T), 3)
    q = jax.random.normal(kq, (B, T, cfg.n_heads, E))
    k = jax.random.normal(kk, (B, S_, G, E))
    v = jax.random.normal(kv, (B, S_, G, E))
    positions = jnp.asarray([[3], [S_ - T]], jnp.int32) + jnp.arange(T, dtype=jnp.int32)
    # each compiled whole (op by op, every small op compiles on its own)
    got = jax.jit(attention_pairs, static_argnums=4)(q, k, v, positions, cfg)
    ref = jax.jit(attention_grouped, static_argnums=4)(q, k, v, positions, cfg)
    assert got.shape == (B, T, cfg.n_heads * E)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=1e-5)


def test_decode_step_moves_no_transposed_cache_or_head():
    """The optimized HLO of a batch-1 decode step (per-layer loop, tied head) holds no
    transpose of a cache layer (S slots) nor of the embedding ([V, D] -> [D, V]): each
    was a copy per step, 17% and 19% of a SmolLM2 step in XLA's per-op profile. XLA's
    path (matmul "xla"): specsim's CPU kernels call no transpose at all."""
    import re
    cfg = TINY_LLAMA.replace(layer_loop="unroll", tie_embeddings=True, matmul="xla")
    from specsim.models.transformer import arrange_layers
    params = arrange_layers(init_params(jax.random.PRNGKey(0), cfg), cfg)
    params.pop("lm_head", None)
    slots = 37                                      # no other dimension has this size
    hlo = jax.jit(forward, static_argnums=1, donate_argnums=3).lower(
        params, cfg, jnp.ones((1, 1), jnp.int32), init_cache(cfg, 1, slots)).compile().as_text()
    shapes = re.findall(r"= \w+\[([\d,]*)\]\{[\d,]*\} transpose\(", hlo)
    dims = [tuple(int(d) for d in s.split(",") if d) for s in shapes]
    cache_like = [d for d in dims if slots in d and cfg.head_dim in d]      # keys/values
    head_like = [d for d in dims if cfg.vocab_size in d and cfg.d_model in d]
    assert dims and not cache_like and not head_like, dims
    assert "dynamic-update-slice" in hlo or "scatter" in hlo       # the cache write is there


@pytest.mark.parametrize("loop", ["scan", "unroll"])
def test_fused_projections_are_the_same_model(model, loop):
    """The fused layout (the default) holds the parts side by side, gives the unfused
    layout's logits and cache, round-trips exactly, and quantises to the same model."""
    from specsim.models.quantize import QuantizedWeight, dequantize, quantize_params
    from specsim.models.transformer import (arrange_layers, fuse_projections,
                                            unfuse_projections, unstack_layers)
    cfg, fused = model
    assert cfg.fused_projections
    c = cfg.replace(layer_loop=loop)
    fused = arrange_layers(fused, c)
    plain_cfg = c.replace(fused_projections=False)
    plain = arrange_layers(fused, plain_cfg)
    lf = fused["layers"] if loop == "scan" else unstack_layers(fused)["layers"][0]
    lp = plain["layers"] if loop == "scan" else unstack_layers(plain)["layers"][0]
    llama = cfg.arch == "llama"
    assert "w_qkv" in lf and not {"wq", "wk", "wv", "w_gate", "w_up"} & set(lf)
    assert ("w_gate_up" in lf) == llama and ("b_qkv" in lf) == ("bq" in lp)
    assert {"wq", "wk", "wv"} <= set(lp) and "w_qkv" not in lp and "w_gate_up" not in lp
    # the columns are the parts side by side: q, then k, then v (gate, then up)
    split = np.cumsum([cfg.q_dim, cfg.kv_dim])
    for part, cols in zip(("wq", "wk", "wv"), np.split(np.asarray(lf["w_qkv"]), split, -1)):
        np.testing.assert_array_equal(cols, np.asarray(lp[part]))
    if llama:
        gate, up = np.split(np.asarray(lf["w_gate_up"]), 2, -1)
        np.testing.assert_array_equal(gate, np.asarray(lp["w_gate"]))
        np.testing.assert_array_equal(up, np.asarray(lp["w_up"]))
    ids = _ids(cfg, 2, 12, seed=11)
    ref, ref_cache = _full(plain, plain_cfg, ids)
    got, got_cache = _full(fused, c, ids)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=ATOL)
    np.testing.assert_allclose(np.asarray(got_cache.v), np.asarray(ref_cache.v), atol=ATOL)
    again = fuse_projections(unfuse_projections(fused, c))
    jax.tree_util.tree_map(np.testing.assert_array_equal, again, fused)
    # quantising the fused matrix is quantising each part (columns are independent; the
    # layer layout does not enter, so once)
    for bits, group in ((8, None), (4, 4)) if loop == "scan" else ():
        qf = quantize_params(fused, c, bits, group)
        qp = fuse_projections(quantize_params(plain, plain_cfg, bits, group))
        leaves = lambda t: jax.tree_util.tree_leaves(t, is_leaf=lambda x: isinstance(x, QuantizedWeight))  # noqa: E731
        for a, b in zip(leaves(qf), leaves(qp)):
            if isinstance(a, QuantizedWeight):
                np.testing.assert_array_equal(np.asarray(dequantize(a)), np.asarray(dequantize(b)))
        np.testing.assert_allclose(np.asarray(_full(qf, c, ids)[0]),
                                   np.asarray(_full(quantize_params(plain, plain_cfg, bits, group),
                                                    plain_cfg, ids)[0]), atol=1e-4)


def test_fused_projections_setting_is_checked():
    from specsim.errors import ConfigError
    with pytest.raises(ConfigError, match="fused_projections must be True or False"):
        TINY_LLAMA.replace(fused_projections="yes")
