"""report.md, one function per section (`SECTIONS`), each written only when the tables
it reads are there (a demo run with ``--parts`` may leave some out)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from specsim import schema as S
from specsim.report.fidelity import (decomposition_summary, decomposition_table, has_inrun,
                                     machine_summary)
from specsim.report.overview import headline_section
from specsim.report.policies import policies_section
from specsim.report.trees import trees_section
from specsim.report.tables import (alpha_by_kind, drafter_alpha_table, drafter_speedup_table,
                                   hardware_table, markdown_table, speedup_table, worst_runs)


def _header(result) -> list[str]:
    s, env = result.settings, result.environment
    return [f"# specsim demo: {env.get('model')} on {', '.join(env['devices'])}", "",
            f"Command: `specsim demo{' --quick' if s.quick else ''}` · parts "
            f"{', '.join(s.parts)} · date {env['date']} · commit {env['git_commit']} · jax "
            f"{env['jax']} / jaxlib {env['jaxlib']} · CPU {env['cpu']} ({env['cpu_count']} "
            f"cores) · dtype {env['dtype']} · layer loop {env.get('layer_loop')} · matmul "
            f"{env.get('matmul', 'xla')} · {_compiler(env)} · seed {env['seed']} · wall "
            f"{env.get('wall_s')} s{_part_times(env)}", ""]


def _part_times(env) -> str:
    """" (roofline 80 s, instrument 200 s, ...)": each part's wall time, where recorded."""
    parts = env.get("part_wall_s") or {}
    return f" ({', '.join(f'{k} {v:.0f} s' for k, v in parts.items())})" if parts else ""


def _compiler(env) -> str:
    """The XLA options the programs compiled with (`specsim.models.compiler`), as the
    environment recorded them (older results did not)."""
    if "compiler_options" not in env:
        return "compiler options not recorded"
    opts = env["compiler_options"]
    return "compiler options " + (", ".join(f"{k}={v}" for k, v in opts.items()) or "XLA's defaults")


def _machine_section(result) -> list[str]:
    if result.ceilings.empty:
        return []
    c = result.ceilings[[S.DEVICE, "dtype", S.MATMUL_FLOPS_PER_S, S.COPY_BYTES_PER_S]].copy()
    c["matmul GFLOP/s"] = c.pop(S.MATMUL_FLOPS_PER_S) / 1e9
    c["copy GB/s"] = c.pop(S.COPY_BYTES_PER_S) / 1e9
    frows = [dict(model=name, t0_ms=f.t0 * 1e3, t0_se_ms=f.t0_se * 1e3,
                  P_GFLOPs=f.peak_flops / 1e9, W_GBs=f.bandwidth / 1e9,
                  W_se_GBs=f.bandwidth_se / 1e9, R2=f.r2, heldout_MAPE_pct=f.mape_heldout,
                  points=f.n_train + f.n_heldout) for name, f in result.fits.items()]
    return ["## 1. The machine and the fitted roofline", "",
            "Measured ceilings (large matmul, large copy counting read + write):", "",
            markdown_table(c, ".1f"), "",
            "Roofline fits t(n) = t0 + max(FLOPs/P, bytes/W) to each model's forward sweep "
            "(FLOPs and bytes from `roofline.forward_cost`; 25% of points held out):", "",
            markdown_table(pd.DataFrame(frows), ".3g"), "",
            "![roofline](roofline.png) ![latency](latency_vs_tokens.png)", ""]


def _fidelity_section(result) -> list[str]:
    if result.runs.empty:
        return []
    return ["## 2–3. Speculative decoding: predicted against measured", "",
            "α: accepted drafts per draft slot; measured speedup: autoregressive decode time "
            "per token over speculative decode time per token (prefill removed), mean over "
            f"the kinds of work {list(result.settings.kinds)}, with its 95% interval (`ci_lo`, "
            "`ci_hi`, mean over the kinds); `pred_prior`: the prediction before the run "
            "(fitted roofline, the drafter's α known beforehand); `pred_iid` uses E(α, K) for "
            "the run's one measured α, `pred_pos` its per-position rates, both with the pass "
            "times of the run's own rounds (in-run parts) or the fitted roofline's (older "
            "tables); `pred_swept` the per-position rates with the forward sweep's own median "
            "pass times; `overhead`: measured decode time over iterations × (K·t_draft + "
            "t_verify(K+1)); `err_*_%`: each prediction's relative error (the report's "
            "MAPEs are in the one table under the headline).",
            "",
            markdown_table(speedup_table(result), ".2f"), "",
            "Largest misses:", "", markdown_table(worst_runs(result), ".2f"), "",
            "![speedup](speedup_vs_k.png)", "", "![acceptance](acceptance_by_position.png)", "",
            "α by kind of work (mean over K):", "", markdown_table(alpha_by_kind(result), ".2f"), ""]


def _hardware_section(result) -> list[str]:
    if result.hardware.empty:
        return []
    hw = hardware_table(result)
    return ["## 4. The same acceptance on other hardware", "",
            "Speedup from the roofline of the model's FLOPs and bytes in "
            f"{result.settings.hardware_dtype} on datasheet rows (no launch overhead, so small "
            "models look more memory-bound than they run), beside this machine's fitted "
            "roofline:", "", markdown_table(hw, ".2f"), ""]


def _inrun_section(result) -> list[str]:
    runs = result.runs
    if not has_inrun(runs):
        return []
    clock = runs[S.CLOCK].iloc[0] if S.CLOCK in runs else "wall"
    lines = ["## Predicted against measured, in-run costs", "",
             f"Clock: {clock}. Timing: every speculative run is timed in paired rounds, "
             "runs of the same rows and K share a block: each round its plain-decoding "
             "baseline, the runs back to back, and the pass programs their predictions read in sets before and after them (`specsim.experiment.paired`); the "
             "measured speedup is the ratio of the medians over rounds, each round's times "
             "in units of that round's baseline (so a swing of the machine's speed over a "
             "round cancels), and its 95% interval (`measured_speedup_ci_lo`/`_hi`) a "
             "bootstrap over rounds (`specsim.experiment.intervals`); every timed call's "
             "seconds, in the order they ran, are in `timed_calls.csv`. Rounds go on until that interval is within "
             "the target half-width or the part's time budget is spent (`rounds`, "
             "`stopped`). The prediction before the run (`pred_speedup_prior`, the headline) "
             "takes every pass time from the fitted roofline and the drafter's α known "
             "beforehand: set for the instrument, from untimed calibration runs on other "
             "prompts of the same kind for a real drafter (`acceptance_prior.csv`). The "
             "in-run prediction `predicted_speedup` = E_effective · t_target_1 / (K · "
             "t_draft + t_verify) takes the pass times of the run's own rounds "
             "(`specsim.pass_costs`: same layer loop, cache length, batch, padded shapes) "
             "and the acceptance the run had, its n/I; its miss splits exactly into two "
             "terms (100·ln ratio) adding up to `err_total_pct`: cost model (pass program "
             "vs the step inside the autoregressive run) and residual loop overhead (the "
             "iteration inside the run vs K·t_draft + t_verify). The acceptance model "
             "stands apart: `err_acceptance_pct` is E_model, the expected tokens per "
             "iteration of a run of this length at the run's own rates α_j per slot, whose "
             "slowest batch row ends it, against n/I. Their errors are in the headline's "
             "table.", "",
             "Error decomposition by drafter and batch (log-percent; `err_prior_pct` = "
             "`err_prior_alpha_pct` (the α known before the run against the run's n/I) + "
             "`err_prior_fit_pct` (the fitted roofline's pass times against the run's "
             "own) + `err_total_pct` (the in-run miss) = the two terms after it; the "
             "acceptance model's term last):",
             "",
             markdown_table(decomposition_summary(runs), ".1f"), "",
             "![surface](speedup_surface.png)", "",
             "![predicted vs measured](predicted_vs_measured_band.png)", ""]
    be = getattr(result, "tables", {}).get(S.BREAK_EVEN)
    if be is not None and not be.empty:
        lines += ["Break-even batch (speculation stops paying; inf: pays on the whole grid):",
                  "", markdown_table(be, ".1f"), ""]
    return lines + ["Every run:", "", markdown_table(decomposition_table(runs), ".2f"), ""]


def _machine_state_section(result) -> list[str]:
    m = machine_summary(result)
    if not m:
        return []
    rows = []
    for name, key, scale, unit in (("matmul", "matmul_flops_per_s", 1e9, "GFLOP/s"),
                                   ("copy", "copy_bytes_per_s", 1e9, "GB/s")):
        a, b = m["start"].get(key, np.nan), m["end"].get(key, np.nan)
        rows.append({"ceiling": f"{name} ({unit})", "start": a / scale, "end": b / scale,
                     "change %": 100 * m["drift"][key]})
    load = (m["start"].get("load_1min", np.nan), m["end"].get("load_1min", np.nan))
    timing = pd.DataFrame(getattr(result, "environment", {}).get("timing", []))
    lines = ["## The machine while it ran", "",
             "Ceilings measured at the start and the end of the demo (1024² matmul, 1 GiB "
             f"copy); load average {load[0]:.1f} at the start, {load[1]:.1f} at the end "
             f"({m['start'].get('cpu_count')} cores):", "", markdown_table(pd.DataFrame(rows), ".1f"), "",
             f"CPU time over wall time of the timed calls: median {m['cpu_over_wall']:.2f} "
             "over runs (above 1: the kernels use several threads; a drop from one run to "
             "the next means other processes took the cores). Spread of each run's own "
             f"baseline over its rounds, (max − min) / median: median "
             f"{m['baseline_spread_pct']:.1f}%. {m['converged']} of {m['runs']} runs reached "
             f"±{100 * m['target_half_width']:g}% on the measured speedup."]
    if not timing.empty:
        lines += ["", "Timed rounds per group:", "", markdown_table(timing, ".2f")]
    if m["unconverged"]:
        lines += ["", "Runs that did not converge (and why their rounds stopped):", "",
                  markdown_table(pd.DataFrame(m["unconverged"]), ".2f")]
    if m["busy"]:
        lines += ["", "**Too busy for the stated precision**: " + "; ".join(m["busy"]) + "."]
    return lines + [""]


def _drafters_section(result) -> list[str]:
    t = getattr(result, "tables", {})
    if S.DRAFTER_COSTS not in t:
        return []
    costs = t[S.DRAFTER_COSTS].drop(columns=[S.T_TARGET_1, S.T_VERIFY], errors="ignore")
    return ["## Drafters: quantised self-draft, distilled, n-gram, layer-skip", "",
            "α per draft slot by kind of work (`alpha_by_kind.csv`; a quantised target is a "
            "row of its own):", "", markdown_table(drafter_alpha_table(t[S.ALPHA_BY_KIND]), ".2f"), "",
            "Cost ratio c: measured from the loop's own draft and target programs "
            "(`pass_costs`, same interleaved rounds), from the roofline's bytes at the "
            "draft's stored weight width (`c_bytes`), and with the fp32 copies XLA:CPU "
            "writes and reads of every dequantised matrix (`c_bytes_materialised`):", "",
            markdown_table(costs, ".3g"), "",
            "Speedup against K at temperature 0 (decode time per token: each call's loop "
            "program timed alone, its prefills run before it untimed; older tables "
            "subtracted a prefill timed alone, and `prefill_removed` false marks "
            "their rows where it took up a whole run; "
            "`pred_iid`/`pred_pos`: E(α, K) / the run's tokens per iteration with the "
            "measured pass times; `pred_closed_form`: Thm 3.8 at the measured c):", "",
            markdown_table(drafter_speedup_table(t[S.DRAFTER_SPEEDUP]), ".2f"), "",
            "![drafters](drafters_speedup_vs_k.png) ![alpha](drafters_alpha_by_kind.png)", "",
            "What limits each drafter (closed form at temperature 0, mean α over the kinds; "
            "α and c needed for 1.5× minimised over K ≤ 16):", "",
            markdown_table(t[S.DRAFTER_LIMITS], ".3g"), ""]


SECTIONS: list[Callable[[object], list[str]]] = [
    _header, headline_section, _machine_section, _fidelity_section, _hardware_section,
    _inrun_section, _machine_state_section, _drafters_section, policies_section, trees_section]
"""report.md's sections in order; a new demo part adds the function for its own."""


def report_md(result) -> str:
    return "\n".join(line for section in SECTIONS for line in section(result)) + "\n"
