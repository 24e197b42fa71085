"""Compile time of Goodput's policy program (K_max 4, layer-skip draft, "auto" widths as
`generate_speculative` compiles it), this commit's (the late-primed loop: two off loops)
against session 27's (specsim/decode.py at 4e31922: one off loop, a zero state carried),
alternated, R pairs; the lowered program compiled each time (no persistent cache).

    PYTHONPATH=. python data/policies-cpu-s28/compile_ab.py [pairs (4)]
"""
import sys, time, importlib.util, subprocess, tempfile, pathlib
import numpy as np
import jax
from specsim import decode, models, workloads, experiment, policies as P
from specsim.drafters import layer_skip_drafter
src = subprocess.run(["git", "show", "4e31922:specsim/decode.py"], capture_output=True, text=True, check=True).stdout
path = pathlib.Path(tempfile.mkdtemp()) / "decode_s27.py"; path.write_text(src)
spec = importlib.util.spec_from_file_location("specsim.decode_s27", path)
orig = importlib.util.module_from_spec(spec); spec.loader.exec_module(orig)
t = models.load("smollm2-135m")
d = layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers))
prompt = [t.tokenizer.encode(workloads.prompt_text("code", t.tokenizer))]
pol = P.Goodput(k_max=4, costs=P.Costs(t_draft=0.86, t_target=(1.0, 1.01, 1.06, 1.16, 1.17)))
R = int(sys.argv[1]) if len(sys.argv) > 1 else 4
times = {"new": [], "s27": []}
for r in range(R):
    for name, mod in (("new", decode), ("s27", orig)) if r % 2 == 0 else (("s27", orig), ("new", decode)):
        lowered = mod.speculative_loop(t, d, prompt, 40, policy=pol, eos_token_id=None).lower()
        jax.clear_caches()                  # compiles are cached in memory
        t0 = time.perf_counter(); lowered.compile(); times[name].append(time.perf_counter() - t0)
n, o = np.array(times["new"]), np.array(times["s27"])
print(f"XLA compile of the lowered program, {R} alternated pairs: new {np.median(n):.2f} s "
      f"({', '.join(f'{x:.2f}' for x in n)}), session 27 {np.median(o):.2f} s "
      f"({', '.join(f'{x:.2f}' for x in o)}); ratio of medians {np.median(n)/np.median(o):.3f}")
