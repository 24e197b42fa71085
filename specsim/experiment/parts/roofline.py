"""Part ``roofline``: the machine's ceilings, a forward sweep of the target and of every
drafter that runs a model, and a roofline fit of each (the form with the lower
held-out error is kept for prediction); when an in-run part will run, also a sweep of
the target's pass programs at its batches, widths and cache lengths, fitted the same way
(`specsim.experiment.pass_sweep`), which the prediction before the run reads for the
target and the draft models alike (a draft model's forward sweep then runs only for the
hardware part)."""

from __future__ import annotations

import pandas as pd

from specsim import schema
from specsim.experiment import pass_sweep
from specsim.experiment.part import Part
from specsim.experiment.state import DemoState


def sweep_points(state: DemoState, target: bool = True) -> list[tuple[int, int, int]]:
    """(n_tokens, batch, context): every verify width K + 1 of the drafters and of the
    instrument at the runs' cache size, two other contexts at one token, a few batches
    at 8 tokens, and at each batch of the batch part one token and its verify widths
    (what the prediction before the run reads)."""
    s, S = state.settings, state.cache_len
    base_ns = {1, 4, 16, 64} if s.quick else {1, 2, 4, 8, 16, 32, 64}
    ns = sorted(base_ns | {k + 1 for k in (*s.ks, *s.instrument_ks)})
    points = [(n, 1, S) for n in ns] + [(1, 1, c) for c in (S // 2, 2 * S) if c >= 1]
    points += [(8, b, S) for b in ((2, 4) if s.quick else (2, 4, 8))]
    if target and "batch" in s.parts:        # a drafter's sweep needs no batched widths
        points += [(n, b, S) for b in s.batches if b > 1
                   for n in sorted({1, *(k + 1 for k in s.batch_ks)})]
    return list(dict.fromkeys(points))


def fit_model_sweep(state: DemoState, name: str, df: pd.DataFrame, ceilings=None):
    """Both roofline forms fitted to one sweep (logged); the better held-out one. With
    ``ceilings`` (the part's `bench.measure_ceilings` table) the fitted P and W are
    capped at the measured matmul and copy ceilings (`fit.ceiling_bounds`): without the
    caps the max form can put W far above the copy ceiling the machine measured. The
    chosen form is refitted on every point (`fit.fit_sweep_best`)."""
    from specsim import fit

    bounds = fit.ceiling_bounds(ceilings) if ceilings is not None else {}
    best, tried = fit.fit_sweep_best(df, holdout=0.25, seed=state.settings.seed, **bounds)
    for kind, f in tried.items():
        if isinstance(f, ValueError):
            raise f
        state.log(f"    {name} ({kind}): t0 {f.t0 * 1e3:.2f} ms, P {f.peak_flops / 1e9:.1f} "
                  f"GFLOP/s, W {f.bandwidth / 1e9:.1f} GB/s, R2 {f.r2:.3f}, held-out MAPE "
                  f"{f.mape_heldout:.1f}%")
    return best


def run(state: DemoState) -> None:
    from specsim import bench

    s = state.settings
    state.tables[schema.CEILINGS] = bench.measure_ceilings(
        matmul_size=1024 if s.quick else 2048, copy_mib=bench.CEILING_COPY_MIB)
    models = {state.target.cfg.name: state.target}
    passes = pass_sweep.plan(state)
    if not passes or "hardware" in s.parts:   # else the pass roofline prices draft steps
        for setup in state.drafters.values():
            if setup.cost_model is not None:
                models[setup.cost_model.cfg.name] = setup.cost_model
    sweeps = []
    for name, m in models.items():
        df = bench.sweep_forward(m, sweep_points(state, m is state.target),
                                 repeats=s.sweep_repeats, warmup=1,
                                 progress=state.progress)
        sweeps.append(df)
        state.fits[name] = fit_model_sweep(state, name, df, state.tables[schema.CEILINGS])
    state.tables[schema.SWEEPS] = pd.concat(sweeps, ignore_index=True)
    if passes:                        # an in-run part will run: sweep its pass programs
        df = pass_sweep.sweep(state)
        state.tables[schema.PASS_SWEEP] = df
        for key, f in pass_sweep.fit(state, df, state.tables[schema.CEILINGS]).items():
            state.fits[key] = f
            state.log(f"    {key}: {f.n_train} points, t0 {f.t0 * 1e3:.2f} ms, "
                      f"R2 {f.r2:.3f}, held-out MAPE {f.mape_heldout:.1f}%")


PART = Part(name="roofline", summary="measuring the machine's ceilings and forward sweeps",
            run=run, produces=(schema.CEILINGS, schema.SWEEPS))
