"""Goodput off throughout (K = 0 every iteration) against plain decoding on
SmolLM2-135M, each call's decode time (the 40-token call less the same rows' one-token
call), 6 interleaved rounds. Drafter: layer-skip (default; a draft model the off loop
leaves out) or "ngram"; a fourth argument turns Goodput's judging of the free lookup
off.

    PYTHONPATH=. python data/policies-cpu-s27/full/off_cost.py <batch> [cache_len (256)] \
        [layer-skip|ngram] [nojudge]
"""
import sys, time, numpy as np
from specsim import bench, decode, models, workloads, experiment, policies as P
from specsim.drafters import layer_skip_drafter
t = models.load("smollm2-135m")
from specsim.drafters import NGramDrafter
d = NGramDrafter(t.cfg.vocab_size, n=3) if len(sys.argv) > 3 and sys.argv[3] == "ngram" else layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers))
if len(sys.argv) > 4: pol_kw = dict(judge_off=False)
else: pol_kw = {}
B = int(sys.argv[1])
prompt = [t.tokenizer.encode(workloads.prompt_text(k, t.tokenizer)) for k in workloads.KINDS * 4][:B]
pol = P.Goodput(k_max=4, costs=P.Costs(t_draft=1.0, t_target=(1.0,) + (1.2,) * 4), **pol_kw)
kw = dict(eos_token_id=None, cache_len=int(sys.argv[2]) if len(sys.argv) > 2 else 256)
calls = [lambda: decode.generate_autoregressive(t, prompt, 40, **kw),
         lambda: decode.generate_speculative(t, d, prompt, 40, policy=pol, **kw),
         lambda: decode.generate_autoregressive(t, prompt, 1, **kw)]
s, out = bench.interleaved_rounds(calls, 6, np.random.default_rng(0), warmup=1)
m = [float(np.median(x)) for x in s]
print(f"batch {B}: AR {m[0]:.3f} s, goodput-off {m[1]:.3f} s, one-token {m[2]:.3f} s; decode AR {m[0]-m[2]:.3f}, off {m[1]-m[2]:.3f}, ratio {(m[1]-m[2])/(m[0]-m[2]):.3f}; per iteration +{1000*(m[1]-m[0])/39:.2f} ms")
