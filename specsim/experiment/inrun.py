"""The in-run cost model: time every speculative run with its own autoregressive
baseline, the prefill and the pass programs of `specsim.pass_costs` (t_target(1),
t_verify(K+1), t_draft, as the loop pays them) in paired rounds (`paired`), at the
run's layer loop, cache length, batch and padded shapes, and turn each run into one
row of the runs table with its prediction and error decomposition (`specsim.experiment.decomposition`).

A `Group` is the unit of timing: one temperature, one batch, one cache length; its runs
may use different prompt rows (kinds of work), each with its own baseline. Compiled
programs are shared wherever shapes allow: instrument drafters that differ only in α
share one speculative program (α is a traced child) and one draft program (``cost_key``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from specsim import schema
from specsim.experiment.decomposition import acceptance_variants, decompose, finite_run_tokens
from specsim.experiment.state import DemoState
from specsim.experiment.timing import acceptance_fields

CLOCKS = ("wall", "cpu")


@dataclass(frozen=True, kw_only=True)
class SpecRun:
    """One speculative run. ``name``: the runs table's drafter; ``rows``: the prompt token
    ids of each batch row; ``kind``: kind of work (or "mixed"); ``cost_key``: runs with
    one key share a draft program (same cost computation, e.g. instrument α only
    differs); ``cost_model``: the Model whose prefill the drafter pays (None: none);
    ``acceptance``: (form, value) of a set acceptance (("iid", α)) or None (measured α)."""
    name: str
    drafter_kind: str
    drafter: Any
    k: int
    kind: str
    rows: tuple
    cost_key: str
    cost_model: Any = None
    acceptance: tuple | None = None
    extra: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True, kw_only=True)
class Group:
    temperature: float
    cache_len: int
    max_new_tokens: int
    runs: tuple[SpecRun, ...]

    @property
    def batch(self) -> int:
        return len(self.runs[0].rows)


def _both_clocks() -> np.ndarray:
    """[wall, cpu] seconds now: every call is timed by both clocks at once."""
    return np.array([time.perf_counter(), time.process_time()])


def _gen_call(target, run: SpecRun | None, rows, group: Group, seed: int, max_new: int):
    from specsim import decode

    common = dict(temperature=group.temperature, seed=seed, eos_token_id=None,
                  cache_len=group.cache_len)
    rows = [list(r) for r in rows]
    if run is None:
        return lambda: decode.generate_autoregressive(target, rows, max_new, **common)
    return lambda: decode.generate_speculative(target, run.drafter, rows, max_new, k=run.k,
                                               **common)


def build_jobs(state: DemoState, group: Group,
               prefill_of: dict | None = None) -> dict[tuple, Callable]:
    """Every call of one group's rounds, compiled and warmed: ("ar", rows), ("spec", i),
    ("ar1", rows) (the same rows with one new token: the prefill and the per-call host
    work, measured in-run), ("prefill", draft model name, P) (the drafter's own prefill
    program, `decode.drafter_prefill_call`: what the speculative call adds to the
    one-token call's), ("target_1",), ("verify", K), ("draft", cost_key, K)."""
    from specsim import decode, pass_costs

    target, seed = state.target, state.settings.seed
    prefill_of = {} if prefill_of is None else prefill_of     # run index -> its prefill key
    warm = decode.warmup_tokens(group.max_new_tokens)
    jobs: dict[tuple, Callable] = {}
    for i, run in enumerate(group.runs):
        if ("ar", run.rows) not in jobs:
            _gen_call(target, None, run.rows, group, seed, warm)()
            jobs[("ar", run.rows)] = _gen_call(target, None, run.rows, group, seed,
                                               group.max_new_tokens)
            jobs[("ar1", run.rows)] = _gen_call(target, None, run.rows, group, seed, 1)
            jobs[("ar1", run.rows)]()
        res = _gen_call(target, run, run.rows, group, seed, warm)()
        jobs[("spec", i)] = _gen_call(target, run, run.rows, group, seed, group.max_new_tokens)
        P = res.plan.padded_prompt
        m = run.cost_model
        if m is not None and ("prefill", m.cfg.name, P) not in jobs:
            jobs[("prefill", m.cfg.name, P)] = decode.drafter_prefill_call(
                target, run.drafter, run.rows, P, res.plan.cache_len)
        if m is not None:
            prefill_of[i] = ("prefill", m.cfg.name, P)
        if ("draft", run.cost_key, run.k) not in jobs:
            calls = pass_costs.pass_calls(target, run.drafter, batch=group.batch,
                                          cache_len=group.cache_len, k=run.k,
                                          temperature=group.temperature,
                                          steps=state.settings.pass_steps, seed=seed)
            jobs.setdefault(("target_1",), calls.target_1)
            jobs.setdefault(("verify", run.k), calls.verify)
            jobs[("draft", run.cost_key, run.k)] = calls.draft
    return jobs


def unit_keys(prefill_of: dict, group: Group, i: int) -> list[tuple]:
    """The calls of run ``i``'s timing unit, in the order a round runs them: its own
    plain-decoding baseline, the run, then the passes its prediction reads (the
    one-token call, the drafter's prefill where it has one, t_target(1), t_verify(K+1),
    the draft step)."""
    run = group.runs[i]
    keys = [("ar", run.rows), ("spec", i), ("ar1", run.rows)]
    if i in prefill_of:
        keys.append(prefill_of[i])
    return keys + [("target_1",), ("verify", run.k), ("draft", run.cost_key, run.k)]


@dataclass
class GroupTiming:
    """One group's paired rounds: per run, role -> [rounds, 2] seconds (wall, CPU), the
    last output of each of its calls, its rounds and why they stopped; the group's
    timing budget, seconds timed and CPU time over wall time of every timed call."""
    times: list[dict]
    last: list[dict]
    rounds: list[int]
    stopped: list[str]
    budget_s: float
    elapsed_s: float
    cpu_over_wall: float


def _roles(keys: list[tuple]) -> list[str]:
    return [k[0] for k in keys]


def _measured_interval(state: DemoState, group: Group, i: int, times: dict):
    """The measured speedup of run ``i`` (``settings.clock``) with its bootstrap interval."""
    from specsim.experiment import intervals

    col = CLOCKS.index(state.settings.clock)
    series = {role: v[:, col] for role, v in times.items()}
    return intervals.bootstrap(series, _measured_statistic(group.runs[i]),
                               draws=state.settings.bootstrap_draws, seed=state.settings.seed,
                               positive=True)


def _measured_statistic(run: SpecRun):
    """Measured speedup from role medians: (T_AR − prefill) / (T_spec − prefill_spec),
    which is E_eff · t1_run / t_iter_run (`decomposition`); NaN where a decode time is
    not positive."""
    def stat(m):
        pre = m["ar1"]
        pre_spec = pre + (m["prefill"] if "prefill" in m else 0.0)
        num, den = m["ar"] - pre, m["spec"] - pre_spec
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where((num > 0) & (den > 0), num / den, np.nan)
    return stat


def time_group(state: DemoState, group: Group, budget_s: float) -> GroupTiming:
    """Build and compile one group, then time it in paired, adaptive rounds
    (`paired.paired_rounds`): each run's unit is its baseline, the run and its passes;
    a run leaves once its measured speedup's interval is within
    ``settings.target_half_width``, and rounds end when ``budget_s`` is spent."""
    from specsim.experiment import paired

    s = state.settings
    t0 = time.perf_counter()
    prefill_of: dict = {}
    jobs = build_jobs(state, group, prefill_of)
    units = [unit_keys(prefill_of, group, i) for i in range(len(group.runs))]
    t1 = time.perf_counter()

    def converged(u: int, samples: list) -> bool:
        times = {role: paired.as_array(v) for role, v in zip(_roles(units[u]), samples)}
        return _measured_interval(state, group, u, times).half_width <= s.target_half_width

    res = paired.paired_rounds([[jobs[k] for k in keys] for keys in units],
                               np.random.default_rng(s.seed), min_rounds=s.repeats,
                               max_rounds=s.max_rounds, budget_s=budget_s,
                               converged=converged, clock=_both_clocks)
    times = [{role: paired.as_array(v) for role, v in zip(_roles(keys), res.samples[u])}
             for u, keys in enumerate(units)]
    last = [dict(zip(_roles(keys), res.outputs[u])) for u, keys in enumerate(units)]
    total = np.sum([v.sum(axis=0) for t in times for v in t.values()], axis=0)
    done = sum(r == paired.CONVERGED for r in res.stopped)
    state.log(f"    batch {group.batch}, T {group.temperature:g}: {len(group.runs)} runs, "
              f"{len(jobs)} calls compiled in {t1 - t0:.0f} s; {min(res.rounds)}-"
              f"{max(res.rounds)} paired rounds timed in {res.elapsed_s:.0f} s (budget "
              f"{budget_s:.0f} s), {done}/{len(group.runs)} within "
              f"±{100 * s.target_half_width:g}%")
    return GroupTiming(times, last, res.rounds, res.stopped, float(budget_s),
                       float(res.elapsed_s), float(total[1] / total[0]))


def _e_finite(pmf, n: int, batch: int) -> float:
    return finite_run_tokens(pmf, n, batch)


def _e_model(run: SpecRun, stats, n: int, batch: int) -> float:
    """E of the headline for a finite run of n tokens whose slowest of ``batch`` rows ends
    it, from the run's measured per-position rates α_j per slot
    (`simulate.tokens_pmf_positional`): the prediction checks the cost model given the
    acceptance the run had (one run's acceptance is a random draw: 47 tokens at α = 0.5
    hold about 20 iterations, a standard error near 10% on tokens per iteration)."""
    from specsim import simulate

    rates = np.clip(np.nan_to_num(stats.per_position_per_slot, nan=0.0), 0.0, 1.0)
    return _e_finite(simulate.tokens_pmf_positional(rates), n, batch)


def _set_alpha_columns(run: SpecRun, row: dict, n: int, batch: int) -> dict:
    """The instrument's prediction from its set α alone (no measured acceptance)."""
    from specsim import analytic, simulate

    if not run.acceptance:
        return {schema.PRED_SET_ALPHA: math.nan, schema.ERR_ACCEPT_SET: math.nan}
    e = _e_finite(simulate.tokens_pmf(float(run.acceptance[1]), run.k), n, batch)
    pred = float(analytic.speedup_from_costs(e, run.k, row[schema.T_DRAFT],
                                             row[schema.T_TARGET_1], row[schema.T_VERIFY]))
    return {schema.PRED_SET_ALPHA: pred,
            schema.ERR_ACCEPT_SET: 100 * math.log(e / row[schema.E_EFFECTIVE])}


def _pass_times(m: dict, run: SpecRun, steps: int) -> tuple:
    """(t_target_1, t_verify, t_draft) per pass from role medians (floats or arrays)."""
    return m["target_1"] / steps, m["verify"] / steps, m["draft"] / (steps * run.k)


def _by_clock(state: DemoState, group: Group, i: int, times: dict, res, col: int) -> dict:
    """Prediction and decomposition of run ``i`` from the samples of one clock (column
    ``col``), with the range of its per-round (paired) speedup."""
    run, steps = group.runs[i], state.settings.pass_steps
    t = {role: v[:, col] for role, v in times.items()}
    med = {role: float(np.median(v)) for role, v in t.items()}
    pre = med["ar1"]
    pre_spec = pre + med.get("prefill", 0.0)
    n = group.max_new_tokens - 1            # decode tokens per row (the prefill gives one)
    t1, tv, td = _pass_times(med, run, steps)
    row = decompose(e_model=_e_model(run, res.stats, n, group.batch), n_tokens=n,
                    iterations=res.n_iterations, k=run.k, t_ar=med["ar"], t_spec=med["spec"],
                    prefill=pre, prefill_spec=pre_spec, t_target_1=t1, t_verify=tv,
                    t_draft=td)
    per_round = _measured_statistic(run)(t)
    row.update({schema.MEASURED_LO: float(np.nanmin(per_round)) if np.isfinite(per_round).any()
                else math.nan,
                schema.MEASURED_HI: float(np.nanmax(per_round)) if np.isfinite(per_round).any()
                else math.nan,
                schema.TIME_S: med["spec"], schema.PREFILL_S: pre_spec,
                schema.DECODE_S: med["spec"] - pre_spec})
    return row


def interval_columns(state: DemoState, group: Group, i: int, times: dict,
                     e_model: float) -> dict:
    """The 95% intervals over run ``i``'s paired rounds (``settings.clock``;
    `intervals.interval`): measured and predicted speedup, the total error, and each
    pass time."""
    from specsim.experiment import intervals

    s, run = state.settings, group.runs[i]
    col = CLOCKS.index(s.clock)
    series = {role: v[:, col] for role, v in times.items()}
    med = intervals.resample_medians(series, draws=s.bootstrap_draws, seed=s.seed)

    def statistics(m: dict) -> dict:
        measured = _measured_statistic(run)(m)
        t1, tv, td = _pass_times(m, run, s.pass_steps)
        predicted = e_model * t1 / (run.k * td + tv)
        with np.errstate(divide="ignore", invalid="ignore"):
            err = 100 * np.log(predicted / measured)
        return {(schema.MEASURED_CI_LO, schema.MEASURED_CI_HI): measured,
                (schema.PREDICTED_CI_LO, schema.PREDICTED_CI_HI): predicted,
                (schema.ERR_TOTAL_CI_LO, schema.ERR_TOTAL_CI_HI): err,
                schema.PASS_CI["t_target_1"]: t1, schema.PASS_CI["t_verify"]: tv,
                schema.PASS_CI["t_draft"]: td}

    value = statistics({role: m for role, (m, _) in med.items()})
    boot = statistics({role: b for role, (_, b) in med.items()})
    per_round = statistics(series)
    out = {}
    for cols, v in value.items():
        iv = intervals.interval(float(v), boot[cols], per_round[cols],
                                positive=cols[0] != schema.ERR_TOTAL_CI_LO)
        out[cols[0]], out[cols[1]] = iv.lo, iv.hi
    return out


def run_row(state: DemoState, group: Group, i: int, timing: GroupTiming) -> dict:
    """One row of the runs table for run ``i`` of ``group``: timings, prediction and
    decomposition by ``settings.clock`` with their intervals; measured and predicted
    speedup by each clock; the run's rounds, why they stopped, its baseline's spread."""
    run, s = group.runs[i], state.settings
    times, res = timing.times[i], timing.last[i]["spec"]
    n = group.max_new_tokens - 1
    rows = {name: _by_clock(state, group, i, times, res, c) for c, name in enumerate(CLOCKS)}
    row = dict(rows[s.clock])
    for name, r in rows.items():
        row[schema.MEASURED_BY_CLOCK[name]] = r[schema.MEASURED_SPEEDUP]
        row[schema.PREDICTED_BY_CLOCK[name]] = r[schema.PREDICTED_SPEEDUP]
    row.update(interval_columns(state, group, i, times, row[schema.E_MODEL]))
    lo, hi, m = row[schema.MEASURED_CI_LO], row[schema.MEASURED_CI_HI], row[schema.MEASURED_SPEEDUP]
    ar = times["ar"][:, CLOCKS.index(s.clock)]
    wall_cpu = np.sum([v.sum(axis=0) for v in times.values()], axis=0)
    row.update({schema.MEASURED_HALF_WIDTH: (hi - lo) / 2 / m if m and np.isfinite(m) else math.nan,
                schema.ROUNDS: timing.rounds[i], schema.STOPPED: timing.stopped[i],
                schema.BASELINE_SPREAD: float(100 * (ar.max() - ar.min()) / np.median(ar)),
                schema.CPU_OVER_WALL: float(wall_cpu[1] / wall_cpu[0])})
    row.update({c: math.nan for c in (schema.PRED_SWEPT, schema.PRED_FIT, schema.ERR_COST_FIT)})
    row.update(_set_alpha_columns(run, row, n, group.batch))
    row.update(acceptance_fields(res.stats))
    row.update(acceptance_variants(row, res.stats, run.k))
    row.update({schema.TEMPERATURE: group.temperature, schema.DRAFTER: run.name,
                schema.DRAFTER_KIND: run.drafter_kind, schema.K: run.k, schema.KIND: run.kind,
                schema.BATCH: group.batch, schema.ALPHA_SET: run.acceptance[1]
                if run.acceptance else math.nan,
                schema.NEW_TOKENS: res.n_generated, schema.ITERATIONS: res.n_iterations,
                schema.PADDED_PROMPT: res.plan.padded_prompt, schema.CACHE_LEN: group.cache_len,
                schema.CLOCK: s.clock, schema.TEXT: res.text[0] if res.text else "",
                schema.MEASURED_INPUTS: ";".join(_measured_inputs(run)), **run.extra})
    return row


def _measured_inputs(run: SpecRun) -> list[str]:
    """The columns the in-run prediction took from measurement in this run."""
    acc = [schema.alpha_pos(j) for j in range(1, run.k + 1)]
    return acc + [schema.T_TARGET_1, schema.T_VERIFY, schema.T_DRAFT]


def baseline_rows(state: DemoState, group: Group, timing: GroupTiming) -> list[dict]:
    """One runs-table row per distinct prompt rows of the group: the plain-decoding
    baseline, its samples pooled over every run it was paired with (decode time per
    new token is what the report's headline reads)."""
    col = CLOCKS.index(state.settings.clock)
    pooled: dict[tuple, dict] = {}
    for i, run in enumerate(group.runs):
        p = pooled.setdefault(run.rows, {"ar": [], "ar1": [], "run": run,
                                         "res": timing.last[i]["ar"]})
        p["ar"].append(timing.times[i]["ar"][:, col])
        p["ar1"].append(timing.times[i]["ar1"][:, col])
    rows = []
    for p in pooled.values():
        res, run = p["res"], p["run"]
        t, pre = float(np.median(np.concatenate(p["ar"]))), float(np.median(np.concatenate(p["ar1"])))
        rows.append({schema.TEMPERATURE: group.temperature, schema.DRAFTER: schema.AUTOREGRESSIVE,
                     schema.DRAFTER_KIND: schema.AUTOREGRESSIVE, schema.K: 0,
                     schema.KIND: run.kind, schema.BATCH: group.batch,
                     schema.NEW_TOKENS: res.n_generated, schema.ITERATIONS: res.n_iterations,
                     schema.TIME_S: t, schema.PREFILL_S: pre, schema.DECODE_S: t - pre,
                     schema.PADDED_PROMPT: res.plan.padded_prompt,
                     schema.CACHE_LEN: group.cache_len, schema.CLOCK: state.settings.clock,
                     schema.TEXT: res.text[0] if res.text else ""})
    return rows


def measure(state: DemoState, group: Group, budget_s: float) -> list[dict]:
    """Time one group in paired rounds within ``budget_s`` seconds; one runs-table row
    per baseline and per speculative run. The group's timing (rounds, budget, CPU over
    wall time) is kept in ``state.environment["timing"]``."""
    timing = time_group(state, group, budget_s)
    state.environment.setdefault("timing", []).append(
        {"batch": group.batch, "temperature": group.temperature, "runs": len(group.runs),
         "rounds_min": min(timing.rounds), "rounds_max": max(timing.rounds),
         "budget_s": round(timing.budget_s, 1), "timed_s": round(timing.elapsed_s, 1),
         "cpu_over_wall": round(timing.cpu_over_wall, 3)})
    return baseline_rows(state, group, timing) + \
        [run_row(state, group, i, timing) for i in range(len(group.runs))]


def add_runs(state: DemoState, rows: list[dict]) -> None:
    """Append rows to the runs table (parts add their runs one after another)."""
    import pandas as pd

    new = pd.DataFrame(rows)
    old = state.tables.get(schema.RUNS)
    state.tables[schema.RUNS] = new if old is None or old.empty else pd.concat(
        [old, new], ignore_index=True)


def group_cache_len(target, rows, max_new_tokens: int, k_max: int) -> int:
    """Cache slots every run of a group uses (so baseline and pass programs match)."""
    from specsim import decode

    P = decode.bucket(max(len(r) for r in rows), 8)
    return min(decode.bucket(P + max_new_tokens + k_max + 1), target.cfg.max_seq_len)
