"""One layer's attention alone, 30 layers in a fori_loop, SmolLM2-135M's heads (9 query, 3 kv, 64 wide),\nrandom caches: `kernels.cache_attention` against XLA's (`transformer._attention` on the\nlayer's slice), medians of 5 alternated calls, per layer.\n\n    PYTHONPATH=. python data/attention-cpu-s31/attention_bench.py\n"""
import sys, numpy as np, jax, jax.numpy as jnp, time
from specsim.models import kernels
from specsim.models import transformer as tr
rng = np.random.default_rng(0)
L, G, E, H = 30, 3, 64, 9
class C: n_kv_heads = G; group_size = H // G; head_dim = E
for B, T, S, P in [(1, 1, 512, 250), (8, 1, 512, 250), (8, 3, 512, 250), (8, 1, 2048, 250), (1, 5, 2048, 1000)]:
    q = jnp.asarray(rng.standard_normal((B, T, H, E), np.float32))
    k = jnp.asarray(rng.standard_normal((L, B, S, G, E), np.float32)); v = jnp.asarray(rng.standard_normal((L, B, S, G, E), np.float32))
    pos = jnp.asarray(P + np.arange(T)[None] + np.zeros((B, 1), int), jnp.int32)
    @jax.jit
    def kern(q, k, v, pos):
        return jax.lax.fori_loop(0, L, lambda i, acc: acc + kernels.cache_attention(q, k, v, i, pos).sum(), 0.0)
    @jax.jit
    def xla(q, k, v, pos):
        return jax.lax.fori_loop(0, L, lambda i, acc: acc + tr._attention(q, k[i], v[i], pos, C).sum(), 0.0)
    for f in (kern, xla): f(q, k, v, pos).block_until_ready()
    res = {}
    for nm, f in (("kernel", kern), ("xla", xla)) * 5:
        t0 = time.perf_counter(); f(q, k, v, pos).block_until_ready(); res.setdefault(nm, []).append(time.perf_counter() - t0)
    print(f"B{B} T{T} S{S} pos{P}: per layer kernel {np.median(res['kernel'])/L*1e3:.3f} ms, xla {np.median(res['xla'])/L*1e3:.3f} ms", flush=True)
