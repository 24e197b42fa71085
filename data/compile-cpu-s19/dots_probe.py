"""Dot products of the lowered policy program (Heuristic and Goodput, K_max 4, layer-skip and
n-gram) on SmolLM2-135M, captured from generate_speculative: runs on 503976e and later.
    PYTHONPATH=. python data/compile-cpu-s19/dots_probe.py"""
from specsim import decode, experiment, models, policies as P
from specsim.drafters import NGramDrafter, layer_skip_drafter
class Cap(Exception): pass
target = models.load("smollm2-135m").with_layer_loop("scan")
prompt = [target.tokenizer.encode("def fibonacci(n):")]
ls = layer_skip_drafter(target, experiment.default_layer_skip(target.cfg.n_layers))
ng = NGramDrafter(target.cfg.vocab_size, n=3)
prog = decode._policy_program
for dn, d in (("ls", ls), ("ng", ng)):
    for pn, pol in (("heur", P.Heuristic(k_init=2, k_max=4)), ("goodput", P.Goodput(k_max=4, costs=P.Costs.from_ratio(0.3, 4)))):
        seen = {}
        def cap(*a, **s):
            seen["c"] = (a, s); raise Cap
        decode._policy_program = cap
        try:
            decode.generate_speculative(target, d, prompt, 40, policy=pol, eos_token_id=None, cache_len=256)
        except Cap: pass
        decode._policy_program = prog
        a, s = seen["c"]
        print(dn, pn, "dots", prog.lower(*a, **s).as_text().count("dot_general"), flush=True)
