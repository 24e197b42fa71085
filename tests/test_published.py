"""The published set and its leave-one-source-out validation."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from specsim import published as pub
from specsim.iteration_cost import DRAFTER_KINDS, ENGINE_CLASSES
from specsim.presets import PRESETS
from specsim.roofline import hardware_names


@pytest.fixture(scope="module")
def rows():
    return pub.load_published()


@pytest.fixture(scope="module")
def loso(rows):
    return pub.leave_one_source_out(rows)


def test_every_row_is_cited_and_complete(rows):
    assert len(rows) >= 100 and rows["source_id"].nunique() >= 5
    assert rows["row_id"].is_unique
    for col in ("citation", "url", "location", "hardware", "engine", "target", "drafter_kind"):
        assert rows[col].notna().all() and (rows[col].astype(str).str.len() > 0).all(), col
    assert rows["url"].str.startswith("https://").all()
    assert set(rows["hardware"]) <= set(hardware_names())
    assert set(rows["engine"]) <= set(ENGINE_CLASSES)
    assert set(rows["drafter_kind"]) <= set(DRAFTER_KINDS)
    assert (rows["speedup"] > 0).all() and (rows["batch"] >= 1).all()
    tau = rows[rows["acceptance_kind"] == "tau"]
    alpha = rows[rows["acceptance_kind"] == "alpha"]
    assert len(tau) + len(alpha) == len(rows)
    assert ((tau["acceptance"] >= 1) & (tau["acceptance"] <= tau["verify_tokens"])).all()
    assert ((alpha["acceptance"] > 0) & (alpha["acceptance"] < 1) & alpha["k"].notna()).all()
    chains = rows[rows["k"].notna()]
    assert (chains["verify_tokens"] == chains["k"] + 1).all()


def test_the_eager_class_has_two_sources_so_holding_one_out_still_fits_it(rows, loso):
    eager = rows[rows["engine"].map(ENGINE_CLASSES) == "eager"]
    assert eager["source_id"].nunique() >= 2
    pred, _ = loso
    held = pred[pred["source_id"].isin(eager["source_id"])]
    # each eager source's rows are predicted with overheads fitted on the other one,
    # not at the priors alone
    assert (held["predicted"] != held["prior_only"]).all()


def test_derived_speedups_are_the_printed_throughput_ratios(rows):
    derived = rows[rows["spec_tps"].notna()]
    assert len(derived) >= 16
    np.testing.assert_allclose(derived["speedup"], derived["spec_tps"] / derived["baseline_tps"],
                               rtol=1e-3)


def test_no_fold_trains_on_its_own_source(rows, loso):
    pred, folds = loso
    source_of = dict(zip(rows["row_id"], rows["source_id"]))
    assert {f.held_out for f in folds} == set(rows["source_id"])
    for f in folds:
        assert f.train_row_ids, f.held_out
        assert all(source_of[i] != f.held_out for i in f.train_row_ids)
        others = set(rows.loc[rows["source_id"] != f.held_out, "row_id"]) & set(pred["row_id"])
        assert set(f.train_row_ids) == others
    predictable = rows[rows["target"].str.lower().isin(PRESETS)]
    assert sorted(pred["row_id"]) == sorted(predictable["row_id"])


def test_a_sources_reported_speedups_never_reach_its_own_predictions(rows, loso):
    """Scale every reported speedup of one source: its predictions do not move (the other
    sources' may, through the fit)."""
    pred, _ = loso
    for source in ("vllm-eagle-k-sweep", "sglang-qwen3moe", "specbench"):
        changed = rows.copy()
        mask = changed["source_id"] == source
        changed.loc[mask, "speedup"] *= 3.0
        changed.loc[mask, "baseline_tps"] *= 5.0
        again, _ = pub.leave_one_source_out(changed)
        a = pred[pred["source_id"] == source].set_index("row_id")["predicted"]
        b = again.set_index("row_id").loc[a.index, "predicted"]
        np.testing.assert_allclose(a.to_numpy(), b.to_numpy(), rtol=1e-12)


def test_in_sample_fits_every_row_its_own_source_included(rows, loso):
    """The in-sample fit is the one `specsim.predict` uses, and, unlike the held-out
    fits, it moves with a source's own reported speedups."""
    inside = pub.in_sample(rows)
    pred, _ = loso
    assert list(inside["row_id"]) == list(pred["row_id"])
    ov = pub.fitted_overheads()
    models = pub.row_models(rows)
    np.testing.assert_allclose(
        inside["predicted"],
        [pub.speedup_from_terms(models[i].terms, ov[models[i].engine_class], models[i].tau)
         for i in inside["row_id"]], rtol=1e-12)
    changed = rows.copy()
    mask = changed["source_id"] == "vllm-eagle-k-sweep"
    changed.loc[mask, "speedup"] *= 1.5
    again = pub.in_sample(changed).set_index("row_id")
    ids = rows.loc[mask, "row_id"]
    ratio = again.loc[ids, "predicted"] / inside.set_index("row_id").loc[ids, "predicted"]
    assert (ratio > 1.05).all()


def test_draft_call_slopes_by_hand(rows):
    """Speedups made from an iteration of 6 ms plus 0.8 ms (EAGLE-1) or 1.1 ms (EAGLE-3)
    a draft call give those slopes back; the model's bytes are one draft call's."""
    changed = rows.copy()
    mask = (changed["source_id"] == "vllm-eagle-k-sweep") & changed["drafter"].str.startswith("EAGLE-")
    per_call = np.where(changed.loc[mask, "drafter"].str.startswith("EAGLE-3"), 1.1e-3, 0.8e-3)
    iteration_s = 6e-3 + per_call * changed.loc[mask, "draft_steps"]
    plain_s = 1.0 / changed.loc[mask, "baseline_tps"]
    changed.loc[mask, "speedup"] = changed.loc[mask, "acceptance"] * plain_s / iteration_s
    slopes = pub.draft_call_slopes(changed).set_index("drafter")
    assert len(slopes) == 2 and (slopes["rows"] == 6).all()
    for name, r in slopes.iterrows():
        want = 1.1e-3 if name.startswith("EAGLE-3") else 0.8e-3
        assert r["measured_s"] == pytest.approx(want, rel=1e-9)
        row = rows[rows["drafter"] == name].iloc[0]
        draft = pub.row_models(rows)[int(row["row_id"])].terms.draft
        assert r["model_bytes"] == draft.bytes
    # EAGLE-3's head scores 32000 tokens, EAGLE-1's the target's 128256: fewer bytes
    assert slopes["model_bytes"].iloc[1] < slopes["model_bytes"].iloc[0]


def test_eagle_heads_score_their_draft_vocabulary(rows):
    """EAGLE-3 heads score EAGLE3_DRAFT_VOCAB tokens, FR-Spec the share its row prints of
    the target's 128256, EAGLE-1 heads the target's whole vocabulary."""
    by_id = rows.set_index("row_id")
    target = PRESETS["llama-3.1-8b"]
    vocab = {i: pub._drafter_spec(by_id.loc[i].to_dict(), target).draft_vocab
             for i in (72, 84, 83)}
    assert vocab == {72: pub.EAGLE3_DRAFT_VOCAB, 84: round(0.25 * 128256), 83: None}


def test_heuristic_schedule_matches_a_simulation_of_its_rule():
    """The stationary draft length and tokens per iteration of Hugging Face's heuristic
    schedule (K + 2 after a fully accepted draft, else max(1, K - 1)) against a direct
    simulation of the rule at the same acceptance."""
    rng = np.random.default_rng(7)
    alpha, K, lengths, tokens = 0.65, 5, [], []
    for _ in range(200_000):
        accepted = 0
        while accepted < K and rng.random() < alpha:
            accepted += 1
        lengths.append(K)
        tokens.append(accepted + 1)
        K = K + 2 if accepted == K else max(1, K - 1)
    ks, pi, tau = pub.heuristic_schedule(alpha)
    assert float(pi @ ks) == pytest.approx(np.mean(lengths), rel=0.01)
    assert tau == pytest.approx(np.mean(tokens), rel=0.01)
    assert pub.heuristic_draft_length(tau) == pytest.approx(float(pi @ ks), rel=1e-6)
    with pytest.raises(ValueError, match="tau"):
        pub.heuristic_draft_length(0.5)
    with pytest.raises(ValueError, match="alpha"):
        pub.heuristic_schedule(1.0)


def test_sps_rows_draft_at_their_schedules_mean_length(rows):
    """Spec-Bench's SpS rows (printed K = 5, the schedule's start) are predicted with the
    rounded stationary length at their τ; other rows keep their printed K."""
    by_id = rows.set_index("row_id")
    sps = {**by_id.loc[18].to_dict(), "row_id": 18}          # A100, Vicuna-7B, tau 2.28
    k = round(pub.heuristic_draft_length(2.28))
    assert k == 3
    m = pub.row_model(sps)
    assert m.terms.draft_calls == k
    assert m.terms.verify.flops == pytest.approx(pub.row_model(
        {**sps, "draft_schedule": "", "draft_steps": k, "verify_tokens": k + 1}).terms.verify.flops)
    eagle = {**by_id.loc[71].to_dict(), "row_id": 71}
    assert pub.row_model(eagle).terms.draft_calls == 2


def test_summary_statistics_by_hand():
    pred = pd.DataFrame(dict(source_id=["a", "a", "b"], tree=[False, True, False],
                             observed=[2.0, 1.0, 4.0], predicted=[2.2, 0.8, 4.0]))
    s = pub.summary(pred).set_index("group")
    # errors: +0.10, -0.20, 0.0
    assert s.loc["a", "mape"] == pytest.approx(0.15)
    assert s.loc["a", "mean_signed"] == pytest.approx(-0.05)
    assert s.loc["a", "worst"] == pytest.approx(-0.20)
    assert s.loc["a", "within_10"] == pytest.approx(0.5)
    assert s.loc["all rows", "mape"] == pytest.approx(0.1)
    assert s.loc["chain rows", "rows"] == 2 and s.loc["tree rows", "rows"] == 1


def test_fit_recovers_overheads_that_generated_the_speedups(rows):
    """Speedups made by known overheads are fitted back (the prior is far off)."""
    models = [m for m in pub.row_models(rows).values() if m.engine_class == "vllm"]
    truth = pub.EngineOverheads(layer_floor=3e-5, step=1.2e-3, iteration=0.6e-3, draft_call=0.3e-3)
    observed = pub._predict(models, truth)
    far = pub.EngineOverheads(layer_floor=1e-5, step=3e-3, iteration=3e-3, draft_call=1e-3)
    fitted = pub.fit_overheads(models, observed, far)
    np.testing.assert_allclose(pub._predict(models, fitted), observed, rtol=0.02)


def test_a_plain_step_is_read_only_at_batch_one(rows):
    """A printed baseline throughput gives a plain step's seconds at batch 1; at larger
    batches it is a request set's tokens over its wall time, not read."""
    models = pub.row_models(rows)
    by_id = rows.set_index("row_id")
    assert models[62].plain_s_observed == pytest.approx(1 / by_id.loc[62, "baseline_tps"])
    assert by_id.loc[66, "batch"] == 4 and by_id.loc[66, "baseline_tps"] > 0
    assert math.isnan(models[66].plain_s_observed)
    assert math.isnan(models[1].plain_s_observed)             # none printed


def test_the_fit_keeps_how_the_engine_spends_its_overheads(rows):
    """Fitting moves the four seconds, never the prior's floor_adds or plain_hides_step."""
    models = [m for m in pub.row_models(rows).values() if m.engine_class == "sglang"]
    observed = pub._predict(models, pub.PRIOR_OVERHEADS["sglang"]) * 0.8
    fitted = pub.fit_overheads(models, observed, pub.PRIOR_OVERHEADS["sglang"])
    assert fitted.floor_adds and fitted.plain_hides_step
    assert not np.allclose(fitted.as_array(), pub.PRIOR_OVERHEADS["sglang"].as_array())


def test_t5_draft_cost_ratios_by_hand():
    """Table 4's printed c beside one draft pass over one T5-XXL pass at the XLA prior's
    10 us a layer, added to each pass's roofline or the larger of the two."""
    from specsim.iteration_cost import pass_cost
    from specsim.roofline import load_hardware

    hw = load_hardware("tpu-v4")
    floor = pub.PRIOR_OVERHEADS["xla"].layer_floor

    def roof(name):
        return pass_cost(PRESETS[name], hw, n_tokens=1, context=pub.DEFAULT_CONTEXT).roofline_s

    t = roof("t5-v1.1-xxl")
    got = pub.t5_draft_cost_ratios().set_index("draft")
    for draft, preset, layers, c in (("T5-small", "t5-v1.1-small", 8, 0.02),
                                     ("T5-base", "t5-v1.1-base", 12, 0.04),
                                     ("T5-large", "t5-v1.1-large", 24, 0.11)):
        r = got.loc[draft]
        assert r["c_paper"] == c
        d = roof(preset)
        assert r["c_floor_adds"] == pytest.approx((d + layers * floor) / (t + 24 * floor))
        assert r["c_floor_overlaps"] == pytest.approx(max(d, layers * floor) / max(t, 24 * floor))
        assert r["c_floor_overlaps"] < r["c_floor_adds"] < c


def test_a_class_without_rows_keeps_its_prior():
    prior = pub.PRIOR_OVERHEADS["vllm"]
    assert pub.fit_overheads([], [], prior) is prior


def test_a_single_row_pulls_the_fit_towards_it(rows):
    """One training row is fitted (the prior keeps it finite): its prediction moves from
    the prior's towards the observed speedup and stays on the prior's side of it."""
    m = pub.row_models(rows)[71]          # an EAGLE chain on vLLM, with its baseline
    m = pub.RowModel(**{**m.__dict__, "plain_s_observed": float("nan")})
    prior = pub.PRIOR_OVERHEADS["vllm"]
    at_prior = pub._predict([m], prior)[0]
    target = 0.7 * at_prior
    fitted = pub.fit_overheads([m], [target], prior)
    moved = pub._predict([m], fitted)[0]
    assert target <= moved < at_prior
    assert moved == pytest.approx(target, rel=0.05)


def test_replicate_pairs_by_hand(rows):
    """Two publications of one setup pair up; the difference is their speedups per token
    an iteration yields; a changed setup or the same publication does not pair."""
    a = rows[rows["row_id"] == 6].iloc[0]           # PLD, RTX 3090, tau 1.73, 1.64x
    b = a.copy()
    b["row_id"], b["citation"], b["acceptance"], b["speedup"] = 900, "a re-run", 2.0, 2.0
    c = b.copy()
    c["row_id"], c["batch"] = 901, 4                # another setup
    d = b.copy()
    d["row_id"] = 902                               # the re-run's own second row
    pairs = pub.replicate_pairs(pd.DataFrame([a, b, c, d]))
    assert sorted(zip(pairs["row_a"], pairs["row_b"])) == [(6, 900), (6, 902)]
    assert pairs["difference"].iloc[0] == pytest.approx((2.0 / 2.0) / (1.64 / 1.73) - 1)
    real = pub.replicate_pairs(rows)
    assert len(real) >= 29 and real["difference"].abs().max() < 0.5


def test_closed_form_of_a_free_draft_is_tau(rows):
    row = rows[rows["drafter_kind"] == "ngram"].iloc[0]
    assert pub.closed_form_speedup(row) == pytest.approx(row["acceptance"])
    lev = rows[rows["source_id"] == "leviathan2023"].iloc[0]
    from specsim.analytic import expected_tokens
    c = PRESETS[lev["drafter"]].n_params() / PRESETS[lev["target"]].n_params()
    k = int(lev["k"])
    assert pub.closed_form_speedup(lev) == pytest.approx(
        float(expected_tokens(lev["acceptance"], k)) / (k * c + 1))


def test_the_summary_covers_every_source_and_both_shapes(loso):
    pred, _ = loso
    s = pub.summary(pred)
    assert set(pred["source_id"]) <= set(s["group"])
    assert {"chain rows", "tree rows", "all rows"} <= set(s["group"])
    assert s[["mape", "within_10"]].notna().all().all()
    assert all(math.isfinite(v) for v in pred["predicted"])


def test_typical_acceptance_and_its_errors():
    t = pub.typical_acceptance("eagle")
    assert t["tau_low"] <= t["tau"] <= t["tau_high"] and t["rows"] > 10
    assert t["shape"] == "all" and t["alpha"] is None
    chain = pub.typical_acceptance("eagle", tree=False)
    tree = pub.typical_acceptance("eagle", tree=True)
    assert (chain["shape"], tree["shape"]) == ("chain", "tree")
    assert chain["rows"] + tree["rows"] == t["rows"]
    assert chain["alpha_low"] <= chain["alpha"] <= chain["alpha_high"] < 1
    # the same heads gain more tokens from a tree than from a chain
    assert tree["tau"] > chain["tau"]
    assert tree["tree_tokens"] >= 2 and tree["draft_steps"] >= 1
    assert chain["tree_tokens"] is None
    chat = pub.typical_acceptance("eagle", tree=False, task="chat")
    assert chat["shape"] == "chain" and chat["rows"] < chain["rows"]
    with pytest.raises(ValueError, match="task must be one of"):
        pub.typical_acceptance("eagle", task="poetry")
    medusa = pub.typical_acceptance("medusa", tree=False)    # published only as trees
    assert medusa["shape"] == "all" and medusa["alpha"] is None
    with pytest.raises(ValueError, match="drafter kind 'magic'"):
        pub.typical_acceptance("magic")


def test_task_families_by_hand(rows):
    assert [pub.task_family(t) for t in ("MT-bench (80 questions)", "mt-bench (2 samples)",
                                         "Spec-Bench (6 tasks, mean)", "EnDe", "CNNDM",
                                         "long-spec-bench (1 sample)", "not printed")] == \
        ["chat", "chat", "mixed", "translation", "summarization", "long-context", "unspecified"]
    # every family has published rows
    assert set(rows["task"].map(pub.task_family)) >= set(pub.TASK_FAMILIES)


def test_the_study_page_is_current():
    """docs/studies/published-speedups.md is what `benchmarks/published_validation.py`
    writes from the published set and data/demo-cpu (rerun it after either changes)."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location(
        "published_validation", root / "benchmarks" / "published_validation.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    page = root / "docs" / "studies" / "published-speedups.md"
    assert _same_but_last_digits(page.read_text(), bench.page_text()), \
        "stale page: run python benchmarks/published_validation.py"


_DECIMAL = re.compile(r"-?\d+\.\d+")


def _same_but_last_digits(a: str, b: str) -> bool:
    """``a`` and ``b`` alike but for decimals one unit apart in their last printed digit:
    the overheads are fitted by an optimiser whose last bits differ from one CPU and
    BLAS build to another (2.721 on one host, 2.722 on another). Text and integers must
    match exactly."""
    if _DECIMAL.split(a) != _DECIMAL.split(b):
        return False
    for x, y in zip(_DECIMAL.findall(a), _DECIMAL.findall(b)):
        places = len(x.split(".")[1])
        if len(y.split(".")[1]) != places or abs(float(x) - float(y)) > 1.5 * 10.0 ** -places:
            return False
    return True


def test_page_comparison_allows_only_a_last_digit():
    assert _same_but_last_digits("| 2.721 | 13.2% |", "| 2.722 | 13.2% |")
    assert not _same_but_last_digits("| 2.721 |", "| 2.723 |")
    assert not _same_but_last_digits("| 2.72 |", "| 2.721 |")
    assert not _same_but_last_digits("124 rows", "125 rows")
    assert not _same_but_last_digits("MAPE 13.2%", "mean 13.2%")
