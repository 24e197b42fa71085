"""The demo's ``drafters`` part (specsim.experiment.parts.drafters, drafter_study).

Oracles: the closed-form inverses (α needed and c needed for a speedup) against a brute
force over a grid of α / c and K with `analytic.speedup`; c from bytes against
`roofline.forward_cost` computed here; the part end to end on a tiny tied llama through
the command line, with a distilled draft trained into the cache first, writing every
table with every drafter, temperature and kind it ran."""

import numpy as np
import pandas as pd
import pytest

from quiet_machine import quiet_machine
from specsim import analytic, roofline, schema as S, train
from specsim.cli import main
from specsim.experiment import drafter_study as study


@pytest.mark.parametrize("c", [0.0, 0.05, 0.3, 0.6])
def test_alpha_and_c_for_a_speedup_match_a_brute_force(c):
    ks = np.arange(1, study.K_MAX + 1)
    grid = np.linspace(0, 1, 20001)
    best = analytic.speedup(grid[:, None], ks[None], c).max(1)          # [alpha]
    reach = grid[best >= 1.5]
    a_need = study.alpha_for_speedup(1.5, c)
    if reach.size == 0:
        assert np.isnan(a_need)
    else:
        assert abs(a_need - reach[0]) <= 1e-4
        cs = np.linspace(0, 1, 20001)
        a = min(a_need + 0.02, 1.0)
        best_c = analytic.speedup(a, ks[None], cs[:, None]).max(1)
        assert abs(study.c_for_speedup(1.5, a) - cs[best_c >= 1.5][-1]) <= 1e-4
    assert np.isnan(study.c_for_speedup(1.5, 0.2))          # E(0.2, K) < 1.5 for every K


def test_limit_names_the_binding_side():
    assert study.limit_of(0.9, 0.1, 0.5, 0.4, 2.0) == "none"
    assert study.limit_of(0.2, 0.1, 0.7, np.nan, 0.9) == "α (too low at any c)"
    assert study.limit_of(0.99, 1.2, np.nan, 0.5, 0.9) == "c (too high at any α)"
    assert study.limit_of(0.3, 0.05, 0.6, 0.2, 1.1) == "α"      # α 2x short, c 4x under
    assert study.limit_of(0.8, 0.9, 0.85, 0.3, 1.1) == "c"


def _tied_tiny_target(folder):
    """A tiny llama with tied embeddings (what distillation needs), as an HF folder."""
    import jax
    from specsim import models
    from specsim.models.hf import save_hf
    from specsim.models.config import TINY_LLAMA
    from specsim.models.transformer import init_params

    cfg = TINY_LLAMA.replace(name="tiny-tied", tie_embeddings=True)
    save_hf(models.Model(cfg, init_params(jax.random.PRNGKey(1), cfg)), folder)
    return models.load(folder)


def _train_tiny_draft(target):
    cfg = train.DistillConfig(layers=1, head_vocab=60, steps=4, minutes=None, batch=4,
                              n_new=8, gen_batch=8, teacher_top_k=16, warmup=1)
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(3, 97, 6)] for _ in range(8)]
    return train.train_draft(target, train.default_draft_path(target.cfg.name, cfg), cfg,
                             prompts=prompts, progress=False)


def test_drafters_part_runs_through_the_cli_and_writes_its_tables(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECSIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SPECSIM_JAX_CACHE", str(tmp_path / "jax-cache"))
    quiet_machine(monkeypatch)              # the demo's own ceilings: test_experiment.py's
    target = _tied_tiny_target(tmp_path / "target")
    result = _train_tiny_draft(target)
    assert study.find_distilled(target.cfg.name) == result.folder
    out = tmp_path / "demo"
    argv = ["demo", "--quick", "--target", str(tmp_path / "target"), "--k", "2", "--kinds", "code",
            "--temperatures", "0", "1", "--drafters", "ngram", "layer-skip",
            "--max-new-tokens", "8", "--parts", "drafters",
            "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    assert "1/1 comparing the real drafters" in capsys.readouterr().out
    files = {p.name for p in out.iterdir()}
    assert {"alpha_by_kind.csv", "drafter_costs.csv", "drafter_speedup.csv",
            "drafter_limits.csv", "drafters_speedup_vs_k.png", "report.md"} <= files
    alphas = pd.read_csv(out / "alpha_by_kind.csv")
    names = set(alphas[S.DRAFTER])
    assert {"ngram-3", "quantized-self:int8"} <= names
    assert any(n.startswith("layer-skip") for n in names)
    assert any(n.startswith("distilled:1L/60") for n in names)
    # every drafter at both temperatures on the kind, α a rate
    assert len(alphas.groupby([S.DRAFTER, S.TEMPERATURE, S.KIND])) == 2 * len(names)
    assert alphas[S.ALPHA].between(0, 1).all()
    costs = pd.read_csv(out / "drafter_costs.csv").set_index(S.DRAFTER)
    assert (costs[S.C_MEASURED] > 0).all()
    t, q = target.cfg, costs.loc["quantized-self:int8"]
    speed = pd.read_csv(out / "drafter_speedup.csv")
    assert set(speed[S.DRAFTER]) == names and (speed[S.MEASURED_SPEEDUP] > 0).all()
    assert np.isfinite(speed[[S.PRED_IID, S.PRED_POSITIONAL, S.PRED_CONSTANT_COST]]).all().all()
    # c from bytes: the roofline's int8 pass over the fp32 pass at the runs' cache size
    ctx = int(q[S.CACHE_LEN])
    ratio = (roofline.forward_cost(t, 1, 1, ctx, weight_bits=8).bytes
             / roofline.forward_cost(t, 1, 1, ctx).bytes)
    assert q[S.C_BYTES] == pytest.approx(ratio, rel=1e-9)
    assert q[S.C_BYTES_MATERIALISED] > q[S.C_BYTES]
    assert np.isnan(costs.loc["ngram-3", S.C_BYTES])
    limits = pd.read_csv(out / "drafter_limits.csv")
    assert set(limits[S.DRAFTER]) == names
    report = (out / "report.md").read_text()
    assert "## Drafters" in report and "quantized-self:int8" in report
