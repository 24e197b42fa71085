"""How much a drafter's acceptance varies from prompt to prompt of one kind of work.

    python benchmarks/acceptance_spread.py [--kinds code extraction] [--prompts 8] [--k 4]
        [--max-new-tokens 48] [--prompt-tokens 120]

For each kind and each of the demo's real drafters (n-gram, layer-skip, feature head)
on SmolLM2-135M: E, the tokens per iteration of a greedy run of ``--max-new-tokens``
tokens at K = ``--k``, on the demo's own prompt of that kind and on ``--prompts``
calibration prompts of the same kind (`specsim.experiment.prior.calibration_rows`, the
ones the demo's prediction before the run reads), and E pooled over the first 2, 4 and
all calibration prompts. Untimed: acceptance only. The spread across prompts bounds
how closely any α known before a run (calibration on other prompts of the kind) can
predict that run's speedup.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specsim import validation  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kinds", nargs="+", default=["code", "extraction"])
    p.add_argument("--prompts", type=int, default=8, help="calibration prompts per kind")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--prompt-tokens", type=int, default=120)
    args = p.parse_args(argv)
    for name in ("prompts", "k", "max_new_tokens", "prompt_tokens"):
        validation.positive_int(name, getattr(args, name))
    from specsim import workloads
    for kind in args.kinds:
        validation.choice("kinds", kind, workloads.KINDS)
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    from specsim import decode, simulate
    from specsim.experiment import pipeline, prior
    from specsim.experiment.decomposition import finite_run_tokens
    from specsim.experiment.settings import DemoSettings

    s = DemoSettings(kinds=tuple(args.kinds), max_new_tokens=args.max_new_tokens,
                     drafter_prompt_tokens=args.prompt_tokens)
    state = pipeline.prepare(s, log=lambda *a: None, progress=False)
    K, n = args.k, args.max_new_tokens

    def counts(drafter, prompt):
        res = decode.generate_speculative(state.target, drafter, [list(prompt)], n, k=K,
                                          temperature=0.0, seed=s.seed, eos_token_id=None,
                                          cache_len=state.cache_len)
        c = np.asarray(res.stats.per_position_counts, float)[:K]
        r = np.nan_to_num(np.asarray(res.stats.per_position_per_slot, float)[:K])
        return r * c, c

    def tokens(acc, cnt):
        rates = np.divide(acc, cnt, out=np.zeros_like(acc), where=cnt > 0)
        return finite_run_tokens(simulate.tokens_pmf_positional(rates), n - 1, 1)

    print(f"E (tokens per iteration) at K = {K}, {n} new tokens, greedy; "
          f"{args.prompts} calibration prompts per kind")
    print("| kind | drafter | demo prompt | calibration prompts (min / median / max) "
          "| pooled 2 | pooled 4 | pooled all |")
    print("|---|---|---|---|---|---|---|")
    for kind in args.kinds:
        own = tuple(state.prompts[kind][:args.prompt_tokens])
        cal = prior.calibration_rows(state, kind, len(own), args.prompts)
        for name, setup in state.drafters.items():
            e_own = tokens(*counts(setup.drafter, own))
            per = [counts(setup.drafter, p) for p in cal]
            es = [tokens(a, c) for a, c in per]
            pooled = [tokens(sum(a for a, _ in per[:m]), sum(c for _, c in per[:m]))
                      for m in (2, 4, len(per))]
            print(f"| {kind} | {name} | {e_own:.2f} | {min(es):.2f} / {np.median(es):.2f} / "
                  f"{max(es):.2f} | " + " | ".join(f"{e:.2f}" for e in pooled) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
