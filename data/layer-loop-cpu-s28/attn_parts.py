"""One layer's attention of SmolLM2-135M alone (decode, one new token), jitted: the pairs form
(the default for few kv heads), the grouped form, the scores dot of the pairs form alone,
and a plain read (sum) of the same keys and values; mean of 20 calls.

    PYTHONPATH=. python data/layer-loop-cpu-s28/attn_parts.py
"""
import time, numpy as np, jax, jax.numpy as jnp, math
from specsim.models import transformer as tr, load
t = load("smollm2-135m"); cfg = t.cfg
rng = np.random.default_rng(0)
def bench(f, *a, n=20):
    jax.block_until_ready(f(*a))
    t0 = time.perf_counter()
    for _ in range(n): out = f(*a)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / n * 1e3
for B, S in ((8, 256), (8, 1024), (1, 1024)):
    G, E, H = cfg.n_kv_heads, cfg.head_dim, cfg.n_heads
    k = jnp.asarray(rng.standard_normal((B, S, G, E)).astype(np.float32))
    v = jnp.asarray(rng.standard_normal((B, S, G, E)).astype(np.float32))
    q = jnp.asarray(rng.standard_normal((B, 1, H, E)).astype(np.float32))
    pos = jnp.full((B, 1), S // 2, jnp.int32)
    pairs = jax.jit(lambda q, k, v, p: tr._attention_pairs(q, k, v, p, cfg))
    grouped = jax.jit(lambda q, k, v, p: tr._attention_grouped(q, k, v, p, cfg))
    rd = jax.jit(lambda k, v: jnp.sum(k) + jnp.sum(v))
    scores_only = jax.jit(lambda q, k: jax.lax.dot_general(k, q.reshape(B, 1, G, H // G, E), (((3,), (4,)), ((0,), (0,)))))
    mb = 2 * B * S * G * E * 4 / 1e6
    print(f"B {B} S {S}: K+V {mb:.1f} MB; pairs {bench(pairs, q, k, v, pos):.3f} ms, grouped {bench(grouped, q, k, v, pos):.3f} ms, "
          f"scores dot only {bench(scores_only, q, k):.3f} ms, read K+V {bench(rd, k, v):.3f} ms  (x30 layers)")
