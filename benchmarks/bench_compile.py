"""Cold compile time of each generation program on SmolLM2-135M: plain decoding, the
fixed-K speculative program at each K for every built-in drafter, and the policy programs
(K_max = the largest K), with XLA's share of it.

    PYTHONPATH=. python benchmarks/bench_compile.py [--layer-loop scan|unroll] [--k 2 4]
        [--verify-widths 1 5] [--policies heuristic goodput] [--matmul auto|kernel|xla]

``--policies``: `policies.Heuristic` (never plans K = 0, so its program holds no off
iterations: the threshold's and fixed K's have the same structure) and `policies.Goodput`
(may plan K = 0: the off step, and with a draft model its in-loop prefill and catch-up
pass, are compiled too); both by default.

Each policy program is compiled as `decode.generate_speculative` compiles it by default
(``verify_widths="auto"``: every width 1..K_max + 1 for the heuristic, the fewest widths
within 5% of its own pass costs for Goodput: (1, 3, 5) with the CPU kernel's costs in
`data/kernel-cpu/`), and Goodput
also at every width. ``--verify-widths``: the policy programs also compile their verify
pass at these widths only (each width is one more forward pass in the program).

The persistent compilation cache is not turned on here (the CLI turns it on; see
`specsim.compile_cache`), so every number is a cold compile in a fresh process: the time
the first call spends before it runs (`GenerationResult.compile_s`: tracing, lowering,
XLA), and of it XLA's backend compile (`/jax/core/compile/backend_compile_duration`),
one term per program compiled. Every call starts from the prefill program
(`decode.prefill.prefill_program`), which all the programs here share (same model, prompt and
cache length): the first call (autoregressive) compiles it, and its XLA column shows it
as the first term. A drafter's own prefill (`decode.prefill.drafter_prefill_program`, the draft
model's pass over the prompt) is likewise compiled once per drafter: the first K of each
drafter shows it as a term of its own, and the later K's do not pay it.

Every program compiles with specsim's XLA:CPU options (`specsim.models.compiler`);
``SPECSIM_XLA_OPTIONS=0`` compiles them with XLA's defaults instead, for an A/B in
alternated runs.
"""

from __future__ import annotations

import argparse
import collections

from jax import monitoring


KERNEL_RATIOS = (1.0, 1.01, 1.06, 1.16, 1.17)
"""t(n)/t(1), n = 1..5, of SmolLM2-135M's pass with specsim's CPU kernel on the 2-core
host (`benchmarks/bench_kernel.py`, `data/kernel-cpu/`); Goodput's costs here (a K_max
above 4 extends them by 0.04 a token)."""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer-loop", choices=("scan", "unroll"), default="scan")
    ap.add_argument("--k", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--new-tokens", type=int, default=40)
    ap.add_argument("--matmul", choices=("auto", "kernel", "xla"), default="auto",
                    help="ModelConfig.matmul: specsim's CPU kernel or XLA's dots")
    ap.add_argument("--verify-widths", type=int, nargs="+", default=None)
    ap.add_argument("--policies", nargs="+", choices=("heuristic", "goodput"),
                    default=["heuristic", "goodput"])
    args = ap.parse_args(argv)
    if min(args.k) < 1:
        ap.error(f"--k must be positive integers (got {args.k})")
    if args.verify_widths is not None and (min(args.verify_widths) < 1 or
                                           max(args.verify_widths) != max(args.k) + 1):
        ap.error(f"--verify-widths must lie in 1..K_max + 1 = {max(args.k) + 1} and include "
                 f"it (got {args.verify_widths})")

    durations = collections.defaultdict(list)
    monitoring.register_event_duration_secs_listener(
        lambda event, secs, **_: durations[event].append(secs))

    from specsim import decode, experiment, models
    from specsim import policies as P
    from specsim.drafters import NGramDrafter, feature_head_drafter, layer_skip_drafter
    from specsim.experiment.drafter_study import find_feature_head

    target = models.load("smollm2-135m").with_layer_loop(args.layer_loop)
    target = target.replace(cfg=target.cfg.replace(matmul=args.matmul))
    prompt = [target.tokenizer.encode("def fibonacci(n):")]
    kw = dict(eos_token_id=None, cache_len=256)
    drafters = {"ngram-3": NGramDrafter(target.cfg.vocab_size, n=3),
                "layer-skip": layer_skip_drafter(
                    target, experiment.default_layer_skip(target.cfg.n_layers))}
    head = find_feature_head(target.cfg.name)
    if head is not None:
        drafters["feature-head"] = feature_head_drafter(target, head)
    k_max = max(args.k)
    ratios = KERNEL_RATIOS[:k_max + 1] + tuple(KERNEL_RATIOS[-1] + 0.04 * (n - 4)
                                              for n in range(5, k_max + 1))
    policies = {"heuristic": P.Heuristic(k_init=1, k_max=k_max),
                "goodput": P.Goodput(k_max=k_max, costs=P.Costs(t_draft=0.3, t_target=ratios))}
    runs = [("autoregressive", lambda: decode.generate_autoregressive(
        target, prompt, args.new_tokens, **kw))]
    for name, d in drafters.items():
        runs += [(f"{name} K {k}", lambda d=d, k=k: decode.generate_speculative(
            target, d, prompt, args.new_tokens, k=k, **kw)) for k in args.k]
        for pname, widths in ((p, w) for p in args.policies for w in ["auto"] + (
                [None] if p == "goodput" else []) + (
                [tuple(args.verify_widths)] if args.verify_widths else [])):
            label = f"{name} {pname} K_max {k_max}" + (
                "" if widths == "auto" else " every width" if widths is None
                else f" widths {widths}")
            runs.append((label, lambda d=d, w=widths, p=policies[pname]:
                         decode.generate_speculative(target, d, prompt, args.new_tokens,
                                                     policy=p, verify_widths=w, **kw)))
    print(f"layer loop {args.layer_loop}, matmul {args.matmul}; cold compile per program (s)")
    print("| program | compile_s | of it XLA | XLA per program compiled |")
    print("|---|---|---|---|")
    for label, call in runs:
        durations.clear()
        res = call()
        xla = durations["/jax/core/compile/backend_compile_duration"]
        big = [x for x in xla if x >= 0.05]         # programs, not jnp's one-op helpers
        small = f" (+ {len(xla) - len(big)} under 0.05 s)" if len(big) < len(xla) else ""
        print(f"| {label} | {res.compile_s:.2f} | {sum(xla):.2f} | "
              f"{' + '.join(f'{x:.2f}' for x in big)}{small} |", flush=True)


if __name__ == "__main__":
    main()
