"""Compile time of layer-skip Goodput: the late-primed loop as landed (off loop twice)
against a variant with one off loop carrying a zero draft state."""
import sys, time, collections
from functools import partial
import jax, jax.numpy as jnp
from jax import monitoring
from specsim import decode, experiment, models
from specsim import policies as P
import pathlib
sys.path.insert(0, str(pathlib.Path(__file__).parent))
import dup_off_variant as V

durations = collections.defaultdict(list)
monitoring.register_event_duration_secs_listener(lambda e, s, **_: durations[e].append(s))
orig = decode._late_primed_loop
single = V.single
target, prompt, d, pol, kw = V.setup()
decode.generate_autoregressive(target, prompt, 8, **kw)
rows = collections.defaultdict(list)
outs = {}
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    for name, fn in (("two", orig), ("one", single)):
        decode._late_primed_loop = fn
        jax.clear_caches()
        decode.generate_autoregressive(target, prompt, 8, **kw)   # prefill recompiled
        durations.clear()
        res = decode.generate_speculative(target, d, prompt, 40, policy=pol, **kw)
        xla = durations["/jax/core/compile/backend_compile_duration"]
        rows[name].append((res.compile_s, max(xla)))
        outs[name] = res.tokens if hasattr(res, "tokens") else None
        print(name, f"compile_s {res.compile_s:.2f} biggest XLA {max(xla):.2f}", flush=True)
for name, v in rows.items():
    import statistics
    print(name, "median compile_s", statistics.median(x[0] for x in v),
          "median XLA", statistics.median(x[1] for x in v))
