from functools import partial
import jax, jax.numpy as jnp
from specsim import decode

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

