"""The policy program's own cost: the fixed-K program against the policy program at the
same K (`policies.FixedK`) and a threshold policy, on SmolLM2-135M with the
n-gram drafter (default) or the feature head, timed in interleaved rounds in one process.

    PYTHONPATH=. python benchmarks/bench_policy_loop.py --batch 1 --rounds 5
    PYTHONPATH=. python benchmarks/bench_policy_loop.py --batch 4 --rounds 4 --with-cond
    PYTHONPATH=. python benchmarks/bench_policy_loop.py --drafter feature-head --kind extraction

FixedK(K) drafts what the fixed-K program drafts (the outputs are asserted equal), so the
ratio of their times is what the policy machinery costs or saves: it runs the
one-token target pass where no row proposed anything (n-gram lookup without a match),
where the fixed-K program verifies K+1 positions regardless. ``--with-cond`` adds the
policy program compiled with `lax.cond` choosing that pass (the form before
`decode._once_if`: XLA copies both caches around the conditional), under a threshold
policy with p_min 0, which drafts K as FixedK does.

Times: this process's CPU time and the wall clock, medians over rounds; ratios > 1 mean
the policy program is faster than the fixed-K program.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--with-cond", action="store_true")
    ap.add_argument("--drafter", choices=("ngram", "feature-head"), default="ngram")
    ap.add_argument("--kind", default=None,
                    help="every row's prompt from this kind of work (default: rows cycle "
                         "through the kinds)")
    args = ap.parse_args(argv)

    import jax

    from specsim import decode, models, policies
    from specsim.drafters import NGramDrafter, feature_head_drafter
    from specsim.experiment.drafter_study import find_feature_head
    from specsim.experiment.pipeline import encode_prompts
    from specsim.workloads import KINDS

    target = models.load("smollm2-135m")
    prompts = encode_prompts(target, KINDS)
    kinds = [args.kind] * args.batch if args.kind else [KINDS[b % len(KINDS)]
                                                          for b in range(args.batch)]
    rows = [prompts[kind][:64] for kind in kinds]
    if args.drafter == "ngram":
        drafter = NGramDrafter(target.cfg.vocab_size, n=3)
    else:
        drafter = feature_head_drafter(target, find_feature_head(target.cfg.name))
    K, N = args.k, args.max_new_tokens

    def run(policy=None):
        return lambda: decode.generate_speculative(target, drafter, rows, N,
                                                   k=None if policy else K, policy=policy)

    calls = {"fixed": run(), "policy": run(policies.FixedK(k=K)),
             "threshold": run(policies.ConfidenceThreshold(p_min=0.5, k_max=K))}
    if args.with_cond:
        once = decode._once_if
        decode._once_if = lambda pred, fn, state: jax.lax.cond(pred, fn, lambda s: s, state)
        calls["policy_cond"] = run(policies.ConfidenceThreshold(p_min=0.0, k_max=K))
        calls["policy_cond"]()                  # traced and compiled with the cond
        decode._once_if = once
    out = {name: call() for name, call in calls.items()}     # compile, and the outputs
    assert out["fixed"].tokens == out["policy"].tokens
    times = {name: [] for name in calls}
    for r in range(args.rounds):
        for name in np.random.default_rng(r).permutation(list(calls)):
            c0, w0 = time.process_time(), time.perf_counter()
            calls[name]()
            times[name].append((time.process_time() - c0, time.perf_counter() - w0))
    med = {name: np.median(np.asarray(t), axis=0) for name, t in times.items()}
    print(f"batch {args.batch}, K {K}, {N} new tokens, {args.rounds} rounds, "
          f"{args.drafter} drafter, prompts {args.kind or 'cycling through the kinds'}")
    print("| program | CPU s | wall s | iterations | single-token passes | "
          "speed vs fixed-K (CPU) | (wall) |")
    print("|---|---|---|---|---|---|---|")
    for name, (cpu, wall) in med.items():
        single = out[name].meta.get("single_token_target_passes", 0)
        print(f"| {name} | {cpu:.3f} | {wall:.3f} | {out[name].n_iterations} | {single} | "
              f"{med['fixed'][0] / cpu:.3f} | {med['fixed'][1] / wall:.3f} |")


if __name__ == "__main__":
    main()
