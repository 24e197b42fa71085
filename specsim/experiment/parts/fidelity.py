"""Part ``fidelity``, the real drafters (n-gram lookup, layer-skip self-draft, a draft
model): speculative generation for every temperature, drafter, K and kind of work at
batch 1, each run predicted from its measured acceptance and the pass times measured
in the same interleaved rounds (`specsim.experiment.inrun`). When the roofline part
ran, each row also carries the prediction from the fitted roofline's pass times
(``pred_speedup_fit``) and from the sweep's medians (``pred_speedup_swept_costs``)."""

from __future__ import annotations

import math

import pandas as pd

from specsim import batching, schema
from specsim.experiment import inrun, prediction, prior
from specsim.experiment.part import Part
from specsim.experiment.state import DemoState


def drafter_kind(name: str) -> str:
    for kind in ("ngram", "layer-skip", "instrument", "feature-head"):
        if name.startswith(kind):
            return kind
    return "model"


def fidelity_groups(state: DemoState) -> list[inrun.Group]:
    """One group per temperature: every (drafter, K, kind of work) at batch 1."""
    s = state.settings
    keep = s.drafter_prompt_tokens or None                 # 0: the whole prompt
    rows = {kind: (tuple(state.prompts[kind][:keep]),) for kind in s.kinds}
    S = inrun.group_cache_len(state.target, [r[0] for r in rows.values()], s.max_new_tokens,
                              max(s.ks))
    groups = []
    for temp in s.temperatures:
        runs = [inrun.SpecRun(name=name, drafter_kind=drafter_kind(name), drafter=setup.drafter,
                              k=k, kind=kind, rows=rows[kind], cost_key=name)
                for name, setup in state.drafters.items() for k in s.ks for kind in s.kinds]
        groups.append(inrun.Group(temperature=float(temp), cache_len=S,
                                  max_new_tokens=s.max_new_tokens, runs=tuple(runs)))
    return groups


def fitted_columns(state: DemoState, runs: pd.DataFrame) -> pd.DataFrame:
    """The in-run prediction's E (the run's own n / I) with the fitted roofline's and the
    sweep's pass times (NaN where the roofline part did not measure the model)."""
    sweeps = state.tables.get(schema.SWEEPS, pd.DataFrame())
    out = runs.copy()
    for col in (schema.PRED_FIT, schema.ERR_COST_FIT, schema.PRED_SWEPT):
        out[col] = math.nan
    tname = state.target.cfg.name
    if tname not in state.fits:
        return out
    for i, r in out.iterrows():
        setup = state.drafters.get(r[schema.DRAFTER])
        if setup is None:
            continue
        dm = setup.cost_model
        if dm is not None and dm.cfg.name not in state.fits:
            continue
        k, b, S = int(r[schema.K]), int(r[schema.BATCH]), int(r[schema.CACHE_LEN])
        for col, tm_of in ((schema.PRED_FIT, lambda n: batching.fit_time_model(state.fits[n])),
                           (schema.PRED_SWEPT, lambda n: prediction.swept_time_model(sweeps, n))):
            costs = prediction.Costs.of(state.target.cfg, None if dm is None else dm.cfg, k, b,
                                        S, tm_of(tname), None if dm is None else tm_of(dm.cfg.name))
            out.loc[i, col] = costs.speedup(r[schema.E_EFFECTIVE], k)
        out.loc[i, schema.ERR_COST_FIT] = 100 * math.log(
            out.loc[i, schema.PRED_FIT] / r[schema.PREDICTED_SPEEDUP])
    return out


def run(state: DemoState) -> None:
    rows = []
    groups = fidelity_groups(state)
    for i, group in enumerate(groups):
        state.tables[schema.ACCEPTANCE_PRIOR] = prior.calibrate(state, group)
        rows += inrun.measure(state, group, state.timing_budget("fidelity", len(groups) - i))
    inrun.add_runs(state, rows)
    state.tables[schema.RUNS] = fitted_columns(state, state.tables[schema.RUNS])


PART = Part(name="fidelity", summary="the real drafters (n-gram, layer-skip, feature head) "
            "at batch 1, predicted from in-run pass times", run=run, produces=(schema.RUNS,))
