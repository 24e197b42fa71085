"""The in-run cost model: time every speculative run, its autoregressive baseline, the
prefill and the pass programs of `specsim.pass_costs` (t_target(1), t_verify(K+1),
t_draft, as the loop pays them) in the same interleaved rounds, at the run's layer loop,
cache length, batch and padded shapes, and turn each run into one row of the runs
table with its prediction and error decomposition (`specsim.experiment.decomposition`).

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


def build_jobs(state: DemoState, group: Group) -> dict[tuple, Callable]:
    """Every call of one group's rounds, compiled and warmed: ("ar", rows), ("spec", i),
    ("ar1", rows) (the same rows with one new token: the prefill and the per-call host
    work, measured in-run), ("prefill", draft model name, P) (the drafter's own prefill
    program, `decode.drafter_prefill_call`: what the speculative call adds to the
    one-token call's), ("target_1",), ("verify", K), ("draft", cost_key, K)."""
    from specsim import decode, pass_costs

    target, seed = state.target, state.settings.seed
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
        if ("draft", run.cost_key, run.k) not in jobs:
            calls = pass_costs.pass_calls(target, run.drafter, batch=group.batch,
                                          cache_len=group.cache_len, k=run.k,
                                          temperature=group.temperature,
                                          steps=state.settings.pass_steps, seed=seed)
            jobs.setdefault(("target_1",), calls.target_1)
            jobs.setdefault(("verify", run.k), calls.verify)
            jobs[("draft", run.cost_key, run.k)] = calls.draft
    return jobs


def round_keys(keys: list[tuple], shared_repeats: int) -> list[tuple]:
    """The calls of one timing round: each speculative run and each baseline once, every
    short call that several runs read (the one-token call, a prefill, a pass program)
    ``shared_repeats`` times, each repeat in its own place of the round's shuffled order.
    On a host whose calls vary 30-60% from round to round, one sample of t_target(1)
    moves the prediction of every run of the group alike (`benchmarks/fidelity_probe.py
    --shared-repeats`, README); the short calls cost a few seconds a round, where
    repeating the baselines too took the full demo over its budget."""
    return keys + [k for k in keys if k[0] not in ("spec", "ar")] * (shared_repeats - 1)


def time_group(state: DemoState, group: Group) -> tuple[dict, dict]:
    """Build, compile and time one group: (key -> [samples, 2] seconds by the wall and
    the CPU clock, key -> last output)."""
    from specsim import bench

    s = state.settings
    t0 = time.perf_counter()
    jobs = build_jobs(state, group)
    keys = round_keys(list(jobs), s.shared_repeats)
    t1 = time.perf_counter()
    samples, outputs = bench.interleaved_rounds([jobs[k] for k in keys], s.repeats,
                                                np.random.default_rng(s.seed),
                                                clock=_both_clocks)
    state.log(f"    batch {group.batch}, T {group.temperature:g}: {len(group.runs)} runs, "
              f"{len(jobs)} calls compiled in {t1 - t0:.0f} s, {s.repeats} rounds timed in "
              f"{time.perf_counter() - t1:.0f} s")
    times: dict[tuple, list] = {}
    last: dict[tuple, Any] = {}
    for key, ts, out in zip(keys, samples, outputs):
        times.setdefault(key, []).extend(ts)
        last.setdefault(key, out)
    return {k: np.asarray(v, float).reshape(-1, 2) for k, v in times.items()}, last


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


def _by_clock(state: DemoState, group: Group, i: int, all_times: dict, res, col: int) -> dict:
    """Prediction and decomposition of run ``i`` from the samples of one clock (column
    ``col``), with the per-round range of the measured speedup."""
    run, steps = group.runs[i], state.settings.pass_steps
    times = {key: v[:, col] for key, v in all_times.items()}
    med = {key: float(np.median(v)) for key, v in times.items()}
    P = res.plan.padded_prompt
    pre = med[("ar1", run.rows)]
    pre_spec = pre + (med[("prefill", run.cost_model.cfg.name, P)] if run.cost_model else 0.0)
    n = group.max_new_tokens - 1            # decode tokens per row (the prefill gives one)
    row = decompose(e_model=_e_model(run, res.stats, n, group.batch), n_tokens=n,
                    iterations=res.n_iterations, k=run.k, t_ar=med[("ar", run.rows)],
                    t_spec=med[("spec", i)], prefill=pre, prefill_spec=pre_spec,
                    t_target_1=med[("target_1",)] / steps,
                    t_verify=med[("verify", run.k)] / steps,
                    t_draft=med[("draft", run.cost_key, run.k)] / (steps * run.k))
    per_round = (med[("ar", run.rows)] - pre) / (times[("spec", i)] - pre_spec)
    row.update({schema.MEASURED_LO: float(per_round.min()),
                schema.MEASURED_HI: float(per_round.max()), schema.TIME_S: med[("spec", i)],
                schema.PREFILL_S: pre_spec, schema.DECODE_S: med[("spec", i)] - pre_spec})
    return row


def run_row(state: DemoState, group: Group, i: int, all_times: dict, last: dict) -> dict:
    """One row of the runs table for run ``i`` of ``group``: timings, prediction and
    decomposition by ``settings.clock``; measured and predicted speedup by each clock."""
    run, s = group.runs[i], state.settings
    res = last[("spec", i)]
    n = group.max_new_tokens - 1
    rows = {name: _by_clock(state, group, i, all_times, res, c) for c, name in enumerate(CLOCKS)}
    row = dict(rows[s.clock])
    for name, r in rows.items():
        row[schema.MEASURED_BY_CLOCK[name]] = r[schema.MEASURED_SPEEDUP]
        row[schema.PREDICTED_BY_CLOCK[name]] = r[schema.PREDICTED_SPEEDUP]
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
    """The columns the headline prediction took from measurement in this run."""
    acc = [schema.alpha_pos(j) for j in range(1, run.k + 1)]
    return acc + [schema.T_TARGET_1, schema.T_VERIFY, schema.T_DRAFT]


def baseline_rows(state: DemoState, group: Group, all_times: dict, last: dict) -> list[dict]:
    """One runs-table row per autoregressive baseline of the group (decode time per new
    token is what report's headline reads)."""
    col = CLOCKS.index(state.settings.clock)
    rows = []
    for key, res in last.items():
        if key[0] != "ar":         # ("ar1", rows) is the prefill, not a baseline
            continue
        run = next(r for r in group.runs if r.rows == key[1])
        P = res.plan.padded_prompt
        t = float(np.median(all_times[key][:, col]))
        pre = float(np.median(all_times[("ar1", key[1])][:, col]))
        rows.append({schema.TEMPERATURE: group.temperature, schema.DRAFTER: schema.AUTOREGRESSIVE,
                     schema.DRAFTER_KIND: schema.AUTOREGRESSIVE, schema.K: 0,
                     schema.KIND: run.kind, schema.BATCH: group.batch,
                     schema.NEW_TOKENS: res.n_generated, schema.ITERATIONS: res.n_iterations,
                     schema.TIME_S: t, schema.PREFILL_S: pre, schema.DECODE_S: t - pre,
                     schema.PADDED_PROMPT: P, schema.CACHE_LEN: group.cache_len,
                     schema.CLOCK: state.settings.clock,
                     schema.TEXT: res.text[0] if res.text else ""})
    return rows


def measure(state: DemoState, group: Group) -> list[dict]:
    """Time one group; one runs-table row per baseline and per speculative run."""
    times, last = time_group(state, group)
    return baseline_rows(state, group, times, last) + \
        [run_row(state, group, i, times, last) for i in range(len(group.runs))]


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
