"""specsim.bench: timing statistics, atomic append-only measurement files, and a sweep on
a tiny model. No wall-clock assertions: only counts, shapes, consistency and files."""

import json
import os
import re
import time

import numpy as np
import pandas as pd
import pytest

from specsim import bench
from specsim.models import Model, compiler
from specsim.models.config import TINY_LLAMA
from specsim.roofline import forward_cost


def test_stats_from_times_exact():
    s = bench.stats_from_times([4.0, 1.0, 3.0, 2.0, 5.0], warmup=2)
    assert (s.median, s.min, s.max, s.q25, s.q75) == (3.0, 1.0, 5.0, 2.0, 4.0)
    assert s.mean == 3.0 and s.std == pytest.approx(np.sqrt(2.0))
    assert s.iqr == 2.0 and s.rel_iqr == pytest.approx(2 / 3)
    assert s.repeats == 5 and s.warmup == 2 and s.times == (4.0, 1.0, 3.0, 2.0, 5.0)
    assert s.as_dict("t_")["t_median"] == 3.0 and "t_times" not in s.as_dict("t_")


def test_time_fn_calls_warmup_then_repeats_and_blocks():
    import jax.numpy as jnp

    calls = []

    def fn(x, scale=1.0):
        calls.append(x)
        return jnp.asarray(x) * scale

    s = bench.time_fn(fn, 2.0, scale=3.0, repeats=5, warmup=3)
    assert len(calls) == 8 and s.repeats == 5 and s.warmup == 3
    assert s.min <= s.median <= s.max and len(s.times) == 5
    with pytest.raises(ValueError, match="repeats"):
        bench.time_fn(fn, 1.0, repeats=0)
    with pytest.raises(ValueError, match="warmup"):
        bench.time_fn(fn, 1.0, warmup=-1)


def _frame(n):
    return pd.DataFrame({"n_tokens": np.arange(1, n + 1), "time_s": np.linspace(1e-3, 2e-3, n)})


def test_save_appends_and_keeps_metadata(tmp_path):
    m1 = {"run_id": "aaa", "model": "tiny", "seed": 0}
    m2 = {"run_id": "bbb", "model": "tiny", "seed": 1}
    csv_path, json_path = bench.save_measurements(_frame(3), "sweep", m1, tmp_path)
    bench.save_measurements(_frame(2), "sweep", m2, tmp_path)
    df = bench.load_measurements("sweep", tmp_path)
    assert len(df) == 5 and list(df["run_id"]) == ["aaa"] * 3 + ["bbb"] * 2
    assert [r["run_id"] for r in json.loads(json_path.read_text())] == ["aaa", "bbb"]
    last = bench.load_measurements(csv_path, run_id="last")
    assert len(last) == 2 and last.attrs["runs"] == [m2]
    with pytest.raises(ValueError, match="run_id"):
        bench.load_measurements(csv_path, run_id="zzz")
    with pytest.raises(ValueError, match="run_id"):
        bench.save_measurements(_frame(1), "sweep", {"model": "x"}, tmp_path)
    with pytest.raises(ValueError, match="name"):
        bench.save_measurements(_frame(1), "../escape", m1, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.csv", "sweep.json"]


@pytest.mark.parametrize("fail_at", ["fsync", "replace"])
def test_interrupted_write_leaves_old_file_and_no_partial(tmp_path, monkeypatch, fail_at):
    bench.save_measurements(_frame(3), "sweep", {"run_id": "aaa"}, tmp_path)
    before = (tmp_path / "sweep.csv").read_bytes()

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt  # the user presses Ctrl-C mid-write

    monkeypatch.setattr(os, fail_at, interrupt)
    with pytest.raises(KeyboardInterrupt):
        bench.save_measurements(_frame(4), "sweep", {"run_id": "bbb"}, tmp_path)
    monkeypatch.undo()
    assert (tmp_path / "sweep.csv").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.csv", "sweep.json"]
    assert len(bench.load_measurements("sweep", tmp_path)) == 3


def test_interrupted_first_write_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        bench.save_measurements(_frame(2), "fresh", {"run_id": "a"}, tmp_path / "m")
    assert list((tmp_path / "m").iterdir()) == []


def test_environment_records_what_a_number_needs():
    meta = bench.environment(model="tiny", seed=3, dtype="float32")
    for key in ("run_id", "date", "jax", "jaxlib", "devices", "hostname", "cpu", "git_commit"):
        assert meta[key], key
    assert meta["model"] == "tiny" and meta["seed"] == 3
    assert meta["compiler_options"] == compiler.options()   # what the programs compiled with
    json.dumps(meta)


def test_default_points_cover_the_axes():
    pts = bench.default_points()
    ns = sorted({n for n, b, c in pts if b == 1 and c == 256})
    assert ns[0] == 1 and ns[-1] >= 64
    assert {b for _, b, _ in pts} >= {1, 2, 4, 8}
    assert len({c for _, _, c in pts}) >= 4
    assert all(c >= n for n, _, c in pts)
    assert set(bench.default_points(quick=True)) < set(pts) or len(bench.default_points(True)) < len(pts)
    with pytest.raises(ValueError, match="context"):
        bench.sweep_forward(None, points=[(8, 1, 4)])


@pytest.fixture(scope="module")
def tiny_model():
    import jax

    from specsim.models.transformer import init_params

    return Model(TINY_LLAMA, init_params(jax.random.PRNGKey(0), TINY_LLAMA))


@pytest.mark.parametrize("interleave", [True, False])
def test_sweep_on_tiny_model(tiny_model, tmp_path, interleave):
    pts = [(1, 1, 16), (4, 2, 16), (8, 1, 32)]
    df = bench.sweep_forward(tiny_model, pts, repeats=3, warmup=1, progress=False,
                             interleave=interleave)
    assert list(zip(df["n_tokens"], df["batch"], df["context"])) == pts
    assert (df["time_s"] > 0).all() and (df["time_min"] <= df["time_s"]).all()
    assert (df["time_s"] <= df["time_max"]).all() and (df["time_repeats"] == 3).all()
    for row in df.itertuples():
        cost = forward_cost(TINY_LLAMA, row.batch, row.n_tokens, row.context)
        assert row.flops == cost.flops and row.bytes == cost.bytes
    meta = bench.environment(model=TINY_LLAMA.name, seed=0)
    bench.save_measurements(df, "tiny", meta, tmp_path)
    back = bench.load_measurements("tiny", tmp_path)
    pd.testing.assert_series_equal(back["time_s"], df["time_s"])


def test_forward_call_repeats_the_same_work(tiny_model):
    # the donated cache is fed back with its length reset: every call sees the same state
    call, compile_s = bench.make_forward_call(tiny_model, 3, 2, 24)
    first, second = np.asarray(call()), np.asarray(call())
    assert compile_s > 0 and first.shape == (2, 3, TINY_LLAMA.vocab_size)
    np.testing.assert_array_equal(first, second)


def test_forward_call_heads_as_the_prefills_run_them(tiny_model):
    """logits="last" is the target's prefill (the head at the last position), "none" a
    draft model's (the features, no head): both the last row of the full pass."""
    import jax.numpy as jnp
    from specsim.models.transformer import project

    full = np.asarray(bench.make_forward_call(tiny_model, 3, 2, 24)[0]())
    last = np.asarray(bench.make_forward_call(tiny_model, 3, 2, 24, logits="last")[0]())
    feats = np.asarray(bench.make_forward_call(tiny_model, 3, 2, 24, logits="none")[0]())
    assert last.shape == (2, 1, TINY_LLAMA.vocab_size) and feats.shape == (2, TINY_LLAMA.d_model)
    np.testing.assert_allclose(last[:, 0], full[:, -1], rtol=1e-5, atol=1e-6)
    head = np.asarray(project(tiny_model.params, tiny_model.cfg, jnp.asarray(feats)[:, None]))
    np.testing.assert_allclose(head[:, 0], full[:, -1], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="logits"):
        bench.make_forward_call(tiny_model, 3, 2, 24, logits="first")


def test_interleaved_rounds_prepare_staged_calls_outside_the_timed_region():
    events = []

    class Staged:
        def __init__(self, name):
            self.name = name

        def prepare(self):
            events.append(("prepare", self.name))

        def __call__(self):
            events.append(("call", self.name))
            return self.name

    def plain():
        events.append(("call", "plain"))
        return "plain"

    def clock():
        events.append(("clock",))
        return float(len(events))

    samples, outputs = bench.interleaved_rounds([Staged("a"), plain], 2,
                                                np.random.default_rng(0), clock=clock)
    assert outputs == ["a", "plain"] and all(len(s) == 2 for s in samples)
    for i, e in enumerate(events):
        if e == ("call", "a"):          # prepare, then the clock starts, the call, it stops
            assert events[i - 2:i + 2] == [("prepare", "a"), ("clock",), e, ("clock",)]
        if e == ("call", "plain"):
            assert events[i - 1] == ("clock",) and events[i - 2][0] != "prepare"
    assert events.count(("prepare", "a")) == 2


def test_interleaved_rounds_keep_the_fastest_of_inner_runs():
    """``inner``: a call runs that many times a turn, a staged call prepared once with as
    many copies; the sample is the least of the runs (a recording clock that advances by
    each run's scripted duration)."""
    now, log = [0.0], []
    durations = {"a": iter([3.0, 1.0, 2.0, 5.0, 4.0, 6.0]), "plain": iter([2.0, 2.5, 7.0,
                                                                            1.5, 1.5, 1.0])}

    class Staged:
        def prepare(self, copies=1):
            log.append(("prepare", copies))

        def __call__(self):
            now[0] += next(durations["a"])
            return "a"

    def plain():
        now[0] += next(durations["plain"])
        return "plain"

    samples, outputs = bench.interleaved_rounds([Staged(), plain], 2, np.random.default_rng(0),
                                                inner=3, clock=lambda: now[0])
    assert samples == [[1.0, 4.0], [2.0, 1.0]] and outputs == ["a", "plain"]
    assert log == [("prepare", 3)] * 2
    ticks = iter(np.arange(12.0)[:, None] * [1.0, 0.5] + [[0, 0], [3, 0], [0, 0], [1, 2]] * 3)
    samples, _ = bench.interleaved_rounds([lambda: None], 3, np.random.default_rng(0), inner=2,
                                          clock=lambda: next(ticks))   # (wall, cpu) at once
    np.testing.assert_allclose(samples[0], [[2.0, 0.5]] * 3)   # runs (4, .5), (2, 2.5): least of each
    with pytest.raises(ValueError, match="inner"):
        bench.interleaved_rounds([plain], 1, np.random.default_rng(0), inner=0)


def test_measure_ceilings_small():
    df = bench.measure_ceilings(matmul_size=64, copy_mib=1, repeats=2, warmup=1)
    assert len(df) >= 1
    assert (df["matmul_flops_per_s"] > 0).all() and (df["copy_bytes_per_s"] > 0).all()
    assert df["copy_bytes"].iloc[0] == 2 * 2**20                # read + write
    assert df["matmul_flops"].iloc[0] == 2 * 64**3
    with pytest.raises(ValueError, match="matmul_size"):
        bench.measure_ceilings(matmul_size=4)


# ---- command line ------------------------------------------------------------------------
def test_cli_bench_and_fit(tmp_path, capsys):
    from specsim.cli import main

    pts = ["1:1:16", "4:1:16", "8:2:32", "16:1:32"]
    assert main(["bench", "--model", "tiny-llama", "--quick", "--repeats", "2",
                 "--out", str(tmp_path), "--name", "tiny", "--points", *pts]) == 0
    out = capsys.readouterr().out
    assert "GFLOP/s" in out and "wrote" in out
    df = bench.load_measurements("tiny", tmp_path)
    assert list(df["n_tokens"]) == [1, 4, 8, 16]
    runs = df.attrs["runs"]
    assert runs[0]["model"] == "tiny-llama" and runs[0]["args"]["quick"] is True
    assert (tmp_path / "tiny-ceilings.csv").exists()
    assert main(["fit", str(tmp_path / "tiny.csv"), "--kind", "max"]) == 0
    out = capsys.readouterr().out
    assert "R²" in out and "held out" in out
    assert main(["fit", str(tmp_path / "missing.csv")]) == 2
    assert "no measurement file" in capsys.readouterr().err
    assert main(["bench", "--model", "tiny-llama", "--points", "1:1", "--out", str(tmp_path / "x")]) == 2
    assert main(["bench", "--model", "tiny-llama", "--points", "8:1:4", "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()                 # refused before measuring anything


def test_interleaved_rounds_runs_every_call_once_per_round_in_fresh_orders():
    log = []
    calls = [lambda i=i: log.append(i) or i * 10 for i in range(5)]
    ticks = []
    samples, outputs = bench.interleaved_rounds(calls, 4, np.random.default_rng(1), warmup=1,
                                                on_call=ticks.append)
    rounds = [log[r * 5:(r + 1) * 5] for r in range(4)]
    assert all(sorted(r) == list(range(5)) for r in rounds)       # each call once per round
    assert len({tuple(r) for r in rounds}) > 1                    # the order changes
    assert ticks == log and outputs == [0, 10, 20, 30, 40]
    assert [len(s) for s in samples] == [3] * 5                   # the warm-up round dropped
    with pytest.raises(ValueError, match="warmup"):
        bench.interleaved_rounds(calls, 2, np.random.default_rng(0), warmup=2)


def test_interleaved_rounds_progress_bar_shows_time_remaining(capsys):
    """The demo's longest phase (the timed rounds) shows its progress and time remaining."""
    calls = [lambda: time.sleep(0.001)] * 3
    bench.interleaved_rounds(calls, 4, np.random.default_rng(0), progress="timed rounds")
    err = capsys.readouterr().err
    final = err.replace("\r", "\n").strip().splitlines()[-1]
    # tqdm's "label: 100%|...| done/total [elapsed<remaining, rate, postfix]"
    assert re.search(r"^timed rounds: 100%.*\| 12/12 \[\d\d:\d\d<\d\d:\d\d, .*round 4/4\]$",
                     final), final
    bench.interleaved_rounds(calls, 2, np.random.default_rng(0))      # no label: silent
    assert capsys.readouterr().err == ""
