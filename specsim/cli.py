"""The ``specsim`` command line.

Each subcommand lives in one small function ``_cmd_<name>(args)`` and registers its
parser in ``build_parser``. Heavy imports (JAX, pandas, plotting) happen inside the
command that needs them, so ``specsim speedup`` starts fast and never imports JAX.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specsim",
        description="Speculative decoding: closed-form theory, a compiled JAX engine and "
                    "roofline hardware models, held against each other.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    # --- theory (specsim.analytic) -------------------------------------------------------
    p = sub.add_parser(
        "speedup", help="closed-form speedup table over alpha x K x c",
        description="Speedup S = (1 - a^(K+1)) / ((1 - a)(K c + 1)) (Leviathan et al. 2023, "
                    "Thm 3.8) for every combination; prints one row per (c, alpha), one "
                    "column per K, the best K marked '*'.")
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
    # --- the main job (specsim.experiment) -----------------------------------------------
    p = sub.add_parser(
        "demo", help="the main job (for now: the analytic model, table and figure)",
        description="Prints the closed-form speedup table and writes the analytic figure "
                    "(speedup, arithmetic factor and optimal K against alpha) under --out.")
    p.add_argument("--out", default="results/demo",
                   help="output folder (default results/demo)")
    p.add_argument("--c", type=float, default=0.05,
                   help="draft/target step-time ratio for the table and figure (default 0.05)")
    p.set_defaults(func=_cmd_demo)
    return parser


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


def _cmd_speedup(args) -> int:
    from specsim import analytic
    table = analytic.speedup_table(args.alpha, parse_k_values(args.k), args.c)
    print(analytic.format_speedup_table(table))
    if args.csv:
        import csv
        from pathlib import Path
        path = Path(args.csv)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(list(table))
            for row in zip(*table.values()):
                writer.writerow([repr(float(v)) if isinstance(v, np.floating) else int(v)
                                 for v in row])
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


# --- the main job -----------------------------------------------------------------------

def _cmd_demo(args) -> int:
    from specsim.plots.analytic import analytic_report
    report = analytic_report(args.out, c=args.c)
    print(report.table)
    for path in report.figures:
        print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as err:  # bad input: one clear line, no traceback
        print(f"specsim {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
