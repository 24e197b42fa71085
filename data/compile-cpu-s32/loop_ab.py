"""Loop programs only, Goodput off throughout (layer-skip, batch B, S slots): plain
decoding's loop, the landed late-primed program ("two": off loop compiled twice) and the
one-off-loop variant ("one": a zero draft state carried, not returned)."""
import sys, time, importlib.util, pathlib, numpy as np, jax, jax.numpy as jnp
sys.path.insert(0, str(pathlib.Path(__file__).parent))
from specsim import decode, models, workloads, experiment, policies as P
from specsim.drafters import layer_skip_drafter
import dup_off_variant as V
spec = importlib.util.spec_from_file_location("specsim.decode_one", pathlib.Path(decode.__file__))
one = importlib.util.module_from_spec(spec); spec.loader.exec_module(one)
one._late_primed_loop = V.single
t = models.load("smollm2-135m")
B, S, R = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
NLONG = int(sys.argv[4]) if len(sys.argv) > 4 else 40
drafting = len(sys.argv) > 5 and sys.argv[5] == "draft"
d = layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers))
prompt = [t.tokenizer.encode(workloads.prompt_text(k, t.tokenizer)) for k in workloads.KINDS * 4][:B]
pol = (P.Goodput(k_max=4, costs=P.Costs(t_draft=0.1, t_target=(1.0,) + (1.05,) * 4)) if drafting
       else P.Goodput(k_max=4, costs=P.Costs(t_draft=1.0, t_target=(1.0,) + (1.2,) * 4)))
kw = dict(eos_token_id=None, cache_len=S)

def ar_loop(n):
    loop = decode.autoregressive_loop(t, prompt, n, **kw)
    jax.block_until_ready(loop.args)
    return lambda: loop.program(*loop.args, **loop.static)

def pol_loop(mod, n):
    loop = mod.speculative_loop(t, d, prompt, n, policy=pol, **kw)
    jax.block_until_ready(loop.args)
    return lambda: loop.program(*loop.args, **loop.static)

names = ["ar", "two", "one"]
times = {(nm, n): [] for nm in names for n in (8, NLONG)}
toks = {}
rng = np.random.default_rng(0)
for r in range(R + 1):
    jobs = [(nm, n) for nm in names for n in (8, NLONG)]
    rng.shuffle(jobs)
    for nm, n in jobs:
        f = ar_loop(n) if nm == "ar" else pol_loop(decode if nm == "two" else one, n)
        t0 = time.perf_counter(); out = f(); jax.block_until_ready(out); dt = time.perf_counter() - t0
        toks[(nm, n)] = np.asarray(out[0].tokens)
        del out
        if r: times[(nm, n)].append(dt)
print("same tokens two/one:", all(np.array_equal(toks[("two", n)], toks[("one", n)]) for n in (8, NLONG)))
for nm in names:
    a, b = np.median(times[(nm, 8)]), np.median(times[(nm, NLONG)])
    print(f"batch {B} {S} slots {'drafting' if drafting else 'off'} {nm}: 8 tokens {a:.3f} s, {NLONG} tokens {b:.3f} s, per token {(b-a)/(NLONG-8)*1000:.2f} ms, intercept {a - 7*(b-a)/(NLONG-8):.3f} s")
