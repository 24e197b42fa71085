"""Loop programs only (the prefills run outside the timing): plain decoding's loop and
the policy program with Goodput off throughout (K = 0 every iteration), this commit's
("new") and session 27's ("orig", specsim/decode.py at 4e31922), at 8 and NLONG (default 40) new tokens,
R interleaved rounds (shuffled each round, one warm-up round). The time per token is the
slope, the per-call cost the intercept at 1 token.

    PYTHONPATH=. python data/policies-cpu-s28/loop_only.py <batch> <cache_len> <layer-skip|ngram> <rounds> [NLONG]
"""
import sys, time, importlib.util, numpy as np, jax, jax.numpy as jnp
from specsim import decode, models, workloads, experiment, policies as P
from specsim.drafters import layer_skip_drafter, NGramDrafter
import subprocess, tempfile, pathlib
src = subprocess.run(["git", "show", "4e31922:specsim/decode.py"], capture_output=True, text=True, check=True).stdout
path = pathlib.Path(tempfile.mkdtemp()) / "decode_s27.py"; path.write_text(src)
spec = importlib.util.spec_from_file_location("specsim.decode_s27", path)
orig = importlib.util.module_from_spec(spec); spec.loader.exec_module(orig)
t = models.load("smollm2-135m")
B, S, which, R = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
NLONG = int(sys.argv[5]) if len(sys.argv) > 5 else 40
d = NGramDrafter(t.cfg.vocab_size, n=3) if which == "ngram" else layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers))
prompt = [t.tokenizer.encode(workloads.prompt_text(k, t.tokenizer)) for k in workloads.KINDS * 4][:B]
pol = P.Goodput(k_max=4, costs=P.Costs(t_draft=1.0, t_target=(1.0,) + (1.2,) * 4))
kw = dict(eos_token_id=None, cache_len=S)

def ar_loop(n):
    cfg = t.cfg
    enc = [list(p) for p in prompt]
    plan = decode.plan_shapes(enc, n, 0, [(cfg.max_seq_len, "x")], S)
    arr, lens = decode._pad(enc, plan.padded_prompt)
    sp = decode.SamplingParams.make(0.0, 0, 1.0, vocab_size=cfg.vocab_size)
    args = (t.params, sp, jnp.asarray(arr), jnp.asarray(lens), jnp.int32(n), jnp.int32(-1), jax.random.PRNGKey(0))
    start, _ = decode._prefill_program(*args, cfg=cfg, S=S)
    jax.block_until_ready(start)
    return lambda: decode._autoregressive_program(t.params, sp, args[3], args[4], args[5], start, cfg=cfg, S=S, I=plan.iterations)

def pol_loop(mod, n):
    loop = mod.speculative_loop(t, d, prompt, n, policy=pol, **kw)
    jax.block_until_ready(loop.args)
    return lambda: loop.program(*loop.args, **loop.static)

names = ["ar", "new", "orig"]
times = {(nm, n): [] for nm in names for n in (8, NLONG)}
rng = np.random.default_rng(0)
for r in range(R + 1):
    jobs = [(nm, n) for nm in names for n in (8, NLONG)]
    rng.shuffle(jobs)
    for nm, n in jobs:
        f = ar_loop(n) if nm == "ar" else pol_loop(decode if nm == "new" else orig, n)
        t0 = time.perf_counter(); out = f(); jax.block_until_ready(out); dt = time.perf_counter() - t0
        del out
        if r: times[(nm, n)].append(dt)
for nm in names:
    a, b = np.median(times[(nm, 8)]), np.median(times[(nm, NLONG)])
    print(f"{which} batch {B} {S} slots {nm}: 8 tokens {a:.3f} s, {NLONG} tokens {b:.3f} s, per token {(b-a)/(NLONG-8)*1000:.2f} ms, intercept {a - 7*(b-a)/(NLONG-8):.3f} s")
