import time, sys, numpy as np, jax, jax.numpy as jnp
from specsim.models import transformer as tr
from specsim import decode, workloads
from specsim.drafters import NGramDrafter
from specsim.models.embedded import load_smollm2
if "gemvs" in sys.argv:
    orig = tr._mm
    def _mm(x, w):
        n = int(np.prod(x.shape[:-1]))
        if 1 < n <= 8 and not isinstance(w, tr.QuantizedWeight):
            flat = x.reshape(n, x.shape[-1])
            return jnp.concatenate([flat[i:i+1] @ w for i in range(n)]).reshape(*x.shape[:-1], w.shape[-1])
        return orig(x, w)
    tr._mm = _mm
t = load_smollm2()
ps = [t.tokenizer.encode(workloads.prompt_text(k, t.tokenizer)) for k in workloads.KINDS]
kw = dict(eos_token_id=None, cache_len=256)
d = NGramDrafter(t.cfg.vocab_size, n=3)
t0 = time.perf_counter()
jobs = {"ar1": lambda: decode.generate_autoregressive(t, ps[:1], 64, **kw),
        "spec1_k4": lambda: decode.generate_speculative(t, d, ps[:1], 64, k=4, **kw),
        "spec1_k2": lambda: decode.generate_speculative(t, d, ps[:1], 64, k=2, **kw),
        "ar4": lambda: decode.generate_autoregressive(t, ps[:4], 32, **kw),
        "spec4_k4": lambda: decode.generate_speculative(t, d, ps[:4], 32, k=4, **kw)}
out = {k: j() for k, j in jobs.items()}
print("compile", round(time.perf_counter() - t0, 1), "s; compile_s", {k: round(o.compile_s, 2) for k, o in out.items()})
print("tokens", {k: hash(str(o.tokens)) % 10**6 for k, o in out.items()})
rng = np.random.default_rng(0); keys = list(jobs); times = {k: [] for k in keys}
for r in range(5):
    for i in rng.permutation(len(keys)):
        k = keys[i]; times[k].append(jobs[k]().wall_s)
print(sys.argv[1:], " ".join(f"{k} {np.median(times[k]):.2f}" for k in keys), "s")
