"""Writing the demo's results: a table for the terminal, and ``results/demo/`` with
report.md, CSV/JSON files and PNG figures. The folder is built beside the target and
swapped in at the end, so an interrupted run never leaves a half-written report."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd


def _fmt(df: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """A DataFrame as a GitHub markdown table (no extra dependency)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(str(c) for c in cols) + " |",
             "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in df.iterrows():
        cells = []
        for v in row:
            if isinstance(v, (float, np.floating)):
                cells.append(format(v, floatfmt) if np.isfinite(v) else "nan")
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def speedup_table(result) -> pd.DataFrame:
    """One row per (drafter, temperature, K): mean α and speedups over the kinds of
    work, and the relative error of each prediction."""
    spec = result.runs[result.runs["drafter"] != "autoregressive"]
    g = spec.groupby(["drafter", "temperature", "k"], as_index=False).agg(
        alpha=("alpha", "mean"), tokens_per_iter=("tokens_per_iteration", "mean"),
        measured=("measured_speedup", "mean"), pred_iid=("pred_speedup_iid", "mean"),
        pred_pos=("pred_speedup_positional", "mean"),
        pred_swept=("pred_speedup_swept_costs", "mean"), overhead=("loop_overhead_ratio", "mean"))
    for col in ("iid", "pos", "swept"):
        g[f"err_{col}_%"] = 100 * (g[f"pred_{col}"] - g["measured"]) / g["measured"]
    return g


def summary_table(result) -> str:
    t = speedup_table(result)
    out = [_fmt(t, ".2f"), "",
           f"MAPE of predicted vs measured speedup over {int((result.runs['drafter'] != 'autoregressive').sum())} "
           f"runs: i.i.d. α {result.mape('pred_speedup_iid'):.1f}%, per-position α "
           f"{result.mape('pred_speedup_positional'):.1f}% (fitted costs); per-position α "
           f"with the sweep's measured pass times {result.mape('pred_speedup_swept_costs'):.1f}%"]
    return "\n".join(out)


def _report_md(result) -> str:
    s = result.settings
    env = result.environment
    lines = [f"# specsim demo: {env.get('model')} on {', '.join(env['devices'])}", "",
             f"Command: `specsim demo{' --quick' if s.quick else ''}` · date {env['date']} · "
             f"commit {env['git_commit']} · jax {env['jax']} / jaxlib {env['jaxlib']} · "
             f"CPU {env['cpu']} ({env['cpu_count']} cores) · dtype {env['dtype']} · "
             f"layer loop {env.get('layer_loop')} · seed {env['seed']} · wall {env.get('wall_s')} s",
             "", "## 1. The machine and the fitted roofline", ""]
    c = result.ceilings[["device", "dtype", "matmul_flops_per_s", "copy_bytes_per_s"]].copy()
    c["matmul GFLOP/s"] = c.pop("matmul_flops_per_s") / 1e9
    c["copy GB/s"] = c.pop("copy_bytes_per_s") / 1e9
    lines += ["Measured ceilings (large matmul, large copy counting read + write):", "",
              _fmt(c, ".1f"), ""]
    frows = []
    for name, f in result.fits.items():
        frows.append(dict(model=name, t0_ms=f.t0 * 1e3, t0_se_ms=f.t0_se * 1e3,
                          P_GFLOPs=f.peak_flops / 1e9, W_GBs=f.bandwidth / 1e9,
                          W_se_GBs=f.bandwidth_se / 1e9, R2=f.r2, heldout_MAPE_pct=f.mape_heldout,
                          points=f.n_train + f.n_heldout))
    lines += ["Roofline fits t(n) = t0 + max(FLOPs/P, bytes/W) to each model's forward sweep "
              "(FLOPs and bytes from `roofline.forward_cost`; 25% of points held out):", "",
              _fmt(pd.DataFrame(frows), ".3g"), "",
              "![roofline](roofline.png) ![latency](latency_vs_tokens.png)", "",
              "## 2–3. Speculative decoding: predicted against measured", "",
              "α: accepted drafts per draft slot; measured speedup: autoregressive decode time "
              "per token over speculative decode time per token (prefill removed), mean over "
              f"the kinds of work {list(s.kinds)}; `pred_iid` uses E(α, K) for one α, `pred_pos` "
              "the per-position rates (equal to the measured tokens per iteration, so its "
              "error is the cost model's alone), both with the fitted roofline's pass times; "
              "`pred_swept` the per-position rates with the sweep's own median pass times "
              "(no fit: what remains is the loop and the finite run); `overhead`: measured "
              "decode time over iterations × (K·t_draft + t_verify(K+1)) from the fit.", "",
              _fmt(speedup_table(result), ".2f"), "",
              f"**MAPE** over every run: i.i.d. α {result.mape('pred_speedup_iid'):.1f}%, "
              f"per-position α {result.mape('pred_speedup_positional'):.1f}%; per-position α "
              f"with swept pass times {result.mape('pred_speedup_swept_costs'):.1f}%.", ""]
    spec = result.runs[result.runs["drafter"] != "autoregressive"].copy()
    spec["err_%"] = 100 * (spec["pred_speedup_iid"] - spec["measured_speedup"]) / spec["measured_speedup"]
    worst = spec.reindex(spec["err_%"].abs().sort_values(ascending=False).index).head(5)
    lines += ["Largest misses (i.i.d. prediction):", "",
              _fmt(worst[["drafter", "temperature", "k", "kind", "alpha", "measured_speedup",
                          "pred_speedup_iid", "pred_speedup_positional", "err_%"]], ".2f"), "",
              "![speedup](speedup_vs_k.png)", "", "![acceptance](acceptance_by_position.png)", "",
              "α by kind of work (mean over K):", ""]
    by_kind = spec.pivot_table(index=["drafter", "temperature"], columns="kind", values="alpha",
                               aggfunc="mean").reset_index()
    lines += [_fmt(by_kind, ".2f"), "", "## 4. The same acceptance on other hardware", "",
              f"Speedup from the roofline of the model's FLOPs and bytes in {s.hardware_dtype} "
              "on datasheet rows (no launch overhead, so small models look more memory-bound "
              "than they run), beside this machine's fitted roofline:", ""]
    hw = result.hardware.pivot_table(index=["drafter", "temperature", "k", "alpha"],
                                     columns="hardware", values="pred_speedup").reset_index()
    lines += [_fmt(hw, ".2f"), ""]
    return "\n".join(lines) + "\n"


def _save_fig(fig, path: Path) -> None:
    fig.savefig(path, dpi=110)


def write_demo(result, out_dir: Path) -> list[str]:
    """Write every file into a fresh folder beside ``out_dir`` and swap it in."""
    from specsim import plots

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        result.runs.to_csv(tmp / "runs.csv", index=False)
        result.sweeps.to_csv(tmp / "sweeps.csv", index=False)
        result.ceilings.to_csv(tmp / "ceilings.csv", index=False)
        result.hardware.to_csv(tmp / "hardware.csv", index=False)
        speedup_table(result).to_csv(tmp / "speedup_table.csv", index=False)
        (tmp / "fits.json").write_text(json.dumps(
            {k: v.as_dict() for k, v in result.fits.items()}, indent=1, default=str))
        (tmp / "environment.json").write_text(json.dumps(result.environment, indent=1, default=str))
        target = result.environment.get("model")
        sweep_t = result.sweeps[result.sweeps["model"] == target]
        fit_t = result.fits[target]
        _save_fig(plots.roofline_plot(sweep_t, fit_t), tmp / "roofline.png")
        _save_fig(plots.latency_vs_tokens(sweep_t, fit_t), tmp / "latency_vs_tokens.png")
        _save_fig(plots.speedup_predicted_vs_measured(result.runs), tmp / "speedup_vs_k.png")
        _save_fig(plots.acceptance_by_position(result.runs), tmp / "acceptance_by_position.png")
        (tmp / "report.md").write_text(_report_md(result))
        files = sorted(p.name for p in tmp.iterdir())
        old = None
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return files
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
