"""XLA's per-op profile (jax.profiler, CPU thunks) of plain decoding's loop, SmolLM2-135M, 40
new tokens after the workloads' prompts, at batch x slots given as BxS; 3 calls each, medians:
wall and op time per step, and the share of the cache-slice copies (dynamic-slice fusions).

    PYTHONPATH=. python data/attention-cpu-s31/profile_loop.py 1x512 1x2048 8x512 8x2048
    SPECSIM_CPU_ATTENTION=0 PYTHONPATH=. python data/attention-cpu-s31/profile_loop.py ...
"""
import sys, glob, collections, re, time, numpy as np, jax
from jax._src.profiler import ProfileData
from specsim import decode, models, workloads
t = models.load("smollm2-135m")
for spec in sys.argv[1:]:
    B, S = map(int, spec.split("x"))
    prompt = [t.tokenizer.encode(workloads.prompt_text(k, t.tokenizer)) for k in workloads.KINDS * 4][:B]
    loop = decode.autoregressive_loop(t, prompt, 40, eos_token_id=None, cache_len=S); jax.block_until_ready(loop.args)
    jax.block_until_ready(loop.program(*loop.args, **loop.static))
    res = []
    for r in range(3):
        loop = decode.autoregressive_loop(t, prompt, 40, eos_token_id=None, cache_len=S); jax.block_until_ready(loop.args)
        d_ = f"/tmp/specsim-profile/tr_{B}_{S}_{r}"
        with jax.profiler.trace(d_):
            t0 = time.perf_counter(); jax.block_until_ready(loop.program(*loop.args, **loop.static)); w = time.perf_counter() - t0
        pd = ProfileData.from_file(sorted(glob.glob(f"{d_}/**/*.xplane.pb", recursive=True))[-1])
        agg = collections.Counter()
        for plane in pd.planes:
            for line in plane.lines:
                if line.name.startswith("tf_XLA") and not line.name.startswith("tf_XLAPjRt"):
                    for ev in line.events:
                        if ev.name.startswith("ThunkExecutor"): continue
                        agg[re.sub(r"\.\d+$", "", ev.name) if not ev.name.startswith("dynamic-slice") else ev.name] += ev.duration_ns / 1e6
        tot = sum(v for k, v in agg.items() if not k.startswith("while"))
        res.append((w, tot, agg))
    w = np.median([x[0] for x in res]); tot = np.median([x[1] for x in res])
    ds = np.median([sum(v for k, v in a.items() if k.startswith("dynamic-slice")) for _, _, a in res])
    print(f"batch {B} slots {S}: wall {w*1000/39:.1f} ms/step, op time {tot/39:.1f} ms/step, cache slices {ds/39:.2f} ms/step ({ds/tot:.0%} of op time)", flush=True)
    top = collections.Counter(); [top.update(a) for _, _, a in res]
    print("   ", "; ".join(f"{k} {v/3/39:.2f}" for k, v in top.most_common(8)))
