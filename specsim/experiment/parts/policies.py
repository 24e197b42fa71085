"""Part ``policies``: draft-length policies with the real drafters on the kinds of work
(`specsim.experiment.policy_runs` for the grid), measured against the best fixed K found
by sweeping and against plain decoding, and replayed on the recorded trace.

Steps: (1) compile the pass-cost programs of `specsim.pass_costs` (target step, verify
over K + 1 for every K up to K_max, draft step) at each batch; (2) time them in a few
interleaved rounds and build the Goodput policy of each (drafter, batch) from those
in-run costs; (3) compile every generation program; (4) time every run and the pass
calls again in the same interleaved rounds, each run's loop program alone (its prefills
run untimed before it, `decode.StagedCall`), the fastest of ``loop_repeats`` runs a round
from one prefill; (5) one row per run: measured decode speedup
(the loop's time per token) against the baseline and against the best
fixed K of its cell, and the speedup the same policy gets replayed on the trace of the
cell's FixedK(K_max) run under the policy loop with the pass costs of step 4.
Greedy (temperature 0) only; not in the default parts (``--parts policies``)."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pandas as pd

from specsim import policies as P
from specsim import schema
from specsim.drafters import off_draft
from specsim.experiment import policy_runs as R
from specsim.experiment.part import Part
from specsim.experiment.state import DemoState

TEMPERATURE = 0.0
PRE_ROUNDS = 7       # interleaved rounds of the pass programs Goodput plans with


def _pass_calls(state: DemoState) -> dict:
    """(role, ...) -> (zero-argument call, passes per call), compiled."""
    from specsim import pass_costs

    s, S = state.settings, state.cache_len
    k_max = max(s.ks)
    out = {}
    steps = lambda k: max(1, min(8, (S - S // 2 - k - 1) // (k + 1)))   # noqa: E731
    for batch in sorted({b for _, b in R.grid(s)}):
        for k in range(1, k_max + 1):        # the policy loop verifies at every width
            c = pass_costs.pass_calls(state.target, None, batch=batch, cache_len=S, k=k,
                                      temperature=TEMPERATURE, steps=steps(k), seed=s.seed)
            out[("verify", batch, k)] = (c.verify, c.steps)
            out.setdefault(("target_1", batch), (c.target_1, c.steps))
        for name, setup in state.drafters.items():     # every drafter that computes: the
            if setup.drafter.passes_per_iteration(k_max):  # feature head's step is not free
                c = pass_costs.pass_calls(state.target, setup.drafter, batch=batch,
                                          cache_len=S, k=k_max, temperature=TEMPERATURE,
                                          steps=steps(k_max), seed=s.seed)
                out[("draft", name, batch)] = (c.draft, c.steps * k_max)
    return out


def _medians(keys, samples, passes) -> dict:
    return {key: float(np.median(ts)) / n for key, ts, n in zip(keys, samples, passes)}


def _paired(keys, samples, passes) -> dict:
    """Per-pass times for Goodput's plan: each pass as its ratio to the target step of
    the same batch measured in the same round, the geometric mean of those ratios over
    rounds, times the step's median. A plan reads only the ratios between its pass
    times (E(K) / t(K) is unchanged when every time is scaled), and a ratio measured
    side by side cancels what a round's moment adds to both, so it varies less over
    rounds than a ratio of medians (`benchmarks/sim_goodput_explore.py --study
    cost-estimators`)."""
    per = dict(zip(keys, (np.asarray(ts, float) / n for ts, n in zip(samples, passes))))
    out = {}
    for key, ts in per.items():
        batch = key[2] if key[0] == "draft" else key[1]       # see `_pass_calls`' keys
        ref = per[("target_1", batch)]
        out[key] = float(np.median(ref) * np.exp(np.mean(np.log(ts / ref))))
    return out


def _cell_costs(per_pass: dict, name: str, batch: int, k_max: int):
    """(t_target_1, {K: t_verify(K + 1)} for K = 1..K_max, t_draft) of one (drafter,
    batch)."""
    return (per_pass[("target_1", batch)],
            {k: per_pass[("verify", batch, k)] for k in range(1, k_max + 1)},
            per_pass.get(("draft", name, batch), 0.0))


def _rows(state: DemoState, kind: str, batch: int) -> list[list[int]]:
    """The prompt rows of a cell: ``batch`` copies of the kind's prompt, or for
    R.MIXED the prompts of `policy_runs.mixed_kinds` (in ``state.prompts``, see
    `_with_mixed_rows`)."""
    if kind != R.MIXED:
        return [state.prompts[kind]] * batch
    return [state.prompts[k] for k in R.mixed_kinds(state.settings, batch)]


def _with_policy_tokens(state: DemoState) -> DemoState:
    """``state`` whose settings' max_new_tokens is the policies part's own,
    ``policy_max_new_tokens`` (0: max_new_tokens), so every run, pass call and cache size
    of the part reads it."""
    s = state.settings
    n = s.policy_max_new_tokens or s.max_new_tokens
    return dataclasses.replace(state, settings=dataclasses.replace(s, max_new_tokens=n))


def _with_mixed_rows(state: DemoState) -> DemoState:
    """``state`` with the prompts of the MIXED batch's kinds added and the cache slots
    sized for the longest of them (every run and pass call of the part uses those
    slots, so the pass costs describe the runs). The tables dict is shared."""
    from specsim.experiment.prompts import encode_prompts, runs_cache_len

    kinds = {k for kind, b in R.grid(state.settings) if kind == R.MIXED
             for k in R.mixed_kinds(state.settings, b)}
    prompts = {**encode_prompts(state.target, sorted(kinds - set(state.prompts))),
               **state.prompts}
    S = max(state.cache_len, runs_cache_len(state.target, prompts, state.settings))
    return dataclasses.replace(state, prompts=prompts, cache_len=S)


def _call(state: DemoState, job: R.PolicyJob, policy, max_new: int):
    """The job as a `decode.StagedCall`: its prefills run in ``prepare`` (untimed), its
    loop program when called."""
    from specsim import decode

    s = state.settings
    rows = _rows(state, job.kind, job.batch)
    common = dict(temperature=TEMPERATURE, seed=s.seed, eos_token_id=None,
                  cache_len=state.cache_len)
    if job.label == R.AUTOREGRESSIVE:
        return decode.staged_autoregressive(state.target, rows, max_new, **common)
    drafter = state.drafters[job.drafter].drafter
    if job.label == R.FIXED:
        return decode.staged_speculative(state.target, drafter, rows, max_new, k=job.k,
                                         **common)
    return decode.staged_speculative(state.target, drafter, rows, max_new, policy=policy,
                                     **common)


def _policies(state: DemoState, per_pass: dict) -> dict:
    """(drafter, batch, label) -> policy, Goodput from the pre-round costs (`_paired`)
    made non-decreasing in the pass's width (`Costs.nondecreasing`: a dip is noise, and
    Goodput's plan follows its inputs' noise, `benchmarks/sim_goodput_explore.py
    --study cost-noise`)."""
    s = state.settings
    k_max = max(s.ks)
    out = {}
    for name in state.drafters:
        for batch in sorted({b for _, b in R.grid(s)}):
            costs = R.costs_from_passes(*_cell_costs(per_pass, name, batch, k_max),
                                        k_max).nondecreasing()
            for label in R.POLICY_NAMES:
                out[(name, batch, label)] = R.make_policy(label, k_max, costs)
            t = np.asarray(costs.t_target)
            state.log(f"    Goodput's costs for {name} at batch {batch}: t(n)/t(1) = "
                      f"{', '.join(f'{v:.3f}' for v in t / t[0])} (n = 1..{k_max + 1}), "
                      f"draft step {costs.t_draft / t[0]:.3f}")
    return out


def _time_everything(state: DemoState, jobs, pols, pass_keys, pass_items):
    """Compile each generation program once, then time the jobs' loop programs (their
    prefills and host work run untimed before each, `decode.StagedCall`) and the pass
    calls together, each cell's baseline in ``shared_repeats`` turns a round
    (`baseline_rounds`). → (job samples, job results, per-pass medians).

    The loop alone, because a call's prefill can dwarf its decoding (at batch 8 the
    mixed prompts' prefill takes longer than plain decoding's 40 tokens), and
    subtracting a separately timed one-token call from each call leaves every batched
    speedup a small difference of large, noisy times."""
    from specsim import bench, decode

    s = state.settings
    warm = decode.warmup_tokens(s.max_new_tokens)
    seen = set()
    t0 = time.perf_counter()
    for job in jobs:
        if job.program not in seen:
            seen.add(job.program)
            _call(state, job, pols.get((job.drafter, job.batch, job.label)), warm)()
    state.log(f"    compiled {len(seen)} generation programs in {time.perf_counter() - t0:.0f} s")
    staged = [_call(state, j, pols.get((j.drafter, j.batch, j.label)), s.max_new_tokens)
              for j in jobs]
    again = [i for i, j in enumerate(jobs) if j.label == R.AUTOREGRESSIVE] * \
        (s.shared_repeats - 1)                  # each cell's baseline, in more places
    calls = staged + [c for c, _ in pass_items] + \
        [_call(state, jobs[i], None, s.max_new_tokens) for i in again]
    t0 = time.perf_counter()
    samples, outputs = bench.interleaved_rounds(
        calls, s.repeats, np.random.default_rng(s.seed + 1), inner=s.loop_repeats,
        progress="policy rounds" if state.progress else None)
    state.log(f"    timed {len(calls)} calls x {s.repeats} rounds (the fastest of "
              f"{s.loop_repeats} runs each) in "
              f"{time.perf_counter() - t0:.0f} s")
    n, m = len(jobs), len(jobs) + len(pass_items)
    per_pass = _medians(pass_keys, samples[n:m], [p for _, p in pass_items])
    results = [c.result(o) for c, o in zip(staged, outputs[:n])]
    return baseline_rounds(samples[:n], again, samples[m:]), results, per_pass


def baseline_rounds(samples, again, extra) -> list:
    """``samples`` (per job, its seconds per round) with each job of ``again`` (its
    index, once per extra turn) given, round by round, the median of its own sample and
    those of its extra turns (``extra``, in the order of ``again``).

    Every row of a cell reads the cell's plain-decoding baseline, so one noisy draw of
    it moves every speedup of the cell alike; this part times it ``shared_repeats``
    times a round, each turn in its own place of the shuffled order.
    The median, not the least, keeps the baseline's estimator that of every other run
    (the least of ``loop_repeats`` runs per turn)."""
    out = [list(t) for t in samples]
    turns: dict = {}
    for i, t in zip(again, extra):
        turns.setdefault(i, []).append(t)
    for i, more in turns.items():
        out[i] = [float(np.median(r)) for r in zip(samples[i], *more)]
    return out


def _row(state: DemoState, job: R.PolicyJob, times, res, prefill, per_pass,
         policy) -> dict:
    """One run's row. ``times``: its loop program's seconds per round (prefills outside,
    `_time_everything`); a policy loop that primes a draft model late (`decode.
    _primes_late`) holds that prefill, which is removed where it ran (`prefill`)."""
    from specsim import decode
    from specsim.experiment.timing import acceptance_fields

    t_run = float(np.median(times))
    t_pre = 0.0
    if job.drafter != R.AUTOREGRESSIVE and state.cost_model(job.drafter) is not None \
            and res.draft_passes > 0 and policy is not None and \
            decode._primes_late(state.drafters[job.drafter].drafter, policy):
        t_pre = prefill(state.cost_model(job.drafter), res.plan.padded_prompt,
                        res.plan.cache_len, job.batch, logits="none")
    row = {schema.DRAFTER: job.drafter, schema.KIND: job.kind, schema.BATCH: job.batch,
           schema.POLICY: job.label, schema.K: job.k, schema.TEMPERATURE: TEMPERATURE,
           schema.NEW_TOKENS: res.n_generated, schema.ITERATIONS: res.n_iterations,
           schema.DRAFT_PASSES: res.draft_passes, schema.TIME_S: t_run,
           schema.TIME_SPREAD_S: float(np.max(times) - np.min(times)),
           schema.PREFILL_S: t_pre, schema.DECODE_S: t_run - t_pre}
    st = res.stats
    if st is not None:
        row.update({k: v for k, v in acceptance_fields(st).items()
                    if k in (schema.ALPHA, schema.ALPHA_PROPOSED, schema.TOKENS_PER_ITERATION)})
        if st.k_used is not None:
            used = st.k_used[st.active]
            row[schema.MEAN_K] = float(used.mean()) if used.size else np.nan
            row[schema.K0_FRACTION] = float(np.mean(used == 0)) if used.size else np.nan
        else:
            row[schema.MEAN_K], row[schema.K0_FRACTION] = float(job.k), 0.0
    if job.drafter != R.AUTOREGRESSIVE:
        t1, verify, td = _cell_costs(per_pass, job.drafter, job.batch, max(state.settings.ks))
        row.update({schema.T_TARGET_1: t1, schema.T_VERIFY: verify[job.k], schema.T_DRAFT: td,
                    schema.COST_RATIO_PASSES: td / t1})
    own = _own_passes_time(state, job, res, per_pass)
    row.update({schema.OWN_COST_SPEEDUP:
                (state.settings.max_new_tokens - 1) * per_pass[("target_1", job.batch)] / own,
                schema.LOOP_OVERHEAD: (t_run - t_pre) / own})
    return row


def _own_passes_time(state: DemoState, job: R.PolicyJob, res, per_pass) -> float:
    """The run's decode time by the cost model on its own passes: its target passes at
    each width (the policy loop counts them; the fixed-K loop runs K + 1 every
    iteration; plain decoding one) and its draft steps, less the drafter's prefill where
    it ran, at the pass times of the same rounds. Against it, the measured decode time
    gives the loop's overhead, and the replay's speedup the effect of its decisions."""
    t1 = per_pass[("target_1", job.batch)]
    if job.label == R.AUTOREGRESSIVE:
        return res.n_iterations * t1
    _, verify, td = _cell_costs(per_pass, job.drafter, job.batch, max(state.settings.ks))
    drafter = state.drafters[job.drafter].drafter
    computes = drafter.passes_per_iteration(job.k) > 0
    steps = max(res.draft_passes - int(computes and res.draft_passes > 0), 0)
    by_width = res.meta.get("target_passes_by_width")
    if by_width is None:                                    # the fixed-K program
        return res.n_iterations * verify[job.k] + steps * td
    t = [t1] + [verify[k] for k in range(1, len(by_width))]
    return float(np.dot(by_width, t)) + steps * td


def _simulate_cell(state, cell: pd.DataFrame, trace, pols, per_pass) -> pd.DataFrame:
    """Replayed speedups of every row of one (drafter, kind, batch) cell."""
    s = state.settings
    k_max = max(s.ks)
    name, batch = cell[schema.DRAFTER].iloc[0], int(cell[schema.BATCH].iloc[0])
    t1, verify, td = _cell_costs(per_pass, name, batch, k_max)
    judged = off_draft(state.drafters[name].drafter)
    sim, off = [], []
    for _, r in cell.iterrows():
        if r[schema.POLICY] == R.FIXED:
            pol = R.make_policy(R.RECORD, int(r[schema.K]), None)
            costs = R.fixed_costs(t1, verify, td, int(r[schema.K]))
        else:   # as the engine runs it: Goodput at its "auto" widths (`program_widths`)
            widths, pol = P.program_widths(pols[(name, batch, r[schema.POLICY])], k_max)
            costs = R.costs_from_passes(t1, verify, td, k_max).bucketed(widths)
        a, b = R.simulated_speedup(pol, trace, costs, off_draft=judged,
                                   new_tokens=s.max_new_tokens - 1)
        sim.append(a)
        off.append(b)
    return cell.assign(**{schema.SIM_SPEEDUP_VS_AR: sim, schema.SIM_K0_FRACTION: off})


MATCH_BEST_FIXED = 0.97
"""A policy matches the best fixed K of its cell when its speedup is at least this
fraction of that K's (the report's `within_3%`)."""
NO_LOSS_VS_AR = 0.98
"""A policy does not lose to plain decoding when its speedup is at least this (the
report's `within_2%_AR`)."""


def goal_verdict(low: float, high: float, goal: float = MATCH_BEST_FIXED) -> str:
    """"yes" when the goal held in every timed round (the lowest per-round ratio reaches
    it), "no" when it held in none, "noise" when the rounds disagree."""
    return "yes" if low >= goal else "no" if high < goal else "noise"


def add_speedups(table: pd.DataFrame, decode_rounds=None) -> pd.DataFrame:
    """Measured speedups against the cell's baseline and best fixed K (and the
    replayed ones against the replay of that K).

    ``decode_rounds``: per row label of ``table``, the decode seconds per token of each
    timed round (paired: every round ran every job once). With it, each speculative row
    also gets its speedup against the best fixed K round by round, the best K of each
    round chosen on the other rounds (`cross_fitted_best`), their median
    (SPEEDUP_VS_BEST_FIXED), lowest and highest, and the verdict on MATCH_BEST_FIXED
    (`goal_verdict`); and the same against plain decoding (its per-round speedup range,
    the verdict on NO_LOSS_VS_AR). Without it, the best fixed K is the one of the highest
    median speedup, which the goal is then measured against."""
    out = []
    for (kind, batch), g in table.groupby([schema.KIND, schema.BATCH], sort=False):
        ar = g[g[schema.POLICY] == R.AUTOREGRESSIVE]
        base = float(ar[schema.DECODE_S].iloc[0] / ar[schema.NEW_TOKENS].iloc[0])
        g = g.assign(**{schema.SPEEDUP_VS_AR: base / (g[schema.DECODE_S] / g[schema.NEW_TOKENS])})
        for name, d in g[g[schema.DRAFTER] != R.AUTOREGRESSIVE].groupby(schema.DRAFTER, sort=False):
            fixed = d[d[schema.POLICY] == R.FIXED]
            best_at = fixed[schema.SPEEDUP_VS_AR].idxmax()
            best = fixed.loc[best_at]
            g.loc[d.index, schema.BEST_FIXED_K] = int(best[schema.K])
            g.loc[d.index, schema.SPEEDUP_VS_BEST_FIXED] = \
                d[schema.SPEEDUP_VS_AR] / best[schema.SPEEDUP_VS_AR]
            if schema.SIM_SPEEDUP_VS_AR in d:
                g.loc[d.index, schema.SIM_SPEEDUP_VS_BEST_FIXED] = \
                    d[schema.SIM_SPEEDUP_VS_AR] / best[schema.SIM_SPEEDUP_VS_AR]
            if decode_rounds is not None:
                best_rounds = cross_fitted_best([decode_rounds[i] for i in fixed.index])
                against_ar = np.asarray(decode_rounds[ar.index[0]])
                for i in d.index:
                    own = np.asarray(decode_rounds[i])
                    vs_best, vs_ar = best_rounds / own, against_ar / own
                    g.loc[i, [schema.SPEEDUP_VS_BEST_FIXED, schema.VS_BEST_LOW,
                              schema.VS_BEST_HIGH, schema.WITHIN_3PCT_OF_BEST]] = [
                        float(np.median(vs_best)), vs_best.min(), vs_best.max(),
                        goal_verdict(vs_best.min(), vs_best.max(), MATCH_BEST_FIXED)]
                    g.loc[i, [schema.VS_AR_LOW, schema.VS_AR_HIGH, schema.WITHIN_2PCT_OF_AR]] = [
                        vs_ar.min(), vs_ar.max(), goal_verdict(vs_ar.min(), vs_ar.max(),
                                                               NO_LOSS_VS_AR)]
        out.append(g)
    return pd.concat(out)


def cross_fitted_best(fixed_rounds) -> np.ndarray:
    """Per round, the time of the fixed K that the *other* rounds' medians rank fastest
    (``fixed_rounds``: one sequence of per-round times per swept K; a single round ranks
    itself).

    Choosing the best K and measuring it on the same samples favours whichever K drew
    the luckiest samples: with two Ks of equal speed and a per-round spread σ, the
    faster-looking one reads σ/√π (0.56 σ) fast on average (3% at σ = 5%). A K ranked
    on other rounds is measured on samples that played no part in choosing it, so its
    time is unbiased for the K a sweep would pick."""
    t = np.asarray(fixed_rounds, float)                         # [n_k, rounds]
    if t.ndim != 2 or not t.size:
        raise ValueError("fixed_rounds must be one non-empty sequence of round times per K")
    n = t.shape[1]
    out = np.empty(n)
    for r in range(n):
        others = np.delete(t, r, axis=1) if n > 1 else t
        out[r] = t[int(np.argmin(np.median(others, axis=1))), r]
    return out


def run(state: DemoState) -> None:
    from specsim import bench
    from specsim.experiment.timing import PrefillTimer

    tables, state = state.tables, _with_mixed_rows(_with_policy_tokens(state))
    s = state.settings
    state.log("    compiling the pass-cost programs (pass_costs) ...")
    pc = _pass_calls(state)
    keys, items = list(pc), list(pc.values())
    pre, _ = bench.interleaved_rounds([c for c, _ in items], PRE_ROUNDS,
                                      np.random.default_rng(s.seed))
    pols = _policies(state, _paired(keys, pre, [p for _, p in items]))
    jobs = R.jobs(list(state.drafters), s)
    samples, outputs, per_pass = _time_everything(state, jobs, pols, keys, items)
    prefill = PrefillTimer(max(3, s.repeats))     # a draft model's own prefill
    table = pd.DataFrame([_row(state, j, t, o, prefill, per_pass,
                               pols.get((j.drafter, j.batch, j.label)))
                          for j, t, o in zip(jobs, samples, outputs)])
    cells = []
    for (name, kind, batch), cell in table.groupby([schema.DRAFTER, schema.KIND, schema.BATCH],
                                                   sort=False):
        if name != R.AUTOREGRESSIVE:
            rec = next(o for j, o in zip(jobs, outputs) if (j.drafter, j.kind, j.batch, j.label)
                       == (name, kind, batch, R.RECORD))
            cell = _simulate_cell(state, cell, R.trace_from_stats(rec.stats), pols, per_pass)
        cells.append(cell)
    per_token = {i: (np.asarray(t) - table[schema.PREFILL_S][i]) / table[schema.NEW_TOKENS][i]
                 for i, t in zip(table.index, samples)}          # decode s/token per round
    tables[schema.POLICIES] = add_speedups(pd.concat(cells).sort_index(), per_token) \
        .reset_index(drop=True)


PART = Part(name="policies", summary="draft-length policies (fixed K swept, threshold, "
            "heuristic, goodput, goodput with p_min) measured and replayed on their traces",
            run=run, produces=(schema.POLICIES,))
