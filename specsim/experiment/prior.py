"""The prediction made before the run: what a user could compute without timing the
run itself. Speedup ``E · t_T(1) / (K · t_D(1) + t_T(K+1))`` with the target's pass
times from the rooflines fitted to the sweep of its pass programs (`pass_sweep`; the
bare forward sweep's fit where that did not run), never the run's own rounds, and E
from the drafter's per-position α known beforehand, for a finite run whose slowest
batch row ends it:

- the instrument drafter: α is set, so α_j = α at every position;
- a real drafter: α_j from an untimed run of the same drafter at the group's largest K
  on the run's prompt (``THIS_PROMPT``), made before its timed rounds: the drafter's
  acceptance on this work, as a user measures it on a sample of theirs.

A second prediction (`schema.PRED_PRIOR_OTHER`) takes a real drafter's α_j from untimed
runs on other prompts of the same kind of work instead (``OTHER_PROMPTS``: the shipped
prompt set, `specsim.train.samples.load_prompts`, cut to the run's prompt length, pooled
by sample count): how far α carries from one prompt of a kind to the next
(docs/studies/acceptance-before-the-run.md). Neither reads the timed run's statistics.

The draft step costs the same fitted roofline at the shapes of what it runs: the
instrument's L target layers and its 16-row head (`drafters.instrument.cost_config`), a
draft model's config (its own forward fit where no pass sweep ran); the feature head's
step is the target step's fitted time scaled by the bytes it reads (its cell and head
rows against the target's pass); n-gram lookup is counted free (host-free table work
inside the loop)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from specsim import schema
from specsim.experiment.state import DemoState

SET, THIS_PROMPT, OTHER_PROMPTS = "set", "this prompt", "other prompts"


def calibration_rows(state: DemoState, kind: str, length: int, n: int) -> list[tuple]:
    """``n`` prompts of ``kind`` other than the run's, ``length`` tokens each: the shipped
    prompts of that kind dealt into ``n`` hands, each hand's texts joined until it is
    long enough, rendered in the chat template and cut (random token ids, seeded apart
    from the run's, for a model without a tokenizer)."""
    tok = state.target.tokenizer
    if tok is None:
        rng = np.random.default_rng(1000 + len(kind))
        return [tuple(int(x) for x in rng.integers(3, state.target.cfg.vocab_size, length))
                for _ in range(n)]
    from specsim.train.samples import load_prompts

    texts = [p["text"] for p in load_prompts() if p["kind"] == kind]
    out = []
    for hand in range(n):
        joined, ids = "", []
        for text in texts[hand::n]:
            joined = f"{joined}\n\n{text}" if joined else text
            rendered = (tok.apply_chat_template([{"role": "user", "content": joined}])
                        if hasattr(tok, "apply_chat_template") else joined)
            ids = tok.encode(rendered)
            if len(ids) >= length:
                break
        if len(ids) >= length:
            out.append(tuple(ids[:length]))
    return out


def calibrate(state: DemoState, group) -> pd.DataFrame:
    """Per-position α of every real drafter of ``group`` (an `inrun.Group`) on each kind
    of work, from untimed runs on the group's own prompt (``THIS_PROMPT``) and on
    `calibration_rows` (``OTHER_PROMPTS``); added to the rows already in the state's
    ``acceptance_prior`` table."""
    s = state.settings
    todo: dict[tuple, tuple] = {}
    for run in group.runs:
        if run.acceptance is None:
            key = (run.name, run.kind)
            k = max(run.k, todo[key][1]) if key in todo else run.k
            todo[key] = (run, k)
    rows = []
    for (name, kind), (run, k) in todo.items():
        others = calibration_rows(state, kind, len(run.rows[0]), s.calibration_prompts)
        for source, prompts in ((THIS_PROMPT, [list(run.rows)]),
                                (OTHER_PROMPTS, [[list(p)] * group.batch for p in others])):
            rates, counts = _acceptance(state, run.drafter, group, prompts, k)
            rows += [{schema.DRAFTER: name, schema.KIND: kind,
                      schema.TEMPERATURE: group.temperature, schema.ALPHA_SOURCE: source,
                      "position": j + 1, schema.ALPHA: rates[j], "count": int(counts[j]),
                      "prompts": len(prompts)} for j in range(k)]
    state.log(f"    acceptance before the run: per-position α of {len(todo)} (drafter, "
              f"kind) pairs on their own prompt and on {s.calibration_prompts} other "
              f"prompt(s) each, untimed")
    old = state.tables.get(schema.ACCEPTANCE_PRIOR)
    new = pd.DataFrame(rows)
    return new if old is None or old.empty else pd.concat([old, new], ignore_index=True)


def _acceptance(state: DemoState, drafter, group, prompts, k: int):
    """(α_1..α_K pooled by sample count over untimed runs of ``drafter`` on each batch
    of ``prompts``, NaN where no draft reached a position; the counts)."""
    from specsim import decode

    accepted, counts = np.zeros(k), np.zeros(k)
    for rows in prompts:
        res = decode.generate_speculative(
            state.target, drafter, [list(r) for r in rows], group.max_new_tokens, k=k,
            temperature=group.temperature, seed=state.settings.seed, eos_token_id=None,
            cache_len=group.cache_len)
        c = np.asarray(res.stats.per_position_counts, float)[:k]
        r = np.nan_to_num(np.asarray(res.stats.per_position_per_slot, float)[:k])
        accepted[:len(c)] += r * c
        counts[:len(c)] += c
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, accepted / np.maximum(counts, 1), math.nan), counts


def prior_rates(row, calibration: pd.DataFrame | None,
                source: str = THIS_PROMPT) -> tuple[np.ndarray, str]:
    """(α_1..α_K known before ``row``'s run, where they came from): the set α of an
    instrument, else ``source``'s rows of ``calibration``; NaNs when unknown."""
    k = int(row[schema.K])
    a = row.get(schema.ALPHA_SET, math.nan)
    if a is not None and np.isfinite(a):
        return np.full(k, float(a)), SET
    if source not in (THIS_PROMPT, OTHER_PROMPTS):
        raise ValueError(f"source must be {THIS_PROMPT!r} or {OTHER_PROMPTS!r}, got {source!r}")
    if calibration is None or calibration.empty:
        return np.full(k, math.nan), ""
    c = calibration[(calibration[schema.DRAFTER] == row[schema.DRAFTER])
                    & (calibration[schema.KIND] == row[schema.KIND])
                    & (calibration[schema.TEMPERATURE] == row[schema.TEMPERATURE])]
    # a table without sources holds other prompts' rates only (the older layout)
    if schema.ALPHA_SOURCE in c:
        c = c[c[schema.ALPHA_SOURCE] == source]
    elif source != OTHER_PROMPTS:
        c = c.iloc[:0]
    rates = c.sort_values("position")[schema.ALPHA].to_numpy(float)[:k]
    if len(rates) < k:
        return np.full(k, math.nan), ""
    # a position calibration never reached (every earlier draft was rejected) adds
    # nothing to E whatever its rate: 0
    return np.nan_to_num(rates, nan=0.0), source


def _draft_time(state: DemoState, row, tm, b: int, S: int, pass_fitted: bool) -> float:
    """The fitted time of one draft step of ``row``'s drafter (0: free): the target's
    fitted decode step at batch ``b`` scaled by the bytes the draft step reads over the
    bytes the target's reads (the instrument's L layers and small head, a draft model's
    config, the feature head's cell and head rows) where the roofline was fitted to the
    loop's passes, else the draft model's own forward fit. A step of the target's few
    rows reads its weights; the fitted split between a pass's fixed cost and its bytes is
    not identified by passes of one model, so the draft is priced by its bytes' share."""
    from specsim import batching
    from specsim.drafters.instrument import cost_config

    cfg = state.target.cfg
    setup = state.drafters.get(row[schema.DRAFTER])
    if row[schema.DRAFTER_KIND] == "instrument":     # the demo's instrument: the small head
        layers = int(row.get(schema.DRAFT_LAYERS, 0) or 0)
        if layers == 0:
            return 0.0
        return tm(cfg, 1, b, S) * _bytes(cost_config(cfg, layers, head=False), b, S) \
            / _bytes(cfg, b, S)
    if row[schema.DRAFTER_KIND] == "feature-head" and setup is not None:
        # one small cell and a restricted head
        from specsim.experiment.drafter_study import feature_head_step_bytes

        return tm(cfg, 1, b, S) * feature_head_step_bytes(setup.drafter) / _bytes(cfg, 1, S)
    if setup is None or setup.cost_model is None:
        return 0.0
    if pass_fitted:          # the machine's pass roofline, by the draft model's bytes
        return tm(cfg, 1, b, S) * _bytes(setup.cost_model.cfg, b, S) / _bytes(cfg, b, S)
    fit = state.fits.get(setup.cost_model.cfg.name)
    if fit is None:
        return math.nan
    return batching.fit_time_model(fit)(setup.cost_model.cfg, 1, b, S)


def _bytes(cfg, batch: int, context: int) -> float:
    """Bytes one decode step of ``cfg`` reads at ``batch`` rows and ``context`` (the
    roofline's count)."""
    from specsim import roofline
    return float(roofline.forward_cost(cfg, batch, 1, context).bytes)


def _pass_context(row) -> int:
    """The context a run's pass programs ran at (its ``pass_context``; half its cache in
    tables written before the column)."""
    ctx = row.get(schema.PASS_CONTEXT, math.nan)
    return int(ctx) if ctx is not None and np.isfinite(ctx) else int(row[schema.CACHE_LEN]) // 2


def target_time_model(state: DemoState):
    """(the target's time model, run row -> the context it is read at): the rooflines
    fitted to the pass-program sweep where the roofline part ran it (context: where the
    run's pass programs ran, the loop's mean), else the one fitted to bare forward passes
    (context: the cache); (None, None) without either."""
    from specsim import batching
    from specsim.experiment import pass_sweep

    name = state.target.cfg.name
    if pass_sweep.fit_key(name) in state.fits:
        return pass_sweep.time_model(state.fits, state.target.cfg), _pass_context
    if name in state.fits:
        return batching.fit_time_model(state.fits[name]), lambda r: int(r[schema.CACHE_LEN])
    return None, None


def prior_columns(state: DemoState, runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with the prediction before the run (PRED_PRIOR), its error against the
    measured speedup (ERR_PRIOR, 100 ln ratio) split into the α term (ERR_PRIOR_ALPHA),
    the fitted costs' term (ERR_PRIOR_FIT) and the in-run prediction's miss
    (ERR_TOTAL), and the α it used; the same prediction with α from other prompts
    (PRED_PRIOR_OTHER, ERR_PRIOR_OTHER); NaN without a fit."""
    from specsim.experiment import pass_sweep

    out = runs.copy()
    for col in (schema.PRED_PRIOR, schema.ERR_PRIOR, schema.ERR_PRIOR_CI_LO,
                schema.ERR_PRIOR_CI_HI, schema.ERR_PRIOR_ALPHA, schema.ERR_PRIOR_FIT,
                schema.PRED_PRIOR_OTHER, schema.ERR_PRIOR_OTHER):
        out[col] = math.nan
    out[schema.ALPHA_PRIOR] = ""
    out[schema.ALPHA_PRIOR_SOURCE] = ""
    tm, at = target_time_model(state)
    if tm is None or runs.empty:
        return out
    pass_fitted = pass_sweep.fit_key(state.target.cfg.name) in state.fits
    calibration = state.tables.get(schema.ACCEPTANCE_PRIOR)
    from specsim import analytic

    cfg = state.target.cfg
    for i, r in out.iterrows():
        if r[schema.DRAFTER] == schema.AUTOREGRESSIVE:
            continue
        e, rates, source = _tokens(r, calibration, THIS_PROMPT)
        e_other = _tokens(r, calibration, OTHER_PROMPTS)[0]
        if not (np.isfinite(e) or np.isfinite(e_other)):
            continue
        k, b, S = int(r[schema.K]), int(r[schema.BATCH]), at(r)
        costs = (_draft_time(state, r, tm, b, S, pass_fitted), tm(cfg, 1, b, S),
                 tm(cfg, k + 1, b, S))        # the same fitted costs for either α
        m = r[schema.MEASURED_SPEEDUP]
        other = float(analytic.speedup_from_costs(e_other, k, *costs))
        if other > 0 and m > 0:
            out.loc[i, [schema.PRED_PRIOR_OTHER, schema.ERR_PRIOR_OTHER]] = [
                other, 100 * math.log(other / m)]
        if not np.isfinite(e):
            continue
        pred = float(analytic.speedup_from_costs(e, k, *costs))
        err = 100 * math.log(pred / m) if pred > 0 and m > 0 else math.nan
        out.loc[i, [schema.PRED_PRIOR, schema.ERR_PRIOR]] = [pred, err]
        lo, hi = r.get(schema.MEASURED_CI_LO, math.nan), r.get(schema.MEASURED_CI_HI, math.nan)
        if pred > 0 and lo > 0 and hi > 0:
            out.loc[i, [schema.ERR_PRIOR_CI_LO, schema.ERR_PRIOR_CI_HI]] = [
                100 * math.log(pred / hi), 100 * math.log(pred / lo)]
        e_run, inrun = r.get(schema.E_EFFECTIVE, math.nan), r.get(schema.ERR_TOTAL, math.nan)
        if np.isfinite(err) and np.isfinite(e_run) and np.isfinite(inrun) and e_run > 0:
            # the miss in three: the α known before against the acceptance the run had,
            # the fitted pass times against the run's own, and the in-run prediction's miss
            alpha_term = 100 * math.log(e / e_run)
            out.loc[i, [schema.ERR_PRIOR_ALPHA, schema.ERR_PRIOR_FIT]] = [
                alpha_term, err - alpha_term - inrun]
        out.loc[i, schema.ALPHA_PRIOR] = ";".join(f"{a:.3f}" for a in rates)
        out.loc[i, schema.ALPHA_PRIOR_SOURCE] = source
    return out


def _tokens(r, calibration, source: str) -> tuple[float, np.ndarray, str]:
    """(E for run ``r``'s finite run from ``source``'s α, the α_j, where they came
    from); NaN E where that α is unknown."""
    from specsim import simulate
    from specsim.experiment.decomposition import finite_run_tokens

    rates, got = prior_rates(r, calibration, source)
    if not np.isfinite(rates).all():
        return math.nan, rates, got
    e = finite_run_tokens(simulate.tokens_pmf_positional(np.clip(rates, 0, 1)),
                          int(r[schema.NEW_TOKENS]) - 1, int(r[schema.BATCH]))
    return e, rates, got
