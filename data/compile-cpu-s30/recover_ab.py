"""XLA compile time of Goodput's policy program (K_max 4, "auto" widths as
`generate_speculative` compiles it) with the recovery probe (session 30's default,
recover 1) and without it (recover None, session 29's policy), alternated, R pairs, for
each drafter; the lowered program compiled each time (no persistent cache).

    PYTHONPATH=. python data/compile-cpu-s30/recover_ab.py [pairs (3)]
"""
import sys, time
import numpy as np
import jax
from specsim import decode, models, workloads, experiment, policies as P
from specsim.drafters import layer_skip_drafter, NGramDrafter, feature_head_drafter
from specsim.experiment.drafter_study import find_feature_head

t = models.load("smollm2-135m")
drafters = {"ngram": NGramDrafter(t.cfg.vocab_size, n=3),
            "layer-skip": layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers)),
            "feature-head": feature_head_drafter(t, find_feature_head(t.cfg.name))}
drafts = {"ngram": 0.0, "layer-skip": 0.86, "feature-head": 0.037}
prompt = [t.tokenizer.encode(workloads.prompt_text("code", t.tokenizer))]
R = int(sys.argv[1]) if len(sys.argv) > 1 else 3
for name, d in drafters.items():
    costs = P.Costs(t_draft=drafts[name], t_target=(1.0, 1.067, 1.159, 1.318, 1.318))
    pols = {"recover": P.Goodput(k_max=4, costs=costs),
            "off": P.Goodput(k_max=4, costs=costs, recover=None)}
    times = {k: [] for k in pols}
    for r in range(R + 1):                      # round 0: warm-up, not kept
        for k in (("recover", "off") if r % 2 else ("off", "recover")):
            lowered = decode.speculative_loop(t, d, prompt, 40, policy=pols[k],
                                              eos_token_id=None).lower()
            jax.clear_caches()
            t0 = time.perf_counter(); lowered.compile(); dt = time.perf_counter() - t0
            if r:
                times[k].append(dt)
    a, b = np.array(times["recover"]), np.array(times["off"])
    print(f"{name}: recover {np.median(a):.2f} s ({', '.join(f'{x:.2f}' for x in a)}), "
          f"off {np.median(b):.2f} s ({', '.join(f'{x:.2f}' for x in b)}); "
          f"ratio of medians {np.median(a) / np.median(b):.3f}", flush=True)
