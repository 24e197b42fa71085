"""`specsim.simulate.replay_positions` on tables `specsim.experiment.position_tables`
records: a batch-1 greedy replay of any policy equals the engine's run (each
iteration's planned K, the passes by width, the iterations), for n-gram lookup (free
judging while off) and the feature head (paid judging), with and without p_min cuts;
and the table's own arithmetic against a hand count."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from specsim import policies as P
from specsim import simulate as S

PROMPTS = [[1, 5, 7, 9, 11, 2, 13, 6, 10], [4, 8, 15, 16, 23, 42, 4, 8, 15, 16, 23]]
N_NEW = 40


@pytest.fixture(scope="module")
def target():
    from specsim import models
    from specsim.models.config import TINY_LLAMA
    from specsim.models.transformer import init_params
    cfg = TINY_LLAMA.replace(layer_loop="scan", eos_token_id=None)
    params = jax.tree_util.tree_map_with_path(
        lambda path, a: a if "norm" in str(path[-1]) else a * 12.0,
        init_params(jax.random.PRNGKey(0), cfg))
    return models.Model(cfg, params)


def _drafters(target):
    from specsim.drafters import NGramDrafter, feature_head_drafter
    from specsim.drafters.feature_head import init_cell
    cfg = target.cfg
    cell = init_cell(jax.random.PRNGKey(3), cfg.d_model, 16)
    cell = dict(cell, w_out=jax.random.normal(jax.random.PRNGKey(4), (16, cfg.d_model)) * 0.05)
    return {"ngram": (NGramDrafter(cfg.vocab_size, n=2), 0.0, "free"),
            "feature-head": (feature_head_drafter(target, (cell, np.arange(cfg.vocab_size))),
                             0.05, "paid")}


def _policies(costs):
    return {"fixed": P.FixedK(k=3),
            "threshold": P.ConfidenceThreshold(p_min=0.3, k_max=4, k_min=1),
            "heuristic": P.Heuristic(k_init=2, k_max=4),
            "goodput": P.Goodput(k_max=4, costs=costs),
            "goodput-no-cut": P.Goodput(k_max=4, costs=costs, p_min=0.0, prior_alpha=0.7),
            "goodput-shared": P.Goodput(k_max=4, costs=costs, width="shared", prior_alpha=0.7),
            # the budget's bank begins in the program (max_new_tokens − 1 tokens' allowance):
            # a wide one lets the eager prior draft; none is the loss-unbounded policy
            "goodput-budget": P.Goodput(k_max=4, costs=costs, budget=0.2, prior_alpha=0.7),
            "goodput-no-budget": P.Goodput(k_max=4, costs=costs, budget=None),
            # recovery probes: the point estimate (z 0) and an overdraft of twice the
            # allowance, so K = 1 past the worst case runs wherever slot 0 pays
            "goodput-recover": P.Goodput(k_max=4, costs=costs, budget=0.01, recover=0.0,
                                         overdraft=2.0, prior_alpha=0.7),
            # an allowance just short of a K = 1 probe's worst loss for N_NEW − 1 tokens
            # (enough for N_NEW): the eager prior must not draft, in the engine as here
            "goodput-budget-edge": P.Goodput(
                k_max=4, costs=costs, prior_alpha=0.9, recover=None,
                budget=float(costs.iteration_time(1) - 1.0) / (N_NEW - 0.5))}


# Run with the n-gram lookup only: FixedK and the heuristic never judge while off (what
# the drafter changes is paid or free judging), and at batch 1 the shared width plans
# as Goodput's default. The feature head runs the threshold (its p_min cut on the
# head's confidences) and Goodput's other settings.
NGRAM_ONLY = ("fixed", "heuristic", "goodput-shared")


@pytest.mark.parametrize("which", ["ngram", "feature-head"])
def test_replay_on_a_position_table_is_the_engine_run(target, which):
    from specsim.decode import generate_autoregressive, generate_speculative
    from specsim.experiment.position_tables import record
    drafter, c, off = _drafters(target)[which]
    costs = P.Costs(t_draft=c, t_target=(1.0, 1.3, 1.4, 1.5, 1.6))
    accepted = rejected = recovered = 0
    for prompt in PROMPTS:
        out = generate_autoregressive(target, [prompt], N_NEW).tokens[0]
        table = record(target, drafter, prompt, out, 4)
        assert table.n_tokens == N_NEW and table.k == 4
        for name, pol in _policies(costs).items():
            if which == "feature-head" and name in NGRAM_ONLY:
                continue
            res = generate_speculative(target, drafter, [prompt], N_NEW, policy=pol)
            assert res.tokens[0] == out
            run = S.replay_positions(pol, table, costs, off_draft=off)
            k_used = np.asarray(res.stats.k_used)[:, 0]
            np.testing.assert_array_equal(run.k_plan[:, 0], k_used[k_used >= 0], err_msg=name)
            by_width = np.bincount(run.proposed[:, 0], minlength=5)
            got = np.zeros(5, int)
            got[:len(res.meta["target_passes_by_width"])] = res.meta["target_passes_by_width"]
            np.testing.assert_array_equal(by_width, got, err_msg=name)
            if name == "goodput-budget-edge":
                assert not run.k_plan.any()       # its allowance never covered a probe
            if name == "goodput-recover":         # did it probe where the budget would not?
                alone = S.replay_positions(dataclasses.replace(pol, recover=None), table,
                                           costs, off_draft=off)
                recovered += int(run.k_plan.shape != alone.k_plan.shape or
                                 (run.k_plan != alone.k_plan).any())
            accepted += run.accepted.sum()
            rejected += (run.proposed > run.accepted).sum()
    assert accepted > 0 and rejected > 0             # both outcomes were replayed
    assert recovered > 0                             # and the engine ran recovery probes


def test_replay_against_a_hand_count():
    # K 2 from every state; accepted runs: state 1 accepts 2, state 4 accepts 0, ...
    ok = np.zeros((9, 2), bool)
    ok[0] = True                        # g 1: both drafts right -> g 4
    ok[3, 0] = False                    # g 4: first wrong -> g 5
    ok[4] = [True, False]               # g 5: one -> g 7
    ok[6] = True                        # g 7: both -> g 10 (past N = 10: done)
    table = S.PositionTable(ok=ok, confidence=np.full((9, 2), 0.9))
    costs = P.Costs(t_draft=0.1, t_target=(1.0, 1.5, 2.0))
    run = S.replay_positions(P.FixedK(k=2), table, costs)
    assert run.accepted[:, 0].tolist() == [2, 0, 1, 2]
    assert run.time.tolist() == pytest.approx([2.2] * 4)
    assert run.speedup == pytest.approx(9 * 1.0 / 8.8)
    # a draft of confidence 0.3 under p_min 0.5 is not proposed: the verify is 1 token
    low = S.PositionTable(ok=ok, confidence=np.where(np.arange(9)[:, None] == 0, 0.3, 0.9)
                          * np.ones((1, 2)))
    cut = S.replay_positions(P.ConfidenceThreshold(p_min=0.5, k_max=2), low, costs)
    assert cut.proposed[0, 0] == 0 and cut.accepted[0, 0] == 0
    assert cut.time[0] == pytest.approx(0.1 + 1.0)          # the draft step that stopped it
    # a shorter run replays the same table's first states
    assert S.replay_positions(P.FixedK(k=2), table, costs, new_tokens=4).accepted[:, 0].tolist() \
        == [2]


def test_position_table_and_replay_errors():
    with pytest.raises(ValueError, match=r"ok and confidence must be \[N - 1, K\]"):
        S.PositionTable(ok=np.zeros((3, 2), bool), confidence=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="ok must be a bool array"):
        S.PositionTable(ok=np.zeros((3, 2)), confidence=np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"confidence must hold probabilities in \[0, 1\]"):
        S.PositionTable(ok=np.zeros((3, 2), bool), confidence=np.full((3, 2), np.nan))
    table = S.PositionTable(ok=np.zeros((3, 2), bool), confidence=np.ones((3, 2)))
    costs = P.Costs(t_draft=0.0, t_target=(1.0, 1.1, 1.2, 1.3))
    with pytest.raises(ValueError, match=r"policy.k_max \(3\) must be <= the table's k \(2\)"):
        S.replay_positions(P.FixedK(k=3), table, costs)
    with pytest.raises(ValueError, match=r"new_tokens must be an integer in 2..4"):
        S.replay_positions(P.FixedK(k=2), table, costs, new_tokens=5)
    with pytest.raises(ValueError, match="off_draft must be one of"):
        S.replay_positions(P.FixedK(k=2), table, costs, off_draft="cheap")
    with pytest.raises(ValueError, match="table must be a PositionTable"):
        S.replay_positions(P.FixedK(k=2), np.zeros((3, 2)), costs)


def test_record_errors(target):
    from specsim.drafters import model_drafter
    from specsim.experiment.position_tables import record
    drafter, _, _ = _drafters(target)["ngram"]
    with pytest.raises(ValueError, match="drafter must be one of"):
        record(target, model_drafter(target, target), [1, 2], [3, 4], 2)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        record(target, drafter, [1, 2], [3, 4], 0)
    with pytest.raises(ValueError, match="output at least 2 tokens"):
        record(target, drafter, [1, 2], [3], 2)
