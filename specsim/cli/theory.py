"""`specsim speedup` and `specsim optimal-k`: the closed-form theory (`specsim.analytic`)
on the command line. Nothing here imports JAX, so these commands start fast."""

from __future__ import annotations

import numpy as np

from specsim.cli.arguments import add_command, parse_k_values


def add_commands(sub) -> None:
    p = add_command(sub, "speedup", _cmd_speedup,
                    help="closed-form speedup table over alpha x K x c")
    p.add_argument("--alpha", type=float, nargs="+", required=True,
                   help="acceptance rates in [0, 1], e.g. 0.6 0.8 0.9")
    p.add_argument("--k", nargs="+", default=["1-8"],
                   help="draft lengths: ranges and lists, e.g. 1-8, '1,2,4', 1-4 8 "
                        "(default 1-8)")
    p.add_argument("--c", type=float, nargs="+", default=[0.0],
                   help="draft/target step-time ratios >= 0 (default 0)")
    p.add_argument("--csv", metavar="PATH",
                   help="also write the long-form table (alpha,k,c,expected_tokens,speedup)")

    p = add_command(sub, "optimal-k", _cmd_optimal_k,
                    help="the draft length that maximises speedup")
    p.add_argument("--alpha", type=float, nargs="+", required=True,
                   help="acceptance rates in [0, 1]")
    p.add_argument("--c", type=float, nargs="+", required=True,
                   help="draft/target step-time ratios >= 0")
    p.add_argument("--k-max", type=int, default=None,
                   help="largest K considered (default: specsim.analytic.DEFAULT_K_MAX)")


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
    """Speedup S = (1 - a^(K+1)) / ((1 - a)(K c + 1)) (Leviathan et al. 2023, Thm 3.8)
    for every combination; prints one row per (c, alpha), one column per K, the best K
    marked '*'. When the best K up to specsim.analytic.DEFAULT_K_MAX lies outside the
    --k range, the row marks the edge it lies beyond with '>' or '<' and a note names
    it."""
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
    """For each (alpha, c), the K in [1, k-max] maximising the closed-form speedup, that
    speedup, and the expected tokens per iteration there."""
    from specsim import analytic
    k_max = analytic.DEFAULT_K_MAX if args.k_max is None else args.k_max
    alpha, c = (g.ravel() for g in np.meshgrid(args.alpha, args.c, indexing="ij"))
    k_star, s = analytic.optimal_k(alpha, c, k_max=k_max)
    e = analytic.expected_tokens(alpha, k_star)
    print(f"{'alpha':>7} {'c':>7} {'K*':>4} {'speedup':>9} {'E[tokens]':>10}   (K <= {k_max})")
    for row in zip(alpha, c, k_star, s, e):
        print(f"{row[0]:>7.4g} {row[1]:>7.4g} {row[2]:>4d} {row[3]:>9.4f} {row[4]:>10.4f}")
    return 0

