"""Compile and run time of captured loop programs at XLA:CPU LLVM level default vs 0 (per-compile option).
    .venv-test/bin/python data/compile-cpu-s19/probe_level.py scan   (from the repository root, 503976e..03f3f02)"""
import sys, time, statistics, jax, jax.numpy as jnp, numpy as np
from specsim import decode, experiment, models, policies as P
from specsim.drafters import NGramDrafter, layer_skip_drafter

class Cap(Exception): pass
target = models.load("smollm2-135m").with_layer_loop(sys.argv[1] if len(sys.argv) > 1 else "scan")
prompt = [target.tokenizer.encode("def fibonacci(n):\n    if n < 2:\n        return n\n")]
ls = layer_skip_drafter(target, experiment.default_layer_skip(target.cfg.n_layers))
def capture(name, **kw):
    prog = getattr(decode, name); seen = {}
    def cap(*a, **s):
        seen["c"] = (a, s); raise Cap
    setattr(decode, name, cap)
    try:
        try:
            if name == "_autoregressive_program":
                decode.generate_autoregressive(target, prompt, 64, eos_token_id=None, cache_len=256)
            else:
                decode.generate_speculative(target, ls, prompt, 64, eos_token_id=None, cache_len=256, **kw)
        except Cap: pass
    finally:
        setattr(decode, name, prog)
    return prog, seen["c"]

cases = [("ar", "_autoregressive_program", {}),
         ("fixedK4", "_speculative_program", dict(k=4)),
         ("heur4", "_policy_program", dict(k=4, policy=P.Heuristic(k_init=2, k_max=4)))]
for label, name, kw in cases:
    prog, (a, s) = capture(name, **kw)
    exes = {}
    ct = {"default": [], "O0": []}
    for rep in range(2):
        for lvl in ("default", "O0"):
            prog.clear_cache()
            opts = {} if lvl == "default" else {"xla_backend_optimization_level": 0}
            t0 = time.perf_counter()
            exes[lvl] = prog.lower(*a, **s).compile(compiler_options=opts)
            ct[lvl].append(time.perf_counter() - t0)
    rt = {"default": [], "O0": []}
    for rep in range(8):
        for lvl in (("default", "O0") if rep % 2 else ("O0", "default")):
            args = jax.tree.map(lambda x: jnp.copy(x) if isinstance(x, jax.Array) else x, a)
            jax.block_until_ready(args)
            t0 = time.perf_counter()
            out = exes[lvl](*[x for x in args])
            jax.block_until_ready(out)
            rt[lvl].append(time.perf_counter() - t0)
    print(label, "compile", {k: [round(x, 2) for x in v] for k, v in ct.items()},
          "run med", {k: round(statistics.median(v), 4) for k, v in rt.items()},
          "ratio O0/def", round(statistics.median(rt["O0"]) / statistics.median(rt["default"]), 3), flush=True)
