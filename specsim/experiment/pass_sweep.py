"""A sweep of the target's pass programs (`specsim.pass_costs`: the decode step and the
verify pass as the compiled loop pays them, sampling and acceptance included), fitted to
a roofline: the pass times the prediction before the run reads (`prior`).

A bare forward pass misses the loop's per-pass work (sampling over the vocabulary, the
acceptance test, statistics), so a roofline of bare passes misses the loop's own step
ratios; this sweep times the loop's pieces instead, at every batch and verify width the
in-run parts will run and at their cache lengths, in interleaved rounds before any run
(never the runs' own rounds). Rows record ``context`` = cache slots / 2, where the
programs run."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from specsim import schema
from specsim.experiment.state import DemoState

SUFFIX = " passes"
"""``state.fits`` holds the pass-program fit of a model under its name plus this."""


FIT_KS = (1, 2, 4, 8)
"""Draft lengths always swept at batch 1 (where the cache holds them), so that the fit
has widths 1, 2, 3, 5 and 9."""


def fit_key(model_name: str) -> str:
    return model_name + SUFFIX


def plan(state: DemoState) -> dict[tuple[int, int], set[int]]:
    """(batch, cache slots) -> the draft lengths K whose verify pass (width K + 1) the
    in-run parts will run there, from the settings as the parts build their groups."""
    from specsim.experiment.inrun import group_cache_len

    s, t = state.settings, state.target
    out: dict[tuple[int, int], set[int]] = {}

    def add(batch, prompt_len, n, ks):
        S = group_cache_len(t, [[0] * prompt_len], n, max(ks))
        out.setdefault((batch, S), set()).update(int(k) for k in ks)

    if {"instrument", "batch"} & set(s.parts):
        add(1, s.prompt_tokens or 28, s.max_new_tokens,
            (*s.instrument_ks, *(s.batch_ks if "batch" in s.parts else ())))
    if "batch" in s.parts:
        for b in s.batches:
            if b > 1:
                add(b, s.prompt_tokens or 28, s.batch_max_new_tokens or s.max_new_tokens,
                    s.batch_ks)
    if "fidelity" in s.parts:
        longest = max(len(p) for p in state.prompts.values())
        add(1, min(longest, s.drafter_prompt_tokens or longest), s.max_new_tokens, s.ks)
    single = sorted(S for b, S in out if b == 1)
    if single:                 # enough widths at batch 1 to fit either roofline form
        S = single[0]
        out[(1, S)].update(k for k in FIT_KS
                           if S // 2 + s.pass_steps * (k + 1) + k + 1 <= S)
    return out


def sweep(state: DemoState) -> pd.DataFrame:
    """Per-pass seconds of the target's decode step (width 1) and verify passes (width
    K + 1) at every point of `plan`: the median over ``sweep_repeats`` interleaved
    rounds, divided by the program's steps, by the clock the runs are measured on
    (``settings.clock``)."""
    from specsim import bench, pass_costs

    s = state.settings
    calls, keys = [], []
    for (b, S), ks in sorted(plan(state).items()):
        for i, k in enumerate(sorted(ks)):
            c = pass_costs.pass_calls(state.target, None, batch=b, cache_len=S, k=k,
                                      temperature=0.0, steps=s.pass_steps, seed=s.seed)
            if i == 0:
                calls.append(c.target_1)
                keys.append((1, b, S))
            calls.append(c.verify)
            keys.append((k + 1, b, S))
    clock = time.process_time if s.clock == "cpu" else time.perf_counter
    samples, _ = bench.interleaved_rounds(calls, s.sweep_repeats, np.random.default_rng(s.seed),
                                          clock=clock)
    name = state.target.cfg.name
    return pd.DataFrame([{schema.MODEL: fit_key(name), schema.N_TOKENS: n, schema.BATCH: b,
                          schema.CONTEXT: S // 2,
                          schema.TIME_S: float(np.median(ts)) / s.pass_steps,
                          schema.CLOCK: s.clock}
                         for (n, b, S), ts in zip(keys, samples)])


def fit(state: DemoState, df: pd.DataFrame, ceilings=None):
    """Both roofline forms fitted to the pass sweep (FLOPs and bytes of a forward over
    the same shapes); the one with the lower held-out error, refitted on every point
    (`fit.fit_sweep_best`)."""
    from specsim import fit as fitting

    bounds = fitting.ceiling_bounds(ceilings) if ceilings is not None else {}
    best, tried = fitting.fit_sweep_best(df, state.target.cfg, holdout=0.25,
                                         seed=state.settings.seed, **bounds)
    for kind, f in tried.items():
        if isinstance(f, ValueError):   # too few points for a held-out set: say so
            state.log(f"    pass sweep ({kind}): not fitted ({f})")
    return best
