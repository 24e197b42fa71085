"""SmolLM2-135M forward passes compiled with specsim's XLA:CPU options
(`specsim.models.compiler.CPU_OPTIONS`) and with XLA's defaults, in one process:
step time (15 alternated calls each, medians, and the median of per-call ratios) and
compile time, at batch 1 and 8, 1 to 16 new tokens, 256 to 1024 slots.

    PYTHONPATH=. python data/compile-cpu-s29/step_ab.py [rounds]
"""
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from specsim.models import compiler, forward, init_cache, load

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 15
m = load("smollm2-135m").with_layer_loop("scan")
cfg, params = m.cfg, m.params
OPTS = {"xla": None, "specsim": dict(compiler.CPU_OPTIONS)}


def make(batch, n_new, context, cache_len, opts):
    fill = jax.jit(forward, static_argnums=1, donate_argnums=3)
    cache = init_cache(cfg, batch, cache_len)
    ctx = jnp.asarray(np.random.default_rng(0).integers(3, cfg.vocab_size, (batch, context)),
                      jnp.int32)
    _, cache = fill(params, cfg, ctx, cache)
    tokens = jnp.ones((batch, n_new), jnp.int32)
    t0 = time.perf_counter()
    step = jax.jit(forward, static_argnums=1, donate_argnums=3).lower(
        params, cfg, tokens, cache).compile(compiler_options=opts)
    compile_s = time.perf_counter() - t0
    length = np.asarray(cache.length)
    state = {"cache": cache}

    def call():
        logits, c = step(params, tokens, state["cache"])
        state["cache"] = c._replace(length=jnp.asarray(length))
        return logits

    jax.block_until_ready(call())
    return call, compile_s


for batch, n_new, context, cache_len in [(1, 1, 256, 512), (1, 5, 256, 512), (1, 16, 256, 512),
                                          (8, 1, 900, 1024), (8, 5, 200, 256)]:
    calls = {k: make(batch, n_new, context, cache_len, o) for k, o in OPTS.items()}
    ts = {k: [] for k in OPTS}
    for r in range(ROUNDS):
        for k in (list(OPTS) if r % 2 else list(reversed(list(OPTS)))):
            t0 = time.perf_counter()
            jax.block_until_ready(calls[k][0]())
            ts[k].append(time.perf_counter() - t0)
    ratio = np.median(np.array(ts["specsim"]) / np.array(ts["xla"]))
    print(f"batch {batch} n_new {n_new:2d} context {context}/{cache_len}: "
          f"xla {1e3 * np.median(ts['xla']):.2f} ms, specsim {1e3 * np.median(ts['specsim']):.2f} ms,"
          f" specsim/xla {ratio:.3f}; compile xla {calls['xla'][1]:.2f} s, "
          f"specsim {calls['specsim'][1]:.2f} s", flush=True)
