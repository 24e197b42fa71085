"""Data chosen on purpose (specsim.bench.choose_sweep): the user's own results/ first,
newest file first, then the reference sweep shipped with the package; one model and one
run; the ceilings measured with it come along."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from specsim import bench


def _sweep(model: str, scale: float = 1.0, n: int = 6) -> pd.DataFrame:
    tokens = 2 ** np.arange(n)
    return pd.DataFrame({"model": model, "n_tokens": tokens, "batch": 1, "context": 64,
                         "time_s": scale * (1e-3 + 1e-4 * tokens), "flops": 1e6 * tokens,
                         "bytes": 1e6 + 1e3 * tokens})


def _save(df, name, directory, run_id):
    return bench.save_measurements(df, name, {"run_id": run_id}, directory)[0]


def test_reference_sweep_without_results(tmp_path):
    chosen = bench.choose_sweep(results_dir=tmp_path / "none")
    reference = bench.measurement_paths(bench.REFERENCE_SWEEP, bench.REFERENCE_DIR)[0]
    raw = pd.read_csv(reference)
    assert chosen.source == "reference" and chosen.path == reference
    assert chosen.run_id == str(raw["run_id"].iloc[-1])                   # the newest run
    assert len(chosen.df) == int((raw["run_id"] == raw["run_id"].iloc[-1]).sum())
    assert set(chosen.df["run_id"]) == {chosen.run_id}
    assert chosen.ceilings is not None and set(chosen.ceilings["run_id"]) == {chosen.run_id}
    assert [r["run_id"] for r in chosen.df.attrs["runs"]] == [chosen.run_id]
    assert "reference" in chosen.describe()


def test_the_package_ships_one_reference_sweep_and_writes_under_the_working_directory(
        tmp_path, monkeypatch):
    from specsim import resources
    assert bench.REFERENCE_DIR == resources.data_path("measurements")
    assert [p.stem for p in bench.REFERENCE_DIR.glob("*.csv") if bench._is_sweep(p)] == \
        [bench.REFERENCE_SWEEP]
    named = bench.choose_sweep(name=bench.REFERENCE_SWEEP, results_dir=tmp_path)
    assert named.source == "named" and named.path.parent == bench.REFERENCE_DIR
    # a stem that is not the user's own falls back to the reference sweep
    assert len(bench.load_measurements(bench.REFERENCE_SWEEP, tmp_path)) == \
        len(pd.read_csv(named.path))
    monkeypatch.chdir(tmp_path)
    written = _save(_sweep("smollm2-135m", 2.0), "mine", bench.MEASUREMENTS_DIR, "r-1")
    assert written.resolve() == tmp_path / "results" / "measurements" / "mine.csv"
    assert bench.choose_sweep().path.resolve() == written.resolve()     # the default results/


def test_users_own_results_come_first_newest_first(tmp_path):
    results = tmp_path / "results"
    old = _save(_sweep("smollm2-135m", 2.0), "old", results / "measurements", "r-old")
    new = _save(_sweep("smollm2-135m", 3.0), "new", results / "measurements", "r-new")
    _save(_sweep("smollm2-135m", 5.0), "new", results / "measurements", "r-newer")
    ceil = pd.DataFrame({"device": ["cpu:0"], "matmul_flops_per_s": [1e11],
                         "copy_bytes_per_s": [2e10]})
    _save(ceil, "new-ceilings", results / "measurements", "r-newer")
    os.utime(old, (1e9, 1e9))
    os.utime(new, (2e9, 2e9))
    chosen = bench.choose_sweep(results_dir=results)
    assert chosen.source == "results" and chosen.path == new and chosen.run_id == "r-newer"
    np.testing.assert_allclose(chosen.df["time_s"], _sweep("m", 5.0)["time_s"])
    assert chosen.ceilings["copy_bytes_per_s"].tolist() == [2e10]
    os.utime(old, (3e9, 3e9))
    assert bench.choose_sweep(results_dir=results).path == old
    assert [s for s, _ in bench.sweep_candidates(results_dir=results)] == \
        ["results", "results", "reference"]


def test_one_model_from_a_demo_sweep_and_model_filter(tmp_path):
    demo = tmp_path / "results" / "demo"
    demo.mkdir(parents=True)
    pd.concat([_sweep("smollm2-135m"), _sweep("smollm2-135m-layers24", 0.8)]
              ).to_csv(demo / "sweeps.csv", index=False)
    pd.DataFrame({"device": ["cpu:0"], "matmul_flops_per_s": [3e11],
                  "copy_bytes_per_s": [4e10]}).to_csv(demo / "ceilings.csv", index=False)
    first = bench.choose_sweep(results_dir=tmp_path / "results")
    assert first.model == "smollm2-135m" and len(first.df) == 6 and first.run_id is None
    assert first.ceilings["matmul_flops_per_s"].tolist() == [3e11]
    draft = bench.choose_sweep("smollm2-135m-layers24", results_dir=tmp_path / "results")
    assert set(draft.df["model"]) == {"smollm2-135m-layers24"}
    with pytest.raises(ValueError, match="specsim bench --model tiny-llama"):
        bench.choose_sweep("tiny-llama", results_dir=tmp_path / "results")
    with pytest.raises(ValueError, match="no such sweep"):
        bench.choose_sweep(name="not-a-sweep", results_dir=tmp_path)
