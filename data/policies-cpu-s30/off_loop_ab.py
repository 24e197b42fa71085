"""Loop programs only (prefills outside the timing) at batch B and S cache slots: plain
decoding's loop and Goodput's policy program off throughout (t_draft 1: K = 0 every
iteration), at 8 and NLONG new tokens, R interleaved rounds (shuffled, one warm-up); the
per-token slope and the intercept of each, by the wall and the CPU clock.

    PYTHONPATH=. python data/policies-cpu-s30/off_loop_ab.py <B> <S> <layer-skip|ngram|feature-head> <R> [NLONG]

feature-head (added in session 31): the committed feature head under Goodput at the
pass costs session 31's grid measured at batch 8 (t(n)/t(1) = 1, 1.486, 1.637, 1.997,
2.132, draft step 0.052), which keep it off throughout while its first drafts are judged
on every 6th off iteration (paid draft steps).

The README's numbers were taken with plain decoding's loop built inline from
`decode`'s private programs; `decode.autoregressive_loop` (added after) builds the same
program with the same arguments.
"""
import sys, time, numpy as np, jax, jax.numpy as jnp
from specsim import decode, models, workloads, experiment, policies as P
from specsim.drafters import layer_skip_drafter, NGramDrafter
t = models.load("smollm2-135m")
B, S, which, R = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
NLONG = int(sys.argv[5]) if len(sys.argv) > 5 else 40
pol = P.Goodput(k_max=4, costs=P.Costs(t_draft=1.0, t_target=(1.0,) + (1.2,) * 4))
if which == "feature-head":
    from specsim.experiment.drafter_study import feature_head, find_feature_head
    d = feature_head(find_feature_head("smollm2-135m"), t).drafter
    pol = P.Goodput(k_max=4, costs=P.Costs(t_draft=0.052, t_target=(1.0, 1.486, 1.637, 1.997, 2.132)))
else:
    d = NGramDrafter(t.cfg.vocab_size, n=3) if which == "ngram" else layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers))
prompt = [t.tokenizer.encode(workloads.prompt_text(k, t.tokenizer)) for k in workloads.KINDS * 4][:B]
kw = dict(eos_token_id=None, cache_len=S)
def ar_loop(n):
    loop = decode.autoregressive_loop(t, prompt, n, **kw)
    jax.block_until_ready(loop.args)
    return lambda: loop.program(*loop.args, **loop.static)
def pol_loop(n):
    loop = decode.speculative_loop(t, d, prompt, n, policy=pol, **kw)
    jax.block_until_ready(loop.args)
    return lambda: loop.program(*loop.args, **loop.static)
times = {(nm, n): [] for nm in ("ar", "off") for n in (8, NLONG)}
rng = np.random.default_rng(0)
for r in range(R + 1):
    jobs = list(times)
    rng.shuffle(jobs)
    for nm, n in jobs:
        f = ar_loop(n) if nm == "ar" else pol_loop(n)
        t0 = time.perf_counter(); c0 = time.process_time()
        out = f(); jax.block_until_ready(out)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        del out
        if r: times[(nm, n)].append((dt, dc))
for nm in ("ar", "off"):
    for j, clock in enumerate(("wall", "cpu")):
        a = np.median([x[j] for x in times[(nm, 8)]]); b = np.median([x[j] for x in times[(nm, NLONG)]])
        print(f"{which} batch {B} {S} slots {nm} {clock}: per token {(b-a)/(NLONG-8)*1000:.2f} ms, intercept {a - 7*(b-a)/(NLONG-8):.3f} s", flush=True)
