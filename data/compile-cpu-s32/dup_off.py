"""Compile time of layer-skip Goodput: the late-primed loop as landed (off loop twice)
against a variant with one off loop carrying a zero draft state."""
import sys, time, collections
from functools import partial
import jax, jax.numpy as jnp
from jax import monitoring
from specsim import decode, experiment, models
from specsim import policies as P
from specsim.drafters import layer_skip_drafter

durations = collections.defaultdict(list)
monitoring.register_event_duration_secs_listener(lambda e, s, **_: durations[e].append(s))
orig = decode._late_primed_loop

def single(run, cfg, policy, step, prompts, S, I, passes, carry):
    drafter = run.drafter
    off_loop = partial(decode._policy_off_loop, run, cfg, policy, I)
    shapes = jax.eval_shape(lambda: drafter.init_state(prompts, run.prompt_lens, S))
    dz = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    def body(lc):
        (c, cache, dstate, pstate, stats, pstats), primed = lc
        c, cache, pstate, stats, pstats = off_loop((c, cache, pstate, stats, pstats, ()))[:5]
        def prime(s):
            _, ps = s
            return drafter.init_state(prompts, run.prompt_lens, S), ps._replace(
                draft_steps=ps.draft_steps + passes)
        go = decode._running(c, I)
        dstate, pstats = decode._once_if(go & ~primed, prime, (dstate, pstats))
        inner = decode._once_if(go, step, (c, cache, dstate, pstate, stats, pstats))
        return inner, primed | go
    c, cache, pstate, stats, pstats = carry
    (c, cache, _, pstate, stats, pstats), _ = jax.lax.while_loop(
        lambda lc: decode._running(lc[0][0], I), body,
        ((c, cache, dz, pstate, stats, pstats), jnp.bool_(False)))
    return c, cache, pstate, stats, pstats

target = models.load("smollm2-135m")
prompt = [target.tokenizer.encode("def fibonacci(n):")]
d = layer_skip_drafter(target, experiment.default_layer_skip(target.cfg.n_layers))
pol = P.Goodput(k_max=4, costs=P.Costs(t_draft=0.3, t_target=(1.0, 1.01, 1.06, 1.16, 1.17)))
kw = dict(eos_token_id=None, cache_len=256)
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
