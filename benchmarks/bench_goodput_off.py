"""Goodput turned off (K = 0 every iteration, layer-skip drafter on SmolLM2-135M) against
plain decoding, interleaved rounds: the overhead of the policy loop at K = 0.

    python benchmarks/bench_goodput_off.py [rounds (default 8)] [wall|cpu (default wall)]

``cpu`` times with this process's CPU time, which other jobs on a shared machine do not
inflate (`specsim.bench.interleaved_rounds`)."""
import sys
import time

import numpy as np
from specsim import bench, decode, models, workloads, experiment
from specsim import policies as P
from specsim.drafters import layer_skip_drafter
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
clock = {"wall": time.perf_counter, "cpu": time.process_time}[sys.argv[2] if len(sys.argv) > 2
                                                             else "wall"]
experiment.enable_compilation_cache()
t = models.load("smollm2-135m").with_layer_loop("scan")
d = layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers))
prompt = t.tokenizer.encode(workloads.prompt_text("code", t.tokenizer))
pol = P.Goodput(k_max=4, costs=P.Costs(t_draft=1.0, t_target=(1.0,) + (1.2,) * 4))
kw = dict(eos_token_id=None, cache_len=256)
ar = lambda: decode.generate_autoregressive(t, [prompt], 40, **kw)
gp = lambda: decode.generate_speculative(t, d, [prompt], 40, policy=pol, **kw)
a, g = ar(), gp()
# off throughout: the same tokens, no draft pass (not even the drafter's prefill)
assert a.tokens == g.tokens and g.draft_passes == 0, (g.draft_passes)
s, _ = bench.interleaved_rounds([ar, gp], rounds, np.random.default_rng(0), warmup=1,
                                clock=clock)
r = np.asarray(s[1]) / np.asarray(s[0])
print("AR median s", np.median(s[0]), "goodput-off median s", np.median(s[1]))
print("ratio goodput/AR per round", np.round(r, 3), "median", np.median(r), "range",
      r.min(), r.max(), "ratio of medians", np.median(s[1]) / np.median(s[0]))
