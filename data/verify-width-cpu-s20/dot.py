import time, sys, numpy as np, jax, jax.numpy as jnp
L, D, F = 30, 576, 1536
Ws = [jnp.asarray(np.random.default_rng(l).standard_normal((D, F)), jnp.float32) for l in range(L)]
Vs = [jnp.asarray(np.random.default_rng(100+l).standard_normal((F, D)), jnp.float32) * 0.01 for l in range(L)]
def chain(form):
    @jax.jit
    def f(x, Ws, Vs):
        for l in range(L):
            if form == "std":
                h = x @ Ws[l]; x = x + (h @ Vs[l])
            elif form == "T":
                h = jnp.einsum("df,td->tf", Ws[l], x); x = x + jnp.einsum("fd,tf->td", Vs[l], h)
            elif form == "bcast":
                h = (x[:, :, None] * Ws[l][None]).sum(1); x = x + (h[:, :, None] * Vs[l][None]).sum(1)
            elif form == "gemvs":
                h = jnp.concatenate([x[t:t+1] @ Ws[l] for t in range(x.shape[0])]); x = x + jnp.concatenate([h[t:t+1] @ Vs[l] for t in range(x.shape[0])])
            elif form == "hp":
                h = jnp.dot(x, Ws[l], precision="highest"); x = x + jnp.dot(h, Vs[l], precision="highest")
        return x
    return f
forms = sys.argv[1].split(",")
ws = [int(w) for w in sys.argv[2].split(",")]
jobs = {}
for form in forms:
    for w in ws:
        x = jnp.ones((w, D), jnp.float32)
        f = chain(form)
        jobs[(form, w)] = (lambda f=f, x=x: f(x, Ws, Vs))
        jax.block_until_ready(jobs[(form, w)]())
rng = np.random.default_rng(0); keys = list(jobs); times = {k: [] for k in keys}
for r in range(10):
    for i in rng.permutation(len(keys)):
        k = keys[i]; t0 = time.perf_counter(); jax.block_until_ready(jobs[k]()); times[k].append(time.perf_counter() - t0)
by = 2 * L * D * F * 4
for k in keys:
    m = np.median(times[k]); print(k, f"{m*1e3:.1f} ms {by/m/1e9:.1f} GB/s")
