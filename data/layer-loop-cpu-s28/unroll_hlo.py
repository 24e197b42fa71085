"""The unrolled decode step at batch 8 and 1024 slots, compiled: every op of >= 4 MB by
shape and kind (each layer's keys and values are sliced out of the stacked cache by a
fusion of their own, i.e. copied, under unroll as under scan).

    PYTHONPATH=. python data/layer-loop-cpu-s28/unroll_hlo.py
"""
import re, jax, jax.numpy as jnp
from specsim.models import transformer as tr, load
t = load("smollm2-135m").with_layer_loop("unroll"); cfg = t.cfg
B, S = 8, 1024
cache = tr.init_cache(cfg, B, S)
f = jax.jit(lambda p, tk, c: tr.forward(p, cfg, tk, c)[1], donate_argnums=2)
txt = f.lower(t.params, jnp.zeros((B, 1), jnp.int32), cache).compile().as_text()
import collections
cnt = collections.Counter()
for l in txt.splitlines():
    m = re.search(r'= (f32\[[\d,]+\])\S* (\S+?)\(', l)
    if m:
        dims = [int(x) for x in m.group(1)[4:-1].split(',')]
        n = 1
        for x in dims: n *= x
        if n * 4 >= 4e6: cnt[(m.group(1), m.group(2))] += 1
for k, v in sorted(cnt.items()): print(v, k)
