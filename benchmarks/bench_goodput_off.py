"""Goodput turned off (K = 0 every iteration, on SmolLM2-135M) against plain decoding,
interleaved rounds: the overhead of the policy loop at K = 0.

    python benchmarks/bench_goodput_off.py [rounds (default 8)] [wall|cpu (default wall)]
        [layer-skip|feature-head|ngram (default layer-skip)] [batch (default 1)]

The layer-skip drafter is left out of off iterations (`policy_engine.skippable`); the
feature head, which reads the target's features, is handed each off iteration's feature;
n-gram lookup, whose draft is free, is run once per off iteration and judged against the
step's token (`policy_engine.judge_off`), so its ratio is the price of that judging.

``cpu`` times with this process's CPU time, which other jobs on a shared machine do not
inflate (`specsim.bench.interleaved_rounds`)."""
import sys
import time

import numpy as np
from specsim import bench, decode, models, workloads, experiment
from specsim import policies as P
from specsim.drafters import NGramDrafter, feature_head_drafter, layer_skip_drafter
from specsim.experiment.drafter_study import find_feature_head
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
clock = {"wall": time.perf_counter, "cpu": time.process_time}[sys.argv[2] if len(sys.argv) > 2
                                                             else "wall"]
experiment.enable_compilation_cache()
t = models.load("smollm2-135m").with_layer_loop("scan")
kind = sys.argv[3] if len(sys.argv) > 3 else "layer-skip"
batch = int(sys.argv[4]) if len(sys.argv) > 4 else 1
d = (feature_head_drafter(t, find_feature_head(t.cfg.name)) if kind == "feature-head"
     else NGramDrafter(t.cfg.vocab_size, n=3) if kind == "ngram"
     else layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers)))
prompt = [t.tokenizer.encode(workloads.prompt_text(k, t.tokenizer))
          for k in workloads.KINDS * 4][:batch]
pol = P.Goodput(k_max=4, costs=P.Costs(t_draft=1.0, t_target=(1.0,) + (1.2,) * 4))
kw = dict(eos_token_id=None, cache_len=256)
ar = lambda: decode.generate_autoregressive(t, prompt, 40, **kw)
gp = lambda: decode.generate_speculative(t, d, prompt, 40, policy=pol, **kw)
a, g = ar(), gp()
# off throughout: the same tokens, no draft pass (the feature head: its prefill only)
assert a.tokens == g.tokens and g.draft_passes == (kind == "feature-head"), (g.draft_passes)
calls = [ar, gp]
if kind == "ngram":       # the same loop without the judging: the price of the lookup alone
    blind = P.Goodput(k_max=4, costs=pol.costs, judge_off=False)
    calls.append(lambda: decode.generate_speculative(t, d, prompt, 40, policy=blind, **kw))
s, _ = bench.interleaved_rounds(calls, rounds, np.random.default_rng(0), warmup=1,
                                clock=clock)
r = np.asarray(s[1]) / np.asarray(s[0])
print("AR median s", np.median(s[0]), "goodput-off median s", np.median(s[1]))
print("ratio goodput/AR per round", np.round(r, 3), "median", np.median(r), "range",
      r.min(), r.max(), "ratio of medians", np.median(s[1]) / np.median(s[0]))
if g.stats.off_judged is not None and (g.stats.off_judged >= 0).any():
    j = g.stats.off_judged[g.stats.active]
    print(f"off iterations whose free first draft was judged: {np.mean(j >= 0):.2f}, "
          f"matched: {np.mean(j == 1):.2f}")
if kind == "ngram":
    rj = np.asarray(s[1]) / np.asarray(s[2])
    print("ratio judged/unjudged per round", np.round(rj, 3), "median", np.median(rj),
          "range", rj.min(), rj.max())
    # the lookup alone, 200 in one compiled loop, against the target step (pass_costs)
    import jax
    import jax.numpy as jnp
    from specsim import pass_costs
    from specsim.drafters import Context
    from specsim.sampling import SamplingParams
    sp = SamplingParams.make(0.0, 0, 1.0, vocab_size=t.cfg.vocab_size)
    ctx = Context(jnp.asarray(np.random.default_rng(0).integers(0, 50, (batch, 256)), jnp.int32),
                  jnp.full((batch,), 200, jnp.int32))

    @jax.jit
    def lookups(ctx):
        def body(i, acc):          # each lookup reads the last one's output: not hoisted
            _, dr = d.propose((), ctx._replace(tokens=ctx.tokens.at[:, 0].set(acc[:, 0])), 1,
                              None, sp)
            return acc + dr.tokens % 50
        return jax.lax.fori_loop(0, 200, body, jnp.zeros((batch, 1), jnp.int32))

    step = pass_costs.pass_calls(t, None, batch=batch, cache_len=256, k=1, steps=4).target_1
    (tl, ts), _ = bench.interleaved_rounds([lambda: lookups(ctx), step], rounds,
                                           np.random.default_rng(1), warmup=1, clock=clock)
    print(f"one lookup {1e6 * np.median(tl) / 200:.0f} us, one target step "
          f"{1e3 * np.median(ts) / 4:.1f} ms: {np.median(tl) / 200 / (np.median(ts) / 4):.4f}"
          " of a step")
