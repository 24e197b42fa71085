import time, numpy as np, jax
from specsim import bench, pass_costs
from specsim.models.embedded import load_smollm2
t = load_smollm2()
S = 128
jobs = {}
for w in (1, 2, 3, 5, 8):
    jobs[f"bare{w}"] = bench.make_forward_call(t, w, 1, S)[0]
for k in (1, 2, 4):
    jobs[f"verify{k+1}"] = pass_costs.pass_calls(t, None, batch=1, cache_len=S, k=k, steps=4).verify
jobs["t1"] = pass_costs.pass_calls(t, None, batch=1, cache_len=S, k=1, steps=4).target_1
for j in jobs.values(): jax.block_until_ready(j())
rng = np.random.default_rng(0); keys = list(jobs); times = {k: [] for k in keys}
for r in range(8):
    for i in rng.permutation(len(keys)):
        k = keys[i]; t0 = time.perf_counter(); jax.block_until_ready(jobs[k]()); times[k].append(time.perf_counter() - t0)
for k in keys:
    d = 4 if (k.startswith("verify") or k == "t1") else 1
    print(k, f"{np.median(times[k])/d*1e3:.1f} ms  (min {np.min(times[k])/d*1e3:.1f})")
