"""Full SmolLM2 forward, one process, per-compile options: YNN fusions (default) vs none,
tied head vs an untied [D, V] copy. Interleaved rounds, wall clock, medians."""
import time, sys, dataclasses, numpy as np, jax, jax.numpy as jnp
from specsim.models.transformer import KVCache, arrange_layers, forward, init_cache
from specsim.models.embedded import load_smollm2
m = load_smollm2(); cfg = m.cfg
P = arrange_layers(m.params, cfg)
Pu = dict(P); Pu["lm_head"] = jnp.asarray(np.asarray(P["embed"]).T.copy())
S = 128
def call(params, w, b, opts):
    toks = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (b, w)), jnp.int32)
    cache = init_cache(cfg, b, S); cache = cache._replace(length=jnp.full((b,), S - w, jnp.int32))
    def step(params, tokens, cache):
        logits, new = forward(params, cfg, tokens, cache)
        return logits, KVCache(new.k, new.v, cache.length)
    c = jax.jit(step, donate_argnums=(2,)).lower(params, toks, cache).compile(compiler_options=opts)
    st = {"c": cache}
    def f():
        lg, st["c"] = c(params, toks, st["c"]); return lg
    return f
NO = {"xla_cpu_experimental_ynn_fusion_type": ""}
shapes = [(1, 1), (2, 1), (5, 1), (1, 4), (5, 4)]
jobs = {}
for (w, b) in shapes:
    jobs[("tied-ynn", w, b)] = call(P, w, b, {})
    jobs[("untied-ynn", w, b)] = call(Pu, w, b, {})
    jobs[("untied-noynn", w, b)] = call(Pu, w, b, NO)
outs = {k: np.asarray(j()) for k, j in jobs.items()}
for (w, b) in shapes:
    r = outs[("tied-ynn", w, b)]
    print(w, b, "max|diff| untied-ynn", float(np.abs(outs[("untied-ynn", w, b)] - r).max()),
          "untied-noynn", float(np.abs(outs[("untied-noynn", w, b)] - r).max()))
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
rng = np.random.default_rng(0); keys = list(jobs); times = {k: [] for k in keys}
for r in range(rounds):
    for i in rng.permutation(len(keys)):
        k = keys[i]; t0 = time.perf_counter(); jax.block_until_ready(jobs[k]()); times[k].append(time.perf_counter() - t0)
for (w, b) in shapes:
    base = np.array(times[("tied-ynn", w, b)])
    print(f"w{w} b{b}: " + "  ".join(
        f"{v} {np.median(times[(v, w, b)])*1e3:.1f} ms (ratio {np.median(np.array(times[(v, w, b)]) / base):.2f})"
        for v in ("tied-ynn", "untied-ynn", "untied-noynn")))
