"""Timing the generation runs: compile every program first, then time every run in
interleaved rounds (`specsim.bench.interleaved_rounds`), and turn each run into one row
of the runs table (`specsim.schema`)."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from specsim import schema
from specsim.experiment.runspec import RunSpec, programs, timing_jobs
from specsim.experiment.state import DemoState


@dataclass(frozen=True)
class TimedRun:
    """A run's spec, its last result (`decode.GenerationResult`) and every timed sample."""
    spec: RunSpec
    result: object
    times: tuple[float, ...]


def make_call(state: DemoState, spec: RunSpec, max_new: int) -> Callable[[], object]:
    """A zero-argument call that runs ``spec`` once (compiling on first use)."""
    from specsim import decode

    s = state.settings
    rows = [state.prompts[spec.kind]] * spec.batch
    common = dict(temperature=spec.temperature, seed=s.seed, eos_token_id=None,
                  cache_len=state.cache_len)
    if spec.is_baseline:
        return lambda: decode.generate_autoregressive(state.target, rows, max_new, **common)
    drafter = state.drafters[spec.drafter].drafter
    return lambda: decode.generate_speculative(state.target, drafter, rows, max_new,
                                               k=spec.k, **common)


def compile_programs(state: DemoState, specs: list[RunSpec]) -> None:
    """One untimed, shorter call per distinct program (same padded prompt, cache and
    iteration buffer as the timed runs), so no timed call compiles."""
    from specsim import decode

    progs = programs(specs)
    if state.progress:
        from tqdm.auto import tqdm
        progs = tqdm(progs, desc="generation", unit="config")
    warm_new = decode.warmup_tokens(state.settings.max_new_tokens)
    t0 = time.perf_counter()
    for spec in progs:
        make_call(state, spec, warm_new)()
    state.log(f"    compiled {len(programs(specs))} programs in {time.perf_counter() - t0:.0f} s")


def time_runs(state: DemoState, specs: list[RunSpec]) -> list[TimedRun]:
    """Compile, then time ``settings.repeats`` rounds of every spec (baselines several
    times per round) in a fresh seeded order each round; samples of one spec are pooled."""
    from specsim import bench

    compile_programs(state, specs)
    jobs = timing_jobs(specs)
    calls = [make_call(state, spec, state.settings.max_new_tokens) for spec in jobs]
    t0 = time.perf_counter()
    samples, outputs = bench.interleaved_rounds(
        calls, state.settings.repeats, np.random.default_rng(state.settings.seed),
        progress="timed rounds" if state.progress else None)
    state.log(f"    timed {len(jobs)} runs x {state.settings.repeats} rounds in "
              f"{time.perf_counter() - t0:.0f} s")
    pooled: dict[RunSpec, list[float]] = {}
    last: dict[RunSpec, object] = {}
    for spec, times, out in zip(jobs, samples, outputs):
        pooled.setdefault(spec, []).extend(times)
        last.setdefault(spec, out)
    return [TimedRun(spec, last[spec], tuple(pooled[spec])) for spec in specs]


def acceptance_fields(stats) -> dict[str, float]:
    """The runs table's acceptance columns of one speculative run (`SpeculativeStats`):
    α and the per-position rates per draft slot, with each position's sample count."""
    rates, counts = stats.per_position_per_slot, stats.per_position_counts
    return {schema.ALPHA: stats.alpha_per_slot, schema.ALPHA_PROPOSED: stats.alpha_per_proposal,
            schema.TOKENS_PER_ITERATION: stats.tokens_per_iteration,
            schema.MEAN_OVERLAP: stats.mean_overlap, **schema.position_fields(rates, counts)}


class PrefillTimer:
    """The median time of one prefill pass per (model, padded prompt, cache, batch,
    logits), measured once and reused. ``logits`` (`bench.make_forward_call`): "last"
    for a target (its prefill draws the first token from the last position), "none" for
    a draft model (its prefill only fills its cache)."""

    def __init__(self, repeats: int):
        self.repeats = repeats
        self._cache: dict = {}

    def __call__(self, model, padded_prompt: int, cache_len: int, batch: int = 1,
                 logits: str = "last") -> float:
        from specsim import bench

        key = (model.cfg.name, padded_prompt, cache_len, batch, logits)
        if key not in self._cache:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*donated buffers.*")
                call, _ = bench.make_forward_call(model, padded_prompt, batch, cache_len,
                                                  logits=logits)
                self._cache[key] = bench.time_calls(call, repeats=self.repeats, warmup=1).median
        return self._cache[key]


def run_row(state: DemoState, run: TimedRun, prefill: PrefillTimer) -> dict:
    """One row of the runs table: the spec, timings (median over rounds) and acceptance."""
    res, times = run.result, np.asarray(run.times)
    padded, cache_len = res.plan.padded_prompt, res.plan.cache_len
    t_run = float(np.median(times))
    t_pre = prefill(state.target, padded, cache_len, run.spec.batch)
    draft_m = state.cost_model(run.spec.drafter)
    if draft_m is not None:
        t_pre += prefill(draft_m, padded, cache_len, run.spec.batch, logits="none")
    row = {**run.spec.as_row(), schema.NEW_TOKENS: res.n_generated,
           schema.ITERATIONS: res.n_iterations, schema.TARGET_PASSES: res.target_passes,
           schema.DRAFT_PASSES: res.draft_passes, schema.TIME_S: t_run,
           schema.TIME_SPREAD_S: float(times.max() - times.min()), schema.PREFILL_S: t_pre,
           schema.DECODE_S: t_run - t_pre, schema.PADDED_PROMPT: padded,
           schema.CACHE_LEN: cache_len, schema.TEXT: res.text[0] if res.text else ""}
    if res.stats is not None:
        row.update(acceptance_fields(res.stats))
    return row


def runs_table(state: DemoState, specs: list[RunSpec]) -> pd.DataFrame:
    """Time every spec and return the runs table (one row per spec, in order)."""
    timed = time_runs(state, specs)
    prefill = PrefillTimer(max(3, state.settings.repeats))
    return pd.DataFrame([run_row(state, run, prefill) for run in timed])
