"""Whole generation loops (prefill outside the timing) of SmolLM2-135M with each layer's
attention by `kernels.cache_attention` against XLA's, the same program otherwise (the
attention switch read while tracing, both compiled before timing): plain decoding and
speculative decoding (prompt lookup, K 4; layer-skip draft 24/30, K 2) at batch 1 and 8,
512 and 2048 cache slots, N new tokens after the workloads' prompts, R interleaved rounds
(shuffled); median per-round ratio and tokens/s.

    PYTHONPATH=. python data/attention-cpu-s31/loop_ab.py [rounds (5)] [N (48)]
"""
import os, sys, time, numpy as np, jax
from specsim import decode, models, workloads, experiment
from specsim.drafters import NGramDrafter, layer_skip_drafter
from specsim.models import kernels
t = models.load("smollm2-135m")
R = int(sys.argv[1]) if len(sys.argv) > 1 else 5
N = int(sys.argv[2]) if len(sys.argv) > 2 else 48
texts = [workloads.prompt_text(k, t.tokenizer) for k in workloads.KINDS * 4]
prompts = {B: [t.tokenizer.encode(x) for x in texts[:B]] for B in (1, 8)}
ngram = NGramDrafter(t.cfg.vocab_size, n=3)
skip = layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers))
cases = [("plain", 1, 512), ("plain", 1, 2048), ("plain", 8, 512), ("plain", 8, 2048),
         ("ngram K4", 1, 512), ("ngram K4", 8, 512), ("layer-skip K2", 1, 512)]
kw = dict(eos_token_id=None)


def loop(name, B, S):
    if name == "plain":
        return decode.autoregressive_loop(t, prompts[B], N, cache_len=S, **kw)
    d, k = (ngram, 4) if name.startswith("ngram") else (skip, 2)
    return decode.speculative_loop(t, d, prompts[B], N, k=k, cache_len=S, **kw)


compiled = {}
for variant in ("kernel", "xla"):
    os.environ[kernels.ATTENTION_SWITCH] = "1" if variant == "kernel" else "0"
    jax.clear_caches()
    for c in cases:
        lowered = loop(*c).lower()
        assert (kernels.TARGET_ATTENTION in lowered.as_text()) == (variant == "kernel")
        compiled[(*c, variant)] = lowered.compile()
os.environ.pop(kernels.ATTENTION_SWITCH)
times = {key: [] for key in compiled}
tokens = {}
rng = np.random.default_rng(0)
for r in range(R + 1):
    order = list(compiled)
    rng.shuffle(order)
    for key in order:
        lc = loop(*key[:3])
        jax.block_until_ready(lc.args)
        t0 = time.perf_counter()
        out = compiled[key](*lc.args)
        jax.block_until_ready(out)
        if r:
            times[key].append(time.perf_counter() - t0)
        common = out[0]
        tokens[key] = int(np.sum(np.asarray(common.length))) - sum(len(p) for p in prompts[key[1]])
print(f"{R} rounds, {N} new tokens a row; kernel / XLA attention loop time, median (range); "
      f"tokens/s of the medians")
print("| loop | batch | slots | kernel / XLA (range) | kernel tokens/s | XLA tokens/s |")
print("|---|---|---|---|---|---|")
for c in cases:
    a, b = np.array(times[(*c, "kernel")]), np.array(times[(*c, "xla")])
    ratio = a / b
    print(f"| {c[0]} | {c[1]} | {c[2]} | {np.median(ratio):.3f} ({ratio.min():.3f}–{ratio.max():.3f}) | "
          f"{tokens[(*c, 'kernel')] / np.median(a):.1f} | {tokens[(*c, 'xla')] / np.median(b):.1f} |",
          flush=True)
