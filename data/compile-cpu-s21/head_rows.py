import time, numpy as np, jax, jax.numpy as jnp
from specsim import models
from specsim.models.transformer import project
from specsim.sampling import SamplingParams
t = models.load("smollm2-135m").with_layer_loop("scan")
cfg, p = t.cfg, t.params
sp = SamplingParams.make(0.0, 0, 1.0, vocab_size=cfg.vocab_size)
fs = {}
for w in (1, 2, 3, 4, 5, 8, 12, 20, 40):
    fs[w] = jax.jit(lambda p, x: sp.probs(project(p, cfg, x)))
xs = {w: jnp.ones((1, w, cfg.d_model), jnp.float32) for w in fs}
for w in fs: fs[w](p, xs[w]).block_until_ready()
ts = {w: [] for w in fs}
for r in range(15):
    for w in fs:
        t0 = time.perf_counter()
        for _ in range(5): fs[w](p, xs[w]).block_until_ready()
        ts[w].append((time.perf_counter() - t0) / 5)
for w in fs: print(w, f"{1e3*np.median(ts[w]):.2f} ms")
