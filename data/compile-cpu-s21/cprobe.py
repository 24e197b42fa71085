import time, sys, collections
import jax, jax.numpy as jnp
from jax import monitoring
from specsim import models
from specsim.models.transformer import forward_hidden, project, init_cache
from specsim.sampling import SamplingParams
d = collections.defaultdict(list)
monitoring.register_event_duration_secs_listener(lambda e, s, **_: d[e].append(s))
t = models.load("smollm2-135m").with_layer_loop(sys.argv[1] if len(sys.argv) > 1 else "scan")
cfg, p = t.cfg, t.params
sp = SamplingParams.make(0.0, 0, 1.0, vocab_size=cfg.vocab_size)
B, S = 1, 256
cache = init_cache(cfg, B, S)
def mk(widths, head=True):
    def f(p, cache, toks):
        out = []
        for w in widths:
            h, c = forward_hidden(p, cfg, toks[:, :w], cache)
            if head:
                out.append(sp.probs(project(p, cfg, h)).sum())
            else:
                out.append(h.sum())
            cache = c
        return sum(out), cache
    return jax.jit(f)
toks = jnp.zeros((B, 5), jnp.int32)
for name, f in [("w5 head", mk((5,))), ("w5 nohead", mk((5,), False)), ("w1..5 head", mk((1,2,3,4,5))),
                ("w1..5 nohead", mk((1,2,3,4,5), False)), ("w5 head again", mk((5,)))]:
    for rep in range(2):
        jax.clear_caches(); d.clear()
        t0 = time.perf_counter(); lo = f.lower(p, cache, toks); t1 = time.perf_counter(); lo.compile(); t2 = time.perf_counter()
        print(f"{name:16s} lower {t1-t0:.2f} compile {t2-t1:.2f}", flush=True)
