"""A sweep of the target's pass programs (`specsim.pass_costs`: the decode step and the
verify pass as the compiled loop pays them, sampling and acceptance included), fitted to
a roofline: the pass times the prediction before the run reads (`prior`).

A bare forward pass misses the loop's per-pass work (sampling over the vocabulary, the
acceptance test, statistics), so a roofline of bare passes misses the loop's own step
ratios; this sweep times the loop's pieces instead, at every batch and verify width the
in-run parts will run and at their cache lengths, in interleaved rounds before any run
(never the runs' own rounds). Each point runs at the context its groups' pass programs
run at (the loops' mean, `inrun.pass_context`), which rows record as ``context``.

The engine's few-row matmuls run specsim's CPU kernel up to `kernels.MAX_ROWS` rows per
pass (batch × tokens) and XLA's dots above it: two implementations with their own
ceilings and fixed costs, so one roofline through both bends where neither does. Where
the kernel runs, each side of that split gets its own fit (`fit`), and `time_model`
prices a pass by the side its rows fall on (docs/measurement.md)."""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd

from specsim import schema
from specsim.errors import InvalidArgument
from specsim.experiment.state import DemoState

SUFFIX = " passes"
"""``state.fits`` holds the pass-program fit of a model under its name plus this."""


FIT_KS = (1, 2, 4, 8)
"""Draft lengths always swept at batch 1 (where the cache holds them), so that the fit
has widths 1, 2, 3, 5 and 9."""


ABOVE = " over {rows} rows"
"""... and the fit of the passes above the kernel's rows under that name plus this."""

MIN_REGIME_POINTS = 4
"""Points a side of the split needs for its own fit (three parameters and one held
out); with fewer, one fit covers every point."""


def fit_key(model_name: str) -> str:
    return model_name + SUFFIX


def above_key(model_name: str, rows: int) -> str:
    return fit_key(model_name) + ABOVE.format(rows=rows)


def kernel_rows(cfg) -> int | None:
    """Rows per pass up to which ``cfg``'s matmuls run specsim's CPU kernel while more
    rows run XLA's dots (`kernels.use_kernel`); None where one implementation runs at
    every width."""
    from specsim.models import kernels

    try:
        split = (kernels.use_kernel(cfg.matmul, 1, cfg.dtype)
                 and not kernels.use_kernel(cfg.matmul, kernels.MAX_ROWS + 1, cfg.dtype))
    except InvalidArgument:     # matmul="kernel" where the kernel cannot run: one regime
        return None
    return kernels.MAX_ROWS if split else None


def wide_passes(n_tokens, batch, split: int | None) -> np.ndarray | None:
    """Which passes of a sweep (arrays of tokens and batch) lie above the kernel's
    ``split`` rows, where each side has `MIN_REGIME_POINTS`; None where one fit covers
    them all (no split, or too few points on a side)."""
    if split is None:
        return None
    wide = np.asarray(n_tokens) * np.asarray(batch) > split
    return wide if min(wide.sum(), (~wide).sum()) >= MIN_REGIME_POINTS else None


def _groups(state: DemoState):
    """(batch, prompt tokens, new tokens, draft lengths) of every group the in-run parts
    will time, from the settings as the parts build them."""
    s = state.settings
    if {"instrument", "batch"} & set(s.parts):
        yield (1, s.prompt_tokens or 28, s.max_new_tokens,
               (*s.instrument_ks, *(s.batch_ks if "batch" in s.parts else ())))
    if "batch" in s.parts:
        for b in s.batches:
            if b > 1:
                yield (b, s.prompt_tokens or 28, s.batch_max_new_tokens or s.max_new_tokens,
                       s.batch_ks)
    if "fidelity" in s.parts:
        longest = max(len(p) for p in state.prompts.values())
        yield 1, min(longest, s.drafter_prompt_tokens or longest), s.max_new_tokens, s.ks


def plan(state: DemoState) -> dict[tuple[int, int, int], set[int]]:
    """(batch, cache slots, context) -> the draft lengths K whose verify pass (width
    K + 1) the in-run parts will run there, from the settings as the parts build their
    groups; the context is the one their pass programs run at (the loops' mean,
    `inrun.pass_context`), averaged where several groups share a cache."""
    from specsim.experiment.inrun import group_cache_len, mean_context
    from specsim.pass_costs import max_context

    s, t = state.settings, state.target
    by_cache: dict[tuple[int, int], tuple[set, list]] = {}
    for batch, prompt_len, n, ks in _groups(state):
        S = group_cache_len(t, [[0] * prompt_len], n, max(ks))
        ctx = min(mean_context(prompt_len, n), max_context(S, max(ks), s.pass_steps))
        widths, ctxs = by_cache.setdefault((batch, S), (set(), []))
        widths.update(int(k) for k in ks)
        ctxs.append(max(2, ctx))
    single = sorted(S for b, S in by_cache if b == 1)
    out = {}
    for (b, S), (ks, ctxs) in by_cache.items():
        ctx = round(float(np.mean(ctxs)))
        # enough widths to fit each side of the kernel's row split: at batch 1 in its
        # smallest cache, and in every cache of a larger batch
        if b > 1 or (single and S == single[0]):
            ks.update(k for k in FIT_KS if ctx <= max_context(S, k, s.pass_steps))
        out[(b, S, ctx)] = ks
    return out


def sweep_calls(state: DemoState) -> tuple[list[list], list[list[tuple]]]:
    """The sweep's compiled pass calls, one list per (batch, cache, context) cell of
    `plan` (the decode step first, then each verify width), and their points (tokens,
    batch, context)."""
    from specsim import pass_costs

    s = state.settings
    units, keys = [], []
    for (b, S, ctx), ks in sorted(plan(state).items()):
        calls, cell = [], []
        for i, k in enumerate(sorted(ks)):
            c = pass_costs.pass_calls(state.target, None, batch=b, cache_len=S, k=k,
                                      temperature=0.0, steps=s.pass_steps, seed=s.seed,
                                      context=ctx)
            if i == 0:
                calls.append(c.target_1)
                cell.append((1, b, ctx))
            calls.append(c.verify)
            cell.append((k + 1, b, ctx))
        units.append(calls)
        keys.append(cell)
    return units, keys


def paired_medians(samples: list) -> list[float]:
    """A cell's per-call medians over rounds (``samples[j]``: call j's seconds, one per
    round) of its times in units of each round's decode step (call 0,
    `inrun.in_baseline_units`)."""
    from specsim.experiment.inrun import in_baseline_units

    t = in_baseline_units({j: np.asarray(v, float) for j, v in enumerate(samples)}, baseline=0)
    return [float(np.median(t[j])) for j in range(len(samples))]


def sweep(state: DemoState) -> pd.DataFrame:
    """Per-pass seconds of the target's decode step (width 1) and verify passes (width
    K + 1) at every point of `plan`, by the clock the runs are measured on
    (``settings.clock``), divided by the program's steps. The points of one (batch,
    cache, context) cell run back to back as one block of paired rounds
    (``sweep_repeats`` rounds, the blocks in a fresh order each round, a block's calls
    reversed every second round), and each point is its `paired_medians`: the ratios
    the prediction reads (a verify pass over the decode step at one batch) are paired
    round by round, not taken from calls seconds apart."""
    from specsim.experiment import paired

    s = state.settings
    units, keys = sweep_calls(state)
    clock = time.process_time if s.clock == "cpu" else time.perf_counter
    res = paired.paired_rounds(units, np.random.default_rng(s.seed), min_rounds=s.sweep_repeats,
                               max_rounds=s.sweep_repeats, budget_s=math.inf,
                               converged=lambda u, samples: False, clock=clock, alternate=True)
    name = state.target.cfg.name
    return pd.DataFrame([{schema.MODEL: fit_key(name), schema.N_TOKENS: n, schema.BATCH: b,
                          schema.CONTEXT: ctx, schema.TIME_S: t / s.pass_steps,
                          schema.CLOCK: s.clock}
                         for cell, samples in zip(keys, res.samples)
                         for (n, b, ctx), t in zip(cell, paired_medians(samples))])


def fit(state: DemoState, df: pd.DataFrame, ceilings=None) -> dict:
    """Fit name -> roofline fitted to the pass sweep (FLOPs and bytes of a forward over
    the same shapes): both forms tried, the one with the lower held-out error refitted
    on every point (`fit.fit_sweep_best`); one fit per side of the kernel's row split
    (`kernel_rows`) where each side has `MIN_REGIME_POINTS`, else one over all."""
    from specsim import fit as fitting

    cfg = state.target.cfg
    bounds = fitting.ceiling_bounds(ceilings) if ceilings is not None else {}
    split = kernel_rows(cfg)
    wide = wide_passes(df[schema.N_TOKENS], df[schema.BATCH], split)
    sides = {fit_key(cfg.name): df} if wide is None else {
        fit_key(cfg.name): df[~wide].reset_index(drop=True),
        above_key(cfg.name, split): df[wide].reset_index(drop=True)}
    out = {}
    for key, part in sides.items():
        best, tried = fitting.fit_sweep_best(part, cfg, holdout=0.25,
                                             seed=state.settings.seed, **bounds)
        for kind, f in tried.items():
            if isinstance(f, ValueError):   # too few points for a held-out set: say so
                state.log(f"    {key} ({kind}): not fitted ({f})")
        if best is not None:
            out[key] = best
    return out


def time_model(fits: dict, cfg):
    """``time_model(cfg, n_tokens, batch, context)`` from the pass-sweep fits of the
    target ``cfg`` in ``fits``: a pass of more than the kernel's rows priced by the fit
    above the split where there is one; None without a pass-sweep fit."""
    below = fits.get(fit_key(cfg.name))
    if below is None:
        return None
    split = kernel_rows(cfg)
    above = None if split is None else fits.get(above_key(cfg.name, split))

    def model(c, n_tokens: int, batch: int, context: int) -> float:
        f = above if above is not None and n_tokens * batch > split else below
        return float(f.predict_forward(c, int(n_tokens), int(batch), int(context)))

    model.description = (f"pass-sweep rooflines split at the kernel's {split} rows"
                         if above is not None else "pass-sweep roofline")
    return model
