"""Compile time of one generation loop program alone, repeated, on SmolLM2-135M: the
fixed-K program (`decode.speculative.speculative_program`) of a drafter at each K, or with
``--policy`` the policy program (`decode.policy_loop.policy_program`, K = its k_max), lowered and
compiled from the arguments `decode.generate_speculative` would call it with
(`decode.speculative_loop`: not run), ``--repeats`` times each with JAX's in-memory
cache cleared in between.

    PYTHONPATH=. python benchmarks/bench_loop_compile.py [--drafter layer-skip|ngram]
        [--policy fixed|threshold|heuristic|goodput] [--k 2 3 4] [--repeats 3]

Where `bench_compile.py` times each program's first call once (the prefill programs
included), this isolates the loop and repeats it, so two commits can be compared in a
few alternated runs on a noisy machine: run it in a worktree of each (``PYTHONPATH=.``
picks the worktree's package) and compare the medians. It prints each compile (trace,
lowering and XLA, in seconds) and their median.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafter", choices=("layer-skip", "ngram"), default="layer-skip")
    ap.add_argument("--policy", choices=("fixed", "threshold", "heuristic", "goodput"),
                    default=None, help="the policy program (default: the fixed-K program)")
    ap.add_argument("--k", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if min(args.k) < 1 or args.repeats < 1:
        ap.error(f"--k and --repeats must be positive (got {args.k} and {args.repeats})")

    from specsim import decode, experiment, models
    from specsim import policies as P
    from specsim.drafters import NGramDrafter, layer_skip_drafter

    target = models.load("smollm2-135m").with_layer_loop("scan")
    prompt = [target.tokenizer.encode("def fibonacci(n):")]
    drafter = (NGramDrafter(target.cfg.vocab_size, n=3) if args.drafter == "ngram" else
               layer_skip_drafter(target, experiment.default_layer_skip(target.cfg.n_layers)))
    policy = {None: lambda k: None, "fixed": lambda k: P.FixedK(k=k),
              "threshold": lambda k: P.ConfidenceThreshold(p_min=0.4, k_max=k),
              "heuristic": lambda k: P.Heuristic(k_init=min(2, k), k_max=k),
              "goodput": lambda k: P.Goodput(k_max=k, costs=P.Costs.from_ratio(0.3, k))
              }[args.policy]

    times = []
    for k in args.k:
        pol = policy(k)
        loop = decode.speculative_loop(target, drafter, prompt, 40, k=None if pol else k,
                                       policy=pol, eos_token_id=None, cache_len=256)
        for _ in range(args.repeats):
            loop.program.clear_cache()
            t0 = time.perf_counter()
            loop.lower().compile()
            times.append(time.perf_counter() - t0)
    what = "fixed-K loop" if args.policy is None else f"{args.policy} policy loop"
    print(f"{args.drafter} {what}, K {args.k} x {args.repeats}: "
          f"{' '.join(f'{t:.2f}' for t in times)} s; median {statistics.median(times):.2f} s")


if __name__ == "__main__":
    main()
