"""A decode step (and a 5-token verify pass) of SmolLM2-135M with each layer's attention
by specsim's kernel reading the stacked cache in place (`transformer._attention_stacked`,
one `kernels.cache_matmul` call per side for the batch)
against XLA's pairs form on the sliced layer (which XLA copies first under the layer
scan), both with the kernel's weight matmuls, scan over layers; R interleaved rounds
(shuffled), median per-round ratio. Caches filled to half their slots.

    PYTHONPATH=. python data/attention-cpu-s28/step_ab.py [rounds (10)]
"""
import sys, time, numpy as np, jax, jax.numpy as jnp
from specsim.models import transformer as tr, load
t = load("smollm2-135m")
cfg = t.cfg
R = int(sys.argv[1]) if len(sys.argv) > 1 else 10
rng = np.random.default_rng(0)
cases = [(1, 256, 1), (1, 1024, 1), (1, 256, 5), (8, 256, 1), (8, 1024, 1), (8, 1024, 5)]
fns = {}
for B, S, T in cases:
    cache = tr.init_cache(cfg, B, S)
    cache = tr.KVCache(jnp.asarray(rng.standard_normal(cache.k.shape).astype(np.float32)),
                       jnp.asarray(rng.standard_normal(cache.v.shape).astype(np.float32)),
                       jnp.full((B,), S // 2, jnp.int32))
    toks = jnp.asarray(rng.integers(0, cfg.vocab_size, (B, T)), jnp.int32)
    for name in ("kernel", "xla"):
        orig = tr._attention_by_kernel
        if name == "xla":
            tr._attention_by_kernel = lambda *a: False
        # the cache donated and returned, as in the decode loops (else XLA copies it to
        # write the new keys); each call writes the same slots (length reset)
        f = jax.jit(lambda p, tk, c: tr.forward(p, cfg, tk, c._replace(length=c.length - T))[1],
                    donate_argnums=2)
        cache = jax.tree.map(jnp.copy, cache)
        cache = f(t.params, toks, cache._replace(length=cache.length + T))   # compiled under the switch
        jax.block_until_ready(cache)
        tr._attention_by_kernel = orig
        fns[(B, S, T, name)] = (f, toks, cache)
ratios = {c: [] for c in cases}
times = {k: [] for k in fns}
for r in range(R):
    order = list(fns)
    rng.shuffle(order)
    got = {}
    for key in order:
        f, toks, cache = fns[key]
        t0 = time.perf_counter()
        for _ in range(5):
            cache = f(t.params, toks, cache)
        jax.block_until_ready(cache)
        got[key] = (time.perf_counter() - t0) / 5
        fns[key] = (f, toks, cache)
        times[key].append(got[key])
    for c in cases:
        ratios[c].append(got[(*c, "kernel")] / got[(*c, "xla")])
print(f"jax {jax.__version__}, {R} rounds, each time the mean of 5 calls")
for c in cases:
    B, S, T = c
    k, x = np.median(times[(*c, "kernel")]), np.median(times[(*c, "xla")])
    q = np.array(ratios[c])
    print(f"batch {B}, {S} slots, {T} new token(s): kernel attention {k*1e3:.2f} ms, XLA {x*1e3:.2f} ms, "
          f"ratio {np.median(q):.3f} (range {q.min():.3f}-{q.max():.3f})")
