"""What makes a generation program compile again, as README's "Compiling, and paying for
it once" section states it: counted with `decode.TRACE_COUNTS` on a tiny model."""

import dataclasses

import jax
import pytest

from specsim import decode, drafters, models, policies


@pytest.fixture(scope="module")
def model():
    return models.load("tiny-gpt2")


def _traces(fn, program="speculative"):
    """(traces of ``program``, result, traces of the target's prefill program, traces of
    the drafter's prefill program)."""
    counts = decode.TRACE_COUNTS
    before = dict(counts)
    res = fn()
    n, pre, dpre = (counts[p] - before.get(p, 0)
                    for p in (program, "prefill", "drafter-prefill"))
    assert (res.compile_s > 0) == (n + pre + dpre > 0)                  # reported when paid
    return n, res, pre, dpre


def _paid(traced) -> tuple:
    """(loop, prefill, drafter prefill) traces of a `_traces` result."""
    return traced[0], traced[2], traced[3]


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
    # a new program each, started from the same prefill program (keyed by the model and
    # the buffer sizes alone): a new K, drafter or policy compiles its loop only
    assert _paid(run(k=4)) == (1, 0, 0)                                # K is static
    assert run(new=40)[0] == 1                                       # I: 32 -> 64
    assert run(prompts=prompt * 2)[0] == 1                           # batch 1 -> 2
    assert run(temperature=0.7)[0] == 1                              # greedy -> sampled
    assert run(temperature=0.9)[0] == 0                              # ... not per temperature
    # a drafter's own prefill (`init_state`) is a program of its own, keyed by the drafter
    # and the buffer sizes: a new drafter compiles it with its loop (n-gram lookup's is
    # empty), and a draft model's next K compiles the loop alone
    assert _paid(run(drafter=drafters.NGramDrafter(vocab_size=model.cfg.vocab_size, n=2))) \
        == (1, 0, 1)
    skip = drafters.layer_skip_drafter(model, [0])
    assert _paid(run(drafter=skip, k=2)) == (1, 0, 1)
    assert _paid(run(drafter=skip, k=3)) == (1, 0, 0)
    assert run(drafter=skip, k=3)[0] == 0
    policy = policies.Heuristic(k_init=1, k_max=3)
    assert _paid(_traces(lambda: decode.generate_speculative(
        model, ngram, prompt, 20, policy=policy, eos_token_id=None),
        "speculative-policy")) == (1, 0, 0)
    # a policy that never plans K = 0 starts a draft model from the drafter's prefill
    # program, compiled already by the fixed-K runs; Goodput (K = 0 allowed) primes it
    # inside its loop (at the first draft), so neither compiles a drafter prefill again
    for pol in (policy, policies.Goodput(k_max=3, costs=policies.Costs.from_ratio(0.3, 3))):
        assert _paid(_traces(lambda: decode.generate_speculative(
            model, skip, prompt, 20, policy=pol, eos_token_id=None),
            "speculative-policy")) == (1, 0, 0)
    assert _traces(lambda: decode.generate_autoregressive(model, prompt, 20, eos_token_id=None),
                   "autoregressive")[2:] == (0, 0)
    assert decode.TRACE_COUNTS["prefill"] >= 1          # the prefill is a program of its own

