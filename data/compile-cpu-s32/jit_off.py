"""Compile time of layer-skip Goodput with the off loop wrapped in an inner jax.jit
(one lowered function, called from both sites) against the landed program."""
import sys, collections, statistics
from functools import partial
import jax
from jax import monitoring
from specsim import decode, experiment, models
from specsim import policies as P
import pathlib
sys.path.insert(0, str(pathlib.Path(__file__).parent))
import dup_off_variant as V

durations = collections.defaultdict(list)
monitoring.register_event_duration_secs_listener(lambda e, s, **_: durations[e].append(s))
orig = decode._policy_off_loop
inner = jax.jit(orig, static_argnums=(1, 2, 3))
target, prompt, d, pol, kw = V.setup()
rows = collections.defaultdict(list)
for r in range(int(sys.argv[1])):
    for name, fn in (("plain", orig), ("inner-jit", inner)):
        decode._policy_off_loop = fn
        jax.clear_caches()
        decode.generate_autoregressive(target, prompt, 8, **kw)
        durations.clear()
        res = decode.generate_speculative(target, d, prompt, 40, policy=pol, **kw)
        xla = durations["/jax/core/compile/backend_compile_duration"]
        rows[name].append(max(xla))
        print(name, f"compile_s {res.compile_s:.2f} biggest XLA {max(xla):.2f}", flush=True)
for name, v in rows.items():
    print(name, "median XLA", statistics.median(v))
