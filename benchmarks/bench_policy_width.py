"""What a policy program pays for its K_max when it plans fewer drafts: per-iteration
time of fixed plans (K 1 every iteration, K 0 one iteration in four, ...) compiled with
K_max 4, against `policies.FixedK` at the planned K (compiled with K_max = K), on
SmolLM2-135M with a chosen drafter, timed in interleaved rounds in one process.

    PYTHONPATH=. python benchmarks/bench_policy_width.py [--drafter feature-head]
        [--batch 8] [--rounds 5] [--kind code] [--verify-widths 1 5]

A plan of K below K_max still carries K_max-wide buffers (the [B, K_max, V] draft and
[B, K_max + 1, V] target distributions the acceptance test and the statistics read);
the draft loop and the verify pass follow the plan (early stopping; one compiled verify
pass per width). The gap between "K 1 of K_max 4" and FixedK(1) is what the K_max-wide
buffers cost. ``--verify-widths``: each plan also runs in a program compiled at these
verify widths only (`generate_speculative(verify_widths=...)`: fewer forward passes to
compile, each verify padded to the narrowest width that covers it), in the same rounds.
Printed: decode seconds (prefill removed), iterations, ms per iteration.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Cycle:
    """Plans ``pattern[i % len(pattern)]`` drafts in iteration i (every row alike)."""
    pattern: tuple
    k_max: int = 4

    def init(self, batch, xp=np):
        return (xp.zeros((batch,), xp.int32),)

    def plan(self, state, batch, xp=np, active=None):
        return xp.asarray(self.pattern, xp.int32)[state[0] % len(self.pattern)]

    def keep(self, j, confidence, xp=np):
        return xp.ones(confidence.shape, bool)

    def update(self, state, k_plan, n_accepted, n_proposed, active, xp=np):
        return (state[0] + 1,)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafter", choices=("feature-head", "layer-skip", "ngram"),
                    default="feature-head")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--kind", default="code")
    ap.add_argument("--new-tokens", type=int, default=40)
    ap.add_argument("--verify-widths", type=int, nargs="+", default=None)
    args = ap.parse_args(argv)
    if args.batch < 1 or args.rounds < 2:
        ap.error("--batch must be >= 1 and --rounds >= 2")
    if args.verify_widths is not None and (min(args.verify_widths) < 1 or
                                           max(args.verify_widths) != 5):
        ap.error(f"--verify-widths must lie in 1..K_max + 1 = 5 and include it "
                 f"(got {args.verify_widths})")

    from specsim import bench, decode, experiment, models
    from specsim import policies as P
    from specsim.drafters import NGramDrafter, feature_head_drafter, layer_skip_drafter
    from specsim.experiment.drafter_study import find_feature_head
    from specsim.experiment.pipeline import encode_prompts

    target = models.load("smollm2-135m").with_layer_loop("scan")
    if args.drafter == "feature-head":
        drafter = feature_head_drafter(target, find_feature_head(target.cfg.name))
    elif args.drafter == "layer-skip":
        drafter = layer_skip_drafter(target, experiment.default_layer_skip(target.cfg.n_layers))
    else:
        drafter = NGramDrafter(target.cfg.vocab_size, n=3)
    rows = [encode_prompts(target, [args.kind])[args.kind]] * args.batch
    kw = dict(temperature=0.0, seed=0, eos_token_id=None, cache_len=256)
    policies = {"K 1 of K_max 4": Cycle(pattern=(1,)), "FixedK(1)": P.FixedK(k=1),
                "K 2 of K_max 4": Cycle(pattern=(2,)), "FixedK(2)": P.FixedK(k=2),
                "K 0,1,1,1 of K_max 4": Cycle(pattern=(0, 1, 1, 1)),
                "K 1,1,1,2 of K_max 4": Cycle(pattern=(1, 1, 1, 2))}
    calls = {name: (lambda n, p=p: decode.generate_speculative(target, drafter, rows, n,
                                                                 policy=p, **kw))
             for name, p in policies.items()}
    if args.verify_widths:
        widths = tuple(args.verify_widths)
        calls.update({f"{name}, widths {widths}": (
            lambda n, p=p: decode.generate_speculative(target, drafter, rows, n, policy=p,
                                                       verify_widths=widths, **kw))
            for name, p in policies.items() if isinstance(p, Cycle)})
    calls["plain decoding"] = lambda n: decode.generate_autoregressive(target, rows, n, **kw)
    calls["prefill"] = lambda n: decode.generate_autoregressive(target, rows, 1, **kw)
    for call in calls.values():                                     # compile
        call(decode.warmup_tokens(args.new_tokens))
    samples, outs = bench.interleaved_rounds(
        [lambda c=c: c(args.new_tokens) for c in calls.values()], args.rounds,
        np.random.default_rng(1), warmup=1)
    med = {name: float(np.median(s)) for name, s in zip(calls, samples)}
    prefill = med.pop("prefill")
    print(f"{args.drafter}, {args.kind}, batch {args.batch}, {args.new_tokens} new tokens, "
          f"medians of {args.rounds - 1} rounds")
    print("| plan | decode s | iterations | ms / iteration |")
    print("|---|---|---|---|")
    for (name, t), out in zip(med.items(), outs):
        it = out.n_iterations
        print(f"| {name} | {t - prefill:.3f} | {it} | {1e3 * (t - prefill) / it:.1f} |")


if __name__ == "__main__":
    main()
