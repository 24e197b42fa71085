"""`specsim bench` and `specsim fit`: this machine's ceilings and forward-latency sweep
(`specsim.bench`), and the roofline fitted to a sweep (`specsim.fit`)."""

from __future__ import annotations

import sys

from specsim.cli.arguments import add_command


def add_commands(sub) -> None:
    p = add_command(sub, "bench", _cmd_bench,
                    help="measure this machine's ceilings and a forward-latency sweep")
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

    p = add_command(sub, "fit", _cmd_fit,
                    help="fit a roofline t0 + max(FLOPs/P, bytes/W) to a sweep file")
    p.add_argument("path", help="measurement CSV, or a stem under results/measurements or "
                                "of the shipped reference sweep (cpu-smollm2-135m)")
    p.add_argument("--kind", choices=("max", "smooth", "both"), default="both")
    p.add_argument("--holdout", type=float, default=0.25, help="held-out fraction (default 0.25)")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out split")
    p.add_argument("--run", default=None, help="fit one run_id only ('last' for the newest)")
    p.add_argument("--column", default="time_s",
                   help="timing column to fit: time_s (median, default), time_min, time_mean")


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
    """Measures matmul FLOP/s and copy bytes/s per device, then times one forward pass
    of --model over tokens per pass, batch and context (compiled outside the timed
    region, warmed up, medians of --repeats). Appends to results/measurements/<name>.csv
    (under the working directory, or --out) with a JSON metadata sidecar."""
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
    """Fits the roofline (and with --kind smooth a p-norm blend) to a measurement CSV by
    least squares in log time; prints parameters ± standard errors, R² and held-out
    MAPE."""
    from specsim import bench, fit

    df = bench.load_measurements(args.path, run_id=args.run)
    kinds = ("max", "smooth") if args.kind == "both" else (args.kind,)
    print(f"{args.path}: {len(df)} points"
          + (f", models {sorted(set(df['model']))}" if "model" in df else ""))
    for kind in kinds:
        print(fit.fit_sweep(df, kind=kind, holdout=args.holdout, seed=args.seed,
                            time_column=args.column).summary())
    return 0

