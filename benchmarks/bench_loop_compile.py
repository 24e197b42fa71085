"""Compile time of one generation loop program alone, repeated, on SmolLM2-135M: the
fixed-K program (`decode._speculative_program`) of a drafter at each K, lowered and
compiled from the arguments `decode.generate_speculative` would call it with (captured,
not run), ``--repeats`` times each with JAX's in-memory cache cleared in between.

    PYTHONPATH=. python benchmarks/bench_loop_compile.py [--drafter layer-skip|ngram]
        [--k 2 3 4] [--repeats 3]

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


class _Captured(Exception):
    pass


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafter", choices=("layer-skip", "ngram"), default="layer-skip")
    ap.add_argument("--k", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if min(args.k) < 1 or args.repeats < 1:
        ap.error(f"--k and --repeats must be positive (got {args.k} and {args.repeats})")

    from specsim import decode, experiment, models
    from specsim.drafters import NGramDrafter, layer_skip_drafter

    target = models.load("smollm2-135m").with_layer_loop("scan")
    prompt = [target.tokenizer.encode("def fibonacci(n):")]
    drafter = (NGramDrafter(target.cfg.vocab_size, n=3) if args.drafter == "ngram" else
               layer_skip_drafter(target, experiment.default_layer_skip(target.cfg.n_layers)))
    program, seen = decode._speculative_program, {}

    def capture(*a, **static):
        seen["call"] = (a, static)
        raise _Captured

    times = []
    for k in args.k:
        decode._speculative_program = capture
        try:
            decode.generate_speculative(target, drafter, prompt, 40, k=k, eos_token_id=None,
                                        cache_len=256)
        except _Captured:
            pass
        finally:
            decode._speculative_program = program
        a, static = seen["call"]
        for _ in range(args.repeats):
            program.clear_cache()
            t0 = time.perf_counter()
            program.lower(*a, **static).compile()
            times.append(time.perf_counter() - t0)
    print(f"{args.drafter} fixed-K loop, K {args.k} x {args.repeats}: "
          f"{' '.join(f'{t:.2f}' for t in times)} s; median {statistics.median(times):.2f} s")


if __name__ == "__main__":
    main()
