"""One cold compile of layer-skip Goodput (`dup_off_variant.setup`) in a fresh process:
prints compile_s and the biggest XLA program's backend compile. `inner`: the off loop as an
inner jax.jit. Run per XLA_FLAGS setting (split_ab.txt):

    XLA_FLAGS=--xla_cpu_parallel_codegen_split_count=2 PYTHONPATH=. python data/compile-cpu-s32/one_compile.py
"""
import sys, collections, jax
from jax import monitoring
from specsim import decode, experiment, models
from specsim import policies as P
import pathlib
sys.path.insert(0, str(pathlib.Path(__file__).parent))
import dup_off_variant as V
durations = collections.defaultdict(list)
monitoring.register_event_duration_secs_listener(lambda e, s, **_: durations[e].append(s))
if "inner" in sys.argv[1:]:
    decode._policy_off_loop = jax.jit(decode._policy_off_loop, static_argnums=(1, 2, 3))
target, prompt, d, pol, kw = V.setup()
decode.generate_autoregressive(target, prompt, 8, **kw)
durations.clear()
res = decode.generate_speculative(target, d, prompt, 40, policy=pol, **kw)
print(f"{res.compile_s:.2f} {max(durations['/jax/core/compile/backend_compile_duration']):.2f}")
