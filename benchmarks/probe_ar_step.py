"""Does the pass program's autoregressive step (`pass_costs._target_1_program`) cost
what the compiled loop's step costs? SmolLM2-135M, scan layer loop, greedy.

    PYTHONPATH=. python benchmarks/probe_ar_step.py [batch (default 1)] [rounds (default 20)]

The oracle is the loop itself: `decode.generate_autoregressive` over 64 and over 33 new
tokens (eos off, the same compiled program: the same cache and iteration bucket),
differenced, so the prefill and the per-call overhead cancel and what remains is 31 of
the loop's steps. Against it, the pass program at 4 and 16 steps per call. Every call is
timed by this process's CPU time in interleaved random rounds (`bench.interleaved_rounds`).
"""
import sys
import time

import numpy as np

from specsim import bench, decode, experiment, models, pass_costs, workloads

batch = int(sys.argv[1]) if len(sys.argv) > 1 else 1
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
experiment.enable_compilation_cache()
target = models.load("smollm2-135m").with_layer_loop("scan")
tok = target.tokenizer
prompts = [tok.encode(workloads.prompt_text(workloads.KINDS[b % len(workloads.KINDS)], tok))[:28]
           for b in range(batch)]
S, LONG, SHORT = 128, 64, 33
assert decode.bucket(LONG) == decode.bucket(SHORT)
gen = lambda n: (lambda: decode.generate_autoregressive(target, prompts, n, eos_token_id=None,
                                                        cache_len=S))
calls, steps = [gen(LONG), gen(SHORT)], {}
for n in (4, 16):
    calls.append(pass_costs.pass_calls(target, None, batch=batch, cache_len=S, k=1,
                                       steps=n).target_1)
    steps[len(calls) - 1] = n
for c in calls[:2]:
    c()                                                   # compile outside the rounds
samples, _ = bench.interleaved_rounds(calls, rounds, np.random.default_rng(0), warmup=1,
                                      clock=time.process_time)
long_, short = (np.asarray(s) for s in samples[:2])
loop = (long_ - short) / (LONG - SHORT)
print(f"batch {batch}, {rounds} rounds, CPU clock; per step (ms): minimum / median")
print(f"  loop step (64 - 33 tokens, differenced per round): {1e3 * loop.min():.1f} / "
      f"{1e3 * np.median(loop):.1f}; by medians "
      f"{1e3 * (np.median(long_) - np.median(short)) / (LONG - SHORT):.1f}")
for i, n in steps.items():
    t = np.asarray(samples[i]) / n
    print(f"  pass program, {n:2d} steps per call: {1e3 * t.min():.1f} / "
          f"{1e3 * np.median(t):.1f}  (median / loop's by medians: "
          f"{np.median(t) / ((np.median(long_) - np.median(short)) / (LONG - SHORT)):.3f})")
