import time, sys, numpy as np, jax, jax.numpy as jnp
from specsim.models import transformer as tr
from specsim import bench
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
jobs = {w: bench.make_forward_call(t, w, 1, 128)[0] for w in (1, 2, 3, 5)}
for j in jobs.values(): jax.block_until_ready(j())
rng = np.random.default_rng(0); keys = list(jobs); times = {k: [] for k in keys}
for r in range(12):
    for i in rng.permutation(len(keys)):
        k = keys[i]; t0 = time.perf_counter(); jax.block_until_ready(jobs[k]()); times[k].append(time.perf_counter() - t0)
print(sys.argv[1:], " ".join(f"w{k} {np.median(times[k])*1e3:.1f}" for k in keys), "ms")
