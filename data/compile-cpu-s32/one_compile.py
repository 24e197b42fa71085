import sys, collections, jax
from jax import monitoring
from specsim import decode, experiment, models
from specsim import policies as P
from specsim.drafters import layer_skip_drafter
durations = collections.defaultdict(list)
monitoring.register_event_duration_secs_listener(lambda e, s, **_: durations[e].append(s))
if "inner" in sys.argv[1:]:
    decode._policy_off_loop = jax.jit(decode._policy_off_loop, static_argnums=(1, 2, 3))
target = models.load("smollm2-135m")
prompt = [target.tokenizer.encode("def fibonacci(n):")]
d = layer_skip_drafter(target, experiment.default_layer_skip(target.cfg.n_layers))
pol = P.Goodput(k_max=4, costs=P.Costs(t_draft=0.3, t_target=(1.0, 1.01, 1.06, 1.16, 1.17)))
kw = dict(eos_token_id=None, cache_len=256)
decode.generate_autoregressive(target, prompt, 8, **kw)
durations.clear()
res = decode.generate_speculative(target, d, prompt, 40, policy=pol, **kw)
print(f"{res.compile_s:.2f} {max(durations['/jax/core/compile/backend_compile_duration']):.2f}")
