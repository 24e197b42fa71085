"""The iteration cost model on measured CPU ceilings (`specsim.experiment.ceiling_prediction`):
the hardware row, the CPU loop's fit to a pass sweep, and a synthetic demo folder whose
speedups are computed by hand."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from specsim.errors import InvalidArgument
from specsim.experiment import ceiling_prediction as cp
from specsim.iteration_cost import PRIOR_OVERHEADS, CeilingUse, pass_cost
from specsim.presets import get_shape

TARGET = get_shape("smollm2-135m")
PEAK, BW = 200e9, 20e9
EF, EB, P = 0.5, 0.4, 1.7          # the synthetic machine's CPU loop


def _ceilings(rows=((PEAK, BW),)):
    return pd.DataFrame([dict(device="cpu:0", platform="cpu", dtype="float32",
                              matmul_flops_per_s=p, copy_bytes_per_s=b) for p, b in rows])


def _bare(n, b, S):
    c = pass_cost(TARGET, cp.hardware_from_ceilings(_ceilings()), n_tokens=n, batch=b,
                  context=S, use=CeilingUse(1.0, 1.0, overlap=False))
    return c.compute_s, c.memory_s


def _norm(compute, memory, p):
    return (compute ** p + memory ** p) ** (1 / p)


def _t(n, b, S):
    """The synthetic loop's pass seconds, by hand: the p-norm of FLOPs/(peak ef) and
    bytes/(bw eb)."""
    compute, memory = _bare(n, b, S)
    return _norm(compute / EF, memory / EB, P)


def _sweep(clock="wall", factor=1.0):
    pts = [(1, 1), (2, 1), (3, 1), (5, 1), (9, 1), (1, 4), (5, 4), (1, 16), (5, 16)]
    return pd.DataFrame([dict(model="smollm2-135m passes", n_tokens=n, batch=b, context=32,
                              time_s=_t(n, b, 32) * factor, clock=clock) for n, b in pts])


def test_hardware_from_ceilings_takes_the_medians():
    hw = cp.hardware_from_ceilings(_ceilings([(100e9, 10e9), (300e9, 30e9), (200e9, 50e9)]))
    assert hw.peak("float32") == pytest.approx(200e9) and hw.bandwidth == pytest.approx(30e9)
    assert hw.kind == "cpu"
    with pytest.raises(InvalidArgument, match="copy_bytes_per_s"):
        cp.hardware_from_ceilings(_ceilings().drop(columns="copy_bytes_per_s"))
    with pytest.raises(InvalidArgument, match="finite positive"):
        cp.hardware_from_ceilings(_ceilings([(0.0, 1e9)]))


@pytest.mark.parametrize("clock,factor", [("wall", 1.0), ("cpu", 1.9)])
def test_the_cpu_loop_fit_recovers_a_known_loop(clock, factor):
    """Times on the cpu clock are divided by its CPU-over-wall factor before the fit."""
    e = cp.fit_cpu_loop(cp.hardware_from_ceilings(_ceilings()), _sweep(clock, factor),
                        cpu_over_wall=factor)
    assert e.use.flops_efficiency == pytest.approx(EF, rel=1e-4)
    assert e.use.bandwidth_efficiency == pytest.approx(EB, rel=1e-4)
    assert e.use.blend == pytest.approx(P, rel=1e-4)
    assert not e.use.overlap and e.overheads.layer_floor == 0.0 and e.overheads.step == 0.0
    assert e.overheads.iteration == PRIOR_OVERHEADS["xla"].iteration
    assert e.sweep_points == 9 and e.sweep_mape < 1e-4
    with pytest.raises(InvalidArgument, match="clock"):
        cp.clock_factor("sundial", 1.0)


def _folder(tmp_path):
    _ceilings().to_csv(tmp_path / "ceilings.csv", index=False)
    _sweep().to_csv(tmp_path / "pass_sweep.csv", index=False)
    base = dict(temperature=0.0, kind="code", new_tokens=3, cache_len=64, clock="wall",
                cpu_over_wall=1.0, alpha_set=math.nan, draft_layers=math.nan)
    runs = [dict(base, drafter="autoregressive", drafter_kind="autoregressive", k=0, batch=1,
                 measured_speedup=math.nan),
            dict(base, drafter="instrument:a0.5:L0", drafter_kind="instrument", k=2, batch=1,
                 alpha_set=0.5, draft_layers=0, measured_speedup=1.0),
            dict(base, drafter="ngram-3", drafter_kind="ngram", k=2, batch=1,
                 measured_speedup=1.5, E_effective=2.0),
            dict(base, drafter="layer-skip:6/30", drafter_kind="layer-skip", k=2, batch=1,
                 measured_speedup=0.5)]
    pd.DataFrame(runs).to_csv(tmp_path / "runs.csv", index=False)
    # the untimed run on the prompt, and other prompts' (which a prediction never reads
    # where the prompt's own is there)
    cal = [dict(drafter=d, kind="code", temperature=0.0, position=j + 1, alpha=a, count=10,
                prompts=2, source=src) for d in ("ngram-3", "layer-skip:6/30")
           for src, rates in (("this prompt", (0.8, 0.3)), ("other prompts", (0.1, 0.9)))
           for j, a in enumerate(rates)]
    pd.DataFrame(cal).to_csv(tmp_path / "acceptance_prior.csv", index=False)
    return tmp_path


def test_a_synthetic_folder_by_hand(tmp_path):
    """Two new tokens after the first (new_tokens 3) at batch 1: one iteration when the
    first draft is accepted (α_1), else two, so τ = 2 / (2 - α_1). The speedup is
    τ t(1) / (t(K+1) + iteration + K (draft pass + draft call)) with the synthetic loop's
    t(n) = the p-norm of compute / ef and memory / eb."""
    pred, engine, hw = cp.predict_runs(_folder(tmp_path))
    assert list(pred["drafter"]) == ["instrument:a0.5:L0", "ngram-3", "layer-skip:6/30"]
    S = 32                                    # half the cache
    it = PRIOR_OVERHEADS["xla"].iteration
    call = PRIOR_OVERHEADS["xla"].draft_call
    t1, t3 = _t(1, 1, S), _t(3, 1, S)
    # the layer-skip draft: its 6 kept layers and the target's head
    skip = pass_cost(dataclasses.replace(TARGET, n_layers=6), hw, n_tokens=1, batch=1,
                     context=S, use=CeilingUse(1.0, 1.0, overlap=False))
    t_skip = _norm(skip.compute_s / EF, skip.memory_s / EB, P)
    want = {"instrument:a0.5:L0": (2 / 1.5) * t1 / (t3 + it),
            "ngram-3": (2 / 1.2) * t1 / (t3 + it),
            "layer-skip:6/30": (2 / 1.2) * t1 / (t3 + it + 2 * (t_skip + call))}
    for r in pred.itertuples():
        assert r.predicted == pytest.approx(want[r.drafter], rel=2e-3), r.drafter
    ng = pred.set_index("drafter").loc["ngram-3"]
    assert ng["tau"] == pytest.approx(2 / 1.2)
    assert ng["error"] == pytest.approx(want["ngram-3"] / 1.5 - 1, rel=2e-3)
    # the diagnostic with the run's own τ (2.0) uses the same costs
    assert ng["predicted_run_tau"] == pytest.approx(2.0 * t1 / (t3 + it), rel=2e-3)
    assert pred.set_index("drafter")["alpha_source"].tolist() == ["set", "this prompt",
                                                                  "this prompt"]
    # an older folder, other prompts' rates without a source column: read as such
    cal = pd.read_csv(tmp_path / "acceptance_prior.csv")
    cal[cal["source"] == "this prompt"].drop(columns="source").to_csv(
        tmp_path / "acceptance_prior.csv", index=False)
    old = cp.predict_runs(tmp_path)[0].set_index("drafter")
    assert old["alpha_source"].tolist() == ["set", "other prompts", "other prompts"]
    assert old.loc["ngram-3", "predicted"] == pytest.approx(want["ngram-3"], rel=2e-3)


def test_score_by_hand():
    pred = pd.DataFrame(dict(drafter_kind=["ngram", "ngram", "feature-head"],
                             batch=[1, 4, 1], measured=[2.0, 1.0, 1.0],
                             predicted=[2.2, 0.7, 1.05]))
    s = cp.score(pred).set_index("group")
    assert s.loc["all runs", "mape"] == pytest.approx((0.1 + 0.3 + 0.05) / 3)
    assert s.loc["all runs", "mean_signed"] == pytest.approx((0.1 - 0.3 + 0.05) / 3)
    assert s.loc["all runs", "worst"] == pytest.approx(-0.3)
    assert s.loc["drafter ngram", "rows"] == 2 and s.loc["batch 4", "mape"] == pytest.approx(0.3)
    assert s.loc["all runs but the feature head", "within_10"] == pytest.approx(0.5)


def test_drafter_names_are_checked(tmp_path):
    hw = cp.hardware_from_ceilings(_ceilings())
    e = cp.fit_cpu_loop(hw, _sweep())
    row = dict(drafter="layer-skip:all", drafter_kind="layer-skip", batch=1)
    with pytest.raises(InvalidArgument, match="layer-skip:<kept>/<of>"):
        cp.draft_call(row, TARGET, hw, e, context=32)
    with pytest.raises(InvalidArgument, match="drafter kind"):
        cp.draft_call(dict(row, drafter_kind="oracle"), TARGET, hw, e, context=32)
    with pytest.raises(InvalidArgument, match="no runs.csv"):
        cp.predict_runs(tmp_path)
    assert np.isfinite(cp.draft_call(dict(row, drafter="feature-head:64",
                                          drafter_kind="feature-head"),
                                     TARGET, hw, e, context=32).memory_s)


def test_the_cpu_loop_fit_splits_at_the_kernel_rows():
    """Passes above the kernel's rows run XLA's dots: a sweep made of two known loops
    (the narrow one up to 8 rows, the wide one adding compute and memory) is fitted side
    by side, and `regime` picks by rows."""
    ef2, eb2 = 0.8, 0.3
    sweep = _sweep()
    hw = cp.hardware_from_ceilings(_ceilings())
    rows = sweep["n_tokens"] * sweep["batch"]
    for i in sweep.index[rows > 8]:
        compute, memory = _bare(int(sweep.at[i, "n_tokens"]), int(sweep.at[i, "batch"]), 32)
        sweep.at[i, "time_s"] = compute / ef2 + memory / eb2
    e = cp.fit_cpu_loop(hw, sweep, kernel_rows=8)
    assert e.kernel_rows == 8 and e.sweep_points == 9 and e.sweep_mape < 1e-4
    assert (e.use.flops_efficiency, e.use.bandwidth_efficiency, e.use.blend) == \
        pytest.approx((EF, EB, P), rel=1e-3)
    assert (e.wide_use.flops_efficiency, e.wide_use.bandwidth_efficiency) == \
        pytest.approx((ef2, eb2), rel=1e-3)
    assert e.wide_use.blend == pytest.approx(1.0, abs=1e-3)
    assert e.regime(8) == e.use and e.regime(9) == e.wide_use
    # without the split, one fit over both loops misses
    one = cp.fit_cpu_loop(hw, sweep)
    assert one.wide_use is None and one.regime(80) == one.use
    assert one.sweep_mape > 0.01
    # too few points above the split for a fit of their own: one fit
    few = sweep[(rows <= 8) | (sweep["batch"] == 16) & (sweep["n_tokens"] == 5)]
    assert cp.fit_cpu_loop(hw, few, kernel_rows=8).wide_use is None


def test_repeated_demos_round_trip_and_score_each_demo_apart(tmp_path):
    """`write_repeats` stacks two demos' tables (the second machine half as fast in its
    ceilings and its passes: the same fitted efficiencies); `read_repeats` gives each
    demo's tables back, and its predictions equal the folder's own; a failed write
    leaves the old dataset as it was."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    a, b = _folder(tmp_path / "a"), _folder(tmp_path / "b")
    _ceilings([(PEAK / 2, BW / 2)]).to_csv(b / "ceilings.csv", index=False)
    _sweep(factor=2.0).to_csv(b / "pass_sweep.csv", index=False)
    out = cp.write_repeats({"first": a, "second (slow)": b}, tmp_path / "repeats")
    demos = cp.read_repeats(out)
    assert list(demos) == ["first", "second (slow)"]
    for label, folder in (("first", a), ("second (slow)", b)):
        runs, ceilings, sweep, cal, kernel_rows = demos[label]
        assert kernel_rows is None and "demo" not in runs.columns
        mine, engine, _ = cp.predict_tables(runs, ceilings, sweep, cal,
                                            kernel_rows=kernel_rows)
        pd.testing.assert_frame_equal(mine, cp.predict_runs(folder)[0])
        assert (engine.use.flops_efficiency, engine.use.bandwidth_efficiency,
                engine.use.blend) == pytest.approx((EF, EB, P), rel=1e-3)
    table = cp.repeat_scores(demos).set_index("demo")
    for label in demos:
        pred = cp.predict_runs(a if label == "first" else b)[0]
        assert table.loc[label, "mape"] == pytest.approx(np.mean(np.abs(pred["error"])))
    assert table.loc["first", "blend"] == pytest.approx(P, rel=1e-3)
    assert table.loc["first", "rows"] == 3
    before = sorted(p.name for p in out.iterdir())
    (b / "runs.csv").unlink()
    with pytest.raises(InvalidArgument, match="no runs.csv"):
        cp.write_repeats({"first": a, "broken": b}, out)
    assert sorted(p.name for p in out.iterdir()) == before
    assert list(cp.read_repeats(out)) == ["first", "second (slow)"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("repeats.")] == []
    with pytest.raises(InvalidArgument, match="no demos.csv"):
        cp.read_repeats(tmp_path)
    with pytest.raises(InvalidArgument, match="at least one"):
        cp.write_repeats({}, out)


def test_demo_spread_by_hand(tmp_path):
    """Pairs only within a commit; the plain baseline is not a run; runs one demo lacks
    are left out of the pair."""
    pd.DataFrame({"demo": ["a1", "a2", "b1"], "git_commit": ["aaa", "aaa", "bbb"],
                  "cpu": ["x"] * 3, "matmul": ["kernel"] * 3}).to_csv(tmp_path / "demos.csv",
                                                                     index=False)
    setup = dict(kind="code", batch=1, temperature=0.0)
    rows = [dict(demo=d, drafter=dr, k=k, measured_speedup=s, **setup)
            for d, dr, k, s in [("a1", "autoregressive", 0, 1.0), ("a2", "autoregressive", 0, 1.0),
                                ("a1", "ngram-3", 4, 2.0), ("a2", "ngram-3", 4, 1.6),
                                ("a1", "layer-skip", 4, 1.1), ("a2", "layer-skip", 4, 1.0),
                                ("a1", "ngram-3", 2, 1.5),
                                ("b1", "ngram-3", 4, 9.0)]]
    pd.DataFrame(rows).to_csv(tmp_path / "runs.csv", index=False)
    spread = cp.demo_spread(tmp_path)
    assert len(spread) == 1
    r = spread.iloc[0]
    assert (r["commit"], r["demo_a"], r["demo_b"], r["runs"]) == ("aaa", "a1", "a2", 2)
    assert r["mean"] == pytest.approx((0.25 + 0.1) / 2)
    assert r["largest"] == pytest.approx(0.25)
