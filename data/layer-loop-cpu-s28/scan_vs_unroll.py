"""A decode step of SmolLM2-135M, layer loop scan (the default) against unroll, at
batch 1 and 8 and 256 or 1024 cache slots (filled to half), the cache donated and
returned as in the decode loops; R interleaved rounds (shuffled), each time the mean of
5 calls, the median of per-round ratios. Under scan each layer's keys and values are
copied out of the stacked cache before the attention's dots (XLA's dynamic-slice), a
cost that grows with batch x cache slots; unrolled, the slices are static.

    PYTHONPATH=. python data/layer-loop-cpu-s28/scan_vs_unroll.py [rounds (8)]
"""
import sys, time, numpy as np, jax, jax.numpy as jnp
from specsim.models import transformer as tr, load
t = load("smollm2-135m")
models = {"scan": t, "unroll": t.with_layer_loop("unroll")}
R = int(sys.argv[1]) if len(sys.argv) > 1 else 8
rng = np.random.default_rng(0)
cases = [(1, 256), (1, 1024), (8, 256), (8, 1024)]
fns, state = {}, {}
for B, S in cases:
    base = tr.init_cache(t.cfg, B, S)
    toks = jnp.asarray(rng.integers(0, t.cfg.vocab_size, (B, 1)), jnp.int32)
    for loop in ("scan", "unroll"):
        m = models[loop]
        cfg = m.cfg
        f = jax.jit(lambda p, tk, c, cfg=cfg: tr.forward(p, cfg, tk, c._replace(length=c.length - 1))[1],
                    donate_argnums=2)
        cache = tr.KVCache(jnp.asarray(rng.standard_normal(base.k.shape).astype(np.float32)),
                           jnp.asarray(rng.standard_normal(base.v.shape).astype(np.float32)),
                           jnp.full((B,), S // 2 + 1, jnp.int32))
        cache = f(m.params, toks, cache)
        jax.block_until_ready(cache)
        fns[(B, S, loop)] = (f, toks, m.params)
        state[(B, S, loop)] = cache
times = {k: [] for k in fns}
for r in range(R):
    order = list(fns)
    rng.shuffle(order)
    for key in order:
        f, toks, params = fns[key]
        cache = state[key]
        t0 = time.perf_counter()
        for _ in range(5):
            cache = f(params, toks, cache)
        jax.block_until_ready(cache)
        times[key].append((time.perf_counter() - t0) / 5)
        state[key] = cache
print(f"jax {jax.__version__}, {R} rounds, each the mean of 5 calls")
for B, S in cases:
    s, u = np.array(times[(B, S, "scan")]), np.array(times[(B, S, "unroll")])
    q = s / u
    print(f"batch {B}, {S} slots: scan {np.median(s)*1e3:.2f} ms, unroll {np.median(u)*1e3:.2f} ms, "
          f"scan/unroll {np.median(q):.3f} (range {q.min():.3f}-{q.max():.3f})")
