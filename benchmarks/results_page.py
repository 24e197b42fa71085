"""Write docs/results.md, the reference numbers, from the reference data.

    python benchmarks/results_page.py            # rewrites docs/results.md
    python benchmarks/results_page.py --check    # exits 1 when docs/results.md is stale

Sources: the reference runs in data/ (demo-cpu, drafters-cpu, policies-cpu, peers-cpu,
kernel-cpu, trees-cpu) and the reference forward sweep shipped in specsim/data/measurements/. Every
number is printed with the command and commit that produced it, the machine, and the
machine's ceilings measured in the same run (matmul GFLOP/s, copy or read GB/s), or
"not measured in this run". A folder's command comes from its environment.json
("command"), else the first command block of its README, else its report.md
("Command: `...`"). To adopt a new reference run, copy its output folder over data/<folder>/ (for
the demo: runs.csv, fidelity.json, report.md, environment.json and the rest of what
`specsim demo` writes), update its README and run this script.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import warnings
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data"
PAGE = REPO / "docs" / "results.md"
COMMAND = "python benchmarks/results_page.py"
NOT_MEASURED = "not measured in this run"


# ---- a run's provenance ------------------------------------------------------------------

def environment(folder: Path) -> dict:
    path = folder / "environment.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def command(folder: Path, env: dict) -> str:
    if env.get("command"):
        return env["command"]
    readme = folder / "README.md"
    if readme.is_file():
        block = re.search(r"\n\n((?: {4}.+\n)+)", readme.read_text())
        if block:
            lines = [ln.strip().rstrip("\\").strip() for ln in block.group(1).splitlines()]
            return " ".join(lines)
    report = folder / "report.md"
    if report.is_file():
        found = re.search(r"^Command: `([^`]+)`", report.read_text(), re.M)
        if found:
            return found.group(1)
    raise SystemExit(f"{folder}: no command (environment.json 'command', report.md "
                     f"'Command:' or a README command block)")


def commit(env: dict) -> str:
    full = str(env.get("git_commit", "unknown"))
    head, _, tail = full.partition("+")
    return head[:10] + (f"+{tail}" if tail else "")


def machine(env: dict) -> str:
    cpu = env.get("cpu", "unknown CPU")
    cores = f", {env['cpu_count']} cores" if env.get("cpu_count") else ""
    backend = env.get("backend")
    jax = f", jax {env['jax']}" if env.get("jax") else ""
    return f"{cpu}{cores}" + (f" ({backend})" if backend else "") + jax


def ceilings_text(table: pd.DataFrame | None) -> str:
    """One line per device: matmul GFLOP/s and copy GB/s (read + write)."""
    if table is None or table.empty:
        return NOT_MEASURED
    rows = [f"matmul {r.matmul_flops_per_s / 1e9:.0f} GFLOP/s, copy "
            f"{r.copy_bytes_per_s / 1e9:.1f} GB/s" for r in table.itertuples()]
    return "; ".join(dict.fromkeys(rows))


def folder_ceilings(folder: Path, env: dict) -> str:
    """The ceilings a run measured beside itself (the demo's roofline part writes
    ceilings.csv; every demo part records the machine's at its start and end in its
    environment.json, ``env``), or NOT_MEASURED."""
    for name in ("ceilings.csv", *sorted(p.name for p in folder.glob("*-ceilings.csv"))):
        if (folder / name).is_file():
            return ceilings_text(pd.read_csv(folder / name))
    held = [(when, env[f"machine_{when}"]) for when in ("start", "end")
            if {"matmul_flops_per_s", "copy_bytes_per_s"} <= set(env.get(f"machine_{when}", {}))]
    return "; ".join(f"{ceilings_text(pd.DataFrame([m]))} at the {when}"
                     for when, m in held) or NOT_MEASURED


def provenance(folder: Path, env: dict, ceilings: str) -> str:
    rel = folder.relative_to(REPO) if folder.is_relative_to(REPO) else folder
    return (f"Command: `{command(folder, env)}` · commit {commit(env)} · machine: "
            f"{machine(env)} · measured ceilings: {ceilings} · data: `{rel}/`")


def table(df: pd.DataFrame) -> str:
    head = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "---|" * len(df.columns)
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def num(x, digits: int = 2) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


# ---- the sections --------------------------------------------------------------------------

class Page:
    def __init__(self):
        self.summary: list[dict] = []
        self.sections: list[str] = []

    def claim(self, result: str, value: str, folder: Path, env: dict, ceilings: str):
        self.summary.append({"result": result, "value": value,
                             "command": f"`{command(folder, env)}`", "commit": commit(env),
                             "machine": machine(env), "measured ceilings": ceilings})

    def section(self, title: str, folder: Path, env: dict, ceilings: str, note: str,
                rows: list[dict]):
        """A section: its title, the run's provenance, a note and a table of ``rows``."""
        self.sections.append("\n".join([f"## {title}", "", provenance(folder, env, ceilings),
                                        "", note, "", table(pd.DataFrame(rows)), ""]))


def demo_section(page: Page, folder: Path) -> None:
    env = environment(folder)
    ceil = folder_ceilings(folder, env)
    fidelity = json.loads((folder / "fidelity.json").read_text())
    report = (folder / "report.md").read_text()
    headline = re.search(r"^## Headline\n(.*?)(?=^## |\Z)", report, re.M | re.S)
    lines = ["## The demo: predicted against measured speedup", "",
             provenance(folder, env, ceil), ""]
    if headline:
        lines += [headline.group(1).strip(), ""]
    def errors(f: dict) -> str:
        value = f"MAPE {f['mape_pct']:.1f}%"
        if f.get("max_abs_error_pct") is not None:
            value += f", worst {f['max_abs_error_pct']:.1f}%"
        for key, name in (("coverage_pct", "coverage"), ("agreement_pct", "agreement")):
            if f.get(key) is not None:
                value += f", {name} {f[key]:.0f}%"
        return value + (f" over {f['n_runs']} runs" if "n_runs" in f else "")

    if fidelity.get("prior", {}).get("mape_pct") is not None:
        value = errors(fidelity["prior"])
        page.claim("prediction before the run (fitted roofline, the drafter's α on this "
                   "prompt)", value, folder, env, ceil)
        lines += [f"Prediction before the run of every run's measured speedup (pass times "
                  f"from the rooflines fitted to the pass sweep, each real drafter's α from "
                  f"an untimed run on the prompt): {value}.", ""]
    if fidelity.get("prior_other_prompts", {}).get("mape_pct") is not None:
        value = errors(fidelity["prior_other_prompts"])
        lines += [f"The same with each real drafter's α from untimed runs on other prompts "
                  f"of the kind (docs/studies/acceptance-before-the-run.md): {value}.", ""]
    if fidelity.get("mape_pct") is not None:       # the table below lists every key
        value = errors(fidelity)
        page.claim("in-run prediction of the measured speedup", value, folder, env, ceil)
        lines += [f"In-run prediction of every run's measured speedup: {value}.", ""]
    scalars = {k: v for k, v in fidelity.items() if isinstance(v, (int, float, str))}
    lines += ["Prediction errors (`fidelity.json`):", "",
              table(pd.DataFrame({"key": list(scalars), "value": list(scalars.values())})), ""]
    for key, groups in fidelity.items():
        if isinstance(groups, dict) and groups and all(
                isinstance(g, dict) and "mape_pct" in g for g in groups.values()):
            rows = [{key: name, "MAPE %": num(g["mape_pct"], 1),
                     "worst %": num(g.get("max_abs_error_pct"), 1), "runs": g.get("n_runs", "—")}
                    for name, g in groups.items()]
            lines += [f"`{key}`:", "", table(pd.DataFrame(rows)), ""]
    page.sections.append("\n".join(lines))


def sweep_section(page: Page) -> None:
    from specsim import bench, fit

    chosen = bench.choose_sweep(name=bench.REFERENCE_SWEEP)
    run = next((r for r in chosen.df.attrs.get("runs", []) if str(r.get("run_id")) ==
                chosen.run_id), {})
    ceil = ceilings_text(chosen.ceilings)
    bounds = fit.ceiling_bounds(chosen.ceilings) if chosen.ceilings is not None else {}
    folder = chosen.path.parent
    env = {**run, "command": "specsim bench --model smollm2-135m --repeats 9"}
    rows = []
    for kind in ("max", "smooth"):
        with warnings.catch_warnings():     # a poor fit is shown by its R² in the table
            warnings.simplefilter("ignore", fit.PoorFitWarning)
            f = fit.fit_sweep(chosen.df, kind=kind, holdout=0.25, seed=0, **bounds)
        rows.append({"form": kind, "P GFLOP/s": f"{f.peak_flops / 1e9:.0f}",
                     "W GB/s": f"{f.bandwidth / 1e9:.1f}", "t0 ms": f"{f.t0 * 1e3:.1f}",
                     "R²": f"{f.r2:.3f}", "MAPE fitted %": f"{f.mape_train:.1f}",
                     "MAPE held out %": f"{f.mape_heldout:.1f}",
                     "notes": ", ".join([*(f"{n} at the measured ceiling"
                                           if n in ("peak_flops", "bandwidth")
                                           else f"{n} at its bound" for n in f.at_bound),
                                         *(f"{n} unidentified" for n in f.unidentified)])
                     or "—"})
    best = min(rows, key=lambda r: float(r["MAPE held out %"]))
    page.claim("roofline fit of the forward sweep (held-out MAPE)",
               f"{best['MAPE held out %']}% ({best['form']} form, R² {best['R²']})",
               folder, env, ceil)
    rel = chosen.path.relative_to(REPO)
    page.sections.append("\n".join([
        "## The roofline fitted to a forward sweep", "",
        f"Command: `{env['command']}`, then `specsim fit {bench.REFERENCE_SWEEP} --run last` · "
        f"commit {commit(env)} · machine: {machine(env)} · measured ceilings: {ceil} · "
        f"data: `{rel}` (run {chosen.run_id}, {len(chosen.df)} points)", "",
        "The fit is capped at the measured ceilings, 25% of the points held out (seed 0):", "",
        table(pd.DataFrame(rows)), ""]))


def drafters_section(page: Page, folder: Path) -> None:
    env = environment(folder)
    ceil = folder_ceilings(folder, env)
    limits = pd.read_csv(folder / "drafter_limits.csv")
    speed = pd.read_csv(folder / "drafter_speedup.csv")
    best = speed.loc[speed.groupby("drafter")["measured_speedup"].idxmax()]
    best = best.set_index("drafter")
    rows = []
    for r in limits.itertuples():
        b = best.loc[r.drafter] if r.drafter in best.index else None
        rows.append({"drafter": r.drafter, "α (mean)": num(r.alpha), "c measured":
                     num(r.c_measured, 3), "K*": int(r.k_star),
                     "closed-form speedup at K*": num(r.speedup_at_k_star),
                     "best measured speedup": "—" if b is None else
                     f"{b.measured_speedup:.2f} (K {int(b.k)}, {b.kind})",
                     "limited by": r.limit})
    top = max(rows, key=lambda r: 0 if r["best measured speedup"] == "—"
              else float(r["best measured speedup"].split()[0]))
    page.claim("best measured speedup of a real drafter",
               f"{top['drafter']}: {top['best measured speedup']}", folder, env, ceil)
    page.sections.append("\n".join([
        "## The real drafters", "", provenance(folder, env, ceil), "",
        table(pd.DataFrame(rows)), ""]))


def policies_section(page: Page, folder: Path) -> None:
    env = environment(folder)
    ceil = folder_ceilings(folder, env)
    df = pd.read_csv(folder / "policies.csv")
    g = df[df["policy"] == "goodput"]
    rows = [{"drafter": r.drafter, "kind": r.kind, "batch": int(r.batch),
             "vs plain decoding": f"{r.speedup_vs_autoregressive:.2f} "
                                  f"({r.speedup_vs_autoregressive_low:.2f}–"
                                  f"{r.speedup_vs_autoregressive_high:.2f})",
             "best fixed K": int(r.best_fixed_k),
             "vs best fixed K": f"{r.speedup_vs_best_fixed:.2f} "
                                f"({r.speedup_vs_best_fixed_low:.2f}–"
                                f"{r.speedup_vs_best_fixed_high:.2f})",
             "mean K": num(r.mean_k), "K = 0 share": num(r.k0_fraction)}
            for r in g.itertuples()]
    worst_ar = g["speedup_vs_autoregressive"].min()
    worst_best = g["speedup_vs_best_fixed"].min()
    page.claim("Goodput against plain decoding and the best fixed K (worst cell)",
               f"{worst_ar:.2f}× plain, {worst_best:.2f}× best fixed K over {len(g)} cells",
               folder, env, ceil)
    page.sections.append("\n".join([
        "## Draft-length policies: Goodput's cells", "", provenance(folder, env, ceil), "",
        "Speedups are medians over the timed rounds, the range in brackets; the full grid "
        "(every policy) is in the folder's `report.md`.", "",
        table(pd.DataFrame(rows)), ""]))


def _iv(row, col: str) -> str:
    """``col`` with its interval from a peers.csv row: "1.85 (1.80–1.90)", or "—"."""
    v = row.get(col)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    lo, hi = row.get(col + "_lo"), row.get(col + "_hi")
    if lo is None or hi is None:                                      # one round: no interval
        return f"{v:.2f}"
    return f"{v:.2f} ({lo:.2f}–{hi:.2f})"


def peers_section(page: Page, folder: Path) -> None:
    """benchmarks/bench_peers.py's run: peers.csv (one row per engine, method and kind,
    with intervals) where the run wrote one, else the printed table of an older run."""
    env = environment(folder)
    if not (folder / "peers.csv").is_file():
        return _peers_text_section(page, folder, env)
    ceil = (f"read {env['read_gbs']:.1f} GB/s (a 512 MB jnp.sum)" if env.get("read_gbs")
            else NOT_MEASURED)
    df = pd.read_csv(folder / "peers.csv")
    recs = [{k: (None if isinstance(v, float) and math.isnan(v) else v)
             for k, v in r.items()} for r in df.to_dict("records")]
    rows = [{"engine": r["engine"], "method": r["method"], "kind": r["kind"],
             "tokens/s": _iv(r, "tokens_per_s"), "× fp32 greedy": _iv(r, "vs_fp32_greedy"),
             "× llama.cpp greedy": _iv(r, "vs_llamacpp_greedy"),
             "weights MB": f"{r['weight_mb']:.1f}",
             "greedy step, share of read": _iv(r, "read_share"), "c": _iv(r, "c"),
             "α": num(r.get("alpha"), 3),
             "= own greedy": "—" if r.get("equals_own_greedy") is None
             else ("yes" if r["equals_own_greedy"] else "no")} for r in recs]
    spec = [r for r in recs if r["engine"].startswith("specsim") and r["method"] != "greedy"
            and r.get("equals_own_greedy") and r.get("vs_llamacpp_greedy") is not None]
    best = {}
    for r in spec:
        if r["kind"] not in best or r["vs_llamacpp_greedy"] > best[r["kind"]]["vs_llamacpp_greedy"]:
            best[r["kind"]] = r
    if best:
        page.claim("specsim's fastest speculative decoding against llama.cpp greedy (same "
                   "GGUF and prompts, output = its target's greedy)",
                   "; ".join(f"{k}: {r['engine'].removeprefix('specsim-')} {r['method']} "
                             f"{_iv(r, 'vs_llamacpp_greedy')}×" for k, r in best.items()),
                   folder, env, ceil)
    int4 = [r for r in recs if r["engine"].startswith("specsim-int4") and r["method"] == "greedy"
            and r.get("read_share") is not None]
    if int4:
        page.claim("int4 greedy decode step: its weight reads over the step, as a share of "
                   "the read bandwidth measured in the same rounds",
                   "; ".join(f"{r['kind']} {r['engine'].removeprefix('specsim-')}: "
                             f"{_iv(r, 'read_share')}" for r in int4), folder, env, ceil)
    selfs = [r for r in recs if r["engine"] == "specsim-fp32" and r["method"].startswith("self-")
             and r.get("c") is not None]
    if selfs:
        page.claim("int4 self-draft of the fp32 target: c, α and speedup over fp32 greedy",
                   "; ".join(f"{r['kind']} {r['method']}: c {r['c']:.2f}, α {r['alpha']:.2f}, "
                             f"{_iv(r, 'vs_fp32_greedy')}×" for r in selfs),
                   folder, env, ceil)
    page.section(
        "specsim against transformers and llama.cpp", folder, env, ceil,
        "One prompt per kind of work, the same token ids for every engine; medians over "
        "the interleaved rounds with 95% intervals. int4: symmetric in groups of 32, the head "
        "too, with int8 activations (x rounded to int8 per group, integer products); int4a: "
        "with offsets (the GGUF's own Q4_1 layers, exactly) and the GGUF's Q8_0 head (int8 in "
        "groups of 32), fp32 activations; self-int4(a): the fp32 or int8 target drafted by its own "
        "weights in that format. The greedy step excludes the prefill; c is the draft "
        "format's greedy step over its target's; = own greedy: the output equals the target's "
        "greedy output token for token.", rows)


def _peers_text_section(page: Page, folder: Path, env: dict) -> None:
    ceil = folder_ceilings(folder, env)
    text = (folder / "bench_peers.txt").read_text().splitlines()
    start = next(i for i, ln in enumerate(text) if ln.startswith("engine"))
    rows = []
    for ln in text[start + 1:]:
        parts = ln.split()
        if len(parts) != 8:
            break
        rows.append(dict(zip(["engine", "method", "tokens/s", "vs transformers", "vs specsim",
                              "weights MB", "GB/s of weights", "agrees with HF greedy"],
                             parts)))
    tps = {(r["engine"], r["method"]): float(r["tokens/s"]) for r in rows}
    ours = tps[("specsim-fp32", "greedy")]
    page.claim("specsim fp32 greedy decode against transformers and llama.cpp",
               f"{ours:.1f} tokens/s: {ours / tps[('transformers', 'greedy')]:.2f}× "
               f"transformers, {ours / tps[('llama.cpp', 'greedy')]:.2f}× llama.cpp",
               folder, env, ceil)
    page.sections.append("\n".join([
        "## specsim against transformers and llama.cpp", "", provenance(folder, env, ceil), "",
        table(pd.DataFrame(rows)), ""]))


def kernel_section(page: Page, folder: Path) -> None:
    env = environment(folder)
    text = (folder / "bench_kernel.md").read_text()
    read = re.search(r"reference read \(jnp\.sum of (\d+ MB)\): median ([\d.]+) GB/s", text)
    ceil = f"read {read.group(2)} GB/s (a {read.group(1)} jnp.sum)" if read else NOT_MEASURED
    lines = [ln for ln in text.splitlines() if ln.startswith("| ") and "---" not in ln]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    df = pd.DataFrame([[c.strip() for c in ln.strip("|").split("|")] for ln in lines[1:]],
                      columns=head)
    df["n"], df["ms"] = df["n"].astype(int), df["ms"].astype(float)
    rows = []
    for (w, loop, mm), g in df.groupby(["weights", "loop", "matmul"], sort=False):
        t = g.set_index("n")["ms"]
        rows.append({"weights": w, "loop": loop, "matmul": mm, "ms at n = 1": f"{t[1]:.2f}",
                     **{f"t({n})/t(1)": f"{t[n] / t[1]:.2f}" for n in t.index if n > 1}})
    by = {(r["weights"], r["loop"], r["matmul"]): r for r in rows}
    n_max = max(df["n"])
    k, x = by[("fp32", "scan", "auto")], by[("fp32", "scan", "xla")]
    page.claim(f"cost of a {n_max}-token verify pass in decode steps (fp32, scan loop)",
               f"{k[f't({n_max})/t(1)']} with specsim's kernel, {x[f't({n_max})/t(1)']} with "
               f"XLA's dots", folder, env, ceil)
    page.sections.append("\n".join([
        "## The CPU matmul kernel against XLA's dots", "", provenance(folder, env, ceil), "",
        "One forward pass at n tokens (batch 1), medians of the interleaved rounds; "
        "`auto` runs specsim's kernel, `xla` XLA's dots.", "",
        table(pd.DataFrame(rows)), ""]))


def trees_section(page: Page, folder: Path) -> None:
    env = environment(folder)
    ceil = folder_ceilings(folder, env)
    tokens = pd.read_csv(folder / "tree_tokens.csv")
    ceiling = pd.read_csv(folder / "tree_ceiling.csv").set_index(["head", "kind"])
    shallow = int(tokens["depth"].min())     # the part's depth: the ceiling's
    trees = tokens[tokens["tree"] != "chain"]
    best = trees.loc[trees.groupby(["head", "depth", "kind"], sort=False)
                     ["tokens_per_iteration_vs_chain"].idxmax()]

    def reach(r) -> str:
        if r.depth != shallow:
            return "–"
        return (f"{num(ceiling.loc[(r.head, r.kind), 'top8_vs_chain'])} / "
                f"{num(ceiling.loc[(r.head, r.kind), 'ceiling_vs_chain'])}")

    rows = [{"head": r.head, "depth": int(r.depth), "kind": r.kind, "best tree": r.tree,
             "tokens/iteration vs its chain": f"{r.tokens_per_iteration_vs_chain:.2f} "
                                               f"({r.vs_chain_ci_lo:.2f}–{r.vs_chain_ci_hi:.2f})",
             "any tree of its top 8 / top 32": reach(r),
             "prompts": int(r.prompts)} for r in best.itertuples()]
    page.claim("tokens per iteration of a head's best tree over its chain of the same depth",
               "; ".join(f"{r['head']} depth {r['depth']} {r['kind']} "
                         f"{r['tokens/iteration vs its chain']}" for r in rows),
               folder, env, ceil)
    page.sections.append("\n".join([
        "## Token trees against chains at equal depth", "", provenance(folder, env, ceil), "",
        f"Greedy tokens per iteration of each head's best tree over its own chain of the "
        f"same depth ({shallow}; the feature head, which drafts one level per step, also "
        f"deeper), pooled over the prompts of a kind, with a 95% interval over prompts; "
        f"the next column is the most any tree of depth {shallow} whose nodes are among "
        f"their parents' top 8 (top 32) candidates reaches, replayed from the ranks of the "
        f"target's tokens. Speedups and the planned sizes are in the folder's "
        f"`report.md`.", "",
        table(pd.DataFrame(rows)), ""]))


def render() -> str:
    page = Page()
    demo_section(page, DATA / "demo-cpu")
    sweep_section(page)
    drafters_section(page, DATA / "drafters-cpu")
    policies_section(page, DATA / "policies-cpu")
    peers_section(page, DATA / "peers-cpu")
    kernel_section(page, DATA / "kernel-cpu")
    trees_section(page, DATA / "trees-cpu")
    intro = [
        "# Reference results", "",
        f"Generated by `{COMMAND}` from the reference runs in `data/` and the reference "
        "sweep in `specsim/data/measurements/`; do not edit (tests/test_results_page.py "
        "fails when the page and the data disagree).", "",
        "Each number was measured by the command beside it, at the commit named, on the "
        "machine named. The ceilings are that machine's large-matmul FLOP/s and large-copy "
        "(read + write) or read bytes/s, measured in the same run where the run measured "
        f"them (\"{NOT_MEASURED}\" otherwise). The machines are shared 2-core VMs on which "
        "timings move 5-10% between runs: read ratios, not absolute times.", "",
        "## Summary", "", table(pd.DataFrame(page.summary)), ""]
    return "\n".join(intro + page.sections).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when docs/results.md differs from what the data give")
    ap.add_argument("--out", type=Path, default=PAGE, help=f"where to write (default {PAGE})")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not args.out.is_file() or args.out.read_text() != text:
            print(f"{args.out} is out of date: run `{COMMAND}`", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(f".{args.out.name}.tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
