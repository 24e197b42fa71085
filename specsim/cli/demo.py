"""`specsim demo`, the main job: its flags, the `DemoSettings` they make, the run
(`specsim.experiment`) and its face, the figures (`specsim.plots`) and the files
(`specsim.report`)."""

from __future__ import annotations

from specsim.cli.arguments import add_command, parse_k_values


def add_commands(sub) -> None:
    p = add_command(sub, "demo", _cmd_demo,
                    help="the main job: measure, fit, predict and compare on SmolLM2-135M")
    p.add_argument("--quick", action="store_true",
                   help="smaller grids: instrument α 0.5 0.9 × K 2 4, n-gram K 4 on two kinds, "
                        "batch 1 and 4 (under 3 minutes on 2 cores)")
    p.add_argument("--target", default="smollm2-135m",
                   help="target model: preset name, HF folder or .gguf (default smollm2-135m)")
    p.add_argument("--draft", default=None,
                   help="an extra draft model (HF folder, .gguf or preset) sharing the "
                        "target's vocabulary")
    p.add_argument("--drafters", nargs="+", default=None,
                   choices=["ngram", "layer-skip", "feature-head"],
                   help="built-in drafters to run (default: all three; the feature head "
                        "when one is trained or committed for the target)")
    p.add_argument("--k", nargs="+", default=None,
                   help="draft lengths of the real drafters, e.g. 1-6 (default 4)")
    p.add_argument("--temperatures", type=float, nargs="+", default=None,
                   help="sampling temperatures of the real drafters (default 0)")
    p.add_argument("--kinds", nargs="+", default=None,
                   choices=["code", "json", "extraction", "prose"],
                   help="kinds of work (default all four; quick code and prose)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="new tokens per run (default 48; quick 40)")
    p.add_argument("--layer-loop", choices=["scan", "unroll"], default=None,
                   help="layer loop for the run (default scan: it compiles 2-3x faster)")
    p.add_argument("--parts", nargs="+", default=None, metavar="PART",
                   help="parts of the demo to run (default: the central check, roofline "
                        "instrument fidelity batch; the parts a chosen one needs run too); "
                        "see --list-parts")
    p.add_argument("--list-parts", action="store_true", help="list the demo's parts and exit")
    _add_inrun_arguments(p)
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--out", default="results/demo",
                   help="output folder (default results/demo)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--analytic-only", action="store_true",
                   help="only the closed-form table and figure (no model, no JAX)")
    p.add_argument("--c", type=float, default=0.05,
                   help="cost ratio for --analytic-only (default 0.05)")


def _add_inrun_arguments(p) -> None:
    """The demo's options for the instrument and batch parts and the in-run timing."""
    p.add_argument("--clock", choices=["wall", "cpu"], default=None,
                   help="clock the predictions and speedups use: cpu (default: this process's "
                        "CPU time, which other jobs on a shared machine do not inflate) or wall; "
                        "both are recorded")
    p.add_argument("--repeats", type=int, default=None,
                   help="paired timing rounds every run gets whatever the time budget "
                        "(default 3)")
    p.add_argument("--max-rounds", type=int, default=None,
                   help="the most paired timing rounds of a run (default 8)")
    p.add_argument("--target-half-width", type=float, default=None,
                   help="a run's rounds stop once its measured speedup's 95%% interval is "
                        "within this fraction either side (default 0.03)")
    p.add_argument("--pass-sets", type=int, default=None,
                   help="times a round the pass programs a block's predictions read are "
                        "timed, half before its loops and the rest after, the verify "
                        "pass in the outermost set each side (default 8; quick 4)")
    p.add_argument("--time-budget", type=float, default=None,
                   help="wall seconds from the start by which the timed rounds end, "
                        "compiles included; the in-run parts share what is left (default "
                        "540; --quick 150)")
    p.add_argument("--calibration-prompts", type=int, default=None,
                   help="untimed runs on other prompts of the same kind that give a real "
                        "drafter's per-position α before its run (default 2; --quick 1)")
    p.add_argument("--shared-repeats", type=int, default=None,
                   help="part policies: times a round each cell's plain-decoding baseline "
                        "is timed (default 3; --quick 2)")
    p.add_argument("--loop-repeats", type=int, default=None,
                   help="part policies: runs of each loop program a round from one "
                        "prefill, the fastest kept (default 2)")
    p.add_argument("--policy-max-new-tokens", type=int, default=None,
                   help="part policies: new tokens per run (default 80, or --max-new-tokens "
                        "where that is given; quick and 0: --max-new-tokens)")
    p.add_argument("--alphas", type=float, nargs="+", default=None,
                   help="instrument acceptance rates (default 0.5 0.7 0.9)")
    p.add_argument("--instrument-k", nargs="+", default=None,
                   help="instrument draft lengths (default 2 4)")
    p.add_argument("--draft-costs", type=float, nargs="+", default=None,
                   help="instrument draft cost as a fraction of the target's layers "
                        "(default 0 0.25)")
    p.add_argument("--batches", type=int, nargs="+", default=None,
                   help="batch sizes of the batch part (default 1 4 16)")
    p.add_argument("--batch-max-new-tokens", type=int, default=None,
                   help="new tokens per row of the batch part at batch > 1 (default 48; "
                        "quick and 0: --max-new-tokens)")


def _cmd_demo(args) -> int:
    """Runs autoregressive and speculative generation on SmolLM2-135M: the instrument
    drafter (set acceptance α and draft cost) over α × K × cost, the real drafters
    (n-gram, layer-skip, feature head) and batch 1, 4, 16; times each run with a
    baseline of its prompts (shared by up to three runs) and the pass programs it is
    predicted from in paired rounds until its speedup is known to ±3% (or the time
    budget is spent); predicts every speedup before
    the run (fitted roofline, the drafter's α) and from its rounds, decomposes every
    miss (cost, loop overhead; acceptance apart) and writes runs.csv, fidelity.json, report.md
    and figures. --parts hardware adds datasheet hardware."""
    if args.analytic_only:
        from specsim.plots.analytic import analytic_report
        report = analytic_report(args.out, c=args.c)
        print(report.table)
        for path in report.figures:
            print(f"wrote {path}")
        return 0
    from specsim import experiment

    if args.list_parts:
        from specsim.experiment.parts import PARTS
        for part in PARTS.values():
            needs = f" (needs {', '.join(part.requires)})" if part.requires else ""
            print(f"{part.name:<10} {part.summary}{needs}")
        return 0
    settings = _demo_settings(args)
    experiment.enable_compilation_cache()

    def log(line: str) -> None:          # the last step begun ("2/4 ...") is what Ctrl-C stops
        if line.split(" ", 1)[0].replace("/", "").isdigit():
            args.interrupted = f"during {line.removesuffix(' ...')}"
        print(line)
    args.interrupted = "before its first step (loading the models)"
    args.done = [f"nothing written to {settings.out_dir}/ (written whole at the end)"]
    result = experiment.run_demo(settings, log=log, progress=not args.no_progress)
    args.interrupted = "while writing the results"
    _write_demo(result, args)
    return 0


def _demo_settings(args):
    """`DemoSettings` from the demo's arguments (only those given override the defaults)."""
    from specsim import experiment

    changes = {"target": args.target, "draft": args.draft, "seed": args.seed,
               "out_dir": args.out}
    optional = {"layer_loop": args.layer_loop,
                "drafters": tuple(args.drafters) if args.drafters else None,
                "ks": tuple(parse_k_values(args.k)) if args.k else None,
                "temperatures": tuple(args.temperatures) if args.temperatures else None,
                "kinds": tuple(args.kinds) if args.kinds else None,
                "max_new_tokens": args.max_new_tokens,
                "parts": tuple(args.parts) if args.parts else None,
                "clock": args.clock, "repeats": args.repeats,
                "max_rounds": args.max_rounds, "target_half_width": args.target_half_width,
                "pass_sets": args.pass_sets, "time_budget_s": args.time_budget,
                "calibration_prompts": args.calibration_prompts,
                "shared_repeats": args.shared_repeats, "loop_repeats": args.loop_repeats,
                "instrument_alphas": tuple(args.alphas) if args.alphas else None,
                "instrument_ks": (tuple(parse_k_values(args.instrument_k))
                                  if args.instrument_k else None),
                "instrument_costs": tuple(args.draft_costs) if args.draft_costs else None,
                "batches": tuple(args.batches) if args.batches else None,
                "batch_max_new_tokens": args.batch_max_new_tokens,
                "policy_max_new_tokens": args.policy_max_new_tokens}
    changes.update({k: v for k, v in optional.items() if v is not None})
    return experiment.DemoSettings.demo(quick=args.quick, **changes)


def _write_demo(result, args) -> None:
    """The face of the demo: figures (`specsim.plots`) and files (`specsim.report`)."""
    from pathlib import Path

    from specsim import report
    from specsim import schema as S
    from specsim.plots.experiment import demo_figures

    out = result.settings.out_dir
    result.files = report.write_demo(result, Path(out), demo_figures(result))
    args.interrupted, args.done = "after writing the results", [f"wrote {out}/"]
    print(report.summary_table(result))
    if S.PREDICTED_SPEEDUP in result.runs:
        f = report.fidelity_summary(result)
        if f.get("prior", {}).get("n_runs"):
            print(f"prediction before the run: {report.fidelity_headline(f['prior'])}")
        if f.get("prior_other_prompts", {}).get("n_runs"):
            print("  the same with α from other prompts of the kind: "
                  f"{report.fidelity_headline(f['prior_other_prompts'])}")
        print(f"in-run prediction: {report.fidelity_headline(f)}")
    print(f"wrote {out}/ ({len(result.files)} files) in {result.environment['wall_s']:.0f} s")

