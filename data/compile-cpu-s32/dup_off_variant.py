"""What the scripts here share: `single`, the late-primed loop with one off loop carrying
a zero draft state (the variant tried), and `setup`, the layer-skip Goodput call they
compile (SmolLM2-135M, the demo's layer-skip draft, K_max 4, 256 slots)."""
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



def setup():
    """(target, prompt, drafter, policy, generate keywords)."""
    from specsim import experiment, models
    from specsim import policies as P
    from specsim.drafters import layer_skip_drafter

    target = models.load("smollm2-135m")
    prompt = [target.tokenizer.encode("def fibonacci(n):")]
    d = layer_skip_drafter(target, experiment.default_layer_skip(target.cfg.n_layers))
    pol = P.Goodput(k_max=4, costs=P.Costs(t_draft=0.3,
                                           t_target=(1.0, 1.01, 1.06, 1.16, 1.17)))
    return target, prompt, d, pol, dict(eos_token_id=None, cache_len=256)
