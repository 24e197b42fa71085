"""Goodput turned off (K = 0 every iteration, on SmolLM2-135M) against plain decoding,
interleaved rounds: the overhead of the policy loop at K = 0.

    python benchmarks/bench_goodput_off.py [rounds (default 8)] [wall|cpu (default wall)]
        [layer-skip|feature-head (default layer-skip)] [batch (default 1)]

The layer-skip drafter is left out of off iterations (`policy_engine.skippable`); the
feature head, which reads the target's features, is handed each off iteration's feature.

``cpu`` times with this process's CPU time, which other jobs on a shared machine do not
inflate (`specsim.bench.interleaved_rounds`)."""
import sys
import time

import numpy as np
from specsim import bench, decode, models, workloads, experiment
from specsim import policies as P
from specsim.drafters import feature_head_drafter, layer_skip_drafter
from specsim.experiment.drafter_study import find_feature_head
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
clock = {"wall": time.perf_counter, "cpu": time.process_time}[sys.argv[2] if len(sys.argv) > 2
                                                             else "wall"]
experiment.enable_compilation_cache()
t = models.load("smollm2-135m").with_layer_loop("scan")
kind = sys.argv[3] if len(sys.argv) > 3 else "layer-skip"
batch = int(sys.argv[4]) if len(sys.argv) > 4 else 1
d = (feature_head_drafter(t, find_feature_head(t.cfg.name)) if kind == "feature-head"
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
s, _ = bench.interleaved_rounds([ar, gp], rounds, np.random.default_rng(0), warmup=1,
                                clock=clock)
r = np.asarray(s[1]) / np.asarray(s[0])
print("AR median s", np.median(s[0]), "goodput-off median s", np.median(s[1]))
print("ratio goodput/AR per round", np.round(r, 3), "median", np.median(r), "range",
      r.min(), r.max(), "ratio of medians", np.median(s[1]) / np.median(s[0]))
