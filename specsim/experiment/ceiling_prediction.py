"""The iteration cost model pointed at this CPU's measured ceilings: the demo's
speculative runs predicted before they run, as `specsim.iteration_cost` predicts a GPU's.

    hw = hardware_from_ceilings(pd.read_csv(folder / "ceilings.csv"))
    engine = fit_cpu_loop(hw, pd.read_csv(folder / "pass_sweep.csv"))
    pred = predict_runs(folder)[0]     # one row per speculative run of runs.csv
    score(pred)                        # MAPE, mean signed, worst per drafter kind and batch
    repeat_scores(read_repeats(data / "demo-cpu-repeats"))   # one row per repeated demo

The hardware row is the measured matmul FLOP/s and copy bytes/s (`hardware_from_ceilings`),
not a datasheet. specsim's compiled CPU loop is an engine class of its own
(`CpuLoopEngine`): its passes cost the p-norm of compute and memory time at fractions
of the ceilings (p = 1 a sum: a core loads, then computes; larger p a partial overlap:
the CPU kernel computes on a few rows while it streams the weights), the two fractions
and p fitted to the pass-program sweep (``pass_sweep.csv``, timed before any run, the
sweep the engine's own prediction before the run fits), one set up to the CPU kernel's
rows a pass and one above, where XLA's dots run. No fixed cost a pass: at the sweep's
shapes it is collinear with the weights' read time, and a fitted one left the drafts'
passes, which do not pay it, nearly free. No launch floor (a compiled loop launches no
kernels); the per-iteration and per-draft-call overheads are the XLA class's priors
(`PRIOR_OVERHEADS`). Draft calls: the instrument's L target layers and 16-row head, the
kept layers of a layer-skip draft, the feature head's cell and head rows
(`dense_pass_cost`); n-gram lookup is free. Acceptance: the run's set α, or the α of
an untimed run on its prompt (of other prompts where a folder has no such run;
`specsim.experiment.prior.prior_rates`), for a finite run whose slowest row ends it; a
run's measured speedup and acceptance are never inputs. Results:
docs/studies/published-speedups.md (this CPU from its measured ceilings).
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from specsim import schema
from specsim.errors import InvalidArgument
from specsim.iteration_cost import (PRIOR_OVERHEADS, CeilingUse, EngineOverheads,
                                    IterationTerms, dense_pass_cost, pass_cost,
                                    speedup_from_terms)
from specsim.presets import ModelShape, get_shape
from specsim.roofline import Hardware

__all__ = ["hardware_from_ceilings", "CpuLoopEngine", "fit_cpu_loop", "clock_factor",
           "draft_call", "predict_runs", "predict_tables", "score", "read_repeats",
           "write_repeats", "repeat_scores", "ceiling_section", "DRAFT_PRIOR_CLASS",
           "COSTED_KINDS", "REPEAT_TABLES"]

# The engine class whose per-iteration and per-draft-call priors the CPU loop takes: an
# XLA program (acceptance and bookkeeping compiled into the loop, no host round trip).
DRAFT_PRIOR_CLASS = "xla"
_PASSES = " passes"           # pass_sweep.csv names its model "<target> passes"
COSTED_KINDS = ("instrument", "layer-skip", "feature-head", "ngram")
# A folder of repeated demos holds each of these tables of every demo stacked, with a
# "demo" column, and demos.csv (demo, git_commit, cpu, matmul): `write_repeats`.
REPEAT_TABLES = ("runs", "ceilings", "pass_sweep", "acceptance_prior")
_DEMO = "demo"


def hardware_from_ceilings(ceilings: pd.DataFrame, name: str = "this-cpu",
                           source: str = "") -> Hardware:
    """The cost model's hardware row from a measured ceilings table
    (`specsim.bench.measure_ceilings`: columns dtype, matmul_flops_per_s,
    copy_bytes_per_s, one row per device or measurement): the median matmul FLOP/s per
    dtype as its peak and the median copy bytes/s as its bandwidth."""
    need = {"dtype", "matmul_flops_per_s", "copy_bytes_per_s"}
    if not isinstance(ceilings, pd.DataFrame) or not need <= set(ceilings.columns) \
            or ceilings.empty:
        raise InvalidArgument(f"ceilings must be a non-empty DataFrame with columns "
                              f"{sorted(need)}")
    peaks = ceilings.groupby("dtype")["matmul_flops_per_s"].median()
    bw = float(ceilings["copy_bytes_per_s"].median())
    if not (np.isfinite(peaks.to_numpy(float)).all() and (peaks > 0).all()
            and math.isfinite(bw) and bw > 0):
        raise InvalidArgument("ceilings must hold finite positive matmul_flops_per_s and "
                              "copy_bytes_per_s")
    kind = str(ceilings["platform"].iloc[0]) if "platform" in ceilings else "cpu"
    return Hardware(name=name, peak_flops=tuple((str(d), float(v)) for d, v in peaks.items()),
                    bandwidth=bw, kind=kind, source=source,
                    notes="measured: median matmul FLOP/s and copy bytes/s")


@dataclass(frozen=True)
class CpuLoopEngine:
    """specsim's compiled CPU loop as an engine class: how its passes use the ceilings
    (``use``: efficiencies and the blend exponent p, no overlap), its overheads (no step
    and no floor; the XLA class's iteration and draft-call priors), the sweep it was
    fitted on (``sweep_points``) and the fit's MAPE on them (``sweep_mape``). Passes of
    more than ``kernel_rows`` rows run XLA's dots instead of specsim's CPU kernel and are
    priced by ``wide_use`` (None: one fit for every width)."""
    use: CeilingUse
    overheads: EngineOverheads
    sweep_points: int
    sweep_mape: float
    kernel_rows: int | None = None
    wide_use: CeilingUse | None = None

    def regime(self, rows: int) -> CeilingUse:
        """How a pass of ``rows`` rows (batch × tokens) uses the ceilings."""
        if self.kernel_rows is not None and self.wide_use is not None and rows > self.kernel_rows:
            return self.wide_use
        return self.use


def clock_factor(clock: str, cpu_over_wall: float) -> float:
    """Seconds of ``clock`` per wall second: 1 for "wall", ``cpu_over_wall`` (process time
    of all threads over wall time) for "cpu"."""
    if clock == "wall":
        return 1.0
    if clock != "cpu":
        raise InvalidArgument(f"clock must be 'wall' or 'cpu', got {clock!r}")
    if not (math.isfinite(cpu_over_wall) and cpu_over_wall > 0):
        raise InvalidArgument(f"cpu_over_wall must be a finite number > 0, got {cpu_over_wall!r}")
    return float(cpu_over_wall)


def _sweep_target(sweep: pd.DataFrame) -> ModelShape:
    names = {str(m).removesuffix(_PASSES) for m in sweep["model"]}
    if len(names) != 1:
        raise InvalidArgument(f"the pass sweep must time one target, got {sorted(names)}")
    return get_shape(names.pop())


def fit_cpu_loop(hw: Hardware, sweep: pd.DataFrame, *, cpu_over_wall: float = 1.0,
                 kernel_rows: int | None = None) -> CpuLoopEngine:
    """The CPU loop's `CpuLoopEngine` fitted to a pass-program sweep (columns model,
    n_tokens, batch, context, time_s, clock): its passes cost ``(C^p + M^p)^(1/p)`` with
    ``C = FLOPs / (peak * flops_efficiency)`` and ``M = bytes / (bandwidth *
    bandwidth_efficiency)`` on ``hw``, the three fitted by least squares on log seconds (times on the "cpu" clock divided by
    ``cpu_over_wall`` to wall seconds, the ceilings' clock). With ``kernel_rows``, the
    passes above that many rows (batch × tokens) get a fit of their own where each side
    has enough points (`pass_sweep.wide_passes`)."""
    from specsim.experiment.pass_sweep import wide_passes

    need = {"model", "n_tokens", "batch", "context", "time_s", "clock"}
    if not need <= set(sweep.columns) or len(sweep) < 3:
        raise InvalidArgument(f"sweep must have columns {sorted(need)} and at least 3 rows")
    target = _sweep_target(sweep)
    bare = CeilingUse(flops_efficiency=1.0, bandwidth_efficiency=1.0, overlap=False)
    costs = np.array([[c.compute_s, c.memory_s] for c in (
        pass_cost(target, hw, n_tokens=int(r.n_tokens), batch=int(r.batch),
                  context=int(r.context), use=bare) for r in sweep.itertuples())])
    wall = np.array([r.time_s / clock_factor(r.clock, cpu_over_wall)
                     for r in sweep.itertuples()])
    if not (np.isfinite(wall).all() and (wall > 0).all()):
        raise InvalidArgument("sweep time_s must be finite and > 0")
    wide = wide_passes(sweep["n_tokens"], sweep["batch"], kernel_rows)
    if wide is None:
        wide = np.zeros(len(wall), bool)
    fits = {side: _fit_passes(costs[wide == side], wall[wide == side])
            for side in (False, True) if (wide == side).any()}
    prior = PRIOR_OVERHEADS[DRAFT_PRIOR_CLASS]
    wide_fit = fits.get(True)
    errors = np.concatenate([e for _, e in fits.values()])
    return CpuLoopEngine(
        use=fits[False][0],
        overheads=EngineOverheads(layer_floor=0.0, step=0.0, iteration=prior.iteration,
                                  draft_call=prior.draft_call),
        sweep_points=len(wall), sweep_mape=float(np.mean(np.abs(errors))),
        kernel_rows=kernel_rows if wide_fit is not None else None,
        wide_use=None if wide_fit is None else wide_fit[0])


MAX_BLEND = 50.0
"""The largest blend exponent a fit may reach: at p = 50 the p-norm of two times is
within 1.4% of the larger (2^(1/50)), so larger p adds nothing the points could tell."""


def _fit_passes(costs: np.ndarray, wall: np.ndarray) -> tuple[CeilingUse, np.ndarray]:
    """(the `CeilingUse` whose ``(C/ef)^p + (M/eb)^p)^(1/p)`` fits ``wall`` seconds on
    log time, the relative errors on them); ``costs`` holds each pass's compute and
    memory seconds at the bare ceilings. A few starts of p, so a start on the wrong side
    of the ridge does not trap the fit."""
    from scipy.optimize import least_squares

    from specsim.fit import roofline_time

    def use(theta) -> CeilingUse:
        return CeilingUse(flops_efficiency=float(theta[0]), bandwidth_efficiency=float(theta[1]),
                          overlap=False, blend=float(1.0 + math.exp(theta[2])))

    def model(theta):          # the bare ceilings' seconds over the efficiencies, no t0
        return roofline_time(costs[:, 0], costs[:, 1], 0.0, theta[0], theta[1],
                             1.0 + math.exp(theta[2]))

    upper = math.log(MAX_BLEND - 1.0)
    sols = [least_squares(lambda th: np.log(model(th)) - np.log(wall), [0.5, 0.5, x0],
                          bounds=([1e-3, 1e-3, -20.0], [3.0, 3.0, upper]))
            for x0 in (-2.0, 0.0, 1.0)]
    best = min(sols, key=lambda sol: sol.cost)
    return use(best.x), model(best.x) / wall - 1


def _feature_head_params(target: ModelShape, head_vocab: int) -> float:
    """Weights one feature-head draft step reads: the shipped (or trained) cell's
    arrays and ``head_vocab`` embedding rows of the target."""
    from specsim.experiment.drafter_study import find_feature_head

    path = find_feature_head(target.name)
    if path is None:
        raise InvalidArgument(f"no feature head for {target.name!r} to cost")
    from specsim.drafters.feature_head import CELL_KEYS
    with np.load(path) as z:
        cell = sum(int(np.prod(z[k].shape)) for k in CELL_KEYS)
    return float(cell + head_vocab * target.d_model)


def draft_call(row, target: ModelShape, hw: Hardware, engine: CpuLoopEngine, *,
               context: int):
    """One draft call of a runs-table row's drafter (`PassCost`), or None (free)."""
    from specsim.drafters.instrument import SMALL_HEAD

    kind, name, b = row[schema.DRAFTER_KIND], str(row[schema.DRAFTER]), int(row[schema.BATCH])
    kw = dict(n_tokens=1, batch=b, context=context, use=engine.regime(b))
    if kind == "ngram":
        return None
    if kind == "instrument":
        layers = float(row.get(schema.DRAFT_LAYERS, 0.0))
        if not layers > 0:                  # 0 or unrecorded: the instrument drafts free
            return None
        return pass_cost(dataclasses.replace(target, n_layers=int(layers), vocab_size=SMALL_HEAD,
                                             tie_embeddings=False), hw, **kw)
    tail = name.partition(":")[2]
    if kind == "layer-skip":                # "layer-skip:<kept>/<of>"
        kept = tail.partition("/")[0]
        if not kept.isdigit() or not 0 < int(kept) <= target.n_layers:
            raise InvalidArgument(f"layer-skip drafter name must be 'layer-skip:<kept>/<of>', "
                                  f"got {name!r}")
        return pass_cost(dataclasses.replace(target, n_layers=int(kept)), hw, **kw)
    if kind == "feature-head":              # "feature-head:<head vocabulary>"
        if not tail.isdigit():
            raise InvalidArgument(f"feature-head drafter name must be 'feature-head:<rows>', "
                                  f"got {name!r}")
        return dense_pass_cost(_feature_head_params(target, int(tail)), hw, batch=b,
                               n_tokens=1, logits=int(tail), dtype=target.dtype,
                               use=engine.regime(b))
    raise InvalidArgument(f"drafter kind must be one of {', '.join(COSTED_KINDS)}; "
                          f"got {kind!r}")


def _read_folder(folder: Path):
    folder = Path(folder)
    for f in ("runs.csv", "ceilings.csv", "pass_sweep.csv"):
        if not (folder / f).is_file():
            raise InvalidArgument(f"folder {str(folder)!r} has no {f} (a demo's output)")
    runs = pd.read_csv(folder / "runs.csv")
    acc = folder / "acceptance_prior.csv"
    calibration = pd.read_csv(acc) if acc.is_file() else None
    return runs, pd.read_csv(folder / "ceilings.csv"), pd.read_csv(folder / "pass_sweep.csv"), \
        calibration


def _kernel_rows(folder: Path) -> int | None:
    """The rows up to which the folder's demo ran specsim's CPU matmul kernel (its
    environment.json's ``matmul``), None where it ran XLA's dots throughout."""
    env = Path(folder) / "environment.json"
    matmul = json.loads(env.read_text()).get("matmul") if env.is_file() else None
    return _kernel_rows_of(matmul)


def _kernel_rows_of(matmul) -> int | None:
    if matmul != "kernel":
        return None
    from specsim.models.kernels import MAX_ROWS
    return MAX_ROWS


def _cpu_over_wall(runs: pd.DataFrame) -> float:
    """The runs' median process time over wall time (the machine's busy threads)."""
    v = pd.to_numeric(runs.get("cpu_over_wall", pd.Series(dtype=float)), errors="coerce")
    v = v[np.isfinite(v) & (v > 0)]
    return float(v.median()) if len(v) else 1.0


def predict_runs(folder) -> tuple[pd.DataFrame, CpuLoopEngine, Hardware]:
    """Every speculative run of a demo folder (runs.csv, ceilings.csv, pass_sweep.csv,
    acceptance_prior.csv, environment.json) predicted from the measured ceilings
    (`predict_tables`)."""
    runs, ceilings, sweep, calibration = _read_folder(folder)
    return predict_tables(runs, ceilings, sweep, calibration,
                          kernel_rows=_kernel_rows(folder),
                          source=str(Path(folder) / "ceilings.csv"))


def predict_tables(runs: pd.DataFrame, ceilings: pd.DataFrame, sweep: pd.DataFrame,
                   calibration: pd.DataFrame | None = None, *, kernel_rows: int | None = None,
                   source: str = "") -> tuple[pd.DataFrame, CpuLoopEngine, Hardware]:
    """Every speculative run of one demo's tables (runs, ceilings, pass sweep, acceptance
    prior; ``kernel_rows`` where its passes ran specsim's CPU kernel) predicted from the
    measured ceilings (see the module docstring); runs of a drafter kind outside
    COSTED_KINDS, or without a measured speedup or an acceptance known before, are left
    out. Returns (one row per run: drafter, drafter_kind, kind, k, batch, tau, measured,
    predicted, error = predicted / measured - 1, and predicted_run_tau, the same costs
    with the run's own tokens per iteration: a diagnostic that separates the cost terms'
    miss from acceptance's, never the prediction, and engine_prior, the demo's own
    prediction before the run where the table has it; the engine; the hardware row)."""
    from specsim import simulate
    from specsim.experiment.decomposition import finite_run_tokens
    from specsim.experiment.prior import OTHER_PROMPTS, prior_rates

    hw = hardware_from_ceilings(ceilings, source=source)
    engine = fit_cpu_loop(hw, sweep, cpu_over_wall=_cpu_over_wall(runs),
                          kernel_rows=kernel_rows)
    target = _sweep_target(sweep)
    rows = []
    measured_ok = pd.to_numeric(runs[schema.MEASURED_SPEEDUP], errors="coerce") > 0
    for _, r in runs[runs[schema.DRAFTER_KIND].isin(COSTED_KINDS) & measured_ok].iterrows():
        k, b = int(r[schema.K]), int(r[schema.BATCH])
        rates, source = prior_rates(r, calibration)
        if not np.isfinite(rates).all():       # a folder without the run's own prompt
            rates, source = prior_rates(r, calibration, OTHER_PROMPTS)
        if not np.isfinite(rates).all():
            continue
        tau = finite_run_tokens(simulate.tokens_pmf_positional(np.clip(rates, 0, 1)),
                                int(r[schema.NEW_TOKENS]) - 1, b)
        S = int(r[schema.CACHE_LEN]) // 2           # where the pass programs run
        kw = dict(batch=b, context=S)
        draft = draft_call(r, target, hw, engine, context=S)
        terms = IterationTerms(
            plain=pass_cost(target, hw, n_tokens=1, use=engine.regime(b), **kw),
            verify=pass_cost(target, hw, n_tokens=k + 1, use=engine.regime(b * (k + 1)), **kw),
            draft=draft, draft_calls=0 if draft is None else k)
        pred = speedup_from_terms(terms, engine.overheads, tau)
        measured = float(r[schema.MEASURED_SPEEDUP])
        run_tau = float(r.get("E_effective", math.nan))
        rows.append(dict(drafter=r[schema.DRAFTER], drafter_kind=r[schema.DRAFTER_KIND],
                         kind=r[schema.KIND], k=k, batch=b, alpha_source=source, tau=tau,
                         measured=measured, predicted=pred, error=pred / measured - 1,
                         predicted_run_tau=(speedup_from_terms(terms, engine.overheads, run_tau)
                                            if run_tau > 0 else math.nan),
                         engine_prior=float(r.get(schema.PRED_PRIOR, math.nan))))
    return pd.DataFrame(rows), engine, hw


def write_repeats(folders: dict, out) -> Path:
    """Stack the tables the ceiling prediction reads (`REPEAT_TABLES`) of demo output
    ``folders`` (label -> folder) into ``out`` with a "demo" column, and demos.csv (demo,
    git_commit, cpu, matmul from each environment.json); written to a temporary folder
    first, then moved into place, so a failure leaves no half-written dataset."""
    import shutil
    import tempfile

    if not folders:
        raise InvalidArgument("folders must name at least one demo folder")
    out = Path(out)
    tables = {t: [] for t in REPEAT_TABLES}
    demos = []
    for label, folder in folders.items():
        runs, ceilings, sweep, calibration = _read_folder(folder)
        for name, df in zip(REPEAT_TABLES, (runs, ceilings, sweep, calibration)):
            if df is not None:
                tables[name].append(df.assign(**{_DEMO: str(label)}))
        env_path = Path(folder) / "environment.json"
        env = json.loads(env_path.read_text()) if env_path.is_file() else {}
        demos.append({_DEMO: str(label), "git_commit": str(env.get("git_commit", ""))[:7],
                      "cpu": env.get("cpu", ""), "matmul": env.get("matmul", "")})
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    tmp.chmod(0o755)                       # mkdtemp makes it private; a dataset is not
    try:
        for name, parts in tables.items():
            if parts:
                pd.concat(parts, ignore_index=True).to_csv(tmp / f"{name}.csv", index=False)
        pd.DataFrame(demos).to_csv(tmp / "demos.csv", index=False)
        if (out / "README.md").is_file():
            shutil.copy2(out / "README.md", tmp / "README.md")
        if out.exists():
            shutil.rmtree(out)
        tmp.replace(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def read_repeats(folder) -> dict[str, tuple]:
    """Demo label -> (runs, ceilings, sweep, calibration or None, kernel rows) from a
    folder `write_repeats` wrote, in the order of its demos.csv."""
    folder = Path(folder)
    for name in ("demos", "runs", "ceilings", "pass_sweep"):
        if not (folder / f"{name}.csv").is_file():
            raise InvalidArgument(f"folder {str(folder)!r} has no {name}.csv "
                                  "(a folder of repeated demos, `write_repeats`)")
    demos = pd.read_csv(folder / "demos.csv", keep_default_na=False)
    tables = {name: pd.read_csv(folder / f"{name}.csv") for name in REPEAT_TABLES
              if (folder / f"{name}.csv").is_file()}
    out = {}
    for d in demos.itertuples():
        label = str(getattr(d, _DEMO))
        part = {name: df[df[_DEMO].astype(str) == label].drop(columns=_DEMO)
                .reset_index(drop=True) for name, df in tables.items()}
        cal = part.get("acceptance_prior")
        out[label] = (part["runs"], part["ceilings"], part["pass_sweep"],
                      cal if cal is not None and len(cal) else None,
                      _kernel_rows_of(d.matmul))
    return out


RUN_SETUP = ("drafter", "k", "kind", "batch", "temperature")


def demo_spread(folder) -> pd.DataFrame:
    """How far one run's measured speedup moves between demos of one commit: for each
    pair of demos in a `write_repeats` folder that share a git commit, ``mean`` and
    ``largest`` of |speedup_a / speedup_b - 1| over the speculative runs both measured
    (a run: `RUN_SETUP`). A prediction exact on one demo reads about this on another."""
    folder = Path(folder)
    demos = pd.read_csv(folder / "demos.csv", keep_default_na=False)
    runs = pd.read_csv(folder / "runs.csv")
    runs = runs[runs["drafter"] != "autoregressive"]
    rows = []
    for commit, g in demos.groupby("git_commit"):
        labels = list(g[_DEMO].astype(str))
        table = runs[runs[_DEMO].astype(str).isin(labels)].pivot_table(
            index=list(RUN_SETUP), columns=_DEMO, values="measured_speedup")
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                d = (table[a] / table[b] - 1).abs().dropna()
                if len(d):
                    rows.append(dict(commit=commit, demo_a=a, demo_b=b, runs=len(d),
                                     mean=float(d.mean()), largest=float(d.max())))
    return pd.DataFrame(rows, columns=["commit", "demo_a", "demo_b", "runs", "mean", "largest"])


def repeat_scores(demos: dict) -> pd.DataFrame:
    """One row per demo (label -> tables, as `read_repeats` gives): its runs, MAPE, mean
    signed and worst error of the prediction, the same with each run's own tokens per
    iteration, the demo's own prediction before the run (``engine_prior_mape``), the
    fitted blend exponents, and whether it meets `GOALS_CPU`."""
    return _scores({label: predict_tables(runs, ceilings, sweep, cal, kernel_rows=kr)[:2]
                    for label, (runs, ceilings, sweep, cal, kr) in demos.items()})


def _scores(predictions: dict) -> pd.DataFrame:
    """`repeat_scores` of label -> (predictions, engine)."""
    from specsim.published_page import GOALS_CPU

    rows = []
    for label, (pred, engine) in predictions.items():
        s = score(pred).set_index("group").loc["all runs"]
        tau = score(pred, "predicted_run_tau").set_index("group").loc["all runs"]
        prior = (score(pred, "engine_prior").set_index("group").loc["all runs", "mape"]
                 if np.isfinite(pred["engine_prior"]).all() else math.nan)
        rows.append(dict(demo=label, rows=int(s["rows"]), mape=s["mape"],
                         mean_signed=s["mean_signed"], worst=s["worst"],
                         run_tau_mape=tau["mape"], engine_prior_mape=prior,
                         blend=engine.use.blend,
                         wide_blend=math.nan if engine.wide_use is None else engine.wide_use.blend,
                         met=bool(s["mape"] <= GOALS_CPU["mape"]
                                  and abs(s["worst"]) <= GOALS_CPU["worst"])))
    return pd.DataFrame(rows)


def score(pred: pd.DataFrame, column: str = "predicted") -> pd.DataFrame:
    """MAPE, mean signed error, worst (signed) and share within 10% of ``column`` against
    the measured speedups: per drafter kind, per batch, all runs and all but the feature
    head."""
    from specsim.published import error_stats

    err = pred[column] / pred["measured"] - 1
    groups = [(f"drafter {k}", pred["drafter_kind"] == k)
              for k in sorted(pred["drafter_kind"].unique())]
    groups += [(f"batch {b}", pred["batch"] == b) for b in sorted(pred["batch"].unique())]
    groups += [("all runs", pred["batch"] > 0),
               ("all runs but the feature head", pred["drafter_kind"] != "feature-head")]
    return pd.DataFrame([dict(group=g, **error_stats(err[m])) for g, m in groups if m.any()])


def _engine_prior_sentence(pred: pd.DataFrame) -> str:
    from specsim.published_page import signed_pct

    if not np.isfinite(pred["engine_prior"]).all():
        return ""
    s = score(pred, "engine_prior").set_index("group").loc["all runs"]
    return (" The demo's own prediction before the run (`pred_speedup_prior`: the roofline "
            "fitted freely to the same sweep, the same acceptance) on the same runs: MAPE "
            f"{100 * s['mape']:.1f}%, mean signed {signed_pct(s['mean_signed'])}, worst "
            f"{signed_pct(s['worst'])}.")


def _wide_clause(engine: CpuLoopEngine) -> str:
    if engine.wide_use is None:
        return ""
    w = engine.wide_use
    return (f"up to {engine.kernel_rows} rows a pass (batch × tokens, specsim's CPU "
            f"kernel), and {100 * w.flops_efficiency:.0f}%, "
            f"{100 * w.bandwidth_efficiency:.0f}% and p = {w.blend:.2f} above "
            "(XLA's dots), each side fitted to its own passes and")


def ceiling_section(folder, repeats=None) -> list[str]:
    """The study page's section "This CPU from its measured ceilings" for a demo folder,
    with the same prediction on each demo of ``repeats`` (a `write_repeats` folder)."""
    from specsim.published_page import GOALS_CPU, markdown_stats_table, signed_pct

    folder = Path(folder)
    pred, engine, hw = predict_runs(folder)
    env_path = folder / "environment.json"
    env = json.loads(env_path.read_text()) if env_path.is_file() else {}
    s = score(pred).set_index("group")
    allr, run_tau = s.loc["all runs"], score(pred, "predicted_run_tau").set_index("group")
    o, u = engine.overheads, engine.use
    met = {k: abs(allr[k]) <= v for k, v in GOALS_CPU.items()}
    rel = folder.name if folder.parent.name == "data" else str(folder)
    out = [
        "## This CPU from its measured ceilings",
        "",
        f"The same iteration model with the hardware row built from `data/{rel}/ceilings.csv` "
        f"({env.get('cpu', 'this CPU')}, {env.get('cpu_count', '?')} cores: "
        f"{hw.peak(hw.dtypes[0]) / 1e9:.0f} GFLOP/s {hw.dtypes[0]} matmul, "
        f"{hw.bandwidth / 1e9:.1f} GB/s copy; `hardware_from_ceilings`) predicts each "
        f"speculative run of the default demo in `data/{rel}/runs.csv` (commit "
        f"{str(env.get('git_commit', '?'))[:7]}) before it runs "
        "(`specsim.experiment.ceiling_prediction.predict_runs`). specsim's compiled CPU loop "
        "is an engine class of its own: its passes cost compute and memory time "
        f"at {100 * u.flops_efficiency:.0f}% of the matmul ceiling and "
        f"{100 * u.bandwidth_efficiency:.0f}% of the copy ceiling, combined as their "
        f"p-norm with p = {u.blend:.2f} (1: a sum; large: the larger of the two) "
        f"{_wide_clause(engine)} fitted to the "
        f"{engine.sweep_points} pass programs of "
        f"`pass_sweep.csv` (MAPE {100 * engine.sweep_mape:.1f}% on them; its process-time "
        "clock converted to wall seconds by the runs' CPU time over wall time); no launch "
        f"floor and no fixed cost a pass; {1e3 * o.iteration:.1f} ms an iteration and "
        f"{1e3 * o.draft_call:.1f} ms a "
        f"draft call, the `{DRAFT_PRIOR_CLASS}` class's priors. The pass sweep is timed in "
        "the roofline part, before any speculative run, and times target passes only: no "
        "run's speedup, acceptance or draft time enters the fit, so the prediction leaks "
        "nothing of what it predicts. Acceptance: the instrument's set α, the other "
        "drafters' α from untimed runs before the timing (`acceptance_prior.csv`, the "
        "source named per run below); draft calls: the instrument's "
        "layers and 16-row head, the layer-skip draft's kept layers, the feature head's "
        "cell and head rows, n-gram free.",
        "",
        "Choices made after seeing the results of an earlier reference run of the demo, so "
        "its numbers are not free of them: the GPU engines' form (the larger of compute and memory time "
        "at 60% and 85% of the ceilings, the XLA class's overheads) predicted its 18 runs "
        "other than the feature head's with MAPE 15.6%, mean signed +4.3%, worst -57.0%: at "
        "batch 1 a pass stays memory-bound, so a verify of K + 1 tokens cost no more than a "
        "decode step (the free instrument drafts +4% to +27% at α 0.7 and 0.9), and at "
        "batch 16 the plain step came out at a third of its swept time while the verify "
        "turned compute-bound, five plain steps where the sweep has two; "
        "compute and memory added, the copy ceiling as reached and a fitted step a pass (a "
        "fixed cost the drafts do not pay) gave 22.7%; that form with one fit through every "
        "width, 11.8% (with each run's own tokens per iteration 4.5%, worst -20.9% at batch "
        "16, where the passes run XLA's dots); one fit on each side of the kernel's rows, "
        "1.6% and -5.3% on the same runs and tokens per iteration. That form (compute and "
        "memory added, a fitted step a pass) then met the goal in one of six consecutive "
        "demos of the present design (MAPE 20.3%, 11.0%, 8.9%, 7.2%, 20.1%, 13.7%: the "
        "first three repeats below, the reference, the two after it). In two the step ran "
        "to 15 ms with the copy ceiling at twice the measured one: at the sweep's shapes a "
        "pass's fixed cost and its weights' read time are nearly collinear, and the drafts' "
        "passes, priced without the step, came out nearly free (layer-skip +82% and "
        "+106%). In the others a sum through the narrow passes overpriced the five-token "
        "verify against the decode step (the batch-4 passes at 8 rows steepen it), so the "
        "K = 4 runs read 10% to 24% slow. Without the step: 6.6%, 11.0%, 8.9%, 7.2%, 4.5%, "
        "13.7%; without it and with the p-norm fitted, the form here: 5.4%, 6.4%, 8.2%, "
        "6.3%, 6.9%, 6.4%. The three demos at an earlier commit on the same host were in "
        "view when the form was chosen; the Xeon's was scored after, and the last three "
        "below ran after it.",
        "",
        f"**Result.** Over {int(allr['rows'])} runs: MAPE {100 * allr['mape']:.1f}% (goal "
        f"{100 * GOALS_CPU['mape']:.0f}%), mean signed {signed_pct(allr['mean_signed'])}, "
        f"worst {signed_pct(allr['worst'])} (goal {100 * GOALS_CPU['worst']:.0f}%): goal "
        f"{'met' if all(met.values()) else 'not met'}. With each run's own tokens per "
        "iteration in place of the acceptance known before (a diagnostic, not a prediction: "
        "what the cost terms alone miss) MAPE "
        f"{100 * run_tau.loc['all runs', 'mape']:.1f}%, mean signed "
        f"{signed_pct(run_tau.loc['all runs', 'mean_signed'])}, worst "
        f"{signed_pct(run_tau.loc['all runs', 'worst'])}.{_engine_prior_sentence(pred)}",
        "",
        *markdown_stats_table(score(pred)),
        "",
        "| drafter | kind | K | batch | α from | τ | measured | predicted | error | with the run's τ |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in pred.itertuples():
        out.append(f"| {r.drafter} | {r.kind} | {r.k} | {r.batch} | {r.alpha_source} | "
                   f"{r.tau:.2f} | {r.measured:.2f} | {r.predicted:.2f} | "
                   f"{signed_pct(r.error)} | {signed_pct(r.predicted_run_tau / r.measured - 1)} |")
    if repeats is not None:
        out += ["", *_repeats_section(folder, rel, Path(repeats), (pred, engine))]
    return out


def _repeats_section(folder: Path, rel: str, repeats: Path, reference) -> list[str]:
    """The prediction on every demo of a `write_repeats` folder beside the reference's
    (``reference``: its (predictions, engine))."""
    from specsim.published_page import GOALS_CPU, signed_pct

    env_path = folder / "environment.json"
    env = json.loads(env_path.read_text()) if env_path.is_file() else {}
    ref = f"{str(env.get('git_commit', '?'))[:7]} (reference)"
    predictions = {ref: reference, **{
        label: predict_tables(runs, ceilings, sweep, cal, kernel_rows=kr)[:2]
        for label, (runs, ceilings, sweep, cal, kr) in read_repeats(repeats).items()}}
    info = pd.read_csv(repeats / "demos.csv", keep_default_na=False).set_index(_DEMO)
    cpus = {ref: env.get("cpu", ""), **info["cpu"].to_dict()}
    table = _scores(predictions)
    pooled = pd.concat([pred for pred, _ in predictions.values()], ignore_index=True)
    s = score(pooled).set_index("group").loc["all runs"]
    rel_rep = repeats.name if repeats.parent.name == "data" else str(repeats)
    spread = demo_spread(repeats)
    spread_sentence = "" if spread.empty else (
        f" The same run measured in two demos of one commit (the same code on the same kind "
        f"of host; {len(spread)} pairs, `demo_spread`) differs by "
        f"{100 * spread['mean'].mean():.1f}% on average, by up to "
        f"{100 * spread['largest'].max():.1f}%: a prediction exact on one demo would miss "
        "another by about that"
        + (f", its largest past the goal's worst of {100 * GOALS_CPU['worst']:.0f}%."
           if spread["largest"].max() > GOALS_CPU["worst"] else "."))
    out = [
        "### The same prediction on repeated demos",
        "",
        f"Each clean-clone default demo in `data/{rel_rep}` (the tables the prediction "
        "reads; commit and host in its `demos.csv`) and the reference, each fitted to its "
        "own sweep and ceilings and predicted with its own acceptance known before. The "
        f"goal (MAPE ≤ {100 * GOALS_CPU['mape']:.0f}%, worst within "
        f"{100 * GOALS_CPU['worst']:.0f}%) is met in {int(table['met'].sum())} of "
        f"{len(table)} demos; over all {int(s['rows'])} runs pooled, MAPE "
        f"{100 * s['mape']:.1f}%, mean signed {signed_pct(s['mean_signed'])}, worst "
        f"{signed_pct(s['worst'])}.{spread_sentence}",
        "",
        "| demo | CPU | runs | MAPE | mean signed | worst | with the runs' τ | the demo's "
        "own prediction before the run | p up to the kernel's rows | goal |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples():
        cpu = " ".join(str(cpus.get(r.demo, "")).replace("(R)", "").replace("Processor", "")
                       .split())
        out.append(f"| {r.demo} | {cpu} | {r.rows} | {100 * r.mape:.1f}% | "
                   f"{signed_pct(r.mean_signed)} | {signed_pct(r.worst)} | "
                   f"{100 * r.run_tau_mape:.1f}% | {100 * r.engine_prior_mape:.1f}% | "
                   f"{r.blend:.2f} | {'met' if r.met else 'not met'} |")
    return out
