"""The ``specsim`` command line.

Each subcommand lives in one small function ``_cmd_<name>(args)`` and registers its
parser in ``build_parser``. Heavy imports (JAX, pandas, plotting) happen inside the
command that needs them, so ``specsim speedup`` starts fast and never imports JAX.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from specsim import compile_cache


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specsim",
        description="Speculative decoding: closed-form theory, a compiled JAX engine and "
                    "roofline hardware models, held against each other.")
    from specsim import __version__
    parser.add_argument("--version", action="version", version=f"specsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    # --- theory (specsim.analytic) -------------------------------------------------------
    p = sub.add_parser(
        "speedup", help="closed-form speedup table over alpha x K x c",
        description="Speedup S = (1 - a^(K+1)) / ((1 - a)(K c + 1)) (Leviathan et al. 2023, "
                    "Thm 3.8) for every combination; prints one row per (c, alpha), one "
                    "column per K, the best K marked '*'. When the best K up to "
                    "specsim.analytic.DEFAULT_K_MAX lies outside the --k range, the row "
                    "marks the edge it lies beyond with '>' or '<' and a note names it.")
    p.add_argument("--alpha", type=float, nargs="+", required=True,
                   help="acceptance rates in [0, 1], e.g. 0.6 0.8 0.9")
    p.add_argument("--k", nargs="+", default=["1-8"],
                   help="draft lengths: ranges and lists, e.g. 1-8, '1,2,4', 1-4 8 "
                        "(default 1-8)")
    p.add_argument("--c", type=float, nargs="+", default=[0.0],
                   help="draft/target step-time ratios >= 0 (default 0)")
    p.add_argument("--csv", metavar="PATH",
                   help="also write the long-form table (alpha,k,c,expected_tokens,speedup)")
    p.set_defaults(func=_cmd_speedup)

    p = sub.add_parser(
        "optimal-k", help="the draft length that maximises speedup",
        description="For each (alpha, c), the K in [1, k-max] maximising the closed-form "
                    "speedup, that speedup, and the expected tokens per iteration there.")
    p.add_argument("--alpha", type=float, nargs="+", required=True,
                   help="acceptance rates in [0, 1]")
    p.add_argument("--c", type=float, nargs="+", required=True,
                   help="draft/target step-time ratios >= 0")
    p.add_argument("--k-max", type=int, default=None,
                   help="largest K considered (default: specsim.analytic.DEFAULT_K_MAX)")
    p.set_defaults(func=_cmd_optimal_k)
    # --- hardware (specsim.bench, specsim.fit) -------------------------------------------
    _add_hardware_commands(sub)
    # --- what-if on a datasheet GPU or TPU (specsim.what_if) -----------------------------
    _add_predict_command(sub)
    # --- the main job (specsim.experiment) -----------------------------------------------
    _add_demo_command(sub)
    # --- training (specsim.train) --------------------------------------------------------
    _add_train_draft_command(sub)
    # --- what specsim keeps on disk (specsim.cache_usage) --------------------------------
    _add_cache_command(sub)
    return parser


def _add_demo_command(sub) -> None:
    p = sub.add_parser(
        "demo", help="the main job: measure, fit, predict and compare on SmolLM2-135M",
        description="Runs autoregressive and speculative generation on SmolLM2-135M: the "
                    "instrument drafter (set acceptance α and draft cost) over α × K × cost, "
                    "the real drafters (n-gram, layer-skip, feature head) and batch 1, 4, 16; "
                    "times each run with its own baseline and the pass programs it is "
                    "predicted from in paired rounds until its speedup is known to ±3%% (or "
                    "the time budget is spent); predicts every speedup before the run (fitted "
                    "roofline, the drafter's α) and from its rounds, decomposes every miss "
                    "(acceptance, cost, loop overhead) and writes runs.csv, fidelity.json, "
                    "report.md and figures. "
                    "--parts hardware adds datasheet hardware.")
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
    p.set_defaults(func=_cmd_demo)


def _add_inrun_arguments(p) -> None:
    """The demo's options for the instrument and batch parts and the in-run timing."""
    p.add_argument("--clock", choices=["wall", "cpu"], default=None,
                   help="clock the predictions and speedups use: cpu (default: this process's "
                        "CPU time, which other jobs on a shared machine do not inflate) or wall; "
                        "both are recorded")
    p.add_argument("--repeats", type=int, default=None,
                   help="paired timing rounds every run gets whatever the time budget "
                        "(default 2)")
    p.add_argument("--max-rounds", type=int, default=None,
                   help="the most paired timing rounds of a run (default 12)")
    p.add_argument("--target-half-width", type=float, default=None,
                   help="a run's rounds stop once its measured speedup's 95%% interval is "
                        "within this fraction either side (default 0.03)")
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


# --- theory -------------------------------------------------------------------------------

def parse_k_values(specs: list[str]) -> list[int]:
    """Draft lengths from CLI words: '1-8' (inclusive range), '1,2,4', '3'; sorted, unique."""
    values: set[int] = set()
    for word in specs:
        for part in filter(None, word.replace(",", " ").split()):
            lo, sep, hi = part.partition("-")
            try:
                a = int(lo)
                b = int(hi) if sep else a
            except ValueError:
                raise ValueError(f"k must be integers or ranges like 1-8 (got {part!r})") from None
            if a < 1 or b < a:
                raise ValueError(f"k must be integers >= 1 and ranges ascending (got {part!r})")
            values.update(range(a, b + 1))
    if not values:
        raise ValueError("k must name at least one draft length")
    return sorted(values)


def _mark_optimum_outside(text: str, table: dict, ks: list[int]) -> tuple[str, list[str]]:
    """Rows of ``format_speedup_table`` text whose best K (over 1..DEFAULT_K_MAX) lies
    outside [min(ks), max(ks)] get '>' or '<' at the edge instead of '*', and a note."""
    from specsim import analytic

    lines, notes = text.splitlines(), []
    row = 1
    for c in np.unique(table["c"]):
        for a in np.unique(table["alpha"][table["c"] == c]):
            k_star, s_star = analytic.optimal_k(float(a), float(c))
            k_star = int(k_star)
            if not ks[0] <= k_star <= ks[-1]:
                mark = ">" if k_star > ks[-1] else "<"
                lines[row] = lines[row].replace("*", mark)
                limit = " (the search limit)" if k_star == analytic.DEFAULT_K_MAX else ""
                notes.append(f"  alpha {a:g}, c {c:g}: best K = {k_star}{limit} (speedup "
                             f"{float(s_star):.3f}), outside --k {ks[0]}..{ks[-1]}")
            row += 1
    return "\n".join(lines), notes


def _cmd_speedup(args) -> int:
    from specsim import analytic
    ks = parse_k_values(args.k)
    table = analytic.speedup_table(args.alpha, ks, args.c)
    text, notes = _mark_optimum_outside(analytic.format_speedup_table(table), table, ks)
    print(text)
    if notes:
        print(f"'>' / '<': the best K (searched up to K = {analytic.DEFAULT_K_MAX}) lies "
              f"beyond the last / before the first K shown; widen --k to see it:")
        print("\n".join(notes))
    if args.csv:
        import csv
        import io

        from specsim import atomic
        text = io.StringIO(newline="")
        writer = csv.writer(text)
        writer.writerow(list(table))
        for row in zip(*table.values()):
            writer.writerow([repr(float(v)) if isinstance(v, np.floating) else int(v)
                             for v in row])
        path = atomic.write(args.csv, lambda tmp: tmp.write_text(text.getvalue(), newline=""))
        print(f"wrote {path}")
    return 0


def _cmd_optimal_k(args) -> int:
    from specsim import analytic
    k_max = analytic.DEFAULT_K_MAX if args.k_max is None else args.k_max
    alpha, c = (g.ravel() for g in np.meshgrid(args.alpha, args.c, indexing="ij"))
    k_star, s = analytic.optimal_k(alpha, c, k_max=k_max)
    e = analytic.expected_tokens(alpha, k_star)
    print(f"{'alpha':>7} {'c':>7} {'K*':>4} {'speedup':>9} {'E[tokens]':>10}   (K <= {k_max})")
    for row in zip(alpha, c, k_star, s, e):
        print(f"{row[0]:>7.4g} {row[1]:>7.4g} {row[2]:>4d} {row[3]:>9.4f} {row[4]:>10.4f}")
    return 0


# --- hardware -----------------------------------------------------------------------------

def _add_hardware_commands(sub) -> None:
    p = sub.add_parser(
        "bench", help="measure this machine's ceilings and a forward-latency sweep",
        description="Measures matmul FLOP/s and copy bytes/s per device, then times one "
                    "forward pass of --model over tokens per pass, batch and context "
                    "(compiled outside the timed region, warmed up, medians of --repeats). "
                    "Appends to results/measurements/<name>.csv (under the working directory, "
                    "or --out) with a JSON metadata sidecar.")
    p.add_argument("--model", default="smollm2-135m",
                   help="preset name, HF folder or .gguf (default smollm2-135m)")
    p.add_argument("--dtype", default=None, help="cast the model to this dtype (e.g. float32)")
    p.add_argument("--quick", action="store_true", help="coarse sweep, fewer repeats")
    p.add_argument("--repeats", type=int, default=None, help="timed calls per point (default 7, quick 3)")
    p.add_argument("--seed", type=int, default=0, help="seed for random weights and tokens")
    p.add_argument("--name", default=None,
                   help="measurement file stem (default <backend>-<model>[-quick])")
    p.add_argument("--out", default=None, help="folder (default results/measurements)")
    p.add_argument("--points", nargs="+", default=None, metavar="N:B:C",
                   help="sweep these (tokens per pass : batch : context) points instead of "
                        "the default axes, e.g. 1:1:256 8:1:256 64:1:256")
    p.add_argument("--no-ceilings", action="store_true", help="skip the matmul/copy ceilings")
    p.add_argument("--no-fit", action="store_true", help="do not fit the sweep afterwards")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser(
        "fit", help="fit a roofline t0 + max(FLOPs/P, bytes/W) to a sweep file",
        description="Fits the roofline (and with --kind smooth a p-norm blend) to a "
                    "measurement CSV by least squares in log time; prints parameters "
                    "± standard errors, R² and held-out MAPE.")
    p.add_argument("path", help="measurement CSV, or a stem under results/measurements or "
                                "of the shipped reference sweep (cpu-smollm2-135m)")
    p.add_argument("--kind", choices=("max", "smooth", "both"), default="both")
    p.add_argument("--holdout", type=float, default=0.25, help="held-out fraction (default 0.25)")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out split")
    p.add_argument("--run", default=None, help="fit one run_id only ('last' for the newest)")
    p.add_argument("--column", default="time_s",
                   help="timing column to fit: time_s (median, default), time_min, time_mean")
    p.set_defaults(func=_cmd_fit)


def _bench_model(name: str, seed: int, dtype: str | None):
    """`specsim.models.load`, falling back to the preset shape with random weights when the
    real checkpoint cannot be loaded (the latency of a pass does not depend on the values)."""
    from specsim import models

    try:
        return models.load(name, seed=seed, dtype=dtype), "checkpoint"
    except (ImportError, OSError, AttributeError) as err:
        if name not in models.PRESETS:
            raise
        print(f"note: could not load the {name} checkpoint ({err}); timing the preset shape "
              f"with random weights", file=sys.stderr)
        import jax
        cfg = models.get_preset(name)
        cfg = cfg.replace(dtype=dtype) if dtype else cfg
        return models.Model(cfg, models.init_params(jax.random.PRNGKey(seed), cfg), None,
                            f"preset:{name}"), "random"


def _cmd_bench(args) -> int:
    from specsim import bench, fit

    points = None
    if args.points:
        try:
            points = bench._check_points(tuple(int(v) for v in spec.split(":"))
                                         for spec in args.points)
        except ValueError:
            raise ValueError(f"--points must be N:B:C integer triples with C >= N, got "
                             f"{args.points}") from None
    model, weights = _bench_model(args.model, args.seed, args.dtype)
    repeats = args.repeats or (3 if args.quick else 7)
    out = args.out or bench.MEASUREMENTS_DIR
    meta = bench.environment(model=model.cfg.name, source=model.source, weights=weights,
                             dtype=model.cfg.dtype, seed=args.seed, repeats=repeats,
                             quick=args.quick,
                             args={k: v for k, v in vars(args).items() if k != "func"})
    stem = args.name or f"{meta['backend']}-{model.cfg.name}" + ("-quick" if args.quick else "")
    if not args.no_ceilings:
        ceil = bench.measure_ceilings(matmul_size=1024 if args.quick else 2048,
                                      copy_mib=64 if args.quick else 256, repeats=repeats)
        for row in ceil.itertuples():
            print(f"{row.device}: matmul {row.matmul_flops_per_s / 1e9:.1f} GFLOP/s "
                  f"(n={row.matmul_size}), copy {row.copy_bytes_per_s / 1e9:.2f} GB/s (read+write)")
        paths = bench.save_measurements(ceil, f"{stem}-ceilings", meta, out)
        print(f"wrote {paths[0]}")
        args.done = [f"wrote {paths[0]} (the ceilings), not the sweep"]
    args.interrupted = "during the sweep"
    df = bench.sweep_forward(model, points, quick=args.quick, repeats=repeats, seed=args.seed)
    paths = bench.save_measurements(df, stem, meta, out)
    args.interrupted, args.done = "after the sweep", [f"wrote {paths[0]} and {paths[1]}"]
    print(df[["n_tokens", "batch", "context", "time_s", "time_iqr"]].to_string(index=False))
    print(f"wrote {paths[0]} and {paths[1]} (run {meta['run_id']})")
    if not args.no_fit and len(df) >= 5:
        for kind in ("max", "smooth"):
            print(fit.fit_sweep(df, kind=kind, holdout=0.25 if len(df) >= 10 else 0.0).summary())
    return 0


def _cmd_fit(args) -> int:
    from specsim import bench, fit

    df = bench.load_measurements(args.path, run_id=args.run)
    kinds = ("max", "smooth") if args.kind == "both" else (args.kind,)
    print(f"{args.path}: {len(df)} points"
          + (f", models {sorted(set(df['model']))}" if "model" in df else ""))
    for kind in kinds:
        print(fit.fit_sweep(df, kind=kind, holdout=args.holdout, seed=args.seed,
                            time_column=args.column).summary())
    return 0


# --- the main job -----------------------------------------------------------------------

def _cmd_demo(args) -> int:
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
                "time_budget_s": args.time_budget,
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
    from specsim.plots.experiment import demo_figures

    out = result.settings.out_dir
    result.files = report.write_demo(result, Path(out), demo_figures(result))
    args.interrupted, args.done = "after writing the results", [f"wrote {out}/"]
    print(report.summary_table(result))
    if report.S.PREDICTED_SPEEDUP in result.runs:
        f = report.fidelity_summary(result)
        if f.get("prior", {}).get("n_runs"):
            print(f"prediction before the run: {report.fidelity_headline(f['prior'])}")
        print(f"in-run prediction: {report.fidelity_headline(f)}")
    print(f"wrote {out}/ ({len(result.files)} files) in {result.environment['wall_s']:.0f} s")


# --- what specsim keeps on disk --------------------------------------------------------------

def _add_cache_command(sub) -> None:
    from specsim.cache_usage import KINDS

    p = sub.add_parser(
        "cache", help="list (with sizes) or clear what specsim keeps on disk",
        description="Lists what specsim keeps under its cache root ($SPECSIM_CACHE, default "
                    "~/.cache/specsim) with sizes and the total: dequantised models (one "
                    "per GGUF file's content, shared by every install), JAX's compiled "
                    "programs, the CPU kernels, trained drafters, unfinished writes. "
                    "'clear' removes them (every kind specsim writes, or the --kind "
                    "given); each is rebuilt when next needed.")
    p.add_argument("action", nargs="?", choices=("list", "clear"), default="list",
                   help="list (default) or clear")
    p.add_argument("--kind", nargs="+", choices=KINDS, default=None,
                   help="only these kinds (clear: default all but 'other', files specsim "
                        "did not write, removed only when named)")
    p.add_argument("--yes", action="store_true", help="clear without asking")
    p.set_defaults(func=_cmd_cache)


def _cmd_cache(args) -> int:
    from specsim import cache_usage as cu

    root = cu.cache_root()
    items = cu.entries(root)
    fmt = cu.format_bytes

    def count(n: int) -> str:
        return f"{n} entr{'y' if n == 1 else 'ies'}"

    def show(chosen):
        for e in chosen:
            name = e.path.relative_to(root) if e.path.is_relative_to(root) else e.path
            print(f"  {e.kind:<10} {fmt(e.size):>9}  {name}  {e.about}".rstrip())

    if args.action == "list":
        chosen = cu.select(items, tuple(args.kind)) if args.kind else items
        print(f"{root}" + ("" if root.is_dir() else " (not created yet)"))
        show(chosen)
        print(f"total {fmt(cu.total_bytes(chosen))} in {count(len(chosen))}")
        return 0
    chosen = cu.select(items, tuple(args.kind) if args.kind else None)
    if not chosen:
        print(f"{root}: nothing to clear")
        return 0
    size = fmt(cu.total_bytes(chosen))
    if not args.yes:
        if not sys.stdin.isatty():
            raise ValueError(f"clear would remove {count(len(chosen))} ({size}) under "
                             f"{root}; add --yes to remove them without a question")
        show(chosen)
        if input(f"remove {count(len(chosen))} ({size})? [y/N] ").strip().lower() \
                not in ("y", "yes"):
            print("nothing removed")
            return 0
    args.done, freed = ["nothing removed"], 0
    for i, e in enumerate(chosen, start=1):
        args.interrupted = f"removing {e.path}"
        freed += cu.clear([e])
        args.done = [f"removed {i} of {count(len(chosen))} ({fmt(freed)})"]
    print(f"removed {count(len(chosen))} under {root}: {fmt(freed)} freed")
    return 0


# --- training (specsim.train) ----------------------------------------------------------------

def _add_train_draft_command(sub) -> None:
    p = sub.add_parser(
        "train-draft", help="distil a small draft from the target (on-policy, restricted head)",
        description="The target generates from the shipped prompt set "
                    "(specsim/data/prompts.jsonl); a "
                    "draft made of some of its layers, its frozen embedding and a head over "
                    "the most frequent tokens learns its next-token distributions (KL, "
                    "optax AdamW). Interruptible: Ctrl-C or the time budget leaves a "
                    "checkpoint in OUT.partial, and the same command resumes it.")
    p.add_argument("--target", default="smollm2-135m",
                   help="target model: preset name, HF folder or .gguf (default smollm2-135m)")
    p.add_argument("--kind", choices=("distilled", "feature-head", "medusa"),
                   default="distilled",
                   help="distilled: a few of the target's layers, trained (a draft model); "
                        "feature-head: a small cell on the target's own features "
                        "(EAGLE-style, reaches a higher alpha on this CPU; "
                        "specsim.drafters.feature_head); medusa: K heads on the target's "
                        "last hidden state proposing a token tree "
                        "(specsim.drafters.medusa) (default distilled)")
    p.add_argument("--out", default=None,
                   help="output folder (a .npz file for --kind feature-head) (default: "
                        "under the specsim cache, where the demo looks for it)")
    p.add_argument("--layers", type=int, default=None,
                   help="draft layers: the target's first N, copied then trained (default 2; "
                        "distilled only)")
    p.add_argument("--width", type=int, default=None,
                   help="cell width (feature-head only; default 768)")
    p.add_argument("--heads", type=int, default=None,
                   help="Medusa heads, tokens guessed ahead (medusa only; default 4)")
    p.add_argument("--head-vocab", type=int, default=None,
                   help="tokens in the draft's head, the most frequent of the target's "
                        "samples (default 8192)")
    p.add_argument("--steps", type=int, default=None,
                   help="optimiser steps (default 300; feature-head 1000)")
    p.add_argument("--minutes", type=float, default=None,
                   help="time budget of this call, samples included (default 15)")
    p.add_argument("--batch", type=int, default=None,
                   help="sequences per step (default 8; feature-head: positions, 256)")
    p.add_argument("--prompts", type=int, default=None,
                   help="use only the first N prompts of the set (default all)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--no-eval", action="store_true",
                   help="skip measuring alpha by kind on the finished draft")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_train_draft)


def _cmd_train_draft(args) -> int:
    from pathlib import Path

    from specsim import models, train

    if args.kind == "medusa":
        return _cmd_train_medusa(args)
    if args.heads is not None:
        raise ValueError("--heads applies to --kind medusa only")
    if args.kind == "feature-head":
        return _cmd_train_feature_head(args)
    if args.width is not None:
        raise ValueError("--width applies to --kind feature-head only")
    given = {"layers": args.layers, "head_vocab": args.head_vocab, "steps": args.steps,
             "minutes": args.minutes, "batch": args.batch, "n_prompts": args.prompts}
    cfg = train.DistillConfig(seed=args.seed, **{k: v for k, v in given.items()
                                                 if v is not None})
    target = models.load(args.target)
    cfg.validate(target.cfg.n_layers, target.cfg.vocab_size)
    out = args.out or train.default_draft_path(target.cfg.name, cfg)
    if (Path(out) / "config.json").is_file():
        print(f"{out} is already trained (delete it to train again)")
        return 0
    evaluate = None if args.no_eval else train.evaluate_alpha(target)
    try:
        result = train.train_draft(target, out, cfg, progress=not args.no_progress,
                                   evaluate=evaluate)
    except KeyboardInterrupt:
        print(f"interrupted: checkpoint in {train.checkpoint_dir(out)}; run the same command "
              f"to resume", file=sys.stderr)
        return 130
    if not result.finished:
        print(f"time budget reached at step {result.step}/{cfg.steps}; checkpoint in "
              f"{train.checkpoint_dir(out)}; run the same command to resume")
        return 0
    print(f"wrote {result.folder} ({result.step} steps, KL {result.losses[0]:.3f} -> "
          f"{np.mean(result.losses[-10:]):.3f})")
    for name, alpha in result.meta.get("alpha", {}).get("alpha_per_slot", {}).items():
        print(f"  alpha_per_slot {name}: {alpha:.3f}")
    return 0


def _cmd_train_feature_head(args) -> int:
    from pathlib import Path

    from specsim import models
    from specsim.train import feature_head as fh

    if args.layers is not None:
        raise ValueError("--layers applies to --kind distilled only")
    given = {"width": args.width, "head_vocab": args.head_vocab, "steps": args.steps,
             "minutes": args.minutes, "batch": args.batch, "n_prompts": args.prompts}
    cfg = fh.FeatureHeadConfig(seed=args.seed, **{k: v for k, v in given.items()
                                                  if v is not None})
    target = models.load(args.target)
    cfg.validate(target.cfg.vocab_size)
    out = Path(args.out) if args.out else fh.default_head_path(target.cfg.name, cfg)
    if out.is_file():
        print(f"{out} is already trained (delete it to train again)")
        return 0
    try:
        result = fh.train_feature_head(target, out, cfg, progress=not args.no_progress)
    except KeyboardInterrupt:
        print(f"interrupted: checkpoint in {fh.checkpoint_dir(out)}; run the same command "
              f"to resume", file=sys.stderr)
        return 130
    if not result.finished:
        print(f"time budget reached at step {result.step}/{cfg.steps}; checkpoint in "
              f"{fh.checkpoint_dir(out)}; run the same command to resume")
        return 0
    print(f"wrote {result.path} ({result.step} steps, loss {result.losses[0]:.3f} -> "
          f"{np.mean(result.losses[-10:]):.3f})")
    print("  held-out greedy alpha per slot (chain): "
          + " ".join(f"{a:.3f}" for a in result.alpha_per_slot))
    return 0


def _cmd_train_medusa(args) -> int:
    from pathlib import Path

    from specsim import models
    from specsim.train import medusa

    for flag, value in (("--layers", args.layers), ("--width", args.width)):
        if value is not None:
            raise ValueError(f"{flag} does not apply to --kind medusa")
    given = {"heads": args.heads, "head_vocab": args.head_vocab, "steps": args.steps,
             "minutes": args.minutes, "batch": args.batch, "n_prompts": args.prompts}
    cfg = medusa.MedusaConfig(seed=args.seed, **{k: v for k, v in given.items()
                                                 if v is not None})
    target = models.load(args.target)
    cfg.validate(target.cfg.vocab_size)
    out = Path(args.out) if args.out else medusa.default_medusa_path(target.cfg.name, cfg)
    if out.is_file():
        print(f"{out} is already trained (delete it to train again)")
        return 0
    try:
        result = medusa.train_medusa(target, out, cfg, progress=not args.no_progress)
    except KeyboardInterrupt:
        print(f"interrupted: checkpoint in {medusa.checkpoint_dir(out)}; run the same "
              f"command to resume", file=sys.stderr)
        return 130
    if not result.finished:
        print(f"time budget reached at step {result.step}/{cfg.steps}; checkpoint in "
              f"{medusa.checkpoint_dir(out)}; run the same command to resume")
        return 0
    print(f"wrote {result.path} ({result.step} steps, loss {result.losses[0]:.3f} -> "
          f"{np.mean(result.losses[-10:]):.3f})")
    print("  held-out greedy top-1 agreement per head: "
          + " ".join(f"{a:.3f}" for a in result.agreement))
    return 0


def _add_predict_command(sub) -> None:
    p = sub.add_parser(
        "predict", help="will speculation pay on a GPU or TPU? (datasheet what-if)",
        description="Speedup of speculative decoding for a target model on a datasheet "
                    "hardware row, from the iteration cost model (specsim.iteration_cost) "
                    "with engine overheads fitted on published results: the speedup with "
                    "an interval, the best K, the batch from which it stops paying, and "
                    "the term that bounds an iteration. No JAX.")
    p.add_argument("--target", required=True, help="target model preset, e.g. llama-3.1-8b")
    p.add_argument("--hardware", required=True, help="datasheet row, e.g. h100-sxm")
    p.add_argument("--drafter", default="eagle",
                   help="draft_model, eagle, medusa, hydra, ngram, ngram_tree, lookahead "
                        "(default eagle)")
    p.add_argument("--draft", default=None, help="draft model preset (for --drafter draft_model)")
    p.add_argument("--engine", default="vllm",
                   help="hf-eager, vllm, sglang, trtllm, t5x-tpu (default vllm)")
    p.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    p.add_argument("--alpha", type=float, default=None, help="per-token acceptance (chains)")
    p.add_argument("--tau", type=float, default=None,
                   help="mean tokens an iteration (at --k, or at --tree-tokens)")
    p.add_argument("--k", type=int, default=None, help="draft length (default: the best K)")
    p.add_argument("--tree-tokens", type=int, default=None,
                   help="tokens a tree verifies, root included (a tree instead of a chain)")
    p.add_argument("--draft-steps", type=int, default=None,
                   help="sequential drafter calls for a tree (default 5)")
    p.add_argument("--context", type=int, default=512, help="tokens in the cache (default 512)")
    p.set_defaults(func=_cmd_predict)


def _cmd_predict(args) -> int:
    from specsim.what_if import predict

    pred = predict(args.target, args.hardware, drafter=args.drafter, draft=args.draft,
                   engine=args.engine, batch=args.batch, tp=args.tp, alpha=args.alpha,
                   tau=args.tau, k=args.k, tree_tokens=args.tree_tokens,
                   draft_steps=args.draft_steps, context=args.context)
    print(pred.summary())
    total = sum(pred.terms.values())
    print("iteration terms (ms): " + ", ".join(f"{name} {1e3 * v:.3f}"
                                                for name, v in pred.terms.items() if v > 0)
          + f"; total {1e3 * total:.3f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    compile_cache.enable_deferred()     # on unless SPECSIM_COMPILATION_CACHE=0 (no JAX import)
    # A command may say what it is doing (args.interrupted) and what it has left on disk
    # (args.done), for the one line that Ctrl-C prints.
    args.interrupted, args.done = "", []
    try:
        return int(args.func(args) or 0)
    except ValueError as err:  # bad input: one clear line, no traceback
        print(f"specsim {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback, the shell's code for SIGINT
        done = "; ".join(args.done) or "nothing written"
        where = f" {args.interrupted}" if args.interrupted else ""
        print(f"specsim {args.command}: interrupted{where}; {done}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
