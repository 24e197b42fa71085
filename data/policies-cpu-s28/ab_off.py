"""Whole calls: Goodput off throughout (K = 0 every iteration) with this commit's policy
program ("new") and session 27's ("orig", specsim/decode.py at 4e31922), and plain
decoding, 40 new tokens; decode time = the call less the same rows' one-token call,
R interleaved rounds (one warm-up).

    PYTHONPATH=. python data/policies-cpu-s28/ab_off.py <batch> <cache_len> [layer-skip|ngram] [rounds (6)]
"""
import sys, time, importlib.util, numpy as np
import specsim
from specsim import bench, decode, models, workloads, experiment, policies as P
from specsim.drafters import layer_skip_drafter, NGramDrafter
import subprocess, tempfile, pathlib
src = subprocess.run(["git", "show", "4e31922:specsim/decode.py"], capture_output=True, text=True, check=True).stdout
path = pathlib.Path(tempfile.mkdtemp()) / "decode_s27.py"; path.write_text(src)
spec = importlib.util.spec_from_file_location("specsim.decode_s27", path)
orig = importlib.util.module_from_spec(spec); spec.loader.exec_module(orig)
t = models.load("smollm2-135m")
B, S = int(sys.argv[1]), int(sys.argv[2])
d = NGramDrafter(t.cfg.vocab_size, n=3) if len(sys.argv) > 3 and sys.argv[3] == "ngram" else layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers))
prompt = [t.tokenizer.encode(workloads.prompt_text(k, t.tokenizer)) for k in workloads.KINDS * 4][:B]
pol = P.Goodput(k_max=4, costs=P.Costs(t_draft=1.0, t_target=(1.0,) + (1.2,) * 4))
kw = dict(eos_token_id=None, cache_len=S)
calls = [lambda: decode.generate_autoregressive(t, prompt, 40, **kw),
         lambda: decode.generate_speculative(t, d, prompt, 40, policy=pol, **kw),
         lambda: orig.generate_speculative(t, d, prompt, 40, policy=pol, **kw),
         lambda: decode.generate_autoregressive(t, prompt, 1, **kw)]
r1 = calls[1](); r2 = calls[2]()
assert r1.tokens == r2.tokens and r1.draft_passes == r2.draft_passes == 0, (r1.draft_passes, r2.draft_passes)
s, out = bench.interleaved_rounds(calls, int(sys.argv[4]) if len(sys.argv) > 4 else 6, np.random.default_rng(0), warmup=1)
m = [float(np.median(x)) for x in s]
dec = [x - m[3] for x in m[:3]]
print(f"batch {B}, {S} slots: medians AR {m[0]:.3f}, new {m[1]:.3f}, orig {m[2]:.3f}, one-token {m[3]:.3f} s; "
      f"decode ratio to plain: new {dec[1]/dec[0]:.3f}, orig {dec[2]/dec[0]:.3f}")
