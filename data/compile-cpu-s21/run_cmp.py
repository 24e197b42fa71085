"""Old (HEAD, one compiled head per verify width) against new (two heads) policy programs,
same process, interleaved rounds: decode seconds and ms per iteration."""
import importlib.util, sys, time
import numpy as np
from specsim import bench, decode, models, workloads, experiment
from specsim import policies as P
from specsim.drafters import NGramDrafter, layer_skip_drafter
spec = importlib.util.spec_from_file_location("decode_old", "/tmp/p21/old/specsim/decode.py")
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
drafter_name, pol_name, kind, batch, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
t = models.load("smollm2-135m").with_layer_loop("scan")
d = NGramDrafter(t.cfg.vocab_size, n=3) if drafter_name == "ngram" else \
    layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers))
pol = {"heuristic": P.Heuristic(k_init=2, k_max=4), "threshold": P.ConfidenceThreshold(p_min=0.4, k_max=4)}[pol_name]
prompts = [t.tokenizer.encode(workloads.prompt_text(k, t.tokenizer)) for k in ([kind] * batch)]
kw = dict(eos_token_id=None, cache_len=256, policy=pol)
calls = [lambda: old.generate_speculative(t, d, prompts, 64, **kw),
         lambda: decode.generate_speculative(t, d, prompts, 64, **kw)]
a, b = calls[0](), calls[1]()
assert a.tokens == b.tokens, "outputs differ"
print("widths old", a.meta["target_passes_by_width"], "new", b.meta["target_passes_by_width"])
s, outs = bench.interleaved_rounds(calls, rounds, np.random.default_rng(0), warmup=1)
dec = [np.asarray(x) for x in s]   # whole call seconds (prefill included)
r = dec[1] / dec[0]
print(f"{drafter_name} {pol_name} {kind} batch {batch}: old median {np.median(dec[0]):.3f} s, new {np.median(dec[1]):.3f} s;"
      f" new/old per round median {np.median(r):.3f} range {r.min():.3f}-{r.max():.3f} ({len(r)} rounds)")
