"""Policy loop program, captured from generate_speculative (runs on 503976e and later, where
`decode.speculative_loop` does not exist yet): its compile, REPEATS times with the
in-memory cache cleared, or with REPEATS 0 the dot products of its lowered program.
    PYTHONPATH=. python data/compile-cpu-s19/cmp_policy.py DRAFTER POLICY K REPEATS
DRAFTER: layer-skip | ngram; POLICY: threshold | heuristic | goodput | fixed."""
import statistics
import sys
import time

from specsim import decode, experiment, models, policies as P
from specsim.drafters import NGramDrafter, layer_skip_drafter


class Cap(Exception):
    pass


dname, pname, k, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
target = models.load("smollm2-135m").with_layer_loop("scan")
prompt = [target.tokenizer.encode("def fibonacci(n):")]
drafter = (NGramDrafter(target.cfg.vocab_size, n=3) if dname == "ngram" else
           layer_skip_drafter(target, experiment.default_layer_skip(target.cfg.n_layers)))
pol = {"threshold": P.ConfidenceThreshold(p_min=0.4, k_max=k),
       "heuristic": P.Heuristic(k_init=2, k_max=k),
       "goodput": P.Goodput(k_max=k, costs=P.Costs.from_ratio(0.3, k)),
       "fixed": P.FixedK(k=k)}[pname]
prog, seen = decode._policy_program, {}


def cap(*a, **s):
    seen["c"] = (a, s)
    raise Cap


decode._policy_program = cap
try:
    decode.generate_speculative(target, drafter, prompt, 40, policy=pol, eos_token_id=None,
                                cache_len=256)
except Cap:
    pass
decode._policy_program = prog
a, s = seen["c"]
if reps == 0:
    print(dname, pname, k, "dots", prog.lower(*a, **s).as_text().count("dot_general"))
    sys.exit()
ts = []
for _ in range(reps):
    prog.clear_cache()
    t0 = time.perf_counter()
    prog.lower(*a, **s).compile()
    ts.append(time.perf_counter() - t0)
print(dname, pname, k, " ".join(f"{t:.2f}" for t in ts), "median", round(statistics.median(ts), 2))
