"""Part ``drafters``: the real drafters side by side on the target — the quantised
self-draft (int8; int4 in the full run), the distilled draft when one is trained
(`drafter_study.find_distilled`; otherwise the log says how to train it), the feature
head (trained, or the copy shipped in specsim/data/drafts), n-gram lookup and the layer-skip
self-draft — and what limits each on this machine.

Tables (`specsim.schema`):

* ``alpha_by_kind``: α per draft slot by (target, drafter, temperature, kind) at one K
  (4 when the run has it); the int8-quantised target with the n-gram drafter is a row of
  its own in the full run (what quantising the target does to α and to speed).
* ``drafter_costs``: c measured from the loop's own per-iteration programs
  (`specsim.pass_costs`, timed in the same interleaved rounds as the runs) beside c
  from bytes (`roofline.forward_cost` with ``weight_bits``) and with the fp32 copies
  XLA:CPU makes of dequantised matrices.
* ``drafter_speedup``: measured speedup against K at temperature 0 on code and JSON
  (the first kind otherwise), with predictions from
  the pass costs (one α, and the run's own tokens per iteration) and from the closed
  form at the measured c — the columns of the runs table, so
  `plots.experiment.speedup_predicted_vs_measured` draws it.
* ``drafter_limits``: per drafter, the closed form's best speedup at its α and c, the α
  it would need for 1.5× at that c and the c it would need at that α.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from specsim import schema as S
from specsim.experiment import drafter_study as study
from specsim.experiment.part import Part
from specsim.experiment.settings import DemoSettings
from specsim.experiment.state import DemoState

BASELINE_REPEATS = 3
"""Turns a round of each plain-decoding baseline: one baseline serves every drafter of its
kind of work, so its noise moves every speedup of that kind."""

FULL_KS = (1, 2, 4, 6)          # K of the full run's speed runs (the default ks is 1..6)
SPEED_KINDS = ("code", "json")


def plan(settings: DemoSettings) -> tuple[tuple[int, ...], int, tuple[str, ...]]:
    """(K of the speed runs, K of the α table, kinds of the speed runs)."""
    ks = FULL_KS if settings.ks == DemoSettings().ks else tuple(settings.ks)
    k_alpha = 4 if 4 in ks else max(ks)
    speed_kinds = tuple(k for k in settings.kinds if k in SPEED_KINDS) or settings.kinds[:1]
    return ks, k_alpha, speed_kinds


def build(state: DemoState) -> list[study.StudyDrafter]:
    """The drafters compared: the demo's own, int8 (and int4 unless quick), distilled
    and the feature head when found."""
    out = [study.from_setup(s) for s in state.drafters.values()]
    out.append(study.quantized(state.target, 8))
    if not state.settings.quick:
        out.append(study.quantized(state.target, 4, 32))
    folder = study.find_distilled(state.target.cfg.name)
    if folder is None:
        state.log("    " + study.train_hint(state.target.cfg.name))
    else:
        out.append(study.distilled(folder, state.target))
        state.log(f"    distilled draft: {folder}")
    head = study.find_feature_head(state.target.cfg.name)
    if any(d.kind == "feature-head" for d in out):
        pass                                    # the demo's own drafters hold it already
    elif head is None:
        state.log(f"    no feature head of {state.target.cfg.name}: train one with `specsim "
                  f"train-draft --kind feature-head --target {state.target.cfg.name}`")
    else:
        out.append(study.feature_head(head, state.target))
        state.log(f"    feature head: {head}")
    return out


class _Calls:
    """Labelled zero-argument calls, all timed together in interleaved rounds; ``warm``
    holds, for generation runs, the same program on fewer tokens (to compile it)."""

    def __init__(self):
        self.labels, self.calls, self.warm, self.per = [], [], [], []

    def add(self, label, call, warm=None, per: int = 1) -> None:
        """``per``: passes one call runs (its median is divided by it)."""
        self.labels.append(label)
        self.calls.append(call)
        self.warm.append(warm)
        self.per.append(per)


def _gen(state, target, drafter, kind, k, temperature, max_new, staged: bool = False):
    """A zero-argument generation call; ``staged``: a `decode.StagedCall`, whose prefills
    run untimed before its loop program (the timed speed runs)."""
    from specsim import decode
    common = dict(temperature=temperature, seed=state.settings.seed, eos_token_id=None,
                  cache_len=state.cache_len)
    rows = [state.prompts[kind]]
    if staged:
        return (decode.staged_autoregressive(target, rows, max_new, **common)
                if drafter is None else
                decode.staged_speculative(target, drafter, rows, max_new, k=k, **common))
    if drafter is None:
        return lambda: decode.generate_autoregressive(target, rows, max_new, **common)
    return lambda: decode.generate_speculative(target, drafter, rows, max_new, k=k, **common)


def _targets(state: DemoState) -> dict[str, object]:
    """Target name -> Model: the run's target, and its int8 copy in the full run."""
    out = {state.target.cfg.name: state.target}
    if not state.settings.quick:
        from specsim.models import Model
        from specsim.models.quantize import quantize_params
        t = state.target
        q = Model(t.cfg.replace(name=f"{t.cfg.name}-int8"),
                  quantize_params(t.params, t.cfg, 8), t.tokenizer, t.source)
        out[q.cfg.name] = q
    return out


def _schedule(state, drafters, targets) -> tuple[_Calls, list]:
    """Timed calls (speed runs at T = 0, pass-cost programs) and untimed α runs
    (label, call). A run's label: ("run", target, drafter, K, kind, temperature)."""
    from specsim import decode, pass_costs

    s = state.settings
    ks, k_alpha, speed_kinds = plan(s)
    n, warm_n = s.max_new_tokens, decode.warmup_tokens(s.max_new_tokens)
    timed, untimed = _Calls(), []
    main = state.target.cfg.name

    def run(tname, target, drafter, name, k, kind):
        timed.add(("run", tname, name, k, kind, 0.0),
                  _gen(state, target, drafter, kind, k, 0.0, n, staged=True),
                  _gen(state, target, drafter, kind, k, 0.0, warm_n))

    for tname, target in targets.items():
        for kind in speed_kinds:     # the baseline serves every drafter: timed more often
            for _ in range(BASELINE_REPEATS):
                run(tname, target, None, S.AUTOREGRESSIVE, 0, kind)
        for d in drafters:
            if tname != main and d.kind != "ngram":
                continue                        # the quantised target: n-gram only
            full_k = tname == main and not (d.kind == "quantized" and d.weight_bits != 8)
            for k in (ks if full_k else (k_alpha,)):
                for kind in speed_kinds:
                    run(tname, target, d.drafter, d.name, k, kind)
            for temp in s.temperatures:
                for kind in s.kinds:
                    if not (temp == 0 and kind in speed_kinds):
                        untimed.append((("run", tname, d.name, k_alpha, kind, temp),
                                        _gen(state, target, d.drafter, kind, k_alpha, temp, n)))
        pc = pass_costs.pass_calls(target, None, batch=1, cache_len=state.cache_len, k=k_alpha)
        timed.add(("t1", tname), pc.target_1, per=pc.steps)
    for k in ks:
        pc = pass_costs.pass_calls(state.target, None, batch=1, cache_len=state.cache_len, k=k)
        timed.add(("verify", k), pc.verify, per=pc.steps)
    for d in drafters:
        pc = pass_costs.pass_calls(state.target, d.drafter, batch=1, cache_len=state.cache_len,
                                   k=k_alpha)
        timed.add(("draft", d.name), pc.draft, per=pc.steps * pc.k)     # one draft step
    return timed, untimed


def _measure(state, timed: _Calls, untimed: list) -> tuple[dict, dict]:
    """Compile and run everything: (label -> median seconds per run or per pass, label ->
    result)."""
    from specsim import bench

    results = {}
    for label, call in untimed:
        results[label] = call()
    for label, warm in dict(zip(timed.labels, timed.warm)).items():   # compile first
        if warm is not None:
            warm()
    samples, outs = bench.interleaved_rounds(
        timed.calls, state.settings.repeats, np.random.default_rng(state.settings.seed),
        progress="drafters: timed rounds" if state.progress else None)
    pooled: dict = {}
    for label, ts, out, per, call in zip(timed.labels, samples, outs, timed.per, timed.calls):
        pooled.setdefault(label, []).extend(t / per for t in ts)
        if label[0] == "run":                   # a StagedCall: its loop's output
            results[label] = call.result(out)
    return {label: float(np.median(ts)) for label, ts in pooled.items()}, results


# ---- tables -----------------------------------------------------------------------------------
def alpha_rows(results: dict) -> pd.DataFrame:
    """The ``alpha_by_kind`` table from every speculative run."""
    rows = []
    for (_, tname, name, k, kind, temp), res in results.items():
        if name == S.AUTOREGRESSIVE:
            continue
        st = res.stats
        rows.append({S.TARGET: tname, S.DRAFTER: name, S.TEMPERATURE: temp, S.K: k,
                     S.KIND: kind, S.ALPHA: st.alpha_per_slot,
                     S.ALPHA_PROPOSED: st.alpha_per_proposal,
                     S.TOKENS_PER_ITERATION: st.tokens_per_iteration})
    return pd.DataFrame(rows)


def cost_rows(state, drafters, medians: dict, k_alpha: int) -> pd.DataFrame:
    """The ``drafter_costs`` table: pass times per drafter and c measured / from bytes."""
    t1 = medians[("t1", state.target.cfg.name)]
    rows = []
    for d in drafters:
        t_draft = medians[("draft", d.name)]                # per draft step
        rows.append({S.DRAFTER: d.name, "drafter_kind": d.kind, S.T_DRAFT: t_draft,
                     S.T_TARGET_1: t1, S.T_VERIFY: medians[("verify", k_alpha)],
                     S.K: k_alpha, S.CACHE_LEN: state.cache_len, S.C_MEASURED: t_draft / t1,
                     **study.bytes_ratios(d, state.target.cfg, state.cache_len),
                     S.WEIGHT_BITS: d.weight_bits, "train_steps": d.train_steps})
    return pd.DataFrame(rows)


def speed_rows(state, results: dict, medians: dict, costs: pd.DataFrame) -> pd.DataFrame:
    """The ``drafter_speedup`` table: each timed speculative run (temperature 0) with its
    measured speedup over the same target's autoregressive run on the same kind (decode
    time per token: each call's loop program timed alone, its prefills run untimed
    before it, `decode.StagedCall`) and the predictions beside it."""
    from specsim import analytic

    main = state.target.cfg.name
    c_of = dict(zip(costs[S.DRAFTER], costs[S.C_MEASURED]))
    td_of = dict(zip(costs[S.DRAFTER], costs[S.T_DRAFT]))
    rows = []
    for label, res in results.items():
        _, tname, name, k, kind, temp = label
        if name == S.AUTOREGRESSIVE or label not in medians:
            continue
        base = ("run", tname, S.AUTOREGRESSIVE, 0, kind, 0.0)
        ar = medians[base] / results[base].n_generated          # the loops' time per token
        sp = medians[label] / res.n_generated
        st = res.stats
        t1 = medians[("t1", main)]
        tv = medians.get(("verify", k), np.nan) if tname == main else np.nan
        e_iid = float(analytic.expected_tokens(st.alpha_per_slot, k))
        iteration = k * td_of[name] + tv
        rows.append({S.TARGET: tname, S.DRAFTER: name, S.TEMPERATURE: temp, S.K: k,
                     S.KIND: kind, S.BATCH: 1, S.ALPHA: st.alpha_per_slot,
                     S.TOKENS_PER_ITERATION: st.tokens_per_iteration,
                     S.MEASURED_SPEEDUP: ar / sp,
                     S.PRED_IID: e_iid * t1 / iteration,
                     S.PRED_POSITIONAL: st.tokens_per_iteration * t1 / iteration,
                     S.PRED_CONSTANT_COST: float(analytic.speedup(st.alpha_per_slot, k,
                                                                  c_of[name])),
                     S.C_MEASURED: c_of[name], S.T_VERIFY: tv, S.T_TARGET_1: t1,
                     S.TIME_S: medians[label], "baseline_time_s": medians[base],
                     S.ITERATIONS: res.n_iterations,
                     S.NEW_TOKENS: res.n_generated,
                     "speedup_vs_main_target": medians[("run", main, S.AUTOREGRESSIVE, 0, kind,
                                                        0.0)] / medians[label]})
    return pd.DataFrame(rows)


def run(state: DemoState) -> None:
    drafters = build(state)
    targets = _targets(state)
    ks, k_alpha, speed_kinds = plan(state.settings)
    state.log(f"    drafters {[d.name for d in drafters]}; speed runs K {list(ks)} on "
              f"{list(speed_kinds)}; α at K = {k_alpha}; targets {list(targets)}")
    timed, untimed = _schedule(state, drafters, targets)
    medians, results = _measure(state, timed, untimed)
    costs = cost_rows(state, drafters, medians, k_alpha)
    alphas = alpha_rows(results)
    main = alphas[alphas[S.TARGET] == state.target.cfg.name]
    state.tables[S.ALPHA_BY_KIND] = alphas
    state.tables[S.DRAFTER_COSTS] = costs
    state.tables[S.DRAFTER_SPEEDUP] = speed_rows(state, results, medians, costs)
    state.tables[S.DRAFTER_LIMITS] = study.limits_table(costs, main[main[S.K] == k_alpha])
    for name in (S.DRAFTER_COSTS, S.DRAFTER_LIMITS):
        state.log(state.tables[name].to_string(index=False, float_format=lambda x: f"{x:.3g}"))


PART = Part(name="drafters", summary="comparing the real drafters (quantised self-draft, "
            "distilled, feature head, n-gram, layer-skip): α by kind, c, speedup against K, "
            "limits",
            run=run, produces=(S.ALPHA_BY_KIND, S.DRAFTER_COSTS, S.DRAFTER_SPEEDUP,
                               S.DRAFTER_LIMITS))
