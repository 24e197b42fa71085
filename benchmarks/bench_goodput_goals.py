"""Issue 12's two goals for Goodput judged without timing noise: each policy's decisions
come from real engine runs (greedy, so deterministic given the costs Goodput plans with),
and each run's target passes by width are charged fixed pass-time ratios t(n)/t(1).

    PYTHONPATH=. python benchmarks/bench_goodput_goals.py [--new-tokens 80] [--ks 1 2 3 4]
        [--drafter ngram|feature-head|layer-skip] [--draft-ratio C]
        [--ratios-1 1 1.65 1.76 1.94 1.94] [--ratios-4 1 1.23 1.42 1.64 1.75]
        [--shipped 0 1 2] [--prior-alpha A] [--explore Z] [--budget E] [--judge-share S]

``--prior-alpha``, ``--explore``, ``--budget`` ('none': off), ``--judge-share``:
Goodput's (default: its defaults). A feature head's draft steps while speculation is off (judging it, every
n-th off iteration) count among the run's draft passes and are charged like any other.
``--drafter``: n-gram lookup (n = 3, free drafts), the committed feature head or the
layer-skip draft (the demo's); ``--draft-ratio``: a draft step's time over a target
step's, charged per draft pass the run counts (its prefill over the prompt excluded, in
every run alike); by default 0 for n-gram lookup, 0.035 for the feature head (README:
its draft costs 3.5% of a step) and 0.86 for layer-skip (session 20,
`data/auto-widths-cpu/`).

Cells: at batch 1 the evaluation prompt of each kind of work and
on the ``--shipped``-th prompts of each kind in data/prompts/ (none of them an evaluation
prompt), and the mixed batch of 4 (one evaluation prompt of each kind). Per cell: fixed K
for each of ``--ks`` (the fixed-K program: every iteration verifies K + 1 tokens), Goodput
(K_max = max ks, planning with the same ratios), and plain decoding, all with the same
greedy tokens (asserted). Printed: speedup against plain decoding (iterations x t(1)
over the run's charged time), against the best fixed K of the cell, Goodput's fraction of
row-iterations at K = 0; then the goals: Goodput >= 0.98x plain decoding and >= 0.97x the
best fixed K.

What this leaves out, on purpose: the time a real iteration spends besides its passes
(bookkeeping, the policy's arithmetic, lookups; `specsim demo --parts policies` times
those, with the rounds' noise) and a mismatch between the costs Goodput plans with and
the ones it is charged (`sim_goodput_explore.py --study cost-noise`). The default ratios
are session 20's, measured on this 2-core CPU (`data/auto-widths-cpu/`: n-gram on code
at batch 1; on extraction at batch 4).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

DRAFT_RATIOS = {"ngram": 0.0, "feature-head": 0.035, "layer-skip": 0.86}


def _ratios(ap, name, values, k_max):
    if len(values) != k_max + 1 or values[0] != 1.0 or not all(np.isfinite(values)) or \
            min(values) <= 0:
        ap.error(f"{name} must give k_max + 1 = {k_max + 1} finite positive ratios t(n)/t(1), "
                 f"n = 1..{k_max + 1}, the first 1 (got {values})")
    return np.asarray(values, float)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new-tokens", type=int, default=80)
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--ratios-1", type=float, nargs="+", default=[1.0, 1.65, 1.76, 1.94, 1.94])
    ap.add_argument("--ratios-4", type=float, nargs="+", default=[1.0, 1.23, 1.42, 1.64, 1.75])
    ap.add_argument("--shipped", type=int, nargs="*", default=[0, 1, 2])
    ap.add_argument("--drafter", choices=tuple(DRAFT_RATIOS), default="ngram")
    ap.add_argument("--draft-ratio", type=float, default=None)
    ap.add_argument("--prior-alpha", type=float, default=None)
    ap.add_argument("--explore", type=float, default=None)
    ap.add_argument("--budget", default=None, help="Goodput's loss budget ε, or 'none' (off)")
    ap.add_argument("--judge-share", type=float, default=None)
    args = ap.parse_args(argv)
    c = DRAFT_RATIOS[args.drafter] if args.draft_ratio is None else args.draft_ratio
    if not (np.isfinite(c) and c >= 0):
        ap.error(f"--draft-ratio must be a finite number >= 0 (got {args.draft_ratio})")
    if args.new_tokens < 2 or min(args.ks) < 1:
        ap.error(f"--new-tokens must be >= 2 and --ks positive (got {args.new_tokens}, {args.ks})")
    k_max = max(args.ks)
    from specsim import policies as P
    from specsim.errors import InvalidArgument

    given = {n: v for n, v in (("prior_alpha", args.prior_alpha), ("explore", args.explore),
                               ("judge_share", args.judge_share))
             if v is not None}
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if args.budget is not None:
        from goodput_positions import parse_budget
        try:
            given["budget"] = parse_budget(args.budget)
        except argparse.ArgumentTypeError as e:
            ap.error(f"--budget {e}")
    try:
        P.Goodput(k_max=k_max, costs=P.Costs.from_ratio(0.0, k_max), **given)
    except InvalidArgument as e:
        ap.error(str(e))
    ratios = {1: _ratios(ap, "--ratios-1", args.ratios_1, k_max),
              4: _ratios(ap, "--ratios-4", args.ratios_4, k_max)}
    from sim_goodput_explore import shipped_by_kind, shipped_prompts

    n_shipped = min(len(v) for v in shipped_by_kind().values())
    if any(not 0 <= i < n_shipped for i in args.shipped):
        ap.error(f"--shipped must lie in 0..{n_shipped - 1} (got {args.shipped})")

    from specsim import decode, experiment, models, workloads
    from specsim.experiment.parts.policies import NO_LOSS_VS_AR, MATCH_BEST_FIXED
    from specsim.drafters import NGramDrafter, feature_head_drafter, layer_skip_drafter
    from specsim.experiment.drafter_study import find_feature_head

    t = models.load("smollm2-135m").with_layer_loop("scan")
    d = {"ngram": lambda: NGramDrafter(t.cfg.vocab_size, n=3),
         "feature-head": lambda: feature_head_drafter(t, find_feature_head(t.cfg.name)),
         "layer-skip": lambda: layer_skip_drafter(
             t, experiment.default_layer_skip(t.cfg.n_layers))}[args.drafter]()
    prefill = 0 if args.drafter == "ngram" else 1      # a model drafter's prompt pass
    enc = {k: t.tokenizer.encode(workloads.prompt_text(k, t.tokenizer)) for k in workloads.KINDS}
    cells = [(k, "eval", [enc[k]]) for k in workloads.KINDS]
    for idx in args.shipped:
        cells += [(k, f"shipped{idx}", [p]) for k, p in shipped_prompts(t, idx).items()]
    cells.append(("mixed", "eval", [enc[k] for k in workloads.KINDS]))
    kw = dict(eos_token_id=None, cache_len=512)
    fmt = lambda r: ", ".join(f"{x:g}" for x in r)                     # noqa: E731
    print(f"{args.drafter}, draft step {c:g} of a target step, {args.new_tokens} new tokens, "
          f"fixed K {args.ks}, Goodput K_max {k_max}; t(n)/t(1) at batch 1 ({fmt(ratios[1])}), "
          f"at batch 4 ({fmt(ratios[4])}); Goodput {given or 'defaults'}")
    print("| kind | prompt | batch | best fixed K | its speedup | Goodput | Goodput / best "
          "| K = 0 |")
    print("|---|---|---|---|---|---|---|---|")
    drafts = lambda res: c * max(res.draft_passes - prefill, 0)           # noqa: E731
    out = []
    for kind, src, prompts in cells:
        r = ratios[len(prompts)]
        ar = decode.generate_autoregressive(t, prompts, args.new_tokens, **kw)
        t_ar = ar.n_iterations * r[0]
        fixed = {}
        for k in args.ks:
            res = decode.generate_speculative(t, d, prompts, args.new_tokens, k=k, **kw)
            assert res.tokens == ar.tokens
            fixed[k] = t_ar / (res.n_iterations * r[k] + drafts(res))
        g = decode.generate_speculative(t, d, prompts, args.new_tokens, policy=P.Goodput(
            k_max=k_max, costs=P.Costs(t_draft=c, t_target=tuple(r)), **given), **kw)
        assert g.tokens == ar.tokens
        s_g = t_ar / (float(np.dot(g.meta["target_passes_by_width"], r)) + drafts(g))
        best = max(fixed, key=fixed.get)
        k0 = float(np.mean(g.stats.k_used[g.stats.active] == 0))
        out.append((s_g, s_g / fixed[best]))
        print(f"| {kind} | {src} | {len(prompts)} | {best} | {fixed[best]:.3f} | {s_g:.3f} | "
              f"{s_g / fixed[best]:.3f} | {k0:.2f} |", flush=True)
    a = np.asarray(out)
    gm = np.exp(np.log(a).mean(0))
    print(f"\n{len(out)} cells. Goodput: geometric mean {gm[0]:.3f}x plain decoding, "
          f"{gm[1]:.3f}x the best fixed K; below {NO_LOSS_VS_AR}x plain decoding in "
          f"{int((a[:, 0] < NO_LOSS_VS_AR).sum())} (worst {a[:, 0].min():.3f}), below "
          f"{MATCH_BEST_FIXED}x the best fixed K in {int((a[:, 1] < MATCH_BEST_FIXED).sum())} "
          f"(worst {a[:, 1].min():.3f}).")


if __name__ == "__main__":
    main()
