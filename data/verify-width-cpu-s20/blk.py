import time, sys, numpy as np, jax, jax.numpy as jnp
L, D, F = 30, 576, 1536
rng0 = np.random.default_rng(0)
Wf = [rng0.standard_normal((D, F)).astype(np.float32) for l in range(L)]
Vf = [(rng0.standard_normal((F, D)) * 0.01).astype(np.float32) for l in range(L)]
def split(m, nb):
    return [jnp.asarray(b.copy()) for b in np.split(m, nb, axis=1)]
def chain(nb, mode):
    Ws = [split(m, nb) for m in Wf]; Vs = [split(m, nb) for m in Vf]
    def mm(x, blocks):
        if mode == "dot":
            return jnp.concatenate([x @ b for b in blocks], axis=1)
        return jnp.concatenate([jnp.concatenate([x[t:t+1] @ b for t in range(x.shape[0])]) for b in blocks], axis=1)
    @jax.jit
    def f(x, Ws, Vs):
        for l in range(L):
            h = mm(x, Ws[l]); x = x + mm(h, Vs[l])
        return x
    return lambda x: f(x, Ws, Vs)
jobs = {}
for nb, mode in [(1, "dot"), (1, "gemv"), (4, "gemv"), (8, "gemv"), (16, "gemv")]:
    for w in (1, 5) if mode == "dot" else (5,):
        x = jnp.ones((w, D)); f = chain(nb, mode); jobs[(nb, mode, w)] = (lambda f=f, x=x: f(x)); jax.block_until_ready(jobs[(nb, mode, w)]())
rng = np.random.default_rng(0); keys = list(jobs); times = {k: [] for k in keys}
for r in range(10):
    for i in rng.permutation(len(keys)):
        k = keys[i]; t0 = time.perf_counter(); jax.block_until_ready(jobs[k]()); times[k].append(time.perf_counter() - t0)
by = 2 * L * D * F * 4
for k in keys:
    m = np.median(times[k]); print(k, f"{m*1e3:.1f} ms {by/m/1e9:.1f} GB/s")
