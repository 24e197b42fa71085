"""Published GPU/TPU speedups against the iteration cost model, leave-one-source-out.

    rows = load_published()                   # specsim/data/papers/published/results.csv
    pred = leave_one_source_out(rows)         # one prediction per row, fitted without its source
    summary(pred)                             # MAPE, mean signed error, worst, share within 10%

Each row is predicted from its hardware row, model presets, engine, drafter settings and
its own acceptance (α or τ); its reported speedup is never an input to its own
prediction. The fitted parameters are the engine overheads of
`specsim.iteration_cost.EngineOverheads`, one set per engine class: for each held-out
source they are fitted on the other sources' rows of that class (or left at
`PRIOR_OVERHEADS` where the other sources have none of that class). The fit is
least squares on log speedup with a log-normal prior (a factor of ``PRIOR_SPREAD``)
around the priors. Results: docs/studies/published-speedups.md.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specsim import analytic
from specsim.iteration_cost import (EAGLE3_DRAFT_VOCAB, FREE_DRAFTERS, PRIOR_OVERHEADS,
                                    DrafterSpec, EngineOverheads, IterationTerms, engine_class,
                                    iteration_terms, iteration_times, pass_cost, pass_time,
                                    speedup_from_terms)
from specsim.errors import InvalidArgument
from specsim.presets import PRESETS, eagle_head_shape, get_shape
from specsim.resources import data_path
from specsim.roofline import load_hardware
from specsim.validation import choice

__all__ = ["published_csv", "load_published", "DEFAULT_CONTEXT", "PRIOR_SPREAD",
           "RowModel", "row_model", "row_models", "fit_overheads", "Fold",
           "leave_one_source_out", "summary", "SETUP_COLUMNS", "replicate_pairs",
           "fitted_overheads", "typical_acceptance", "closed_form_speedup", "error_by_term",
           "heuristic_schedule", "heuristic_draft_length", "t5_draft_cost_ratios",
           "error_stats", "in_sample", "draft_call_slopes", "TASK_FAMILIES", "task_family"]

DEFAULT_CONTEXT = 512          # tokens cached when a row prints no context (chat prompts)
PRIOR_SPREAD = 10.0            # the prior allows each overhead a factor of 10 either way
RESIDUAL_SCALE = 0.1           # log-speedup residual scale the data term is weighted by
MIN_FIT_ROWS = 1               # a class with no training rows keeps its prior


def published_csv(root=None) -> Path:
    """The published rows: shipped with the package (``specsim/data/papers/published/``),
    or ``<root>/published/results.csv`` when ``root`` is given."""
    return (data_path("papers") if root is None else Path(root)) / "published" / "results.csv"


def load_published(root=None):
    """The published rows as a pandas DataFrame (numbers as floats, blanks as NaN)."""
    import pandas as pd

    df = pd.read_csv(published_csv(root))
    for col in ("k", "verify_tokens", "draft_steps", "draft_vocab_fraction", "temperature",
                "batch", "context", "acceptance", "speedup", "n_devices"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    return df


@dataclass(frozen=True)
class RowModel:
    """What the cost model needs of one published row: its overhead-free iteration terms,
    the tokens an iteration yields, its engine class, and whether it is a tree."""
    row_id: int
    source_id: str
    terms: IterationTerms
    tau: float
    engine_class: str
    tree: bool
    plain_s_observed: float = float("nan")


def _drafter_spec(row, target) -> DrafterSpec:
    kind = row["drafter_kind"]
    steps = 0 if math.isnan(row["draft_steps"]) else int(row["draft_steps"])
    n = int(row["verify_tokens"])
    if kind in FREE_DRAFTERS:
        return DrafterSpec(kind=kind, calls=0)
    width = max(1, math.ceil((n - 1) / max(steps, 1)))
    if kind == "draft_model":
        return DrafterSpec(kind=kind, calls=steps, width=width, draft_model=get_shape(row["drafter"]))
    if kind == "medusa":
        return DrafterSpec(kind=kind, calls=1, width=1)
    # the draft head's output vocabulary: EAGLE-3's reduced one, or the share a row
    # prints (FR-Spec); else the target's
    eagle3 = "EAGLE-3" in str(row["drafter"])
    share = float(row.get("draft_vocab_fraction", float("nan")))
    vocab = None
    if eagle3:
        vocab = EAGLE3_DRAFT_VOCAB
    elif not math.isnan(share):
        vocab = round(share * target.vocab_size)
    return DrafterSpec(kind=kind, calls=steps, width=width, fused_inputs=3 if eagle3 else 2,
                       draft_vocab=vocab)


def _tau(row) -> float:
    if row["acceptance_kind"] == "tau":
        return float(row["acceptance"])
    return float(analytic.expected_tokens(float(row["acceptance"]), int(row["k"])))


HEURISTIC_MAX_DRAFT = 64     # draft lengths the schedule's chain holds (longer: negligible)


def heuristic_schedule(alpha: float):
    """Stationary distribution of Hugging Face assisted generation's "heuristic" draft
    length (transformers' AssistedCandidateGenerator.update_candidate_strategy: K + 2
    after an iteration that accepts all K drafts, else max(1, K - 1)) when each draft
    token is accepted with probability ``alpha``: (lengths 1..HEURISTIC_MAX_DRAFT, their
    probabilities, the mean tokens an iteration yields)."""
    if not 0 < alpha < 1:
        raise InvalidArgument(f"alpha must be in (0, 1), got {alpha!r}")
    ks = np.arange(1, HEURISTIC_MAX_DRAFT + 1)
    up = alpha ** ks
    P = np.zeros((ks.size, ks.size))
    P[np.arange(ks.size), np.minimum(ks + 2, ks[-1]) - 1] += up
    P[np.arange(ks.size), np.maximum(ks - 1, 1) - 1] += 1 - up
    # pi (P - I) = 0 with sum(pi) = 1
    A = np.vstack([P.T - np.eye(ks.size), np.ones(ks.size)])
    b = np.zeros(ks.size + 1)
    b[-1] = 1.0
    pi = np.linalg.lstsq(A, b, rcond=None)[0]
    tau = float(pi @ ((1 - alpha ** (ks + 1)) / (1 - alpha)))
    return ks, pi, tau


def heuristic_draft_length(tau: float) -> float:
    """Mean draft length of the "heuristic" schedule (`heuristic_schedule`) at the
    acceptance whose mean tokens per iteration is ``tau``: the draft calls an iteration
    of Spec-Bench's SpS rows makes (its printed K = 5 is the schedule's start)."""
    from scipy.optimize import brentq

    lo, hi = heuristic_schedule(1e-6)[2], heuristic_schedule(0.99)[2]
    if not lo < tau < hi:
        raise InvalidArgument(f"tau must be in ({lo:.3f}, {hi:.2f}) for the heuristic "
                              f"schedule, got {tau!r}")
    alpha = brentq(lambda a: heuristic_schedule(a)[2] - tau, 1e-6, 0.99)
    ks, pi, _ = heuristic_schedule(alpha)
    return float(pi @ ks)


def _with_draft_schedule(row):
    """The row with ``draft_steps`` and ``verify_tokens`` at its schedule's mean draft
    length (rounded) where its ``draft_schedule`` is "heuristic"; else as printed."""
    if str(row.get("draft_schedule", "")) != "heuristic":
        return row
    k = max(1, round(heuristic_draft_length(_tau(row))))
    return {**dict(row), "draft_steps": k, "verify_tokens": k + 1}


def _plain_step_seconds(row) -> float:
    """Seconds of a plain step read from a row's baseline throughput: 1 / tokens per
    second at batch 1; NaN at larger batches, where a printed throughput is the run's
    output tokens over its wall time at that concurrency (prefill, a fixed request set
    draining to a smaller batch), not batch / step (the Qwen3 rows' latency x throughput
    is the same ~174k tokens at every batch), and where none is printed."""
    base = float(row.get("baseline_tps", float("nan")) or float("nan"))
    return 1.0 / base if base > 0 and int(row["batch"]) == 1 else float("nan")


def row_model(row) -> RowModel | None:
    """The `RowModel` of one published row (a mapping or DataFrame row); None when the
    row's target has no preset (it is listed, not predicted)."""
    if str(row["target"]).lower() not in PRESETS:
        return None
    row = _with_draft_schedule(row)
    target = get_shape(row["target"])
    context = DEFAULT_CONTEXT if math.isnan(row["context"]) else int(row["context"])
    terms = iteration_terms(target, load_hardware(row["hardware"]), _drafter_spec(row, target),
                            verify_tokens=int(row["verify_tokens"]), batch=int(row["batch"]),
                            context=context, tp=int(row["n_devices"]), dtype=row["dtype"])
    tree = math.isnan(row["k"])
    plain_s = _plain_step_seconds(row)
    return RowModel(row_id=int(row["row_id"]), source_id=row["source_id"], terms=terms,
                    tau=_tau(row), engine_class=engine_class(row["engine"]), tree=tree,
                    plain_s_observed=plain_s)


def row_models(df) -> dict[int, RowModel]:
    """`row_model` of every predictable row, by row_id."""
    out = {}
    for _, row in df.iterrows():
        m = row_model(row)
        if m is not None:
            out[m.row_id] = m
    return out


def _predict(models, overheads: EngineOverheads) -> np.ndarray:
    return np.array([speedup_from_terms(m.terms, overheads, m.tau) for m in models])


def _log_residuals(models, observed, overheads: EngineOverheads) -> np.ndarray:
    """log(predicted / observed) speedups of ``models`` and, for the rows that print their
    baseline throughput, log(predicted / printed) seconds of a plain step (they pin the
    overheads' absolute size); all over RESIDUAL_SCALE."""
    pred = _predict(models, overheads)
    plain = [math.log(iteration_times(m.terms, overheads)[0] / m.plain_s_observed)
             for m in models if m.plain_s_observed > 0]
    y = np.log(np.asarray(observed, float))
    return np.concatenate([np.log(pred) - y, np.array(plain)]) / RESIDUAL_SCALE


def fit_overheads(models: list[RowModel], observed, prior: EngineOverheads) -> EngineOverheads:
    """The overheads that best predict ``observed`` speedups of ``models`` (rows of one
    engine class): least squares on log speedup, and on the log seconds of a plain step
    where a row prints its baseline throughput (residual scale RESIDUAL_SCALE), plus a
    log-normal prior of spread PRIOR_SPREAD around ``prior``, which keeps a fit to a single
    row close to the prior where that row says little. Fewer than MIN_FIT_ROWS rows: the
    prior itself."""
    from scipy.optimize import least_squares

    if len(models) < MIN_FIT_ROWS:
        return prior
    theta0 = np.log(np.maximum(prior.as_array(), 1e-9))
    sigma_p = math.log(PRIOR_SPREAD)

    def resid(theta):
        o = prior.with_seconds(np.exp(theta))
        return np.concatenate([_log_residuals(models, observed, o),
                               (theta - theta0) / sigma_p])

    sol = least_squares(resid, theta0, method="trf", x_scale=1.0, max_nfev=400)
    return prior.with_seconds(np.exp(sol.x))


@dataclass(frozen=True)
class Fold:
    """One leave-one-source-out fold: the held-out source, the row_ids the overheads
    were fitted on, and the fitted overheads per engine class."""
    held_out: str
    train_row_ids: tuple[int, ...]
    overheads: dict


def _models_and_observed(df) -> tuple[dict[int, RowModel], dict[int, float]]:
    """The predictable rows' models and their reported speedups, by row_id."""
    models = row_models(df)
    observed = {int(r.row_id): float(r.speedup) for r in df.itertuples() if int(r.row_id) in models}
    return models, observed


def _fit_all(models: dict[int, RowModel], observed: dict[int, float], row_ids) -> dict:
    out = {}
    for cls, prior in PRIOR_OVERHEADS.items():
        ids = [i for i in row_ids if models[i].engine_class == cls]
        out[cls] = fit_overheads([models[i] for i in ids], [observed[i] for i in ids], prior)
    return out


def leave_one_source_out(df=None):
    """Predict every predictable row with overheads fitted on the other sources.

    Returns (predictions, folds): a DataFrame with row_id, source_id, engine_class, tree,
    tau, observed, predicted, prior_only (the prediction at PRIOR_OVERHEADS),
    closed_form (`closed_form_speedup`) and error (predicted / observed - 1); and the
    list of `Fold`s (tests check no fold trains on its own source)."""
    import pandas as pd

    df = load_published() if df is None else df
    models, observed = _models_and_observed(df)
    by_id = {int(r["row_id"]): r for _, r in df.iterrows()}
    rows, folds = [], []
    for source in sorted(df["source_id"].unique()):
        train = tuple(i for i in models if models[i].source_id != source)
        fitted = _fit_all(models, observed, train)
        folds.append(Fold(held_out=source, train_row_ids=train, overheads=fitted))
        for i, m in models.items():
            if m.source_id != source:
                continue
            pred = speedup_from_terms(m.terms, fitted[m.engine_class], m.tau)
            prior = speedup_from_terms(m.terms, PRIOR_OVERHEADS[m.engine_class], m.tau)
            rows.append(dict(row_id=i, source_id=source, engine_class=m.engine_class,
                             tree=m.tree, tau=m.tau, observed=observed[i], predicted=pred,
                             prior_only=prior, closed_form=closed_form_speedup(by_id[i]),
                             error=pred / observed[i] - 1))
    out = pd.DataFrame(rows).sort_values("row_id").reset_index(drop=True)
    return out, folds


def in_sample(df=None, overheads: dict | None = None):
    """Every predictable row predicted with the overheads fitted on every row, its own
    source's included: what these terms reach when nothing is held out, a bound that
    held-out fits cannot expect to beat. ``overheads``: that fit of ``df`` where the
    caller has it already (`fitted_overheads`). Columns as `leave_one_source_out`'s,
    without prior_only and closed_form."""
    import pandas as pd

    df = load_published() if df is None else df
    models, observed = _models_and_observed(df)
    fitted = overheads if overheads is not None else _fit_all(models, observed, tuple(models))
    rows = []
    for i, m in models.items():
        pred = speedup_from_terms(m.terms, fitted[m.engine_class], m.tau)
        rows.append(dict(row_id=i, source_id=m.source_id, engine_class=m.engine_class,
                         tree=m.tree, tau=m.tau, observed=observed[i], predicted=pred,
                         error=pred / observed[i] - 1))
    return pd.DataFrame(rows).sort_values("row_id").reset_index(drop=True)


def error_stats(err) -> dict:
    """rows, MAPE, mean signed error, worst (signed) and share within 10% of relative
    errors ``err`` (predicted / observed - 1)."""
    err = np.asarray(err, float)
    a = np.abs(err)
    return dict(rows=len(err), mape=float(a.mean()), mean_signed=float(err.mean()),
                worst=float(err[np.argmax(a)]), within_10=float((a <= 0.10 + 1e-9).mean()))


def summary(pred, column: str = "predicted"):
    """MAPE, mean signed error, worst (signed) and share within 10% of ``column`` against
    the observed speedups: per source, chain and tree rows apart, and overall."""
    import pandas as pd

    err = pred[column] / pred["observed"] - 1
    rows = []
    for source, g in pred.groupby("source_id"):
        rows.append(dict(group=source, **error_stats(err[g.index])))
    for name, mask in (("chain rows", ~pred["tree"]), ("tree rows", pred["tree"]),
                       ("all rows", pred["tree"] | ~pred["tree"])):
        if mask.any():
            rows.append(dict(group=name, **error_stats(err[mask])))
    return pd.DataFrame(rows)


def error_by_term(pred, df) -> "pd.DataFrame":
    """Errors of ``pred`` (`leave_one_source_out`) grouped by the terms a row exercises:
    its engine class (the overheads) and drafter kind (the draft's cost), with the
    sources in each group and ``share``, its part of the summed absolute error; largest
    MAPE first."""
    import pandas as pd

    m = pred.merge(df[["row_id", "drafter_kind"]], on="row_id")
    total = float(m["error"].abs().sum())
    rows = []
    for (cls, kind), g in m.groupby(["engine_class", "drafter_kind"]):
        rows.append(dict(engine_class=cls, drafter_kind=kind,
                         sources=", ".join(sorted(g["source_id"].unique())),
                         share=float(g["error"].abs().sum()) / total, **error_stats(g["error"])))
    return pd.DataFrame(rows).sort_values("mape", ascending=False).reset_index(drop=True)


@functools.lru_cache(maxsize=4)
def fitted_overheads(root=None) -> dict:
    """Overheads per engine class fitted on every published row (for `specsim.what_if.predict`)."""
    df = load_published(root)
    models, observed = _models_and_observed(df)
    return _fit_all(models, observed, tuple(models))


# What a published row's ``task`` is about, for a what-if's typical acceptance: each
# family and the prefixes of the task names it holds (lower case). Rows whose task fits
# none (a benchmark not printed or not described) are "unspecified".
TASK_FAMILIES = {
    "chat": ("mt-bench",),                       # MT-bench: multi-turn chat
    "mixed": ("spec-bench",),                    # Spec-Bench's six tasks, their mean
    "translation": ("ende",),                    # WMT English-German
    "summarization": ("cnndm",),                 # CNN/DailyMail
    "long-context": ("long-spec-bench",),        # prompts over 4k tokens
}


def task_family(task: str) -> str:
    """The `TASK_FAMILIES` key a published row's ``task`` belongs to, else "unspecified"."""
    name = str(task).strip().lower()
    for family, prefixes in TASK_FAMILIES.items():
        if any(name.startswith(p) for p in prefixes):
            return family
    return "unspecified"


def typical_acceptance(drafter_kind: str, root=None, *, temperature: float | None = None,
                       tree: bool | None = None, task: str | None = None) -> dict:
    """A typical acceptance for a what-if when the user has none: the published rows of
    ``drafter_kind`` (at ``temperature`` when given and present), of the shape asked for.

    ``tree`` True: the median τ of its tree rows and their 10th and 90th percentiles.
    ``tree`` False: its chain rows, each read as the α that gives its τ at its K (α rows
    as printed), with the median α and its percentiles beside the τ ones; a tree's τ
    says little about a chain's α (the same head gains more tokens from a tree). When
    the kind has no rows of that shape, or ``tree`` is None, every row of the kind.
    ``task`` (a `TASK_FAMILIES` key) keeps the rows of that kind of work only.
    ``shape``: "tree", "chain" or "all" (which rows were read); ``alpha`` is None unless
    chain rows were read; ``tree_tokens`` and ``draft_steps``, the median tree's nodes
    and sequential draft calls, None unless tree rows were read."""
    if task is not None:
        choice("task", task, tuple(TASK_FAMILIES))
    df = load_published(root)
    sel = df[df["drafter_kind"] == drafter_kind]
    if task is not None and not sel.empty:
        families = sel["task"].map(task_family)
        if not (families == task).any():
            have = sorted(set(families) - {"unspecified"})
            raise InvalidArgument(f"no published {drafter_kind} rows on task {task!r}; "
                                  f"tasks with {drafter_kind} rows: {have}")
        sel = sel[families == task]
    if temperature is not None and (sel["temperature"] == temperature).any():
        sel = sel[sel["temperature"] == temperature]
    if sel.empty:
        kinds = sorted(df["drafter_kind"].unique())
        raise InvalidArgument(f"no published rows for drafter kind {drafter_kind!r}; "
                              f"kinds with rows: {kinds}")
    shape = "all"
    if tree is not None:
        part = sel[sel["k"].isna() == tree]
        if not part.empty:
            sel, shape = part, ("tree" if tree else "chain")
    taus = np.array([_tau(r) for _, r in sel.iterrows()])
    out = dict(tau=float(np.median(taus)), tau_low=float(np.quantile(taus, 0.1)),
               tau_high=float(np.quantile(taus, 0.9)), rows=len(taus), shape=shape,
               alpha=None, alpha_low=None, alpha_high=None, tree_tokens=None,
               draft_steps=None)
    if shape == "tree":
        steps = sel["draft_steps"].dropna()
        steps = steps[steps >= 1]                  # free drafts make no draft calls
        out.update(tree_tokens=int(round(float(sel["verify_tokens"].median()))),
                   draft_steps=int(round(float(steps.median()))) if len(steps) else None)
    if shape == "chain":
        alphas = np.array([float(r["acceptance"]) if r["acceptance_kind"] == "alpha" else
                           float(analytic.alpha_from_expected_tokens(
                               min(t, r["k"] + 0.999), int(r["k"])))
                           for t, (_, r) in zip(taus, sel.iterrows())])
        out.update(alpha=float(np.median(alphas)), alpha_low=float(np.quantile(alphas, 0.1)),
                   alpha_high=float(np.quantile(alphas, 0.9)))
    return out


def closed_form_speedup(row) -> float:
    """Today's closed form for a published row: τ / (calls * c + 1) with c the draft's
    parameter ratio to the target (0 for free drafts; the head's parameters for EAGLE,
    Medusa, Hydra) and a verify pass costing one decode step (Leviathan et al. 2023,
    Thm 3.8 in τ form). The baseline the cost model is compared with."""
    if str(row["target"]).lower() not in PRESETS:
        return float("nan")
    target = get_shape(row["target"])
    kind = row["drafter_kind"]
    steps = 0 if math.isnan(row["draft_steps"]) else int(row["draft_steps"])
    if kind in FREE_DRAFTERS:
        c, calls = 0.0, 0
    elif kind == "draft_model":
        c, calls = get_shape(row["drafter"]).active_params() / target.active_params(), steps
    elif kind == "eagle":
        head = eagle_head_shape(target)
        c = (head.decoder_layer_params() + 2 * target.d_model ** 2) / target.active_params()
        calls = steps
    else:
        per_head = target.d_model ** 2 + target.d_model * target.vocab_size
        heads = 5 if kind == "medusa" else 1
        c, calls = heads * per_head / target.active_params(), (1 if kind == "medusa" else steps)
    return float(_tau(row) / (calls * c + 1))


T5_PRESETS = {"T5-XXL": "t5-v1.1-xxl", "T5-small": "t5-v1.1-small", "T5-base": "t5-v1.1-base",
              "T5-large": "t5-v1.1-large"}


def t5_draft_cost_ratios(root=None, overheads: EngineOverheads | None = None):
    """Leviathan et al.'s measured draft/target cost ratio c (their Table 4: T5 drafts of
    T5-XXL, one TPU-v4, batch 1) beside the cost model's at ``overheads`` (default: the
    XLA class's priors): a draft pass over a target pass, each pass's layer floor added
    to its roofline (the class's form, ``c_floor_adds``) or the larger of the two
    (``c_floor_overlaps``). A check of the pass form that uses no speedup; ``root`` as
    `specsim.papers.load_reported`'s."""
    import dataclasses

    import pandas as pd

    from specsim.papers import leviathan_table4

    hw = load_hardware("tpu-v4")
    adds = dataclasses.replace(overheads or PRIOR_OVERHEADS["xla"], floor_adds=True)
    overlaps = dataclasses.replace(adds, floor_adds=False)

    def seconds(name, o):
        return pass_time(pass_cost(get_shape(T5_PRESETS[name]), hw, n_tokens=1,
                                   context=DEFAULT_CONTEXT), o)

    table = leviathan_table4(root)[["draft", "c"]].drop_duplicates("draft")
    rows = [dict(draft=r.draft, c_paper=float(r.c),
                 c_floor_adds=seconds(r.draft, adds) / seconds("T5-XXL", adds),
                 c_floor_overlaps=seconds(r.draft, overlaps) / seconds("T5-XXL", overlaps))
            for r in table.itertuples()]
    return pd.DataFrame(rows)


def draft_call_slopes(df=None, source_id: str = "vllm-eagle-k-sweep"):
    """What one more draft call costs, read from a chain K sweep and from the model.

    For each drafter of ``source_id`` with batch-1 chain rows at three or more draft
    lengths and a printed baseline throughput: ``measured_s``, the least-squares slope of
    an iteration's seconds (τ over speedup, times the printed plain step) against its
    draft calls; ``model_bytes`` and ``model_s``, the bytes one draft call reads and its
    roofline seconds at the datasheet ceilings (no overheads). One row per drafter."""
    import pandas as pd

    df = load_published() if df is None else df
    models = row_models(df)
    g = df[(df["source_id"] == source_id) & (df["batch"] == 1) & df["k"].notna()
           & df["baseline_tps"].notna() & df["row_id"].isin(list(models))]
    rows = []
    for drafter, d in g.groupby("drafter"):
        if d["draft_steps"].nunique() < 3:
            continue
        calls = d["draft_steps"].to_numpy(float)
        iteration_s = np.array([_tau(r) / (r["speedup"] * r["baseline_tps"])
                                for _, r in d.iterrows()])
        slope = float(np.polyfit(calls, iteration_s, 1)[0])
        draft = models[int(d["row_id"].iloc[0])].terms.draft
        rows.append(dict(drafter=drafter, rows=len(d), measured_s=slope,
                         model_bytes=float(draft.bytes), model_s=float(draft.roofline_s)))
    return pd.DataFrame(rows, columns=["drafter", "rows", "measured_s", "model_bytes", "model_s"])


# The columns that make two rows the same measured setup (the rest: what was read, and
# where).
SETUP_COLUMNS = ("source_id", "hardware", "n_devices", "engine", "target", "drafter_kind",
                 "drafter", "k", "verify_tokens", "draft_steps", "temperature", "batch",
                 "context", "dtype")


def replicate_pairs(df=None):
    """Pairs of rows that measure one setup (`SETUP_COLUMNS`) in two publications (two
    leaderboard versions, a re-run): row_a, row_b and ``difference``, the relative
    difference of their speedups per token an iteration yields (speedup / τ), which a
    cost model cannot explain: a floor under its error on such rows."""
    import pandas as pd

    df = load_published() if df is None else df
    setup = ["|".join(map(str, r)) for r in df[list(SETUP_COLUMNS)].itertuples(index=False)]
    eff = {int(r["row_id"]): float(r["speedup"]) / _tau(r) for _, r in df.iterrows()}
    rows = []
    for _, g in df.groupby(setup):
        g = g.sort_values("row_id")
        for i, a in enumerate(g.itertuples()):
            for b in list(g.itertuples())[i + 1:]:
                if a.citation != b.citation:
                    rows.append(dict(row_a=int(a.row_id), row_b=int(b.row_id),
                                     difference=eff[int(b.row_id)] / eff[int(a.row_id)] - 1))
    return pd.DataFrame(rows, columns=["row_a", "row_b", "difference"])
