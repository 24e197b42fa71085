"""A decode step (and a 5-token verify pass) of SmolLM2-135M with each layer's attention by
`kernels.cache_attention` (the stacked cache read in place, only the slots up to each
row's position) against XLA's (`transformer._attention` on the layer's slice, which XLA
copies out first under the layer scan), both with the kernel's weight matmuls where they
apply, scan over layers; R interleaved rounds (shuffled), median per-round ratio. Each
row's context fills ``fill`` of the cache's slots (default 1/2; random keys and values).

    PYTHONPATH=. python data/attention-cpu-s31/step_ab.py [rounds (10)] [fill (0.5)]

Session 28's `data/attention-cpu-s28/step_ab.py` measured its kernel the same way.
"""
import os, sys, time, numpy as np, jax, jax.numpy as jnp
from specsim.models import kernels, transformer as tr, load
t = load("smollm2-135m")
cfg = t.cfg
R = int(sys.argv[1]) if len(sys.argv) > 1 else 10
fill = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
rng = np.random.default_rng(0)
cases = [(1, 256, 1), (1, 1024, 1), (1, 256, 5), (8, 256, 1), (8, 1024, 1), (8, 1024, 5)]
fns = {}
for B, S, T in cases:
    cache = tr.init_cache(cfg, B, S)
    ctx = int(S * fill)
    cache = tr.KVCache(jnp.asarray(rng.standard_normal(cache.k.shape).astype(np.float32)),
                       jnp.asarray(rng.standard_normal(cache.v.shape).astype(np.float32)),
                       jnp.full((B,), ctx, jnp.int32))
    toks = jnp.asarray(rng.integers(0, cfg.vocab_size, (B, T)), jnp.int32)
    for name in ("kernel", "xla"):
        os.environ[kernels.ATTENTION_SWITCH] = "1" if name == "kernel" else "0"
        # the cache donated and returned, as in the decode loops (else XLA copies it to
        # write the new keys); each call writes the same slots (length reset)
        f = jax.jit(lambda p, tk, c: tr.forward(p, cfg, tk, c._replace(length=c.length - T))[1],
                    donate_argnums=2)
        cache = jax.tree.map(jnp.copy, cache)
        cache = f(t.params, toks, cache._replace(length=cache.length + T))   # traced under the switch
        jax.block_until_ready(cache)
        text = f.lower(t.params, toks, cache).as_text()
        assert (kernels.TARGET_ATTENTION in text) == (name == "kernel"), name
        fns[(B, S, T, name)] = (f, toks, cache)
os.environ.pop(kernels.ATTENTION_SWITCH)
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
print(f"context {fill:.2f} of the slots, {R} rounds; kernel / XLA attention, median (range); "
      f"step times median ms")
print("| batch, slots, new tokens | kernel / XLA (range) | kernel ms | XLA ms |")
print("|---|---|---|---|")
for c in cases:
    x = np.array(ratios[c])
    print(f"| {c[0]}, {c[1]}, {c[2]} | {np.median(x):.3f} ({x.min():.3f}–{x.max():.3f}) | "
          f"{np.median(times[(*c, 'kernel')]) * 1e3:.1f} | {np.median(times[(*c, 'xla')]) * 1e3:.1f} |",
          flush=True)
