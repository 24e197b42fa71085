"""Figures of the demo's runs table (`specsim.schema`, `DemoResult.runs` or its CSV):
speedup against K predicted and measured, acceptance by draft position, α by kind of
work, and every run's measured speedup against its predictions. Autoregressive rows are
ignored; every function returns a Figure. `demo_figures` gives the set ``specsim demo``
writes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from specsim import schema as S
from specsim.errors import InvalidArgument
from specsim.plots.axes import integer_axis, plain_log
from specsim.results import binomial_interval

__all__ = ["speculative_runs", "speedup_predicted_vs_measured", "acceptance_by_position",
           "alpha_by_kind", "predicted_vs_measured", "demo_figures", "speedup_surface",
           "predicted_vs_measured_band"]


def speculative_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The speculative rows of a runs table (any version, `schema.upgrade_runs`), with a
    readable temperature label ``T``."""
    S.require(runs, {S.DRAFTER, S.K, S.KIND, S.TEMPERATURE, S.ALPHA})
    d = S.speculative(S.upgrade_runs(runs)).copy()
    if d.empty:
        raise InvalidArgument("runs has no speculative rows")
    d["T"] = d[S.TEMPERATURE].map(lambda t: f"T = {t:g}")
    return d


def speedup_predicted_vs_measured(runs: pd.DataFrame) -> Figure:
    """Speedup against K, one panel per (drafter, temperature): measured (points, the
    mean over kinds of work with its range), predicted from one α (i.i.d.) and from the
    per-position rates, all with the fitted costs."""
    spec = speculative_runs(runs)
    S.require(spec, {S.MEASURED_SPEEDUP, S.PRED_IID, S.PRED_POSITIONAL})
    panels = sorted(spec.groupby([S.DRAFTER, S.TEMPERATURE]).groups)
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(4.2 * len(panels), 3.8), layout="constrained")
        axes = np.atleast_1d(fig.subplots(1, len(panels), sharey=True))
        for ax, (drafter, temp) in zip(axes, panels):
            d = spec[(spec[S.DRAFTER] == drafter) & (spec[S.TEMPERATURE] == temp)]
            g = d.groupby(S.K).agg(meas=(S.MEASURED_SPEEDUP, "mean"),
                                   lo=(S.MEASURED_SPEEDUP, "min"), hi=(S.MEASURED_SPEEDUP, "max"),
                                   iid=(S.PRED_IID, "mean"),
                                   pos=(S.PRED_POSITIONAL, "mean")).reset_index()
            ax.errorbar(g[S.K], g["meas"], yerr=[(g["meas"] - g["lo"]).clip(lower=0),
                                                 (g["hi"] - g["meas"]).clip(lower=0)],
                        fmt="o", capsize=3, label="measured (mean, range over kinds)")
            ax.plot(g[S.K], g["iid"], "-", label="predicted, i.i.d. α")
            ax.plot(g[S.K], g["pos"], "--", label="predicted, per-position α")
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set(title=f"{drafter}, T={temp:g}", xlabel="draft length K",
                   ylabel="speedup over autoregressive")
            integer_axis(ax, "x")
        axes[0].legend(fontsize=7)
    return fig


def _positions_long(spec: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, draft position) for the largest K of each drafter."""
    top = spec[spec[S.K] == spec.groupby(S.DRAFTER)[S.K].transform("max")]
    rows = []
    for _, r in top.iterrows():
        for j, (a, n) in enumerate(zip(S.position_rates(r), S.position_counts(r)), start=1):
            rows.append({S.DRAFTER: r[S.DRAFTER], S.KIND: r[S.KIND], "T": r["T"],
                         "position": j, S.ALPHA: a, "samples": n})
    return pd.DataFrame(rows)


def acceptance_by_position(runs: pd.DataFrame, level: float = 0.95) -> Figure:
    """Per-position acceptance α_j (conditional on reaching j) for the largest K of each
    drafter, one line per kind of work and temperature, with the Wilson interval of each
    rate at ``level`` (`specsim.results.binomial_interval`); below, the number of samples
    that reached each position (a rate from a handful of samples is no trend)."""
    df = _positions_long(speculative_runs(runs))
    low, high = binomial_interval(df[S.ALPHA] * df["samples"], df["samples"], level)
    df = df.assign(low=low, high=high)
    drafters = sorted(df[S.DRAFTER].unique())
    kinds = sorted(df[S.KIND].unique())
    colors = dict(zip(kinds, sns.color_palette("tab10", len(kinds))))
    styles = dict(zip(sorted(df["T"].unique()), ["-", "--", ":", "-."] * 4))
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(4.6 * len(drafters), 5.4), layout="constrained")
        axes = np.array(fig.subplots(2, len(drafters), sharex="col", squeeze=False,
                                     height_ratios=(2.2, 1)))
        for col, name in enumerate(drafters):
            ax, ax_n = axes[0, col], axes[1, col]
            d = df[df[S.DRAFTER] == name]
            for (kind, temp), g in d.groupby([S.KIND, "T"]):
                g = g.sort_values("position")
                yerr = np.vstack([g[S.ALPHA] - g["low"], g["high"] - g[S.ALPHA]])
                ax.errorbar(g["position"], g[S.ALPHA], yerr=np.clip(np.nan_to_num(yerr), 0, None),
                            marker="o",
                            ms=4, capsize=2, color=colors[kind], ls=styles[temp],
                            label=f"{kind}, {temp}")
                ax_n.plot(g["position"], g["samples"], marker=".", color=colors[kind],
                          ls=styles[temp])
            ax.set(title=name, ylabel=f"α_j ({level:.0%} interval)", ylim=(0, 1.02))
            ax_n.set(xlabel="draft position j", ylabel="samples reaching j")
            if (d["samples"] > 0).any():
                plain_log(ax_n, "y")
            else:                      # a runs table written before counts were kept
                ax_n.text(0.5, 0.5, "sample counts not recorded in this table",
                          transform=ax_n.transAxes, ha="center", va="center", fontsize=8)
                ax_n.set_yticks([])
            integer_axis(ax_n, "x")
            ax.legend(fontsize=7)
    return fig


def alpha_by_kind(runs: pd.DataFrame) -> Figure:
    """α (accepted drafts per draft slot, averaged over K) by kind of work, one panel per
    drafter, one bar per temperature."""
    d = speculative_runs(runs)
    drafters = sorted(d[S.DRAFTER].unique())
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(4.5 * len(drafters), 3.8), layout="constrained")
        axes = np.atleast_1d(fig.subplots(1, len(drafters), sharey=True))
        for ax, name in zip(axes, drafters):
            sns.barplot(d[d[S.DRAFTER] == name], x=S.KIND, y=S.ALPHA, hue="T", errorbar=None,
                        ax=ax)
            ax.set(title=name, xlabel="kind of work", ylabel="α", ylim=(0, 1))
            ax.legend(fontsize=8)
    return fig


PREDICTION_NAMES = {
    S.PRED_IID: ("one α for every draft position", "predicted speedup: E(α, K), fitted pass times"),
    S.PRED_POSITIONAL: ("per-position α", "predicted speedup: per-position α, fitted pass times"),
    S.PRED_SWEPT: ("per-position α, measured pass times",
                   "predicted speedup: per-position α, swept pass times"),
    S.PRED_CONSTANT_COST: ("constant cost ratio c (Thm 3.8)",
                           "predicted speedup: Thm 3.8 with the fitted c"),
}
"""Prediction column -> (panel title, x-axis name) of `predicted_vs_measured`."""


def predicted_vs_measured(runs: pd.DataFrame, columns=(S.PRED_IID, S.PRED_POSITIONAL)) -> Figure:
    """Measured speedup against each prediction column, one panel per prediction (titled
    by what it assumes, with its mean absolute error), with the line measured = predicted."""
    d = speculative_runs(runs)
    cols = [c for c in columns if c in d.columns]
    if S.MEASURED_SPEEDUP not in d.columns or not cols:
        raise InvalidArgument("runs lacks measured_speedup or the prediction columns")
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(4.8 * len(cols), 4.6), layout="constrained")
        axes = np.atleast_1d(fig.subplots(1, len(cols), sharey=True))
        values = d[cols + [S.MEASURED_SPEEDUP]].to_numpy()
        lo, hi = float(np.nanmin(values)) * 0.9, float(np.nanmax(values)) * 1.1
        for ax, col in zip(axes, cols):
            title, xlabel = PREDICTION_NAMES.get(col, (col.replace("_", " "),
                                                       "predicted speedup"))
            sns.scatterplot(d, x=col, y=S.MEASURED_SPEEDUP, hue=S.DRAFTER, style="T", ax=ax)
            ax.plot([lo, hi], [lo, hi], color="grey", ls="--", lw=1, label="measured = predicted")
            ax.axhline(1.0, color="grey", lw=0.8)
            err = (d[col] - d[S.MEASURED_SPEEDUP]).abs() / d[S.MEASURED_SPEEDUP]
            ax.set(xlabel=xlabel, ylabel="measured speedup (over autoregressive)",
                   xlim=(lo, hi), ylim=(lo, hi),
                   title=f"{title}\nmean abs. error {100 * float(err.mean()):.0f}%")
            ax.legend(fontsize=7)
    return fig


def speedup_surface(runs: pd.DataFrame) -> Figure:
    """The instrument's measured speedup over (α, K) at batch 1, one panel per draft cost
    (its measured c, median over the runs), beside the closed form
    S = (1 − α^(K+1)) / ((1 − α)(Kc + 1)) with that c (lines) and the in-run prediction
    (crosses)."""
    from specsim import analytic

    d = speculative_runs(runs)
    S.require(d, {S.DRAFTER_KIND, S.ALPHA_SET, S.DRAFT_LAYERS, S.COST_RATIO,
                  S.PREDICTED_SPEEDUP, S.MEASURED_SPEEDUP})
    d = d[(d[S.DRAFTER_KIND] == "instrument") & (d[S.BATCH] == 1)]
    if d.empty:
        raise InvalidArgument("runs has no instrument runs at batch 1")
    costs = sorted(d[S.DRAFT_LAYERS].unique())
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(4.6 * len(costs), 4.0), layout="constrained")
        axes = np.atleast_1d(fig.subplots(1, len(costs), sharey=True))
        palette = dict(zip(sorted(d[S.ALPHA_SET].unique()),
                           sns.color_palette("viridis", d[S.ALPHA_SET].nunique())))
        for ax, layers in zip(axes, costs):
            g = d[d[S.DRAFT_LAYERS] == layers]
            c = float(g[S.COST_RATIO].median())
            ks = np.arange(1, int(g[S.K].max()) + 1)
            for a, ga in g.groupby(S.ALPHA_SET):
                col = palette[a]
                ax.plot(ks, analytic.speedup(a, ks, c), color=col, lw=1, label=f"α = {a:g}")
                ax.scatter(ga[S.K], ga[S.MEASURED_SPEEDUP], color=col, s=28, zorder=3)
                ax.scatter(ga[S.K], ga[S.PREDICTED_SPEEDUP], color=col, marker="x", s=28)
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set(xlabel="K (draft length)", ylabel="speedup",
                   title=f"draft cost {layers} layers, c = {c:.2f}")
            ax.legend(fontsize=7, title="lines: closed form; ● measured; × in-run prediction",
                      title_fontsize=6)
    return fig


def predicted_vs_measured_band(runs: pd.DataFrame, band: float = 0.05) -> Figure:
    """Every speculative run's headline prediction against its measured speedup (with the
    per-round range as an error bar), the line y = x and a ±``band`` band."""
    d = speculative_runs(runs)
    S.require(d, {S.PREDICTED_SPEEDUP, S.MEASURED_SPEEDUP, S.DRAFTER_KIND})
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(5.4, 5.0), layout="constrained")
        ax = fig.subplots()
        vals = d[[S.PREDICTED_SPEEDUP, S.MEASURED_SPEEDUP]].to_numpy(float)
        lo, hi = float(np.nanmin(vals)) * 0.9, float(np.nanmax(vals)) * 1.1
        x = np.linspace(lo, hi, 50)
        ax.fill_between(x, x * (1 - band), x * (1 + band), color="grey", alpha=0.2,
                        label=f"±{100 * band:.0f}%")
        ax.plot(x, x, color="grey", ls="--", lw=1, label="y = x")
        if {S.MEASURED_LO, S.MEASURED_HI} <= set(d.columns):
            ax.errorbar(d[S.MEASURED_SPEEDUP], d[S.PREDICTED_SPEEDUP], fmt="none", lw=0.6,
                        ecolor="0.6", xerr=[(d[S.MEASURED_SPEEDUP] - d[S.MEASURED_LO]).clip(lower=0),
                                            (d[S.MEASURED_HI] - d[S.MEASURED_SPEEDUP]).clip(lower=0)])
        d = d.assign(batch_label=d[S.BATCH].map(lambda b: f"batch {int(b)}"))
        sns.scatterplot(d, x=S.MEASURED_SPEEDUP, y=S.PREDICTED_SPEEDUP, hue=S.DRAFTER_KIND,
                        style="batch_label", ax=ax)
        err = (d[S.PREDICTED_SPEEDUP] - d[S.MEASURED_SPEEDUP]).abs() / d[S.MEASURED_SPEEDUP]
        ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="measured speedup",
               ylabel="predicted speedup (in-run costs)",
               title=f"{len(d)} runs: MAPE {100 * err.mean():.1f}%, worst {100 * err.max():.1f}%")
        ax.legend(fontsize=7)
    return fig


def demo_figures(result) -> dict[str, Figure]:
    """File name -> Figure for a `DemoResult`: the roofline and latency of the target's
    sweep (when the roofline part ran), speedup against K and acceptance by position
    (when the fidelity part ran)."""
    from specsim.plots.roofline import latency_vs_tokens, roofline_plot

    figs: dict[str, Figure] = {}
    target = result.environment.get("model")
    if not result.sweeps.empty and target in result.fits:
        sweep_t = result.sweeps[result.sweeps[S.MODEL] == target]
        ceilings = getattr(result, "ceilings", None)
        figs["roofline.png"] = roofline_plot(
            sweep_t, result.fits[target],
            ceilings=ceilings if ceilings is not None and len(ceilings) else None)
        figs["latency_vs_tokens.png"] = latency_vs_tokens(sweep_t, result.fits[target])
    if not result.runs.empty:
        figs["speedup_vs_k.png"] = speedup_predicted_vs_measured(result.runs)
        real = result.runs
        if S.DRAFTER_KIND in real:   # the instrument's rates are set: no curve to show
            real = real[real[S.DRAFTER_KIND] != "instrument"]
        if not S.speculative(real).empty:
            figs["acceptance_by_position.png"] = acceptance_by_position(real)
    if not result.runs.empty and S.PREDICTED_SPEEDUP in result.runs:
        figs["predicted_vs_measured_band.png"] = predicted_vs_measured_band(result.runs)
        spec = S.speculative(result.runs)
        if ((spec[S.DRAFTER_KIND] == "instrument") & (spec[S.BATCH] == 1)).any():
            figs["speedup_surface.png"] = speedup_surface(result.runs)
    return figs
