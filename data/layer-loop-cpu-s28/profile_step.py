"""Per-op profile of SmolLM2-135M's decode step (scan, the cache donated) at a batch and
cache length: `jax.profiler` traces 10 steps, and the XLA:CPU thunks' events are summed
by name (the op or fusion each runs) over XLA's threads, top 20, with their share of
all ops' thread time.

    PYTHONPATH=. python data/layer-loop-cpu-s28/profile_step.py <batch> <cache_len>
"""
import collections, glob, os, sys, tempfile, time
import numpy as np, jax, jax.numpy as jnp
from specsim.models import transformer as tr, load
t = load("smollm2-135m"); cfg = t.cfg
B, S = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
base = tr.init_cache(cfg, B, S)
cache = tr.KVCache(jnp.asarray(rng.standard_normal(base.k.shape).astype(np.float32)),
                   jnp.asarray(rng.standard_normal(base.v.shape).astype(np.float32)),
                   jnp.full((B,), S // 2 + 1, jnp.int32))
toks = jnp.asarray(rng.integers(0, cfg.vocab_size, (B, 1)), jnp.int32)
f = jax.jit(lambda p, tk, c: tr.forward(p, cfg, tk, c._replace(length=c.length - 1))[1],
            donate_argnums=2)
for _ in range(3):
    cache = f(t.params, toks, cache)
jax.block_until_ready(cache)
d = tempfile.mkdtemp()
t0 = time.perf_counter()
with jax.profiler.trace(d):
    for _ in range(10):
        cache = f(t.params, toks, cache)
    jax.block_until_ready(cache)
wall = time.perf_counter() - t0
path = glob.glob(os.path.join(d, "**", "*.xplane.pb"), recursive=True)[0]
prof = jax.profiler.ProfileData.from_file(path)
tot = collections.Counter()
for plane in prof.planes:
    for line in plane.lines:
        for ev in line.events:
            tot[(plane.name, line.name, ev.name)] += ev.duration_ns
names = collections.Counter()
skip = ("ThunkExecutor", "SlinkyThreadPool", "while", "$")
for (plane, line, name), ns in tot.items():
    if line.startswith("tf_XLA") and not name.startswith(skip):
        names[name] += ns                    # summed over XLA's threads
busy = sum(names.values())
print(f"batch {B}, {S} slots: 10 steps traced in {wall*1e3:.0f} ms ({wall*100:.1f} ms a step, "
      f"profiler on); ops' thread time {busy/1e7:.1f} ms a step")
for name, ns in names.most_common(20):
    print(f"{ns/1e7:8.3f} ms/step  {100*ns/busy:5.1f}% of op time  {name[:90]}")
