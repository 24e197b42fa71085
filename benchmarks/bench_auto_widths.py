"""Goodput's policy program with ``verify_widths="auto"`` against every width, on
SmolLM2-135M: what the fewer compiled verify passes save in compile, and what the padding
costs in decode time.

    PYTHONPATH=. python benchmarks/bench_auto_widths.py [--drafter ngram|layer-skip]
        [--kind code] [--batch 1] [--k-max 4] [--cost-rounds 7] [--compiles 3]
        [--rounds 5] [--new-tokens 48]

Steps: (1) time the pass programs of `specsim.pass_costs` (the target step, a verify
over K + 1 tokens for K = 1..K_max, and a draft step where the drafter computes one) in
interleaved rounds, each pass as the geometric mean of its ratios to the same round's
target step (the policies part's own `_paired` and `costs_from_passes`); (2) Goodput
with those costs (`Costs.nondecreasing`) and the
widths `Costs.fewest_widths` keeps at `policies.AUTO_WIDTH_TOLERANCE`; (3) the loop
program of both (every width; "auto") lowered afresh and compiled, alternated,
``--compiles`` times each, with the dot products of each lowered program; (4) both runs
and plain decoding in ``--rounds`` interleaved rounds (wall clock, compile excluded),
their output compared. The persistent compilation cache stays off.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafter", choices=("ngram", "layer-skip"), default="ngram")
    ap.add_argument("--kind", default="code")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--k-max", type=int, default=4)
    ap.add_argument("--cost-rounds", type=int, default=7)
    ap.add_argument("--compiles", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--new-tokens", type=int, default=48)
    args = ap.parse_args(argv)
    for name in ("batch", "k_max", "cost_rounds", "compiles", "rounds", "new_tokens"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be an integer >= 1 "
                     f"(got {getattr(args, name)})")

    from specsim import bench, decode, experiment, models, pass_costs, workloads
    from specsim import policies as P
    from specsim.drafters import NGramDrafter, layer_skip_drafter
    from specsim.experiment import policy_runs
    from specsim.experiment.parts import policies as parts_policies

    if args.kind not in workloads.KINDS:
        ap.error(f"--kind must be one of {workloads.KINDS} (got {args.kind!r})")
    target = models.load("smollm2-135m").with_layer_loop("scan")
    rows = [target.tokenizer.encode(workloads.prompt_text(args.kind, target.tokenizer))] * \
        args.batch
    drafter = (NGramDrafter(target.cfg.vocab_size, n=3) if args.drafter == "ngram" else
               layer_skip_drafter(target, experiment.default_layer_skip(target.cfg.n_layers)))
    K = args.k_max
    S = decode.bucket(max(map(len, rows)) + args.new_tokens + K + 1)
    kw = dict(eos_token_id=None, cache_len=S)

    # (1) pass costs, paired to the round's target step
    steps = max(1, min(8, (S - S // 2 - K - 1) // (K + 1)))
    B, calls = args.batch, {}         # keyed as the policies part keys its pass calls
    for k in range(1, K + 1):
        c = pass_costs.pass_calls(target, None, batch=B, cache_len=S, k=k, steps=steps)
        calls[("verify", B, k)] = (c.verify, steps)
        calls.setdefault(("target_1", B), (c.target_1, steps))
    if drafter.passes_per_iteration(K):        # a draft step that computes (layer-skip)
        c = pass_costs.pass_calls(target, drafter, batch=B, cache_len=S, k=K, steps=steps)
        calls[("draft", args.drafter, B)] = (c.draft, steps * K)
    keys = list(calls)
    samples, _ = bench.interleaved_rounds([calls[n][0] for n in keys], args.cost_rounds,
                                          np.random.default_rng(0))
    paired = parts_policies._paired(keys, samples, [calls[n][1] for n in keys])
    costs = policy_runs.costs_from_passes(
        *parts_policies._cell_costs(paired, args.drafter, B, K), K).nondecreasing()
    t = costs.t_target
    widths = costs.fewest_widths()
    pol = P.Goodput(k_max=K, costs=costs)
    print(f"{args.drafter}, {args.kind}, batch {args.batch}, K_max {K}, S {S}")
    print("pass costs t(n)/t(1), n = 1..K_max+1: "
          + " ".join(f"{x / t[0]:.2f}" for x in costs.t_target)
          + f" (t(1) {1e3 * t[0]:.1f} ms, draft step {costs.t_draft / t[0]:.2f}); "
          f"auto widths at {P.AUTO_WIDTH_TOLERANCE:.0%}: {widths}")

    # (3) compile, alternated
    loops = {w: decode.speculative_loop(target, drafter, rows, args.new_tokens, policy=pol,
                                        verify_widths=w, **kw) for w in (None, "auto")}
    dots = {w: loop.lower().as_text().count("dot_general") for w, loop in loops.items()}
    compile_s = {w: [] for w in loops}
    for _ in range(args.compiles):
        for w, loop in loops.items():
            loop.program.clear_cache()
            t0 = time.perf_counter()
            loop.lower().compile()
            compile_s[w].append(time.perf_counter() - t0)

    # (4) decode, interleaved rounds
    gen = {"autoregressive": lambda: decode.generate_autoregressive(
        target, rows, args.new_tokens, **kw)}
    for w in loops:
        gen[f"goodput {w or 'every width'}"] = lambda w=w: decode.generate_speculative(
            target, drafter, rows, args.new_tokens, policy=pol, verify_widths=w, **kw)
    first = {name: call() for name, call in gen.items()}
    same = len({str(r.tokens) for r in first.values()}) == 1
    names = list(gen)
    times = {n: [] for n in names}
    rng = np.random.default_rng(1)
    for _ in range(args.rounds):
        for i in rng.permutation(len(names)):
            times[names[i]].append(gen[names[i]]().wall_s)
    ar = np.asarray(times["autoregressive"])
    print("| program | widths | dots | compile_s (median; each) | decode s (median) | "
          "vs plain decoding (median of rounds) | passes by width |")
    print("|---|---|---|---|---|---|---|")
    for w in loops:
        name = f"goodput {w or 'every width'}"
        ts = np.asarray(times[name])
        print(f"| {name} | {P.program_widths(pol, K, w)[0]} | {dots[w]} | "
              f"{statistics.median(compile_s[w]):.2f} "
              f"({', '.join(f'{x:.2f}' for x in compile_s[w])}) | {np.median(ts):.3f} | "
              f"{np.median(ar / ts):.3f} | {first[name].meta['target_passes_by_width']} |")
    print(f"plain decoding {np.median(ar):.3f} s; outputs equal: {same}")


if __name__ == "__main__":
    main()
