"""Fidelity probe: predicted vs measured speedup of the instrument drafter on the real
SmolLM2-135M, with every miss decomposed.

    PYTHONPATH=. python benchmarks/fidelity_probe.py            # α {0.3, 0.9} × K {2, 4}
    PYTHONPATH=. python benchmarks/fidelity_probe.py --quick    # batch 1, fewer settings

Times are this process's CPU time by default (``--clock wall`` for wall time): on a
shared machine the wall clock mostly measures the other jobs.

For each batch, every round times (in a fresh random order) the autoregressive baseline,
every speculative run (α × K × draft cost), the pass programs of `specsim.pass_costs`
(t_target(1), t_verify(K+1), t_draft, as the loop pays them), the bare forward passes a
roofline sweep times (`bench.make_forward_call`) and the prefill. Then per run:

    measured  = (T_AR − prefill) / (T_spec − prefill)       (same new tokens, eos off)
    predicted = E · t_target_1 / (K · t_draft + t_verify)   (pass_costs.predict_speedup)

The decomposition is exact in logs: with n decode tokens, I batched iterations,
E_eff = n / I, in-run step times t1_run = (T_AR − prefill)/n and
t_iter_run = (T_spec − prefill)/I, the measured speedup is E_eff · t1_run / t_iter_run,
so predicted / measured = (E / E_eff) · (t1 / t1_run) · (t_iter_run / t_iter)^(-1):
acceptance model × AR-step cost model × iteration cost model (the last one's excess over
the pass programs is the residual loop overhead).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specsim import analytic, bench, decode, models, pass_costs, simulate, workloads  # noqa: E402
from specsim.drafters import instrument_drafter, reference_tokens  # noqa: E402


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.3, 0.9])
    ap.add_argument("--ks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--costs", nargs="+", default=["1", "12+head"],
                    help="draft cost per step: target layers, '+head' for the full head")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--prompt-tokens", type=int, default=28,
                    help="keep the first N tokens of each workload prompt (0: all); a short "
                         "prompt keeps the prefill, which is subtracted, small")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="iterations per pass-program call")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="cpu",
                    help="cpu (default): this process's CPU time (all its threads), which "
                         "time-slicing by other processes on a shared machine does not "
                         "inflate (load 22 on 2 cores: per-round interval 9%% of the "
                         "speedup, against 52%% by the wall clock)")
    ap.add_argument("--quick", action="store_true", help="batch 1, K 4, one round less")
    ap.add_argument("--no-cache", action="store_true", help="no persistent compile cache")
    ap.add_argument("--subsets", type=int, default=0, metavar="N",
                    help="also score the estimators of STATS on every subset of N of the "
                         "rounds (the demo times 2 or 4): how much of the miss is how few "
                         "rounds it reads, and which statistic of them misses least")
    ap.add_argument("--order", choices=("shuffled", "blocked"), default="shuffled",
                    help="shuffled (the demo's): each round every call once in a random "
                         "order; blocked: each round every run once in a random order, each "
                         "run timed beside its own baseline, prefill and pass programs (a "
                         "block, itself shuffled), so a slow spell of the host falls on the "
                         "measured and the predicted speedup alike")
    ap.add_argument("--shared-repeats", type=int, default=1, metavar="R",
                    help="(shuffled) time every call that several runs share (the baselines, "
                         "prefill and pass programs) R times per round, each in its own "
                         "place of the shuffled order: one number read by every run is "
                         "where a noisy sample costs most")
    args = ap.parse_args(argv)
    if args.shared_repeats < 1:
        ap.error(f"--shared-repeats must be an integer >= 1 (got {args.shared_repeats})")
    if args.quick:
        args.batches, args.ks, args.rounds = [1], [4], max(2, args.rounds - 1)
    return args


def _cost(text: str) -> tuple[int, bool]:
    layers, _, head = text.partition("+")
    return int(layers), head == "head"


def _prompts(target, batch: int, keep: int) -> list[list[int]]:
    kinds = workloads.KINDS
    out = [target.tokenizer.encode(workloads.prompt_text(kinds[b % len(kinds)],
                                                         target.tokenizer))
           for b in range(batch)]
    return [p[:keep] if keep else p for p in out]


def short_tokens(max_new: int) -> int:
    """The fewest new tokens that run the same compiled loop (same iteration bucket)."""
    b, n = decode.bucket(max_new), max_new
    while n > 2 and decode.bucket(n - 1) == b:
        n -= 1
    return n


def _setup_batch(target, batch, args, log):
    """Reference, drafters, compiled calls for one batch size → dict of jobs."""
    prompts = _prompts(target, batch, args.prompt_tokens)
    k_max = max(args.ks)
    P = decode.bucket(max(map(len, prompts)), 8)
    S = decode.bucket(P + args.max_new + k_max + 1)
    t0 = time.perf_counter()
    ref = reference_tokens(target, prompts, args.max_new + k_max + 1, cache_len=S)
    log(f"  batch {batch}: P {P}, S {S}; reference run {time.perf_counter() - t0:.0f} s")
    jobs = {("ar",): lambda: decode.generate_autoregressive(
        target, prompts, args.max_new, eos_token_id=None, cache_len=S)}
    # the same program over fewer tokens: the slope gives the in-run step, the intercept
    # the in-run prefill and per-call overhead (compared with the bare prefill below)
    jobs[("ar_short",)] = lambda: decode.generate_autoregressive(
        target, prompts, short_tokens(args.max_new), eos_token_id=None, cache_len=S)
    pre, _ = bench.make_forward_call(target, P, batch, S, logits="last")   # as the run's
    jobs[("prefill",)] = pre                       # prefill: the head at one position
    for n in sorted({1} | {k + 1 for k in args.ks}):
        jobs[("bare", n)], _ = bench.make_forward_call(target, n, batch, S)
    for cost in args.costs:
        layers, head = _cost(cost)
        for a in args.alphas:
            d = instrument_drafter(target, prompts, args.max_new, k_max=k_max, alpha=a,
                                   layers=layers, head=head, reference=ref)
            for k in args.ks:
                d.check_run(max_new_tokens=args.max_new, k=k)
                jobs[("spec", cost, a, k)] = (lambda d=d, k=k: decode.generate_speculative(
                    target, d, prompts, args.max_new, k=k, eos_token_id=None, cache_len=S))
        for k in args.ks:
            calls = pass_costs.pass_calls(target, d, batch=batch, cache_len=S, k=k,
                                          steps=args.steps)
            jobs[("draft", cost, k)] = calls.draft
            jobs[("verify", k)] = calls.verify
            jobs[("target_1",)] = calls.target_1
    t0 = time.perf_counter()
    for key, job in jobs.items():          # compile outside the timed rounds
        if key[0] in ("ar", "spec", "ar_short"):
            job()
    log(f"  batch {batch}: {len(jobs)} jobs compiled/warmed in {time.perf_counter() - t0:.0f} s")
    return jobs


def _timed(job, key, clock) -> tuple[float, object]:
    """(seconds, output) of one call, blocked on inside the timed region."""
    t0 = clock()
    out = job()
    if key[0] not in ("ar", "spec", "ar_short"):   # generation returns host values already
        jax.block_until_ready(out)
    return clock() - t0, out


def _time_rounds(jobs: dict, rounds: int, seed: int, clock=time.perf_counter,
                 shared_repeats: int = 1):
    keys = list(jobs) + [("ar",)]          # the baseline twice per round: it serves every run
    keys += [k for k in keys if k[0] != "spec"] * (shared_repeats - 1)
    times = {k: [] for k in jobs}
    results = {}
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        for i in rng.permutation(len(keys)):
            key = keys[i]
            dt, out = _timed(jobs[key], key, clock)
            times[key].append(dt)
            if key[0] == "spec":
                results[key] = out
    return times, results


def _block_keys(key) -> list[tuple]:
    """The calls a run's speedup and its prediction read: timed together in --order blocked."""
    _, cost, _, k = key
    return [key, ("ar",), ("prefill",), ("target_1",), ("verify", k), ("draft", cost, k)]


def _time_blocked(jobs: dict, rounds: int, seed: int, clock=time.perf_counter):
    """Per run, {call: [seconds per round]} from that run's own blocks; the calls no block
    holds (the short baseline, the bare passes) once per round between blocks."""
    runs = [k for k in jobs if k[0] == "spec"]
    inside = {c for r in runs for c in _block_keys(r)}
    loose = [k for k in jobs if k not in inside]
    per_run = {r: {c: [] for c in _block_keys(r)} for r in runs}
    shared = {c: [] for c in loose}
    results = {}
    rng = np.random.default_rng(seed)
    units = [("run", r) for r in runs] + [("loose", c) for c in loose]
    for _ in range(rounds):
        for u in rng.permutation(len(units)):
            what, key = units[u]
            calls = _block_keys(key) if what == "run" else [key]
            for j in rng.permutation(len(calls)):
                c = calls[j]
                dt, out = _timed(jobs[c], c, clock)
                (per_run[key][c] if what == "run" else shared[c]).append(dt)
                if c[0] == "spec":
                    results[c] = out
    return {r: {**shared, **t} for r, t in per_run.items()}, results


STATS = {"median": np.median, "min": np.min}
"""Statistics of a call's per-round times (--subsets): the median (the demo's; with two
rounds, their mean) and the minimum (contention by other processes only adds time)."""


def _row(key, res, times, args, batch, steps, stat=np.median):
    _, cost, a, k = key
    med = {n: float(stat(t)) for n, t in times.items()}
    n = args.max_new - 1                                   # decode tokens per row
    I = res.n_iterations
    pre = med[("prefill",)]
    t1_run = (med[("ar",)] - pre) / n
    titer_run = (med[key] - pre) / I
    t1 = med[("target_1",)] / steps
    tv = med[("verify", k)] / steps
    td = med[("draft", cost, k)] / (steps * k)
    titer = k * td + tv
    st = res.stats
    acc = st.accepted[st.active]
    alpha_hat = float((acc[None] > np.arange(k)[:, None]).sum()
                      / (acc[None] >= np.arange(k)[:, None]).sum())
    rates = np.nan_to_num(st.per_position_acceptance, nan=0.0)
    E = dict(eff=n / I, tpi=st.tokens_per_iteration,
             iid=float(analytic.expected_tokens(alpha_hat, k)),
             pos=float(analytic.expected_tokens_positional(rates)),
             set_finite=n / pass_costs.expected_iterations(simulate.tokens_pmf(a, k), n, batch))
    # per-round measured ratios: the interval of the measurement
    ar, sp, pr = (np.asarray(times[x]) for x in (("ar",), key, ("prefill",)))
    pr_round = stat(pr.reshape(len(sp), -1), axis=1)      # shared calls: R samples a round
    per_round = (stat(ar) - pr_round) / (sp - pr_round)
    measured = (med[("ar",)] - pre) / (med[key] - pre)
    n_short = short_tokens(args.max_new) - 1
    t1_slope = (med[("ar",)] - med[("ar_short",)]) / (n - n_short)
    row = dict(batch=batch, cost=cost, alpha=a, k=k, alpha_hat=alpha_hat, iters=I,
               prefill_bare_s=pre, prefill_run_s=med[("ar",)] - n * t1_slope,
               measured_int=n * t1_slope / (med[key] - (med[("ar",)] - n * t1_slope)),
               c=td / t1, measured=measured, meas_lo=float(per_round.min()),
               meas_hi=float(per_round.max()), t1_ms=1e3 * t1, tv_ms=1e3 * tv,
               td_ms=1e3 * td)
    for name, e in E.items():
        e = min(max(e, 1.0), k + 1.0)
        row[f"pred_{name}"] = float(pass_costs.predict_speedup(e, k, t1, tv, td))
    sv, s1 = med[("bare", k + 1)], med[("bare", 1)]
    row["pred_bare"] = float(pass_costs.predict_speedup(min(E["eff"], k + 1), k, s1, sv, td))
    # the exact decomposition of pred_eff / measured (percent, log-additive)
    row["err_accept_iid"] = 100 * (E["iid"] / E["eff"] - 1)
    row["err_accept_tpi"] = 100 * (E["tpi"] / E["eff"] - 1)
    row["err_t1"] = 100 * (t1 / t1_run - 1)
    row["err_iter"] = 100 * (titer_run / titer - 1)          # residual loop overhead
    row["err_bare_t1"] = 100 * (s1 / t1_run - 1)
    row["err_bare_iter"] = 100 * (titer_run / (k * td + sv) - 1)
    return row


def main(argv=None) -> int:
    args = parse(argv)
    log = lambda s: print(s, flush=True)
    t_start = time.perf_counter()
    if not args.no_cache:
        cache = Path.home() / ".cache" / "specsim" / "jax"
        cache.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(cache))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    target = models.load("smollm2-135m").with_layer_loop("scan")
    log(f"fidelity probe: {target.cfg.name}, scan, rounds {args.rounds}, clock {args.clock}, "
        f"max_new {args.max_new}; {bench.environment().get('devices')}")
    rows, all_times = [], []
    for batch in args.batches:
        jobs = _setup_batch(target, batch, args, log)
        t0 = time.perf_counter()
        clock = time.process_time if args.clock == "cpu" else time.perf_counter
        if args.order == "blocked":
            times, results = _time_blocked(jobs, args.rounds, seed=batch, clock=clock)
        else:
            shared, results = _time_rounds(jobs, args.rounds, seed=batch, clock=clock,
                                           shared_repeats=args.shared_repeats)
            times = {key: shared for key in results}
        log(f"  batch {batch}: {args.rounds} rounds ({args.order}) in "
            f"{time.perf_counter() - t0:.0f} s")
        for key, res in results.items():
            rows.append(_row(key, res, times[key], args, batch, args.steps))
        all_times.append((batch, times, results))
    df = report(rows, log)
    if args.subsets:
        subset_study(all_times, args, log, df)
    log(f"total {time.perf_counter() - t_start:.0f} s")
    return 0


def report(rows, log):
    import pandas as pd

    df = pd.DataFrame(rows)
    pd.set_option("display.width", 250)
    cols = ["batch", "cost", "alpha", "k", "alpha_hat", "iters", "c", "measured", "meas_lo",
            "meas_hi", "measured_int", "prefill_bare_s", "prefill_run_s", "pred_eff", "pred_tpi", "pred_iid", "pred_set_finite", "pred_bare",
            "err_accept_iid", "err_t1", "err_iter", "err_bare_t1", "err_bare_iter"]
    log(df[cols].round(3).to_string(index=False))
    for name in ("eff", "tpi", "iid", "pos", "set_finite", "bare"):
        err = 100 * (df[f"pred_{name}"] / df["measured"] - 1)
        log(f"MAPE pred_{name:<10} {err.abs().mean():5.1f}%   max {err.abs().max():5.1f}%   "
            f"mean signed {err.mean():+5.1f}%")
    for term in ("err_accept_iid", "err_accept_tpi", "err_t1", "err_iter", "err_bare_t1",
                 "err_bare_iter"):
        log(f"  {term:<15} mean {df[term].mean():+5.1f}%  mean |.| {df[term].abs().mean():4.1f}%")
    width = (df["meas_hi"] - df["meas_lo"]) / df["measured"]
    log(f"measurement interval (per-round min..max of the ratio): median width "
        f"{100 * width.median():.1f}% of the speedup")
    return df


def subset_study(all_times, args, log, df) -> None:
    """MAPE of pred_eff against the run's measured speedup when both read only N of the
    rounds, for every subset of N rounds (at most 200, drawn without repetition) and each
    statistic of STATS; against that, the error each subset's measurement makes relative
    to the all-rounds median (how far N rounds put the measured speedup itself)."""
    import itertools

    n = args.subsets
    if not 1 <= n < args.rounds:
        raise SystemExit(f"--subsets must lie in 1..rounds - 1 = {args.rounds - 1} (got {n})")
    subsets = list(itertools.combinations(range(args.rounds), n))
    rng = np.random.default_rng(0)
    if len(subsets) > 200:
        subsets = [subsets[i] for i in rng.choice(len(subsets), 200, replace=False)]
    full = {(r["batch"], r["alpha"], r["k"], r["cost"]): r["measured"] for _, r in df.iterrows()}
    log(f"subsets of {n} of {args.rounds} rounds ({len(subsets)}): MAPE of pred_eff against "
        "measured (mean over subsets, 90th percentile), and |measured / all-rounds median - 1|")
    for name, stat in STATS.items():
        mape, drift = [], []
        for sub in subsets:
            errs, drifts = [], []
            for batch, times, results in all_times:
                for key, res in results.items():
                    part = {c: np.asarray(t).reshape(args.rounds, -1)[list(sub)].ravel()
                            for c, t in times[key].items()}     # every sample of those rounds
                    row = _row(key, res, part, args, batch, args.steps, stat=stat)
                    errs.append(abs(row["pred_eff"] / row["measured"] - 1))
                    drifts.append(abs(row["measured"] / full[(batch, key[2], key[3], key[1])]
                                      - 1))
            mape.append(100 * np.mean(errs))
            drift.append(100 * np.mean(drifts))
        log(f"  {name:<7} MAPE {np.mean(mape):5.1f}% (90th pct {np.percentile(mape, 90):5.1f}%)"
            f"   measured off the all-rounds median by {np.mean(drift):4.1f}%")


if __name__ == "__main__":
    raise SystemExit(main())
