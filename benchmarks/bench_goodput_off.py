"""Goodput turned off (K = 0 every iteration, layer-skip drafter on SmolLM2-135M) against
plain decoding, interleaved rounds: the overhead of the policy loop at K = 0."""
import numpy as np
from specsim import bench, decode, models, workloads, experiment
from specsim import policies as P
from specsim.drafters import layer_skip_drafter
experiment.enable_compilation_cache()
t = models.load("smollm2-135m").with_layer_loop("scan")
d = layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers))
prompt = t.tokenizer.encode(workloads.prompt_text("code", t.tokenizer))
pol = P.Goodput(k_max=4, costs=P.Costs(t_draft=1.0, t_target=(1.0,) + (1.2,) * 4))
kw = dict(eos_token_id=None, cache_len=256)
ar = lambda: decode.generate_autoregressive(t, [prompt], 40, **kw)
gp = lambda: decode.generate_speculative(t, d, [prompt], 40, policy=pol, **kw)
a, g = ar(), gp()
assert a.tokens == g.tokens and g.draft_passes == 0, (g.draft_passes)
s, _ = bench.interleaved_rounds([ar, gp], 8, np.random.default_rng(0), warmup=1)
r = np.asarray(s[1]) / np.asarray(s[0])
print("AR median s", np.median(s[0]), "goodput-off median s", np.median(s[1]))
print("ratio goodput/AR per round", np.round(r, 3), "median", np.median(r), "ratio of medians", np.median(s[1]) / np.median(s[0]))
