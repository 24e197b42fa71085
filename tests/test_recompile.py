"""What makes a generation program compile again, as README's "Compiling, and paying for
it once" section states it: counted with `decode.TRACE_COUNTS` on a tiny model."""

import dataclasses

import jax
import pytest

from specsim import decode, drafters, models


@pytest.fixture(scope="module")
def model():
    return models.load("tiny-gpt2")


def _traces(fn):
    before = decode.TRACE_COUNTS["speculative"]
    res = fn()
    n = decode.TRACE_COUNTS["speculative"] - before
    assert (res.compile_s > 0) == (n > 0)       # compile time reported exactly when paid
    return n, res


@pytest.mark.slow
def test_what_compiles_again(model):
    ngram = drafters.NGramDrafter(vocab_size=model.cfg.vocab_size)
    prompt = [[1, 2, 3, 1, 2]]

    def run(prompts=prompt, new=20, k=3, drafter=ngram, **kw):
        kw.setdefault("eos_token_id", None)
        return _traces(lambda: decode.generate_speculative(model, drafter, prompts, new,
                                                           k=k, **kw))

    assert run()[0] == 1                                             # first call compiles
    # the same program: values are traced, sizes inside one bucket share it
    assert run(temperature=0.0, seed=5)[0] == 0
    assert run(new=17)[0] == 0                  # iteration buffer bucket(17) = bucket(20) = 32
    assert run(prompts=[[4, 5, 6, 7]])[0] == 0  # padded prompt bucket(4, 8) = bucket(5, 8)
    assert run(eos_token_id=7)[0] == 0
    new_weights = dataclasses.replace(model, params=jax.tree.map(lambda x: x * 1.5,
                                                                 model.params))
    assert _traces(lambda: decode.generate_speculative(
        new_weights, ngram, prompt, 20, k=3, eos_token_id=None))[0] == 0
    # a new program each
    assert run(k=4)[0] == 1                                          # K is static
    assert run(new=40)[0] == 1                                       # I: 32 -> 64
    assert run(prompts=prompt * 2)[0] == 1                           # batch 1 -> 2
    assert run(temperature=0.7)[0] == 1                              # greedy -> sampled
    assert run(temperature=0.9)[0] == 0                              # ... not per temperature
    assert run(drafter=drafters.NGramDrafter(vocab_size=model.cfg.vocab_size, n=2))[0] == 1


@pytest.mark.slow
def test_one_prefill_program_serves_every_loop(model):
    """Plain decoding, each K, each drafter and each policy start from the same prefill
    program (`decode._prefill_program`, keyed by model and shapes only): a new K or
    drafter traces its loop program again, never the prefill."""
    from specsim import policies

    prompt, kw = [[1, 2, 3, 1, 2, 3, 1]], dict(eos_token_id=None, cache_len=88)
    counts = decode.TRACE_COUNTS

    def traced(fn):
        before = dict(counts)
        fn()
        return {name: counts[name] - before.get(name, 0) for name in counts
                if counts[name] != before.get(name, 0)}

    ngram = drafters.NGramDrafter(vocab_size=model.cfg.vocab_size)
    # cache_len 88 is this test's own: the first call traces the prefill
    assert traced(lambda: decode.generate_autoregressive(model, prompt, 12, **kw)) == {
        "prefill": 1, "autoregressive": 1}
    for k in (2, 3):
        assert traced(lambda: decode.generate_speculative(model, ngram, prompt, 12, k=k,
                                                          **kw)) == {"speculative": 1}
    bigram = drafters.NGramDrafter(vocab_size=model.cfg.vocab_size, n=2)
    assert traced(lambda: decode.generate_speculative(model, bigram, prompt, 12, k=3,
                                                      **kw)) == {"speculative": 1}
    assert traced(lambda: decode.generate_speculative(
        model, ngram, prompt, 12, policy=policies.Heuristic(k_init=1, k_max=3), **kw)) == {
        "speculative-policy": 1}
    # a new cache length is a new prefill
    assert traced(lambda: decode.generate_autoregressive(
        model, prompt, 12, eos_token_id=None, cache_len=80))["prefill"] == 1
