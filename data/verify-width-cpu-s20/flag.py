import time, sys, numpy as np, jax
from specsim import bench
from specsim.models.embedded import load_smollm2
t = load_smollm2()
jobs = {w: bench.make_forward_call(t, w, 1, 128)[0] for w in (1, 2, 5)}
for j in jobs.values(): jax.block_until_ready(j())
rng = np.random.default_rng(0); keys = list(jobs); times = {k: [] for k in keys}
for r in range(10):
    for i in rng.permutation(len(keys)):
        k = keys[i]; t0 = time.perf_counter(); jax.block_until_ready(jobs[k]()); times[k].append(time.perf_counter() - t0)
print(" ".join(f"w{k} {np.median(times[k])*1e3:.1f}" for k in keys), "ms")
