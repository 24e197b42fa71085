"""specsim.decode: the compiled autoregressive and speculative loops.

Oracles: greedy speculative output equals greedy autoregressive output token for token;
sampled speculative output follows the target's own distribution (χ² against the exact
distribution computed by enumeration on a 12-token vocabulary); the per-step acceptance
rate equals Σ min(p, q); statistics equal a hand-counted run of a scripted drafter.
"""

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import chi2

from specsim import models
from specsim.decode import (TRACE_COUNTS, NonFiniteLogitsError, generate_autoregressive,
                            generate_speculative)
from specsim.drafters import (Draft, ModelDrafter, NGramDrafter, layer_skip_drafter,
                              model_drafter)
from specsim.models.config import TINY_LLAMA, ModelConfig
from specsim.models.transformer import forward, init_cache, init_params, select_layers
from specsim.sampling import logits_to_probs

MAX_NEW = 24
PROMPTS_3 = [[1, 5, 7, 9, 11], [3, 3], [4, 8, 15, 16, 23, 42, 4, 8, 15, 16, 23]]
PROMPTS_1 = [[6, 1, 8, 0, 3, 3, 9]]
FORWARD = jax.jit(forward, static_argnums=1)          # the uncached oracle


def _scaled(params, factor):
    """Larger weights (norm scales untouched): sharper logits, so the greedy output of a
    random tiny model varies instead of repeating one token."""
    return jax.tree_util.tree_map_with_path(
        lambda path, a: a if "norm" in str(path[-1]) else a * factor, params)


@pytest.fixture(scope="module")
def target():
    # eos 53 appears mid-output in some rows: rows stop at different times
    cfg = TINY_LLAMA.replace(layer_loop="scan", eos_token_id=53)
    return models.Model(cfg, _scaled(init_params(jax.random.PRNGKey(0), cfg), 12.0))


@pytest.fixture(scope="module")
def drafters(target):
    return tiny_drafters(target)


def tiny_drafters(target) -> dict:
    """A separate small model (two of the target's layers, perturbed: its own weights),
    layer skip and n-gram drafters for ``target``."""
    sub, sub_cfg = select_layers(target.params, target.cfg, [0, 1])
    leaves, treedef = jax.tree_util.tree_flatten(sub)
    keys = jax.random.split(jax.random.PRNGKey(7), len(leaves))
    noisy = [a * (1 + 0.1 * jax.random.normal(k, a.shape)) for a, k in zip(leaves, keys)]
    small = models.Model(sub_cfg.replace(name="tiny-small"), jax.tree_util.tree_unflatten(treedef, noisy))
    return {"small": model_drafter(small, target),
            "layer-skip": layer_skip_drafter(target, [0, 2]),
            "ngram": NGramDrafter(target.cfg.vocab_size, n=3)}


@pytest.fixture(scope="module")
def reference(target):
    return {1: generate_autoregressive(target, PROMPTS_1, MAX_NEW),
            3: generate_autoregressive(target, PROMPTS_3, MAX_NEW)}


def test_reference_is_non_degenerate(reference):
    ref = reference[3]
    assert all(len(set(t)) >= 8 for t in ref.tokens)
    assert "eos" in ref.finish_reason and "length" in ref.finish_reason
    assert all(len(t) == MAX_NEW for t, r in zip(ref.tokens, ref.finish_reason) if r == "length")
    assert all(t[-1] == 53 and 53 not in t[:-1]
               for t, r in zip(ref.tokens, ref.finish_reason) if r == "eos")


# every drafter at every K and both batches, and every K at both batches: each pair of
# values appears together (K is static, each case compiles its own loop; the full grid's
# 24 cases repeat these paths)
@pytest.mark.parametrize("name, k, batch", [
    (name, k, batch) for name, batches in (("small", (1, 3, 1, 3)), ("layer-skip", (3, 1, 3, 1)),
                                           ("ngram", (1, 3, 3, 1)))
    for k, batch in zip((1, 2, 4, 7), batches)])
def test_greedy_speculative_equals_autoregressive(target, drafters, reference, name, k, batch):
    prompts = PROMPTS_1 if batch == 1 else PROMPTS_3
    res = generate_speculative(target, drafters[name], prompts, MAX_NEW, k)
    ref = reference[batch]
    assert res.tokens == ref.tokens
    assert res.finish_reason == ref.finish_reason
    st = res.stats
    a = st.active
    assert st.accepted.shape == st.drafted.shape == (res.n_iterations, batch)
    assert ((st.accepted <= st.drafted) & (st.drafted <= k))[a].all()
    # every iteration emits accepted + 1 tokens; only the last one of a row is cut
    emitted = 1 + np.where(a, st.accepted + 1, 0).sum(0)
    n = np.asarray([len(t) for t in res.tokens])
    assert ((n <= emitted) & (n >= emitted - k)).all()
    assert res.target_passes == res.n_iterations + 1
    assert res.draft_passes == (0 if name == "ngram" else res.n_iterations * k + 1)
    # greedy overlap is 1 exactly when the draft is the target's argmax
    first = st.overlap[:, :, 0][a & (st.drafted > 0)]
    np.testing.assert_array_equal(first == 1.0, (st.accepted > 0)[a & (st.drafted > 0)])
    if name != "ngram":
        assert 0 < st.alpha_per_proposal < 1


def test_identical_draft_accepts_everything(target, reference):
    k = 4
    res = generate_speculative(target, model_drafter(target, target), PROMPTS_3, MAX_NEW, k)
    assert res.tokens == reference[3].tokens
    st = res.stats
    assert st.alpha_per_proposal == 1.0
    assert st.tokens_per_iteration == k + 1
    np.testing.assert_array_equal(st.per_position_per_proposal, np.ones(k))
    assert (st.accepted[st.active] == k).all()
    np.testing.assert_array_equal(st.overlap[st.active], 1.0)
    # a plain Model as drafter is wrapped as a small-model draft (same program)
    again = generate_speculative(target, target, PROMPTS_3, MAX_NEW, k)
    assert again.tokens == res.tokens and again.stats.alpha_per_proposal == 1.0
    # sampled: the same distribution on both sides, so acceptance is (numerically) certain
    res = generate_speculative(target, model_drafter(target, target), PROMPTS_3, MAX_NEW, k,
                               temperature=1.0, seed=3)
    assert res.stats.alpha_per_proposal > 0.999
    assert abs(res.stats.mean_overlap - 1.0) < 1e-4


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class ScriptedDrafter:
    """Proposes the target's known greedy continuation (``reference``: prompt + greedy
    output, at the loop's buffer positions), with only the first ``schedule[i]`` drafts
    of iteration i right (the rest off by one token). A test-only drafter, which also
    shows that a new drafter plugs into the loop through the three methods."""
    reference: Any      # [B, R] int32
    schedule: tuple     # correct drafts per iteration, cycled
    vocab_size: int
    name: str = "scripted"

    def tree_flatten(self):
        return (self.reference,), (self.schedule, self.vocab_size, self.name)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], *aux)

    def passes_per_iteration(self, k):
        return 0

    def max_cache_len(self):
        return None

    def init_state(self, prompts, prompt_lens, cache_len):
        return jnp.zeros(prompts.shape[0], jnp.int32)                  # [B] iteration

    def propose(self, state, context, k, key, sampling):
        R = self.reference.shape[1]
        i = jnp.arange(k)[None]                                          # [1, K]
        idx = jnp.clip(context.length[:, None] + i, 0, R - 1)
        right = jnp.take_along_axis(self.reference, idx, axis=1)         # [B, K]
        n_right = jnp.asarray(self.schedule)[state % len(self.schedule)]  # [B]
        toks = jnp.where(i < n_right[:, None], right, (right + 1) % self.vocab_size)
        return state, Draft(toks, jax.nn.one_hot(toks, self.vocab_size, dtype=jnp.float32))

    def commit(self, state, n_accepted, active):
        return state + active.astype(jnp.int32)


def _scripted(prompts, ref, schedule, V, R=128):
    arr = np.zeros((len(prompts), R), np.int32)
    for b, (p, t) in enumerate(zip(prompts, ref.tokens)):
        arr[b, :len(p) + len(t)] = p + t
    return ScriptedDrafter(jnp.asarray(arr), tuple(schedule), V)


def test_adversarial_draft_still_yields_target_output(target, reference):
    d = _scripted(PROMPTS_3, reference[3], (0,), target.cfg.vocab_size)
    res = generate_speculative(target, d, PROMPTS_3, MAX_NEW, 3)
    assert res.tokens == reference[3].tokens
    assert res.stats.alpha_per_proposal == 0.0 and res.stats.tokens_per_iteration == 1.0
    assert np.nanmax(res.stats.overlap) == 0.0


def test_stats_match_hand_counted_run(target):
    prompts = [[6, 1, 8, 0, 3, 3, 9]]
    ref = generate_autoregressive(target, prompts, 20, eos_token_id=None)
    d = _scripted(prompts, ref, (2, 0, 3, 1), target.cfg.vocab_size)
    res = generate_speculative(target, d, prompts, 12, 3, eos_token_id=None)
    assert res.tokens[0] == ref.tokens[0][:12]
    # by hand: 1 token from the prefill, then iterations emitting 2+1, 0+1, 3+1, 1+1
    # (= 11 tokens), and a fifth (2 accepted) of which one token is kept.
    st = res.stats
    assert res.n_iterations == 5
    assert st.accepted[:, 0].tolist() == [2, 0, 3, 1, 2]
    assert st.drafted[:, 0].tolist() == [3, 3, 3, 3, 3]
    assert st.alpha_per_proposal == pytest.approx(8 / 15)
    np.testing.assert_allclose(st.per_position_per_proposal, [4 / 5, 3 / 4, 1 / 3])
    assert st.tokens_per_iteration == pytest.approx(13 / 5)
    assert res.target_passes == 6 and res.draft_passes == 0
    assert res.finish_reason == ["length"]


def test_rows_stop_independently_and_stats_per_row(target, reference, drafters):
    res = generate_speculative(target, drafters["layer-skip"], PROMPTS_3, MAX_NEW, 2)
    st = res.stats
    its = st.iterations_per_row
    assert its.max() == res.n_iterations and its.min() < its.max()   # rows finish apart
    # a finished row is marked inactive in every later iteration
    for b in range(3):
        assert st.active[:its[b], b].all() and not st.active[its[b]:, b].any()
    assert st.alpha_per_row.shape == (3,)


def test_result_carries_its_shape_plan(target, drafters):
    """The plan on the result is the one `plan_shapes` computes, and meta repeats it."""
    from specsim.decode import plan_shapes
    prompts = [[5, 6, 7], [9, 9, 9, 9, 9]]
    res = generate_speculative(target, drafters["ngram"], prompts, 10, 3)
    want = plan_shapes(prompts, 10, 3, [(target.cfg.max_seq_len, "max_seq_len")])
    assert res.plan == want
    assert (res.meta["padded_prompt"], res.meta["cache_len"]) == (want.padded_prompt,
                                                                  want.cache_len)
    ar = generate_autoregressive(target, prompts, 10, cache_len=48)
    assert ar.plan.cache_len == 48 and ar.plan == plan_shapes(prompts, 10, 0, 512, 48)


def test_loop_calls_run_what_generate_runs(target, drafters, reference):
    """`autoregressive_loop` and `speculative_loop` hand back the loop program a
    generate_* call runs, its prefill done: run once, each makes the reference's tokens
    (the same rows, the same lengths), so timing one times the call without its
    prefill."""
    from specsim.decode import autoregressive_loop, speculative_loop
    ref = reference[3]
    for loop in (autoregressive_loop(target, PROMPTS_3, MAX_NEW),
                 speculative_loop(target, drafters["ngram"], PROMPTS_3, MAX_NEW, k=2)):
        common = loop.program(*loop.args, **loop.static)[0]
        tokens, length = np.asarray(common.tokens), np.asarray(common.length)
        for b, (p, want) in enumerate(zip(PROMPTS_3, ref.tokens)):
            assert tokens[b, len(p):length[b]].tolist() == want
    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer"):
        autoregressive_loop(target, PROMPTS_3, 0)


def test_compiles_once_per_bucketed_shape(target, drafters):
    d = drafters["ngram"]
    before = TRACE_COUNTS["speculative"]
    generate_speculative(target, d, [[5, 6, 7], [9, 9, 9, 9]], 10, 3, temperature=0.8, seed=1)
    assert TRACE_COUNTS["speculative"] == before + 1
    # same shapes; and different prompt lengths / max_new / temperature / seed in the
    # same buckets: no new trace
    generate_speculative(target, d, [[5, 6, 7], [9, 9, 9, 9]], 10, 3, temperature=0.8, seed=1)
    generate_speculative(target, d, [[1, 2, 3, 4, 5], [7]], 12, 3, temperature=1.3, seed=2,
                         top_p=1.0)
    assert TRACE_COUNTS["speculative"] == before + 1
    before = TRACE_COUNTS["autoregressive"]
    generate_autoregressive(target, [[5, 6, 7]] * 2, 10, temperature=0.8)
    generate_autoregressive(target, [[5, 6], [1, 2, 3, 4, 5]], 11, temperature=0.5, seed=4)
    assert TRACE_COUNTS["autoregressive"] == before + 1


def test_same_seed_same_output_sampled(target, drafters):
    a = generate_speculative(target, drafters["small"], PROMPTS_3, 12, 2, temperature=1.0, seed=5)
    b = generate_speculative(target, drafters["small"], PROMPTS_3, 12, 2, temperature=1.0, seed=5)
    c = generate_speculative(target, drafters["small"], PROMPTS_3, 12, 2, temperature=1.0, seed=6)
    assert a.tokens == b.tokens and a.tokens != c.tokens


def test_nonfinite_logits_are_reported_and_raised(target, drafters, reference):
    prompt, ref = PROMPTS_1, reference[1].tokens[0]
    # poison the embedding of a token the greedy output produces (not in the prompt, not
    # earlier in the output): the pass that feeds it returns NaN logits
    j = next(i for i in range(2, len(ref)) if ref[i] not in prompt[0] + ref[:i])
    bad = target.replace(params=dict(target.params,
                                     embed=target.params["embed"].at[ref[j]].set(jnp.inf)))
    ar = generate_autoregressive(bad, prompt, MAX_NEW, on_nonfinite="report")
    assert ar.nonfinite.tolist() == [True] and ar.finish_reason == ["nonfinite"]
    assert ar.tokens[0] == ref[:j + 1]
    for d in (drafters["ngram"], layer_skip_drafter(bad, [0, 2])):
        res = generate_speculative(bad, d, prompt, MAX_NEW, 4, on_nonfinite="report")
        assert res.nonfinite.tolist() == [True] and res.tokens[0] == ref[:j + 1]
        with pytest.raises(NonFiniteLogitsError) as err:
            generate_speculative(bad, d, prompt, MAX_NEW, 4)
        assert err.value.result.tokens == res.tokens
    with pytest.raises(FloatingPointError):
        generate_autoregressive(bad, prompt, MAX_NEW)


def test_bad_inputs_raise_before_compiling(target, drafters):
    d = drafters["small"]
    ok = dict(target=target, drafter=d, prompts=[[1, 2, 3]], max_new_tokens=8, k=2)
    cases = [(dict(k=0), "k"), (dict(k=1.5), "k"), (dict(max_new_tokens=0), "max_new_tokens"),
             (dict(prompts=[[1, 2], []]), "empty"), (dict(prompts=[]), "prompts"),
             (dict(prompts=[[1] * 120]), "too long"),
             (dict(max_new_tokens=124), "too long"),
             (dict(prompts=[[1, 2, 97]]), r"prompts\[0\]"),
             (dict(prompts=["text"]), "tokenizer"),
             (dict(temperature=-0.5), "temperature"), (dict(top_p=0.0), "top_p"),
             (dict(top_p=1.01), "top_p"), (dict(top_k=-1), "top_k"), (dict(top_k=98), "top_k"),
             (dict(drafter=NGramDrafter(90)), "vocabulary"),
             (dict(drafter=ModelDrafter(d.params, d.cfg.replace(vocab_size=96))), "vocabulary"),
             (dict(on_nonfinite="ignore"), "on_nonfinite"), (dict(seed="x"), "seed"),
             (dict(eos_token_id=500), "eos_token_id"), (dict(cache_len=12), "too long")]
    before = dict(TRACE_COUNTS)
    for change, match in cases:
        with pytest.raises(ValueError, match=match):
            generate_speculative(**(ok | change))
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate_autoregressive(target, [[1, 2]], 0)
    with pytest.raises(ValueError, match="too long"):
        generate_autoregressive(target, [[1] * 100], 40)
    assert dict(TRACE_COUNTS) == before


# ---- exactness in distribution on a 12-token vocabulary -----------------------------------------
V_SMALL = 12
CHI_PROMPT = [3, 7, 3, 7, 3]
# the rows each χ² test samples; test_chi2_catches_resampling_from_the_target is the
# power check at this size
N_SAMPLES = 30_000


@pytest.fixture(scope="module")
def chi_models():
    cfg = ModelConfig(name="chi-target", arch="llama", vocab_size=V_SMALL, d_model=16,
                      n_layers=2, n_heads=2, n_kv_heads=1, head_dim=8, d_ff=24, max_seq_len=32,
                      layer_loop="scan", eos_token_id=None)
    dcfg = cfg.replace(name="chi-draft", n_layers=1)
    t = models.Model(cfg, _scaled(init_params(jax.random.PRNGKey(1), cfg), 10.0))
    d = models.Model(dcfg, _scaled(init_params(jax.random.PRNGKey(2), dcfg), 10.0))
    return t, d


def _exact_joint(model, temperature, top_k=0, top_p=1.0):
    """p(t1, t2, t3 | CHI_PROMPT) [V, V, V] by enumeration (tests/chi2.py)."""
    return chi2.exact_joint(model, CHI_PROMPT, temperature, top_k, top_p)


def _counts(tokens, axes):
    return chi2.counts(tokens, axes, V_SMALL)


_chi2_pvalue = chi2.chi2_pvalue


@pytest.mark.parametrize("temperature, top_k, top_p, k, drafter", [
    (0.5, 0, 1.0, 2, "model"), (1.0, 0, 1.0, 2, "model"), (1.5, 0, 1.0, 1, "model"),
    (1.0, 0, 0.8, 3, "model"), (1.0, 6, 1.0, 2, "model"), (1.0, 0, 1.0, 2, "ngram")])
def test_speculative_sampling_is_exact_in_distribution(chi_models, temperature, top_k, top_p,
                                                       k, drafter):
    t, d = chi_models
    dr = model_drafter(d, t) if drafter == "model" else NGramDrafter(V_SMALL, n=2)
    res = generate_speculative(t, dr, [CHI_PROMPT] * N_SAMPLES, 3, k, temperature, top_k,
                               top_p, seed=11)
    toks = np.asarray(res.tokens)                                            # [N, 3]
    joint = _exact_joint(t, temperature, top_k, top_p)                       # [V, V, V]
    # the first and second speculatively generated positions (t2, t3), jointly with the
    # token before each (t1 comes from the target's prefill)
    p12 = _chi2_pvalue(_counts(toks, (0, 1)), joint.sum(2))
    p23 = _chi2_pvalue(_counts(toks, (1, 2)), joint.sum(0))
    assert p12 > 1e-3 and p23 > 1e-3, (p12, p23)
    if drafter == "model":
        assert 0.05 < res.stats.alpha_per_proposal < 0.95      # drafts really are rejected and resampled
        if temperature == 1.0 and top_p == 1.0 and top_k == 0:
            # power check: the same samples are far from the draft's own distribution
            dj = _exact_joint(d, temperature)
            assert _chi2_pvalue(_counts(toks, (0, 1)), dj.sum(2)) < 1e-6
    else:
        assert res.stats.drafted.sum() > 0 and 0 < res.stats.alpha_per_proposal < 1


def test_chi2_catches_resampling_from_the_target(chi_models, monkeypatch):
    """Power check at the exactness tests' sample size: drawing the token after a
    rejection from the target p instead of the residual max(0, p − q) is biased (the
    target's likely tokens come out too often), and the χ² test above sees it."""
    from specsim.decode import speculative
    from specsim.sampling import sample

    monkeypatch.setattr(speculative, "sample_residual",
                        lambda key, p, q, greedy=False: sample(key, p))
    t, d = chi_models
    # K = 4: a program no other test compiles, so a fresh one traces the patched rule
    res = generate_speculative(t, model_drafter(d, t), [CHI_PROMPT] * N_SAMPLES, 3, 4, 1.0,
                               seed=11)
    assert 0.05 < res.stats.alpha_per_proposal < 0.95                 # rejections happen
    joint = _exact_joint(t, 1.0)
    assert _chi2_pvalue(_counts(np.asarray(res.tokens), (0, 1)), joint.sum(2)) < 1e-6


def test_acceptance_probability_is_overlap(chi_models):
    t, d = chi_models
    temperature = 1.0
    res = generate_speculative(t, model_drafter(d, t), [CHI_PROMPT] * N_SAMPLES, 3, 2,
                               temperature, seed=12)
    st = res.stats
    first_tok = np.asarray([row[0] for row in res.tokens])
    beta = st.overlap[0, :, 0]                                       # measured, per row
    # independent β for each possible first token, from full forwards of both models
    seqs = jnp.asarray([CHI_PROMPT + [x] for x in range(V_SMALL)], jnp.int32)
    lt, _ = FORWARD(t.params, t.cfg, seqs, init_cache(t.cfg, V_SMALL, 16))
    ld, _ = FORWARD(d.params, d.cfg, seqs, init_cache(d.cfg, V_SMALL, 16))
    pt = np.asarray(logits_to_probs(lt[:, -1], temperature))
    pd = np.asarray(logits_to_probs(ld[:, -1], temperature))
    beta_ref = np.minimum(pt, pd).sum(-1)                            # [V]
    np.testing.assert_allclose(beta, beta_ref[first_tok], atol=2e-6)
    accepted = (st.accepted[0] >= 1).astype(float)                   # first draft accepted
    z = (accepted - beta).sum() / np.sqrt((beta * (1 - beta)).sum())
    assert abs(z) < 4, z
    # and the second draft, given the first was accepted, against its own β
    reached = st.accepted[0] >= 1
    acc2 = (st.accepted[0][reached] >= 2).astype(float)
    beta2 = st.overlap[0, reached, 1]
    z2 = (acc2 - beta2).sum() / np.sqrt((beta2 * (1 - beta2)).sum())
    assert abs(z2) < 4, z2


@pytest.mark.slow
@pytest.mark.smollm2
def test_real_smollm2_strings_text_and_greedy_equality():
    m = models.load("smollm2-135m")
    m = m.with_layer_loop("scan")                               # faster to compile
    prompt = ("<|im_start|>user\nRepeat exactly: the cat sat on the mat, the cat sat on the "
              "mat.<|im_end|>\n<|im_start|>assistant\n")
    ar = generate_autoregressive(m, [prompt], 16, eos_token_id=None)
    for d in (NGramDrafter(m.cfg.vocab_size, 3), layer_skip_drafter(m, range(0, 30, 2))):
        res = generate_speculative(m, d, [prompt], 16, 4, eos_token_id=None)
        assert res.tokens == ar.tokens and res.text == ar.text
    assert isinstance(ar.text[0], str) and "cat" in ar.text[0]


def test_drafter_prefill_call_is_the_runs_prefill_without_the_head(target, drafters):
    """The call the in-run demo times a draft model's prefill with: the drafter's own
    prefill program over the padded prompts (its cache equals `init_state`'s, computed
    here eagerly as the oracle), computing no logits (no [B, P, V] value in its
    optimized HLO, where a forward call through the head has one)."""
    from specsim.decode import drafter_prefill_call
    from specsim.errors import InvalidArgument

    d = drafters["layer-skip"]
    P, S = 16, 64
    call = drafter_prefill_call(target, d, PROMPTS_3, P, S)
    got = call()
    arr = np.zeros((3, P), np.int32)
    for i, p in enumerate(PROMPTS_3):
        arr[i, :len(p)] = p
    lens = jnp.asarray([len(p) for p in PROMPTS_3], jnp.int32)
    want = d.init_state(jnp.asarray(arr), lens, S)
    np.testing.assert_array_equal(np.asarray(got.length), np.asarray(want.length))
    for a, b in ((got.k, want.k), (got.v, want.v)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    from specsim.decode.prefill import drafter_prefill_program
    hlo = drafter_prefill_program.lower(d, jnp.asarray(arr), lens, None,
                                         jnp.ones((3,), bool), S=S).compile().as_text()
    V = target.cfg.vocab_size
    assert f"f32[3,{P},{V}]" not in hlo
    head = jax.jit(lambda x: forward(d.params, d.cfg, x, init_cache(d.cfg, 3, S))[0])
    assert f"f32[3,{P},{V}]" in head.lower(jnp.asarray(arr)).compile().as_text()
    with pytest.raises(InvalidArgument, match="padded_prompt"):
        drafter_prefill_call(target, d, PROMPTS_3, 8, S)       # the longest prompt is 11
    with pytest.raises(InvalidArgument, match="padded_prompt"):
        drafter_prefill_call(target, d, PROMPTS_3, 0, S)


def test_staged_calls_return_what_the_generate_calls_do(target, drafters, reference):
    """`StagedCall`: prepare (prefills) then the loop program; its result equals the
    matching generate_* call's, for plain decoding, fixed K and a policy that primes a
    draft model inside its loop; a prepared state serves one call, and ``copies`` more
    calls from one prefill (the donated states copied)."""
    from specsim import policies as P
    from specsim.decode import staged_autoregressive, staged_speculative
    from specsim.errors import InvalidArgument

    with pytest.raises(TypeError, match="k_max"):        # a wrong argument, at once
        staged_speculative(target, drafters["ngram"], PROMPTS_3, MAX_NEW, k_max=2)
    ar = staged_autoregressive(target, PROMPTS_3, MAX_NEW)
    with pytest.raises(InvalidArgument, match="has not run"):
        ar.result(None)
    ar.prepare()
    assert ar.result(ar()).tokens == reference[3].tokens
    assert ar.result(ar()).tokens == reference[3].tokens        # prepared again itself
    ar.prepare(copies=2)                                  # one prefill, two runs of the loop
    assert ar.prepared == 2
    assert [ar.result(ar()).tokens for _ in range(2)] == [reference[3].tokens] * 2
    assert ar.prepared == 0
    with pytest.raises(ValueError, match="copies"):
        ar.prepare(copies=0)
    pol = P.Goodput(k_max=2, costs=P.Costs(t_draft=0.05, t_target=(1.0, 1.02, 1.05)))
    for kw in (dict(k=2), dict(policy=pol)):
        want = generate_speculative(target, drafters["layer-skip"], PROMPTS_3, MAX_NEW, **kw)
        call = staged_speculative(target, drafters["layer-skip"], PROMPTS_3, MAX_NEW, **kw)
        call.prepare(copies=2)
        again = call.result(call())                         # a copy of the prepared state
        got = call.result(call())                           # the prefills' own output
        assert again.tokens == got.tokens == want.tokens == reference[3].tokens
        assert (got.n_iterations, got.draft_passes) == (want.n_iterations, want.draft_passes)
        np.testing.assert_array_equal(got.stats.accepted, want.stats.accepted)
