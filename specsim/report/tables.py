"""The demo's tables, each a DataFrame from a `DemoResult` or a runs table: speedups
with their predictions and errors, MAPEs, the worst misses, α by kind of work, the
acceptance per position, datasheet hardware, the drafters part's tables; and
`markdown_table`, how report.md prints them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from specsim import analytic
from specsim import schema as S
from specsim.experiment.prediction import mape


def markdown_table(df: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """A DataFrame as a GitHub markdown table (no extra dependency)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(str(c) for c in cols) + " |",
             "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):         # (iterrows would turn ints into floats)
        cells = []
        for v in row:
            if isinstance(v, (float, np.floating)):
                cells.append(format(v, floatfmt) if np.isfinite(v) else "nan")
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def as_runs(result_or_runs) -> pd.DataFrame:
    runs = result_or_runs if isinstance(result_or_runs, pd.DataFrame) else result_or_runs.runs
    return S.upgrade_runs(runs)


def speedup_table(result_or_runs) -> pd.DataFrame:
    """One row per (drafter, temperature, K, batch): mean α and speedups over the kinds of
    work (with the measured speedup's 95% interval where the runs have it), and the
    relative error of each prediction; a prediction no run has is left out. Takes a
    DemoResult or a runs table."""
    spec = S.speculative(as_runs(result_or_runs))
    preds = {"prior": S.PRED_PRIOR, "iid": S.PRED_IID, "pos": S.PRED_POSITIONAL,
             "swept": S.PRED_SWEPT}
    extra = {f"pred_{k}": (c, "mean") for k, c in preds.items() if c in spec}
    if S.MEASURED_CI_LO in spec:
        extra.update(ci_lo=(S.MEASURED_CI_LO, "mean"), ci_hi=(S.MEASURED_CI_HI, "mean"))
    g = spec.groupby([S.DRAFTER, S.TEMPERATURE, S.K, S.BATCH], as_index=False).agg(
        alpha=(S.ALPHA, "mean"), tokens_per_iter=(S.TOKENS_PER_ITERATION, "mean"),
        measured=(S.MEASURED_SPEEDUP, "mean"), **extra,
        overhead=(S.LOOP_OVERHEAD, "mean"))
    for k in preds:
        col = f"pred_{k}"
        if col not in g:
            continue
        if g[col].isna().all():           # not measured in this demo (e.g. no sweep)
            g = g.drop(columns=[col])
            continue
        g[f"err_{k}_%"] = 100 * (g[col] - g["measured"]) / g["measured"]
    return g


def error_summary(result_or_runs, by=(S.DRAFTER, S.TEMPERATURE)) -> pd.DataFrame:
    """MAPE (per cent) of each prediction against the measured speedup, per group ``by``."""
    spec = S.speculative(as_runs(result_or_runs))
    rows = [{**dict(zip(by, key if isinstance(key, tuple) else (key,))), "runs": len(g),
             **{f"MAPE {col}": mape(g, col) for col in S.PREDICTIONS}}
            for key, g in spec.groupby(list(by))]
    out = pd.DataFrame(rows)
    return out.dropna(axis=1, how="all")    # a prediction no run had (no roofline sweep)


def worst_runs(result_or_runs, n: int = 5) -> pd.DataFrame:
    """The ``n`` runs whose headline prediction (before the run where the runs have it,
    else the i.i.d. one) misses most, with the relative error and, for in-run runs, the
    two terms of the in-run prediction's miss and the acceptance model's."""
    spec = S.speculative(as_runs(result_or_runs)).copy()
    pred = S.PRED_PRIOR if S.PRED_PRIOR in spec and spec[S.PRED_PRIOR].notna().any() \
        else S.PRED_IID
    spec["err_%"] = 100 * (spec[pred] - spec[S.MEASURED_SPEEDUP]) / spec[S.MEASURED_SPEEDUP]
    worst = spec.reindex(spec["err_%"].abs().sort_values(ascending=False).index).head(n)
    cols = [S.DRAFTER, S.TEMPERATURE, S.K, S.BATCH, S.KIND, S.ALPHA, S.MEASURED_SPEEDUP,
            S.MEASURED_CI_LO, S.MEASURED_CI_HI, pred, "err_%", S.PREDICTED_SPEEDUP,
            S.ERR_TOTAL, *S.DECOMPOSITION, S.ERR_ACCEPTANCE]
    return worst[[c for c in dict.fromkeys(cols) if c in worst]]


def alpha_by_kind(result_or_runs) -> pd.DataFrame:
    """Mean α per (drafter, temperature) by kind of work (one column per kind)."""
    spec = S.speculative(as_runs(result_or_runs))
    return spec.pivot_table(index=[S.DRAFTER, S.TEMPERATURE], columns=S.KIND, values=S.ALPHA,
                            aggfunc="mean").reset_index()


def acceptance_table(result_or_runs) -> pd.DataFrame:
    """The runs at each drafter's largest K: α, E under the i.i.d. model, the measured
    tokens per iteration, and the per-position rates α_j with their sample counts."""
    spec = S.speculative(as_runs(result_or_runs))
    top = spec[spec[S.K] == spec.groupby(S.DRAFTER)[S.K].transform("max")]
    out = top.assign(**{S.E_IID: analytic.expected_tokens(top[S.ALPHA].to_numpy(),
                                                          top[S.K].to_numpy())})
    positions = [c for j in S.position_columns(out) for c in (S.alpha_pos(j), S.alpha_pos_count(j))
                 if c in out]
    return out[[S.DRAFTER, S.KIND, S.TEMPERATURE, S.K, S.ALPHA, S.E_IID,
                S.TOKENS_PER_ITERATION, *positions]].dropna(axis=1, how="all")


def hardware_table(result_or_hardware) -> pd.DataFrame:
    """Datasheet predictions, one column per hardware row."""
    hw = (result_or_hardware if isinstance(result_or_hardware, pd.DataFrame)
          else result_or_hardware.hardware)
    return hw.pivot_table(index=[S.DRAFTER, S.TEMPERATURE, S.K, S.ALPHA],
                          columns=S.HARDWARE_NAME, values=S.PRED_SPEEDUP).reset_index()


def read_demo_tables(folder) -> dict[str, pd.DataFrame]:
    """Every table a demo wrote to ``folder`` (runs upgraded to today's schema)."""
    folder = Path(folder)
    tables = {name: pd.read_csv(folder / f"{name}.csv")
              for name in (S.RUNS, S.SWEEPS, S.CEILINGS, S.HARDWARE, S.ALPHA_BY_KIND,
                           S.DRAFTER_COSTS, S.DRAFTER_SPEEDUP, S.DRAFTER_LIMITS)
              if (folder / f"{name}.csv").exists()}
    if S.RUNS in tables:
        tables[S.RUNS] = S.upgrade_runs(tables[S.RUNS])
    return tables


def drafter_alpha_table(alpha_by_kind: pd.DataFrame) -> pd.DataFrame:
    """The drafters part's α per slot, one column per kind of work, one row per
    (target, drafter, temperature, K)."""
    return alpha_by_kind.pivot_table(index=[S.TARGET, S.DRAFTER, S.TEMPERATURE, S.K],
                                     columns=S.KIND, values=S.ALPHA,
                                     aggfunc="mean").reset_index()


def drafter_speedup_table(speedup: pd.DataFrame) -> pd.DataFrame:
    """The drafters part's speedups, mean over the kinds of work, per (target, drafter, K)."""
    removed = {"prefill_removed": ("prefill_removed", "all")} \
        if "prefill_removed" in speedup else {}          # tables written before the column
    return speedup.groupby([S.TARGET, S.DRAFTER, S.K], as_index=False).agg(
        alpha=(S.ALPHA, "mean"), measured=(S.MEASURED_SPEEDUP, "mean"),
        pred_iid=(S.PRED_IID, "mean"), pred_pos=(S.PRED_POSITIONAL, "mean"),
        pred_closed_form=(S.PRED_CONSTANT_COST, "mean"),
        vs_fp32_target=("speedup_vs_main_target", "mean"), **removed)
