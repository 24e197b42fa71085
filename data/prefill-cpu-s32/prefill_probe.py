"""The draft model's prefill as the run pays it (decode._drafter_prefill_program) against
the one-pass forward call the in-run demo timed it with (bench.make_forward_call: logits
of every prompt token through the head), interleaved, wall clock, medians."""
import sys, time, numpy as np, jax, jax.numpy as jnp
from specsim import bench, decode, models, experiment, workloads
from specsim.drafters import layer_skip_drafter
from specsim.models import Model
R = int(sys.argv[1]) if len(sys.argv) > 1 else 15
for name, P, S, B in (("smollm2-135m", 32, 128, 1), ("smollm2-135m", 128, 256, 1), ("smollm2-135m", 32, 128, 4)):
    t = models.load(name)
    d = layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers))
    m = Model(d.cfg, d.params, None, "x")
    full, _ = bench.make_forward_call(m, P, B, S)
    rows = [t.tokenizer.encode(workloads.prompt_text(k, t.tokenizer))[:P] for k in workloads.KINDS * 4][:B]
    arr, lens = decode._pad(rows, P)
    arr, lens = jnp.asarray(arr), jnp.asarray(lens)
    active = jnp.ones((B,), bool)
    prog = lambda: decode._drafter_prefill_program(d, arr, lens, None, active, S=S)
    jax.block_until_ready(prog())
    ts = {"forward call (head)": [], "drafter prefill program": []}
    for r in range(R):
        for k, f in zip(ts, (full, prog)):
            t0 = time.perf_counter(); out = f(); jax.block_until_ready(out); ts[k].append(time.perf_counter() - t0)
            del out
    print(f"batch {B}, P {P}, S {S}:", ", ".join(f"{k} {np.median(v)*1e3:.1f} ms" for k, v in ts.items()),
          f"ratio {np.median(ts['forward call (head)'])/np.median(ts['drafter prefill program']):.2f}", flush=True)
