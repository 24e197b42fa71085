"""Goodput off throughout with the layer-skip draft model at batch 8, 1024 cache slots:
four calls one after another (wall time, compile time), then plain decoding twice.
Whether the policy program's extra cost is per call or per iteration.

    NNEW=20 PYTHONPATH=. python data/policies-cpu-s27/full/off_per_call.py
"""
import os, time
from specsim import decode, models, workloads, experiment, policies as P
from specsim.drafters import layer_skip_drafter
t = models.load("smollm2-135m")
d = layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers))
prompt = [t.tokenizer.encode(workloads.prompt_text(k, t.tokenizer)) for k in workloads.KINDS * 4][:8]
pol = P.Goodput(k_max=4, costs=P.Costs(t_draft=1.0, t_target=(1.0,) + (1.2,) * 4))
n = int(os.environ.get("NNEW", "20"))
for i in range(4):
    t0 = time.perf_counter()
    r = decode.generate_speculative(t, d, prompt, n, policy=pol, eos_token_id=None, cache_len=1024)
    print(i, f"wall {time.perf_counter() - t0:.2f} s compile_s {r.compile_s:.2f} draft_passes {r.draft_passes}", flush=True)
for i in range(2):
    t0 = time.perf_counter()
    r = decode.generate_autoregressive(t, prompt, n, eos_token_id=None, cache_len=1024)
    print("ar", i, f"wall {time.perf_counter() - t0:.2f} s compile_s {r.compile_s:.2f}", flush=True)
