"""The in-run cost model: time every speculative run with a plain-decoding baseline of
the same rows and the pass programs of `specsim.pass_costs` (t_target(1), t_verify(K+1),
t_draft, as the loop pays them) in paired rounds (`paired`), at the run's layer loop,
cache length, batch and padded shapes, and turn each run into one row of the runs table
with its prediction and error decomposition (`specsim.experiment.decomposition`).

A `Group` is one temperature, one batch, one cache length; its runs may use different
prompt rows (kinds of work). Only loop programs are timed (`decode.StagedCall`: the
checks, host work and prefills run untimed just before each), so a run's measured
speedup is the ratio of two loop times, with no prefill to subtract. A `Block` is the
unit of timing: up to ``runs_per_baseline`` runs of one set of rows and one K, timed
back to back with the baseline they share and the passes they read, so one baseline
and one set of passes serve several runs a round (instrument drafters that differ only
in α also share one compiled program: α is a traced child).
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
ROLES = ("ar", "spec", "target_1", "verify", "iteration")
"""What a run's prediction and measurement read, per round: the baseline's and the
run's loop times, and the three pass programs."""


@dataclass(frozen=True, kw_only=True)
class SpecRun:
    """One speculative run. ``name``: the runs table's drafter; ``rows``: the prompt token
    ids of each batch row; ``kind``: kind of work (or "mixed"); ``cost_key``: runs with
    one key share a draft program (same cost computation, e.g. instrument α only
    differs); ``acceptance``: (form, value) of a set acceptance (("iid", α)) or None
    (measured α)."""
    name: str
    drafter_kind: str
    drafter: Any
    k: int
    kind: str
    rows: tuple
    cost_key: str
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


@dataclass(frozen=True)
class Block:
    """One unit of the paired rounds: ``runs`` (indices into the group's runs, one set of
    rows and one K) and ``keys``, its calls in the order a round runs them: the shared
    baseline ("ar", rows) and each run ("spec", i), with the pass programs their
    predictions read (t_target(1), t_verify(K+1) and one iteration program per cost key,
    `pass_costs`) as sets before and after them: a key may occur more than once
    (`_around`). Every second round runs them in reverse order (`paired.paired_rounds`)."""
    runs: tuple[int, ...]
    keys: tuple[tuple, ...]


def blocks(group: Group, runs_per_baseline: int, pass_sets: int = 1) -> list[Block]:
    """The group's runs in blocks of one set of rows and one K, at most
    ``runs_per_baseline`` runs each (a larger set split evenly, runs of one cost key kept
    together, so a block times as few iteration programs as it can). A block's pass
    programs run ``pass_sets`` times a round, half of them before its loops (the
    baseline, then each run, back to back) and the rest after: timed around the loops,
    the passes see the drift of a shared machine as the loops do, and the loops stay
    side by side (docs/measurement.md, "Rounds"). The verify pass, which the prediction
    does not read, runs in the outermost set on each side only (`_around`)."""
    by_cell: dict[tuple, list[int]] = {}
    for i, run in enumerate(group.runs):
        by_cell.setdefault((run.rows, run.k), []).append(i)
    out = []
    for (rows, k), idx in by_cell.items():
        idx = sorted(idx, key=lambda i: group.runs[i].cost_key)
        n = math.ceil(len(idx) / runs_per_baseline)
        for part in np.array_split(np.asarray(idx), n):
            part = tuple(int(i) for i in part)
            drafts = dict.fromkeys(("iteration", group.runs[i].cost_key, k) for i in part)
            loops = (("ar", rows), *(("spec", i) for i in part))
            out.append(Block(part, _around(loops, tuple(drafts), k, pass_sets)))
    return out


def _around(loops: tuple, drafts: tuple, k: int, sets: int) -> tuple:
    """``sets`` pass sets around ``loops``, half before and the rest after. Every set runs
    the programs the prediction reads (t_target(1) and the ``drafts``' iteration
    programs: E · t1 / t_iter); the verify pass, which only splits the iteration into
    K · t_draft + t_verify, runs in the outermost set on each side."""
    before, after = sets // 2, sets - sets // 2
    light = (("target_1",), *drafts)
    full = (("target_1",), ("verify", k), *drafts)
    head = full + light * (before - 1) if before else ()
    return head + loops + light * (after - 1) + full


def _both_clocks() -> np.ndarray:
    """[wall, cpu] seconds now: every call is timed by both clocks at once."""
    return np.array([time.perf_counter(), time.process_time()])


def _staged(target, run: SpecRun | None, rows, group: Group, seed: int, max_new: int):
    """The group's baseline (``run`` None) or ``run`` over ``rows`` as a
    `decode.StagedCall`."""
    from specsim import decode

    common = dict(temperature=group.temperature, seed=seed, eos_token_id=None,
                  cache_len=group.cache_len)
    rows = [list(r) for r in rows]
    if run is None:
        return decode.staged_autoregressive(target, rows, max_new, **common)
    return decode.staged_speculative(target, run.drafter, rows, max_new, k=run.k, **common)


def build_jobs(state: DemoState, group: Group) -> dict[tuple, Callable]:
    """Every call of one group's rounds, compiled (a warm-up call of the fewest tokens
    that compile the same programs, `decode.warmup_tokens`): ("ar", rows) and ("spec",
    i) as `decode.StagedCall`, ("target_1",), ("verify", K), ("iteration", cost_key, K)."""
    from specsim import decode, pass_costs

    target, seed = state.target, state.settings.seed
    warm = decode.warmup_tokens(group.max_new_tokens)
    jobs: dict[tuple, Callable] = {}
    for i, run in enumerate(group.runs):
        if ("ar", run.rows) not in jobs:
            _block(_staged(target, None, run.rows, group, seed, warm)())
            jobs[("ar", run.rows)] = _staged(target, None, run.rows, group, seed,
                                             group.max_new_tokens)
        _block(_staged(target, run, run.rows, group, seed, warm)())
        jobs[("spec", i)] = _staged(target, run, run.rows, group, seed, group.max_new_tokens)
        if ("iteration", run.cost_key, run.k) not in jobs:
            need = [piece for piece, key in (("target_1", ("target_1",)),
                                             ("verify", ("verify", run.k))) if key not in jobs]
            calls = pass_costs.pass_calls(target, run.drafter, batch=group.batch,
                                          cache_len=group.cache_len, k=run.k,
                                          temperature=group.temperature,
                                          steps=state.settings.pass_steps, seed=seed,
                                          pieces=(*need, "iteration"),
                                          context=pass_context(group, state.settings.pass_steps))
            if calls.target_1 is not None:
                jobs[("target_1",)] = calls.target_1
            if calls.verify is not None:
                jobs[("verify", run.k)] = calls.verify
            jobs[("iteration", run.cost_key, run.k)] = calls.iteration
    return jobs


def _block(out):
    """``out`` once computed (a warm-up call's compile and run, before any timing)."""
    import jax
    return jax.block_until_ready(out)


@dataclass
class GroupTiming:
    """One group's paired rounds, per run: role -> [rounds, 2] seconds (wall, CPU) of
    its loop and pass programs (`ROLES`), role -> [rounds, 2] seconds of the baseline's
    and the run's untimed preparation ("ar", "spec": checks, host work, prefills), the
    `GenerationResult` of its baseline and of the run, its rounds and why they stopped;
    the group's timing budget, seconds timed and CPU time over wall time of every timed
    call; ``calls``: every timed call as a row of `timed_calls.COLUMNS`."""
    times: list[dict]
    prepared: list[dict]
    results: list[dict]
    rounds: list[int]
    stopped: list[str]
    budget_s: float
    elapsed_s: float
    cpu_over_wall: float
    blocks: list[Block]
    calls: list[dict]


def _run_roles(group: Group, block: Block, i: int) -> dict[str, tuple[int, ...]]:
    """Call indices in ``block`` of each of run ``i``'s `ROLES` (a pass program runs
    once per pass set)."""
    run = group.runs[i]
    wanted = {"ar": ("ar", run.rows), "spec": ("spec", i), "target_1": ("target_1",),
              "verify": ("verify", run.k), "iteration": ("iteration", run.cost_key, run.k)}
    return {role: tuple(j for j, key in enumerate(block.keys) if key == want)
            for role, want in wanted.items()}


def _run_times(group: Group, block: Block, i: int, per_call: list) -> dict:
    """Run ``i``'s role -> [rounds, clocks] array from its block's per-call samples: a
    role's calls of one round averaged (one call of its program a round)."""
    from specsim.experiment import paired

    return {role: np.mean([paired.as_array(per_call[j]) for j in js], axis=0)
            for role, js in _run_roles(group, block, i).items()}


def in_baseline_units(series: dict, baseline="ar") -> dict:
    """Each role's times (arrays over rounds, first axis) over its round's baseline
    (the role ``baseline``), times the baseline's median: seconds still, but paired. A
    shared machine's speed moves over seconds, so the calls of one round run slow or
    fast together; the medians of these series give ratios (measured speedup, prediction, the error's
    terms) in which that common swing cancels round by round, where a ratio of two raw
    medians would take them from different rounds (docs/measurement.md, "Rounds")."""
    ar = np.asarray(series[baseline], float)
    scale = np.median(ar, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {role: np.asarray(v, float) / ar * scale for role, v in series.items()}


def _clock_series(times: dict, col: int) -> dict:
    """Role -> [rounds] times of one clock (column ``col``), in baseline units."""
    return in_baseline_units({role: v[:, col] for role, v in times.items()})


def _measured_interval(state: DemoState, times: dict):
    """The measured speedup of a run (``settings.clock``) with its bootstrap interval."""
    col = CLOCKS.index(state.settings.clock)
    return speedup_interval({role: v[:, col] for role, v in times.items()}, state.settings)


def speedup_interval(series: dict, settings):
    """The measured speedup ("ar" over "spec", raw seconds over rounds) with its
    bootstrap interval over rounds (``settings``' draws and seed), on the times in
    baseline units."""
    from specsim.experiment import intervals

    return intervals.bootstrap(in_baseline_units(series), measured_statistic,
                               draws=settings.bootstrap_draws, seed=settings.seed,
                               positive=True)


def measured_statistic(m):
    """Measured speedup from role medians (floats or arrays): the baseline's loop time
    over the run's, both over the same decode tokens, which is E_eff · t1_run /
    t_iter_run (`decomposition`); NaN where a time is not positive."""
    num, den = m["ar"], m["spec"]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((num > 0) & (den > 0), num / den, np.nan)


def widest_half_width(half_widths) -> float:
    """The widest of a block's runs' half-widths; inf where one has no interval (NaN: a
    block converges only when every run has an interval within the target)."""
    w = np.asarray(half_widths, float)
    return float(w.max()) if np.isfinite(w).all() else math.inf


def time_group(state: DemoState, group: Group, budget_s: float) -> GroupTiming:
    """Build and compile one group, then time its `blocks` in paired, adaptive rounds
    (`paired.paired_rounds`); a block leaves once every run's measured speedup has an
    interval within ``settings.target_half_width``; while the budget does not afford a
    round of every block left, the blocks with the widest intervals go first."""
    from specsim.experiment import paired, timed_calls

    s = state.settings
    t0 = time.perf_counter()
    jobs = build_jobs(state, group)
    units = blocks(group, s.runs_per_baseline, s.pass_sets)
    t1 = time.perf_counter()

    def widest(u: int, samples: list) -> float:
        return widest_half_width(
            [_measured_interval(state, _run_times(group, units[u], i, samples)).half_width
             for i in units[u].runs])

    res = paired.paired_rounds(
        [[jobs[k] for k in b.keys] for b in units], np.random.default_rng(s.seed),
        min_rounds=s.repeats, max_rounds=s.max_rounds, budget_s=budget_s,
        converged=lambda u, samples: widest(u, samples) <= s.target_half_width,
        priority=widest, clock=_both_clocks, alternate=True)
    n = len(group.runs)
    times, prepared, results = [None] * n, [None] * n, [None] * n
    rounds, stopped = [0] * n, [""] * n
    for u, b in enumerate(units):
        for i in b.runs:
            roles = _run_roles(group, b, i)
            times[i] = _run_times(group, b, i, res.samples[u])
            prepared[i] = {r: paired.as_array(res.prepared[u][roles[r][0]])
                           for r in ("ar", "spec")}
            results[i] = {r: jobs[b.keys[roles[r][0]]].result(res.outputs[u][roles[r][0]])
                          for r in ("ar", "spec")}
            rounds[i], stopped[i] = res.rounds[u], res.stopped[u]
    total = np.sum([paired.as_array(v).sum(axis=0) for unit in res.samples for v in unit],
                   axis=0)
    done = sum(r == paired.CONVERGED for r in stopped)
    state.log(f"    batch {group.batch}, T {group.temperature:g}: {n} runs in {len(units)} "
              f"blocks, {len(jobs)} calls compiled in {t1 - t0:.0f} s; {min(res.rounds)}-"
              f"{max(res.rounds)} paired rounds timed in {res.elapsed_s:.0f} s (budget "
              f"{budget_s:.0f} s), {done}/{n} within ±{100 * s.target_half_width:g}%")
    return GroupTiming(times, prepared, results, rounds, stopped, float(budget_s),
                       float(res.elapsed_s), float(total[1] / total[0]), units,
                       timed_calls.rows(group, units, res))


def _e_finite(pmf, n: int, batch: int) -> float:
    return finite_run_tokens(pmf, n, batch)


def _run_rates(stats) -> np.ndarray:
    """The run's measured per-position acceptance rates α_j per slot, [K] in [0, 1]."""
    return np.clip(np.nan_to_num(stats.per_position_per_slot, nan=0.0), 0.0, 1.0)


def _e_model(run: SpecRun, stats, n: int, batch: int) -> float:
    """The acceptance model's E for a finite run of n tokens whose slowest of ``batch``
    rows ends it, from the run's measured per-position rates (scored against the run's
    own n / I apart from the in-run prediction, `decomposition`)."""
    from specsim import simulate
    return _e_finite(simulate.tokens_pmf_positional(_run_rates(stats)), n, batch)


def _draw_columns(stats, n: int, batch: int, seed: int) -> dict:
    """The 95% range of the acceptance term over runs simulated at this run's measured
    rates, length and batch (`finite_run.acceptance_term_draws`): how far a run of this
    length strays from E_model by its own draw."""
    from specsim import finite_run

    lo, hi = np.percentile(finite_run.acceptance_term_draws(_run_rates(stats), n, batch, rng=seed),
                           [2.5, 97.5])
    return {schema.ERR_ACCEPTANCE_DRAW_LO: float(lo), schema.ERR_ACCEPTANCE_DRAW_HI: float(hi)}


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
    """(t_target_1, t_verify, t_draft) per pass from role medians (floats or arrays):
    t_draft = (iteration − t_verify) / K, the draft cost the loop pays between its
    target passes (`pass_costs`), 0 where the two programs' difference is below 0."""
    tv = m["verify"] / steps
    return m["target_1"] / steps, tv, np.maximum(m["iteration"] / steps - tv, 0.0) / run.k


def _by_clock(state: DemoState, group: Group, i: int, timing: GroupTiming, col: int) -> dict:
    """Prediction and decomposition of run ``i`` from the samples of one clock (column
    ``col``), with the range of its per-round (paired) speedup. The loop programs are
    timed alone, so no prefill enters the measured speedup; the run's preparation
    (host work and prefills, untimed in the rounds but read by the same clocks) gives
    its prefill and total time."""
    run, steps = group.runs[i], state.settings.pass_steps
    res = timing.results[i]["spec"]
    t = _clock_series(timing.times[i], col)
    med = {role: float(np.median(v)) for role, v in t.items()}
    pre_spec = float(np.median(timing.prepared[i]["spec"][:, col]))
    n = group.max_new_tokens - 1            # decode tokens per row (the prefill gives one)
    t1, tv, td = _pass_times(med, run, steps)
    row = decompose(e_model=_e_model(run, res.stats, n, group.batch), n_tokens=n,
                    iterations=res.n_iterations, k=run.k, t_ar=med["ar"], t_spec=med["spec"],
                    prefill=0.0, prefill_spec=0.0, t_target_1=t1, t_verify=tv, t_draft=td)
    per_round = measured_statistic(t)
    finite = np.isfinite(per_round).any()
    row.update({schema.MEASURED_LO: float(np.nanmin(per_round)) if finite else math.nan,
                schema.MEASURED_HI: float(np.nanmax(per_round)) if finite else math.nan,
                schema.TIME_S: pre_spec + med["spec"], schema.PREFILL_S: pre_spec,
                schema.DECODE_S: med["spec"]})
    return row


def interval_columns(state: DemoState, group: Group, i: int, times: dict,
                     e_eff: float) -> dict:
    """The 95% intervals over run ``i``'s paired rounds (``settings.clock``;
    `intervals.interval`, on the times in baseline units of `in_baseline_units`):
    measured and predicted speedup, the total error, and each pass time."""
    from specsim.experiment import intervals

    s, run = state.settings, group.runs[i]
    col = CLOCKS.index(s.clock)
    series = _clock_series(times, col)
    med = intervals.resample_medians(series, draws=s.bootstrap_draws, seed=s.seed)

    def statistics(m: dict) -> dict:
        measured = measured_statistic(m)
        t1, tv, td = _pass_times(m, run, s.pass_steps)
        predicted = e_eff * t1 / (run.k * td + tv)
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
    times, res = timing.times[i], timing.results[i]["spec"]
    n = group.max_new_tokens - 1
    rows = {name: _by_clock(state, group, i, timing, c) for c, name in enumerate(CLOCKS)}
    row = dict(rows[s.clock])
    for name, r in rows.items():
        row[schema.MEASURED_BY_CLOCK[name]] = r[schema.MEASURED_SPEEDUP]
        row[schema.PREDICTED_BY_CLOCK[name]] = r[schema.PREDICTED_SPEEDUP]
    row.update(interval_columns(state, group, i, times, row[schema.E_EFFECTIVE]))
    lo, hi, m = row[schema.MEASURED_CI_LO], row[schema.MEASURED_CI_HI], row[schema.MEASURED_SPEEDUP]
    ar = times["ar"][:, CLOCKS.index(s.clock)]
    wall_cpu = np.sum([v.sum(axis=0) for v in times.values()], axis=0)
    row.update({schema.MEASURED_HALF_WIDTH: (hi - lo) / 2 / m if m and np.isfinite(m) else math.nan,
                schema.ROUNDS: timing.rounds[i], schema.STOPPED: timing.stopped[i],
                schema.BASELINE_SPREAD: float(100 * (ar.max() - ar.min()) / np.median(ar)),
                schema.CPU_OVER_WALL: float(wall_cpu[1] / wall_cpu[0])})
    row.update({c: math.nan for c in (schema.PRED_SWEPT, schema.PRED_FIT, schema.ERR_COST_FIT)})
    row.update(_draw_columns(res.stats, n, group.batch, s.seed))
    row.update(_set_alpha_columns(run, row, n, group.batch))
    row.update(acceptance_fields(res.stats))
    row.update(acceptance_variants(row, res.stats, run.k))
    row.update({schema.TEMPERATURE: group.temperature, schema.DRAFTER: run.name,
                schema.DRAFTER_KIND: run.drafter_kind, schema.K: run.k, schema.KIND: run.kind,
                schema.BATCH: group.batch, schema.ALPHA_SET: run.acceptance[1]
                if run.acceptance else math.nan,
                schema.NEW_TOKENS: res.n_generated, schema.ITERATIONS: res.n_iterations,
                schema.PADDED_PROMPT: res.plan.padded_prompt, schema.CACHE_LEN: group.cache_len,
                schema.PASS_CONTEXT: pass_context(group, s.pass_steps), schema.CLOCK: s.clock,
                schema.TEXT: res.text[0] if res.text else "",
                schema.MEASURED_INPUTS: ";".join(_measured_inputs(run)), **run.extra})
    return row


def _measured_inputs(run: SpecRun) -> list[str]:
    """The columns the in-run prediction took from measurement in this run."""
    acc = [schema.alpha_pos(j) for j in range(1, run.k + 1)]
    return acc + [schema.T_TARGET_1, schema.T_VERIFY, schema.T_DRAFT]


def baseline_rows(state: DemoState, group: Group, timing: GroupTiming) -> list[dict]:
    """One runs-table row per distinct prompt rows of the group: the plain-decoding
    baseline, its samples pooled over every block that timed it (decode time per new
    token is what the report's headline reads)."""
    col = CLOCKS.index(state.settings.clock)
    pooled: dict[tuple, dict] = {}
    for block in timing.blocks:
        i = block.runs[0]
        run = group.runs[i]
        p = pooled.setdefault(run.rows, {"ar": [], "pre": [], "run": run,
                                         "res": timing.results[i]["ar"]})
        p["ar"].append(timing.times[i]["ar"][:, col])
        p["pre"].append(timing.prepared[i]["ar"][:, col])
    rows = []
    for p in pooled.values():
        res, run = p["res"], p["run"]
        t, pre = float(np.median(np.concatenate(p["ar"]))), float(np.median(np.concatenate(p["pre"])))
        rows.append({schema.TEMPERATURE: group.temperature, schema.DRAFTER: schema.AUTOREGRESSIVE,
                     schema.DRAFTER_KIND: schema.AUTOREGRESSIVE, schema.K: 0,
                     schema.KIND: run.kind, schema.BATCH: group.batch,
                     schema.NEW_TOKENS: res.n_generated, schema.ITERATIONS: res.n_iterations,
                     schema.TIME_S: pre + t, schema.PREFILL_S: pre, schema.DECODE_S: t,
                     schema.PADDED_PROMPT: res.plan.padded_prompt,
                     schema.CACHE_LEN: group.cache_len, schema.CLOCK: state.settings.clock,
                     schema.TEXT: res.text[0] if res.text else ""})
    return rows


def measure(state: DemoState, group: Group, budget_s: float) -> list[dict]:
    """Time one group in paired rounds within ``budget_s`` seconds; one runs-table row
    per baseline and per speculative run. The group's timing (rounds, budget, CPU over
    wall time) is kept in ``state.environment["timing"]``, its calls in the
    ``timed_calls`` table."""
    timing = time_group(state, group, budget_s)
    groups = state.environment.setdefault("timing", [])
    add_rows(state, schema.TIMED_CALLS, [{"group": len(groups), **c} for c in timing.calls])
    groups.append(
        {"batch": group.batch, "temperature": group.temperature, "runs": len(group.runs),
         "blocks": len(timing.blocks), "rounds_min": min(timing.rounds),
         "rounds_max": max(timing.rounds),
         "budget_s": round(timing.budget_s, 1), "timed_s": round(timing.elapsed_s, 1),
         "cpu_over_wall": round(timing.cpu_over_wall, 3)})
    return baseline_rows(state, group, timing) + \
        [run_row(state, group, i, timing) for i in range(len(group.runs))]


def add_runs(state: DemoState, rows: list[dict]) -> None:
    """Append rows to the runs table (parts add their runs one after another)."""
    add_rows(state, schema.RUNS, rows)


def add_rows(state: DemoState, table: str, rows: list[dict]) -> None:
    """Append rows to ``state.tables[table]``."""
    import pandas as pd

    new = pd.DataFrame(rows)
    old = state.tables.get(table)
    state.tables[table] = new if old is None or old.empty else pd.concat(
        [old, new], ignore_index=True)


def loop_context(group: Group) -> int:
    """Cached tokens a step of the group's loops attends on average: the mean prompt
    length over its runs' rows plus half the decode tokens. The CPU attention kernel
    reads the slots up to each row's position, so a pass costs more the longer its
    context; the pass programs run here, where the loops spend their steps on average
    (docs/studies/pass-cost-programs.md)."""
    lengths = [len(r) for run in group.runs for r in run.rows]
    return mean_context(float(np.mean(lengths)), group.max_new_tokens)


def mean_context(prompt_len: float, max_new_tokens: int) -> int:
    """A loop's mean context: its prompt plus half its decode tokens (the prefill gives
    the first new token), at least 2."""
    return max(2, round(prompt_len + (max_new_tokens - 1) / 2))


def pass_context(group: Group, steps: int) -> int:
    """The context the group's pass programs run at: `loop_context`, or less where the
    cache leaves no room for ``steps`` passes of the widest verify beyond it
    (`pass_costs.max_context`)."""
    from specsim.pass_costs import max_context

    k = max(run.k for run in group.runs)
    return max(2, min(loop_context(group), max_context(group.cache_len, k, steps)))


def group_cache_len(target, rows, max_new_tokens: int, k_max: int) -> int:
    """Cache slots every run of a group uses (so baseline and pass programs match)."""
    from specsim import decode

    P = decode.bucket(max(len(r) for r in rows), 8)
    return min(decode.bucket(P + max_new_tokens + k_max + 1), target.cfg.max_seq_len)
