"""specsim.predict / `specsim predict`: the datasheet what-if."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from specsim import analytic
from specsim import iteration_cost as ic
from specsim.errors import InvalidArgument
from specsim.published import fitted_overheads
from specsim.what_if import BREAK_EVEN_BATCHES, predict, predict_from_ceilings

O = ic.EngineOverheads(layer_floor=2e-5, step=5e-4, iteration=5e-4, draft_call=2e-4)


def _chain(k, alpha, batch=1, target="llama-3.1-8b", hw="h100-sxm", kind="eagle"):
    terms = ic.iteration_terms(target, hw, ic.DrafterSpec(kind=kind, calls=k),
                               verify_tokens=k + 1, batch=batch)
    return ic.speedup_from_terms(terms, O, float(analytic.expected_tokens(alpha, k)))


def test_a_chain_prediction_is_the_cost_model_at_that_k():
    p = predict("llama-3.1-8b", "h100-sxm", drafter="eagle", alpha=0.7, k=3, overheads=O)
    assert p.speedup == pytest.approx(_chain(3, 0.7))
    assert p.k == 3 and p.tau == pytest.approx(float(analytic.expected_tokens(0.7, 3)))
    curve = {k: _chain(k, 0.7) for k in range(1, 13)}
    assert p.best_k == max(curve, key=curve.get)
    assert p.best_speedup == pytest.approx(max(curve.values()))


def test_without_k_the_best_k_is_used():
    p = predict("llama-3.1-8b", "h100-sxm", drafter="eagle", alpha=0.8, overheads=O)
    assert p.k == p.best_k and p.speedup == pytest.approx(p.best_speedup)


def test_the_break_even_batch_is_where_the_speedup_first_falls_below_one():
    p = predict("llama-3.1-8b", "h100-sxm", drafter="eagle", alpha=0.6, k=4, overheads=O)
    assert p.break_even_batch in BREAK_EVEN_BATCHES
    i = BREAK_EVEN_BATCHES.index(p.break_even_batch)
    assert _chain(4, 0.6, batch=p.break_even_batch) < 1.0
    assert i == 0 or _chain(4, 0.6, batch=BREAK_EVEN_BATCHES[i - 1]) >= 1.0


def test_a_tree_uses_its_tau_and_reports_no_best_k():
    p = predict("qwen3-30b-a3b", "h100-sxm", drafter="eagle", engine="sglang", tp=4, tau=2.5,
                tree_tokens=16, draft_steps=4, overheads=O)
    terms = ic.iteration_terms("qwen3-30b-a3b", "h100-sxm",
                               ic.DrafterSpec(kind="eagle", calls=4, width=4),
                               verify_tokens=16, tp=4)
    assert p.speedup == pytest.approx(ic.speedup_from_terms(terms, O, 2.5))
    assert p.best_k is None and p.tree_tokens == 16 and p.k is None


def test_interval_and_fitted_overheads():
    p = predict("vicuna-7b", "a100-80gb", drafter="draft_model", draft="vicuna-68m",
                engine="hf-eager", tau=2.3, k=5)
    lo, hi = p.interval
    assert 0 < lo < p.speedup < hi
    # the spread of the eager class's held-out observed/predicted, over its median
    from specsim.published import leave_one_source_out
    held, _ = leave_one_source_out()
    r = (held["observed"] / held["predicted"])[held["engine_class"] == "eager"]
    assert (lo / p.speedup, hi / p.speedup) == pytest.approx(
        (np.quantile(r, 0.1) / np.median(r), np.quantile(r, 0.9) / np.median(r)))
    terms = ic.iteration_terms("vicuna-7b", "a100-80gb",
                               ic.DrafterSpec(kind="draft_model", calls=5,
                                              draft_model="vicuna-68m"), verify_tokens=6)
    assert p.speedup == pytest.approx(ic.speedup_from_terms(terms, fitted_overheads()["eager"], 2.3))
    assert "published" not in p.acceptance_source


def test_typical_acceptance_comes_from_the_published_rows():
    """A chain what-if takes the median α of the kind's chain rows (each row's τ read at
    its own K); a tree what-if the median τ of its tree rows."""
    from specsim import analytic
    from specsim.published import load_published

    rows = load_published()
    rows = rows[(rows["drafter_kind"] == "eagle") & (rows["temperature"] == 0)]
    chain = rows[rows["k"].notna()]
    alphas = [r.acceptance if r.acceptance_kind == "alpha" else
              analytic.alpha_from_expected_tokens(r.acceptance, int(r.k))
              for r in chain.itertuples()]
    p = predict("llama-3.1-8b", "h100-sxm", drafter="eagle", k=4, overheads=O)
    assert "published eagle chain rows" in p.acceptance_source
    assert p.alpha == pytest.approx(float(np.median(alphas)))
    trees = rows[rows["k"].isna()]
    t = predict("llama-3.1-8b", "h100-sxm", drafter="eagle", tree_tokens=26, overheads=O)
    assert "published eagle tree rows" in t.acceptance_source
    assert t.tau == pytest.approx(float(np.median(trees["acceptance"])))
    chat = chain[chain["task"].str.lower().str.startswith("mt-bench")]
    c = predict("llama-3.1-8b", "h100-sxm", drafter="eagle", k=4, task="chat", overheads=O)
    assert "chain rows on chat" in c.acceptance_source
    assert c.alpha == pytest.approx(float(np.median(
        [analytic.alpha_from_expected_tokens(r.acceptance, int(r.k)) for r in chat.itertuples()])))


def test_a_kind_published_only_as_trees_is_predicted_as_its_median_tree():
    from specsim.published import load_published

    rows = load_published()
    medusa = rows[rows["drafter_kind"] == "medusa"]
    assert medusa["k"].isna().all()
    m = predict("vicuna-7b", "a100-80gb", drafter="medusa", engine="hf-eager", overheads=O)
    assert m.k is None and m.tree_tokens == int(medusa["verify_tokens"].median())
    assert m.tau == pytest.approx(float(medusa["acceptance"].median()))
    assert "the median one" in m.acceptance_source
    # a free tree drafter makes no draft calls; its median tree still predicts
    look = predict("vicuna-7b", "a100-80gb", drafter="lookahead", engine="hf-eager", overheads=O)
    assert look.tree_tokens == int(rows.loc[rows["drafter_kind"] == "lookahead",
                                            "verify_tokens"].median())
    # a shape the kind was never published in has no typical acceptance
    with pytest.raises(InvalidArgument, match="no published medusa chain rows.*give alpha"):
        predict("vicuna-7b", "a100-80gb", drafter="medusa", k=3, overheads=O)
    with pytest.raises(InvalidArgument, match="no published ngram tree rows.*give tau"):
        predict("vicuna-7b", "a100-80gb", drafter="ngram", tree_tokens=20, overheads=O)


@pytest.mark.parametrize("kwargs,match", [
    (dict(target="gpt-9"), "unknown model 'gpt-9'.*llama-3.1-8b"),
    (dict(hardware="b300"), "unknown hardware 'b300'.*h100-sxm"),
    (dict(drafter="magic"), "drafter must be one of"),
    (dict(engine="tgi"), "engine must be one of"),
    (dict(alpha=1.5), "alpha"),
    (dict(alpha=0.5, tau=2.0), "alpha or tau, not both"),
    (dict(k=3, tree_tokens=8, tau=2.0), "not both"),
    (dict(drafter="draft_model"), "needs draft="),
    (dict(tau=9.0, k=4), "cannot exceed K \\+ 1"),
    (dict(tau=0.5), "tau must be"),
    (dict(batch=0, alpha=0.5), "batch"),
    (dict(tp=0, alpha=0.5), "tp"),
    (dict(alpha=0.5, tree_tokens=8), "for a tree give tau"),
    (dict(task="poetry"), "task must be one of"),
    (dict(drafter="eagle", task="summarization"), "no published eagle rows on task "
                                                  "'summarization'.*'chat'"),
])
def test_bad_inputs_name_the_argument_and_what_is_allowed(kwargs, match):
    kw = dict(target="llama-3.1-8b", hardware="h100-sxm", overheads=O)
    kw.update(kwargs)
    with pytest.raises(InvalidArgument, match=match):
        predict(kw.pop("target"), kw.pop("hardware"), **kw)


def test_predict_from_ceilings_by_hand():
    """A free draft on measured ceilings: E * (t1) / (t_{K+1} + iteration), each pass
    t0 + max(FLOPs/peak, bytes/bandwidth) of forward_cost as the fit counts it."""
    from specsim.models.config import SMOLLM2_135M
    from specsim.roofline import forward_cost

    peak, bw, t0 = 2e11, 2e10, 1e-3
    s = predict_from_ceilings((peak, bw, t0), target="smollm2-135m", alpha=0.8, k=4,
                              iteration_overhead=2e-4)
    t = lambda n: t0 + max(forward_cost(SMOLLM2_135M, 1, n, 512).flops / peak,
                           forward_cost(SMOLLM2_135M, 1, n, 512).bytes / bw)
    e = float(analytic.expected_tokens(0.8, 4))
    assert s == pytest.approx(e * t(1) / (t(5) + 2e-4))
    c = predict_from_ceilings((peak, bw, t0), target="smollm2-135m", alpha=0.8, k=4,
                              draft_cost_ratio=0.1)
    assert c == pytest.approx(e * t(1) / (t(5) + 4 * 0.1 * t(1)))
    with pytest.raises(InvalidArgument, match="bandwidth"):
        predict_from_ceilings((1e11, -1.0, 0.0), target="smollm2-135m", alpha=0.5, k=2)
    with pytest.raises(InvalidArgument, match="not both"):
        predict_from_ceilings((1e11, 1e10, 0.0), target="smollm2-135m", alpha=0.5, k=2,
                              draft="vicuna-68m", draft_cost_ratio=0.1)


def test_predict_from_ceilings_takes_a_roofline_fit():
    from specsim.fit import roofline_time

    class Fit:                       # the attributes and method of specsim.fit.RooflineFit
        t0, peak_flops, bandwidth, p = 1e-3, 2e11, 2e10, 4.0

        def predict(self, flops, bytes_):
            return roofline_time(flops, bytes_, self.t0, self.peak_flops, self.bandwidth, self.p)

    s = predict_from_ceilings(Fit(), target="smollm2-135m", alpha=0.7, k=3)
    assert 1.0 < s < float(analytic.expected_tokens(0.7, 3))


def test_import_specsim_stays_jax_free_and_exports_predict():
    code = ("import sys, specsim; f = specsim.predict; "
            "assert f.__module__ == 'specsim.what_if'; assert 'jax' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_command_line(capsys):
    from specsim.cli import main

    assert main(["predict", "--target", "llama-3.1-8b", "--hardware", "h100-sxm",
                 "--alpha", "0.7", "--k", "3"]) == 0
    out = capsys.readouterr().out
    assert "speedup" in out and "K=3" in out and "iteration terms (ms)" in out
    assert main(["predict", "--target", "nope", "--hardware", "h100-sxm"]) == 2
    assert "unknown model 'nope'" in capsys.readouterr().err
