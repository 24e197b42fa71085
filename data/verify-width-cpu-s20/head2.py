import time, numpy as np, jax, jax.numpy as jnp
E = jnp.asarray(np.random.default_rng(0).standard_normal((49152, 576)), jnp.float32)
dn = (((1,), (1,)), ((), ()))
def dot(x, E): return jax.lax.dot_general(x, E, dn)
def gemvs(x, E): return jnp.concatenate([jax.lax.dot_general(x[i:i+1], E, dn) for i in range(x.shape[0])])
def chunked(nc):
    def f(x, E):
        c = E.shape[0] // nc
        return jnp.concatenate([jnp.concatenate([jax.lax.dot_general(x[i:i+1], E[j*c:(j+1)*c], dn) for i in range(x.shape[0])]) for j in range(nc)], axis=1)
    return f
fs = {"dot": dot, "gemvs": gemvs, "ch6": chunked(6), "ch12": chunked(12)}
jobs = {}
for name, f in fs.items():
    jf = jax.jit(f)
    for w in ((1, 5) if name == "dot" else (5,)):
        x = jnp.ones((w, 576)); jobs[(name, w)] = (lambda jf=jf, x=x: jf(x, E)); jax.block_until_ready(jobs[(name, w)]())
x = jnp.asarray(np.random.default_rng(1).standard_normal((5, 576)), jnp.float32)
ref = jax.jit(dot)(x, E)
for name, f in fs.items(): print(name, float(jnp.abs(jax.jit(f)(x, E) - ref).max()))
rng = np.random.default_rng(0); keys = list(jobs); times = {k: [] for k in keys}
for r in range(12):
    for i in rng.permutation(len(keys)):
        k = keys[i]; t0 = time.perf_counter(); jax.block_until_ready(jobs[k]()); times[k].append(time.perf_counter() - t0)
for k in keys: m = np.median(times[k]); print(k, f"{m*1e3:.1f} ms {E.size*4/m/1e9:.1f} GB/s")
