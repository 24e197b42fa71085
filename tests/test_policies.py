"""Draft-length policies: NumPy semantics, closed forms (analytic) and replay on traces
(simulate), each held against an independent oracle."""

import subprocess
import sys
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest

import chi2

from specsim import analytic as A
from specsim import policies as P
from specsim import simulate as S


def _goodput(**kw):
    """Goodput with its loss budget off unless ``kw`` says otherwise: the tests of
    other mechanics (planning, judging, widths) count on an unbounded policy, as they
    pin p_min where it matters.
    The budget's tests and the defaults' construct `P.Goodput` itself."""
    return P.Goodput(**{"budget": None, **kw})


def _trace(n=4000, k=6, batch=2, seed=0, **kw):
    return S.synthetic_trace(n, k, batch=batch, rng=seed, **kw)


# ---- validation ----------------------------------------------------------------------------
@pytest.mark.parametrize("make, match", [
    (lambda: P.ConfidenceThreshold(p_min=0.5, k_min=5, k_max=3), r"k_min must be <= k_max"),
    (lambda: P.ConfidenceThreshold(p_min=-0.1, k_max=3), r"p_min must be a number in \[0, 1\]"),
    (lambda: P.ConfidenceThreshold(p_min=1.5, k_max=3), r"p_min must be a number in \[0, 1\]"),
    (lambda: P.ConfidenceThreshold(p_min=float("nan"), k_max=3), r"p_min must be a number in"),
    (lambda: P.FixedK(k=0), r"k must be a positive integer \(got 0\)"),
    (lambda: P.FixedK(k=True), r"k must be a positive integer \(got True\)"),
    (lambda: P.Heuristic(k_init=6, k_max=4), r"k_init must lie in \[1, k_max = 4\]"),
    (lambda: P.Costs(t_draft=-1.0, t_target=(1.0, 1.0)), r"t_draft must be a finite number >= 0"),
    (lambda: P.Costs(t_draft=0.1, t_target=(1.0, -2.0)), r"t_target\[1\] must be a finite number > 0"),
    (lambda: _goodput(k_max=4, costs=P.Costs.from_ratio(0.1, 2)),
     r"costs.t_target must give k_max \+ 1 = 5"),
    (lambda: _goodput(k_max=2, costs=P.Costs.from_ratio(0.1, 2), decay=0.0),
     r"decay must be a finite number > 0"),
    (lambda: _goodput(k_max=2, costs=P.Costs.from_ratio(0.1, 2), decay=1.5),
     r"decay must be a number in \(0, 1\]"),
    (lambda: _goodput(k_max=2, costs=P.Costs.from_ratio(0.1, 2), p_min=1.2),
     r"p_min must be a number in \[0, 1\]"),
    (lambda: _goodput(k_max=2, costs=P.Costs.from_ratio(0.1, 2), budget=1.0),
     r"budget must be None or a number in \[0, 1\) \(got 1.0\)"),
    (lambda: _goodput(k_max=2, costs=P.Costs.from_ratio(0.1, 2), budget=-0.01),
     r"budget must be a finite number >= 0"),
    (lambda: _goodput(k_max=2, costs=P.Costs.from_ratio(0.1, 2), recover=-1.0),
     r"recover must be a finite number >= 0 \(got -1.0\)"),
    (lambda: _goodput(k_max=2, costs=P.Costs.from_ratio(0.1, 2), overdraft=float("nan")),
     r"overdraft must be a finite number >= 0"),
    (lambda: _goodput(k_max=2, costs=P.Costs.from_ratio(0.1, 2), width="rows"),
     r"width must be one of \('slowest', 'shared', 'per-row'\)"),
    (lambda: A.goodput_k(np.full(4, 0.5), 0.05, np.ones(5), shared=True),
     r"alphas must be \[\.\.\., B, K_max\] with shared=True"),
    (lambda: A.threshold_policy([0.5], p_min=0.2, k_max=2, k_min=3), r"k_min must be <= k_max"),
    (lambda: A.threshold_policy([0.5], p_min=1.2, k_max=2), r"p_min must lie in \[0, 1\]"),
    (lambda: S.simulate_policy(P.FixedK(k=7), _trace(10, 6)), r"policy.k_max \(7\) must be <="),
    (lambda: S.AcceptanceTrace(np.zeros((2, 1, 3), bool), np.full((2, 1, 3), 1.5),
                               np.ones((2, 1), bool)), r"confidence must lie in \[0, 1\]"),
    (lambda: P.verify_widths(4, (1, 3)), r"verify_widths must be integers in 1..k_max \+ 1 = 5 "
                                         r"and include k_max \+ 1 \(got \(1, 3\)\)"),
    (lambda: P.verify_widths(4, (0, 5)), r"verify_widths must be integers in 1..k_max \+ 1 = 5"),
    (lambda: _goodput(k_max=2, costs=P.Costs.from_ratio(0.1, 2), judge_off=1),
     r"judge_off must be True or False \(got 1\)"),
    (lambda: S.simulate_policy(P.FixedK(k=2), _trace(n=8, k=2), off_draft="yes"),
     r"off_draft must be one of"),
    (lambda: S.simulate_policy(P.FixedK(k=2), _trace(n=8, k=2), new_tokens=0),
     r"new_tokens must be"),
    (lambda: P.verify_widths(4, (1, 6)), r"verify_widths must be integers in 1..k_max \+ 1 = 5"),
    (lambda: P.verify_widths(4, ()), r"verify_widths must be integers in 1..k_max \+ 1 = 5"),
    (lambda: P.verify_widths(4, (1.5, 5)), r"verify_widths must be None or a sequence of integers"),
    (lambda: P.verify_widths(4, 5), r"verify_widths must be None or a sequence of integers"),
    (lambda: P.Costs.from_ratio(0.1, 2).bucketed((1, 2)), r"include k_max \+ 1 \(got \(1, 2\)\)"),
])
def test_bad_settings_are_clear_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_policies_are_hashable_static_configs():
    a = _goodput(k_max=3, costs=P.Costs.from_ratio(0.2, 3))
    assert hash(a) == hash(_goodput(k_max=3, costs=P.Costs.from_ratio(0.2, 3)))
    assert P.as_policy(None, 4) == P.FixedK(k=4)


def test_a_policy_whose_plan_takes_no_active_rows_is_a_clear_error():
    @dataclass(frozen=True)
    class Old:                                   # plan without the `active` argument
        k_max: int = 2

        def init(self, batch, xp=np):
            return ()

        def plan(self, state, batch, xp=np):
            return xp.full((batch,), 2, xp.int32)

        def keep(self, j, confidence, xp=np):
            return xp.ones(confidence.shape, bool)

        def update(self, state, k_plan, n_accepted, n_proposed, active, xp=np):
            return state

    with pytest.raises(ValueError, match=r"policy.plan must take \(state, batch, xp, active\)"):
        P.as_policy(Old())


def test_a_policy_whose_update_takes_no_plan_is_a_clear_error():
    @dataclass(frozen=True)
    class Old(P.FixedK):                         # update without the `k_plan` argument
        def update(self, state, n_accepted, n_proposed, active, xp=np):
            return state

    with pytest.raises(ValueError, match=r"policy.update must take \(state, k_plan, "
                                         r"n_accepted, n_proposed, active, xp\)"):
        P.as_policy(Old(k=2))


# ---- edge cases on traces ------------------------------------------------------------------
def _fields(run):
    return [run.k_plan, run.proposed, run.draft_steps, run.accepted]


def test_k_min_equal_k_max_is_fixed_k():
    tr = _trace()
    fixed = S.simulate_policy(P.FixedK(k=3), tr)
    thr = S.simulate_policy(P.ConfidenceThreshold(p_min=0.9, k_min=3, k_max=3), tr)
    for a, b in zip(_fields(fixed), _fields(thr)):
        np.testing.assert_array_equal(a, b)
    # closed form: the threshold law with k_min = k_max is E(alpha, K), alpha = E[g(s)]
    s = np.linspace(0.05, 1.0, 20)
    out = A.threshold_policy(s, p_min=0.7, k_max=3, k_min=3)
    assert out["expected_tokens"] == pytest.approx(A.expected_tokens(s.mean(), 3), rel=1e-12)
    assert out["expected_draft_steps"] == 3 and out["expected_proposed"] == 3


def test_p_min_zero_drafts_k_max_and_one_never_drafts():
    tr = _trace()
    always = S.simulate_policy(P.ConfidenceThreshold(p_min=0.0, k_max=5), tr)
    assert (always.proposed[tr.present] == 5).all()
    np.testing.assert_array_equal(always.accepted, S.simulate_policy(P.FixedK(k=5), tr).accepted)
    never = S.simulate_policy(P.ConfidenceThreshold(p_min=1.0, k_max=5), tr)
    assert (never.proposed == 0).all() and (never.accepted == 0).all()
    assert never.tokens_per_iteration == 1.0
    # a one-hot drafter (confidence exactly 1) is still stopped by p_min = 1
    one_hot = S.AcceptanceTrace(np.ones((3, 1, 4), bool), np.ones((3, 1, 4)),
                                np.ones((3, 1), bool))
    assert (S.simulate_policy(P.ConfidenceThreshold(p_min=1.0, k_max=4), one_hot).proposed
            == 0).all()
    out = A.threshold_policy([0.3, 0.8, 1.0], p_min=1.0, k_max=4)
    assert out["expected_tokens"] == 1.0 and out["expected_proposed"] == 0.0


def test_heuristic_schedule_by_hand():
    # row accepts everything for 4 iterations, then rejects everything
    acc = np.zeros((8, 1, 6), bool)
    acc[:4] = True
    tr = S.AcceptanceTrace(acc, np.full((8, 1, 6), 0.5), np.ones((8, 1), bool))
    run = S.simulate_policy(P.Heuristic(k_init=2, k_max=5), tr)
    assert run.k_plan[:, 0].tolist() == [2, 4, 5, 5, 5, 4, 3, 2]
    assert run.accepted[:, 0].tolist() == [2, 4, 5, 5, 0, 0, 0, 0]


def test_absent_rows_do_not_move_state():
    acc = np.ones((4, 2, 4), bool)
    present = np.array([[1, 1], [1, 0], [1, 0], [1, 1]], bool)
    tr = S.AcceptanceTrace(acc, np.full((4, 2, 4), 0.5), present)
    run = S.simulate_policy(P.Heuristic(k_init=1, k_max=4), tr)
    assert run.k_plan[:, 0].tolist() == [1, 3, 4, 4]
    assert run.k_plan[[0, 3], 1].tolist() == [1, 3]
    assert (run.tokens[~present] == 0).all()


# ---- goodput -------------------------------------------------------------------------------
def test_goodput_plan_matches_reference_and_turns_off_when_costly():
    rng = np.random.default_rng(3)
    reached = rng.integers(0, 50, (64, 5)).astype(np.float32)
    acc = np.floor(reached * rng.random((64, 5))).astype(np.float32)
    for c, slope in [(0.05, 0.0), (0.3, 0.1), (0.6, 0.3)]:
        costs = P.Costs.from_ratio(c, 5, verify_slope=slope)
        pol = _goodput(k_max=5, costs=costs, width="per-row")
        alpha = pol.alpha_estimate((acc, reached))
        k_ref, _ = A.goodput_k(alpha, costs.t_draft, costs.t_target)
        np.testing.assert_array_equal(pol.plan((acc, reached), 64), k_ref)
        # shared width: one K for the batch, the best of Σ_rows E(K) / t(K) by enumeration
        t = np.arange(6) * costs.t_draft + np.asarray(costs.t_target)
        e = [sum(1 + np.cumprod(row)[:k].sum() for row in alpha.astype(float)) for k in range(6)]
        k_batch = int(np.argmax(np.asarray(e) / t))
        shared = _goodput(k_max=5, costs=costs, width="shared").plan((acc, reached), 64)
        np.testing.assert_array_equal(shared, np.full(64, k_batch))
        assert A.goodput_k(alpha, costs.t_draft, costs.t_target, shared=True)[0] == k_batch
    off = _goodput(k_max=5, costs=P.Costs.from_ratio(1.5, 5))
    assert (off.plan((acc, reached), 64) == 0).all()
    # replayed: a large cost ratio never speculates, a cheap drafter always does
    tr = _trace(500, 5)
    assert (S.simulate_policy(off, tr).proposed == 0).all()
    cheap = S.simulate_policy(_goodput(k_max=5, costs=P.Costs.from_ratio(0.0, 5), p_min=0.0), tr)
    assert (cheap.proposed[tr.present] == 5).all()
    # with p_min, a Goodput that plans K_max is the confidence threshold at K_max
    cheap_cut = S.simulate_policy(_goodput(k_max=5, costs=P.Costs.from_ratio(0.0, 5),
                                            p_min=0.5), tr)
    thr = S.simulate_policy(P.ConfidenceThreshold(p_min=0.5, k_max=5), tr)
    np.testing.assert_array_equal(cheap_cut.proposed, thr.proposed)
    np.testing.assert_array_equal(cheap_cut.accepted, thr.accepted)
    assert (thr.proposed[tr.present] < 5).any()


def test_goodput_counts_a_paid_slot_with_no_proposal_as_a_rejection():
    """A planned slot yields a token only when its draft is proposed and accepted, and
    costs a verify position only when some row proposed there. So a row whose drafter
    has nothing to propose (an n-gram lookup without a match) beside rows that propose
    is, to the plan, a row whose drafts are all rejected; alone, it paid nothing and
    learns nothing."""
    pol = _goodput(k_max=3, costs=P.Costs.from_ratio(0.0, 3, verify_slope=0.2))
    # one update by hand (the widest proposal 2): row 0 planned 3, proposed 0; row 1
    # planned 3, proposed 2 and accepted 1; row 2 planned 0 (off); row 3 planned 2,
    # proposed 2, accepted both; row 4 planned 3, proposed 1, accepted 0
    state = pol.update(pol.init(5), np.array([3, 3, 0, 2, 3]), np.array([0, 1, 0, 2, 0]),
                       np.array([0, 2, 0, 2, 1]), np.ones(5, bool))
    np.testing.assert_array_equal(state[1], [[1, 0, 0], [1, 1, 0], [0, 0, 0], [1, 1, 0],
                                             [1, 0, 0]])
    np.testing.assert_array_equal(state[0], [[0, 0, 0], [1, 0, 0], [0, 0, 0], [1, 1, 0],
                                             [0, 0, 0]])
    # a finished row's proposals do not widen the batch; a lone silent row paid nothing
    state = pol.update(pol.init(2), np.array([3, 0]), np.array([0, 0]), np.array([0, 3]),
                       np.array([True, False]))
    assert not state[1].any()
    # replayed: beside a row whose drafts are all accepted, a silent row gains nothing
    # from a draft the batch pays for, and a static batch waits for it: the best plan
    # is K = 0. Goodput turns itself off after a few iterations and plans again only
    # as its evidence decays; a silent row that did not count stayed at the
    # prior's 0.6 and kept the batch drafting
    n = 200
    accept = np.zeros((n, 2, 3), bool)
    accept[:, 1] = True
    conf = np.full((n, 2, 3), 0.9)
    conf[:, 0] = 0.0                                      # row 0 never proposes
    run = S.simulate_policy(pol, S.AcceptanceTrace(accept, conf, np.ones((n, 2), bool)))
    assert (run.k_plan[:5] > 0).any() and (run.k_plan[20:] > 0).mean() < 0.2
    # alone, the silent row keeps its prior and its plan: nothing it planned cost a pass
    alone = S.AcceptanceTrace(np.zeros((n, 1, 3), bool), np.zeros((n, 1, 3)),
                              np.ones((n, 1), bool))
    assert (S.simulate_policy(pol, alone).k_plan > 0).all()


def test_replay_charges_a_static_batch_its_slowest_row():
    # row 0 accepts its one draft and is done after 2 iterations (2 tokens each); row 1
    # is rejected throughout and needs 4 (1 token each); every iteration costs t(1) = 1.
    # Static (the engine): 4 iterations for 4 tokens per row, 1.0x; continuous (a
    # finished row's slot refilled): 8 tokens in 6 row-iterations, 4/3.
    accept = np.zeros((4, 2, 1), bool)
    accept[:2, 0] = True
    present = np.array([[1, 1], [1, 1], [0, 1], [0, 1]], bool)
    tr = S.AcceptanceTrace(accept, np.ones((4, 2, 1)), present)
    costs = P.Costs.from_ratio(0.0, 1)
    static = S.simulate_policy(P.FixedK(k=1), tr, costs=costs, cost_model="engine")
    cont = S.simulate_policy(P.FixedK(k=1), tr, costs=costs, cost_model="engine",
                             batching="continuous")
    assert static.speedup == pytest.approx(1.0) and cont.speedup == pytest.approx(4 / 3)
    # both rows present throughout: static runs at the slower row's 1 token per
    # iteration, continuous at the mean rate (6 + 4 tokens in 8 row-iterations)
    full = S.AcceptanceTrace(accept, np.ones((4, 2, 1)), np.ones((4, 2), bool))
    a, b = (S.simulate_policy(P.FixedK(k=1), full, costs=costs, batching=m).speedup
            for m in S.BATCHING)
    assert a == pytest.approx(1.0) and b == pytest.approx(10 / 8)
    # rows of one rate (identical rows; batch 1): the two agree
    same = S.AcceptanceTrace(np.repeat(accept[:, :1], 2, 1), np.ones((4, 2, 1)),
                             np.ones((4, 2), bool))
    a, b = (S.simulate_policy(P.FixedK(k=1), same, costs=costs, batching=m).speedup
            for m in S.BATCHING)
    assert a == pytest.approx(b) == pytest.approx(6 / 4)
    with pytest.raises(ValueError, match=r"batching must be one of \('static', 'continuous'\)"):
        S.simulate_policy(P.FixedK(k=1), tr, costs=costs, batching="paged")


def test_goodput_shared_width_pays_for_the_widest_row():
    # a batch of one eager row (α 0.9) and seven weak ones (α 0.1) at c = 0.05, verify
    # growing 10% per token: per row the eager row plans K 4 and the weak ones K 0, so
    # the batch pays t(4) for one row's gain; shared, every row drafts the batch's best K
    alphas = np.array([[0.9] * 4] + [[0.1] * 4] * 7)
    t_target = [1.0, 1.1, 1.2, 1.3, 1.4]
    k_rows, _ = A.goodput_k(alphas, 0.05, t_target)
    assert k_rows.tolist() == [4] + [0] * 7
    k, rate = A.goodput_k(alphas, 0.05, t_target, shared=True)
    e = lambda row, K: 1 + np.cumprod(row)[:K].sum()                     # noqa: E731
    t = lambda K: 0.05 * K + t_target[K]                                  # noqa: E731
    rates = [sum(e(r, K) for r in alphas) / t(K) for K in range(5)]
    assert k == int(np.argmax(rates)) and rate == pytest.approx(max(rates))
    assert sum(e(r, K) for r, K in zip(alphas, k_rows)) / t(4) < max(rates)
    # the policy plans the same from its running counts, and a finished row (inactive)
    # does not steer the batch: the plan equals the plan of the running rows alone
    costs = P.Costs(t_draft=0.05, t_target=tuple(t_target))
    pol = _goodput(k_max=4, costs=costs, width="shared")                 # as goodput_k above
    reached = np.full((8, 4), 200.0)
    state = (alphas * reached, reached)
    assert (pol.plan(state, 8) == k).all() and k > 0
    active = np.array([True] + [False] * 7)
    alone = pol.plan((state[0][:1], state[1][:1]), 1)
    assert (pol.plan(state, 8, np, active) == alone[0]).all() and alone[0] == 4
    # a static batch (the default, "slowest") runs at its slowest row's pace: the weak
    # rows' best, K 0, while they run; the eager row alone plans its own K 4
    slowest = _goodput(k_max=4, costs=costs)
    assert slowest.width == "slowest" and (slowest.plan(state, 8) == 0).all()
    assert (slowest.plan(state, 8, np, active) == 4).all()


def test_goodput_slowest_plan_against_enumeration():
    rng = np.random.default_rng(11)
    costs = P.Costs(t_draft=0.03, t_target=(1.0, 1.05, 1.12, 1.2, 1.3, 1.45))
    pol = _goodput(k_max=5, costs=costs, width="slowest")
    t = costs.iteration_time(np.arange(6))
    for _ in range(20):
        reached = rng.uniform(5, 50, (6, 5))
        state = (reached * rng.uniform(0.2, 1.0, (6, 5)), reached)
        active = rng.random(6) < 0.7
        a = pol.alpha_estimate(state)
        e = np.array([[1 + np.cumprod(row)[:k].sum() for k in range(6)] for row in a])
        run = e[active] if active.any() else np.full((1, 6), np.inf)
        want = int(np.argmax(run.min(0) / t))
        np.testing.assert_array_equal(pol.plan(state, 6, np, active), np.full(6, want))


def test_goodput_turns_off_at_a_batch_where_verify_grows():
    # batch-size effect: at a large batch verifying K + 1 tokens costs ~ (K + 1) steps
    alphas = np.full(4, 0.7)
    k_small, _ = A.goodput_k(alphas, 0.05, [1.0, 1.02, 1.04, 1.06, 1.08])
    k_big, rate = A.goodput_k(alphas, 0.05, [1.0, 2.0, 3.0, 4.0, 5.0])
    assert k_small == 4 and k_big == 0 and rate == 1.0


def test_goodput_finds_the_best_fixed_k_on_iid_trace():
    alpha, c = 2 / 3, 0.2
    k_star, best = A.optimal_k(alpha, c, k_max=6)
    tr = _trace(20000, 6, batch=1, seed=1)
    costs = P.Costs.from_ratio(c, 6)
    # every draft proposed (the trace's confidences are synthetic: no p_min cut)
    run = S.simulate_policy(_goodput(k_max=6, costs=costs, p_min=0.0), tr, costs=costs)
    fixed = S.simulate_policy(P.FixedK(k=int(k_star)), tr, costs=costs)
    assert fixed.speedup == pytest.approx(best, rel=0.02)
    assert run.speedup > 0.98 * fixed.speedup
    assert np.mean(run.k_plan[tr.present] == k_star) > 0.6


# ---- closed forms against simulation -------------------------------------------------------
@pytest.mark.parametrize("p_min, k_max, k_min, calib", [
    (0.5, 5, 0, None), (0.3, 4, 2, None), (0.7, 6, 1, lambda s: 0.9 * s ** 2)])
def test_threshold_simulation_matches_closed_form(p_min, k_max, k_min, calib):
    a, b = 2.0, 1.2
    tr = _trace(60000, k_max, batch=1, seed=7, confidence_a=a, confidence_b=b,
                calibration=calib)
    run = S.simulate_policy(P.ConfidenceThreshold(p_min=p_min, k_max=k_max, k_min=k_min), tr)
    # the law on a fine grid: Beta(a, b) density times the bin width
    from scipy import stats
    edges = np.linspace(0, 1, 20001)
    s = 0.5 * (edges[1:] + edges[:-1])
    w = np.diff(stats.beta(a, b).cdf(edges))
    g = s if calib is None else calib(s)
    out = A.threshold_policy(s, g, w, p_min=p_min, k_max=k_max, k_min=k_min)
    for name, sim in [("expected_tokens", run.tokens[:, 0]),
                      ("expected_proposed", run.proposed[:, 0]),
                      ("expected_draft_steps", run.draft_steps[:, 0])]:
        se = sim.std() / np.sqrt(sim.size)
        assert abs(sim.mean() - out[name]) < 4 * se + 1e-9, (name, sim.mean(), out[name], se)
    pmf = np.bincount(run.proposed[:, 0], minlength=k_max + 1) / run.proposed.shape[0]
    np.testing.assert_allclose(pmf, out["proposed_pmf"], atol=0.01)


def test_simulated_speedup_matches_closed_form():
    tr = _trace(60000, 4, batch=1, seed=11)
    costs = P.Costs(t_draft=0.15, t_target=(1.0, 1.05, 1.1, 1.2, 1.3))
    s = np.random.default_rng(5).beta(2.0, 1.0, 400000)        # the same law, sampled
    for pol, kw in [(P.FixedK(k=4), dict(p_min=0.0, k_max=4, k_min=4)),
                    (P.ConfidenceThreshold(p_min=0.6, k_max=4), dict(p_min=0.6, k_max=4))]:
        run = S.simulate_policy(pol, tr, costs=costs)
        want = A.speedup_threshold(s, p_min=kw["p_min"], k_max=4, k_min=kw.get("k_min", 0),
                                   c=0.15, verify_cost=costs.t_target)
        assert run.speedup == pytest.approx(want, rel=0.01)


def test_optimal_fixed_vs_dynamic():
    # informative confidence: a draft is either sure (accepted 95%) or lost (10%)
    s, w = np.array([0.1, 0.95]), np.array([0.35, 0.65])
    res = A.optimal_fixed_vs_dynamic(s, s, w, c=0.1, k_max=8)
    alpha = float(np.sum(s * w))
    k_ref, sp_ref = A.optimal_k(alpha, 0.1, k_max=8)
    assert res["fixed_k"] == k_ref and res["fixed_speedup"] == pytest.approx(sp_ref, rel=1e-12)
    assert 0.1 <= res["p_min"] < 0.95 and res["gain"] > 1.1
    # uninformative (acceptance does not depend on s): thresholding cannot help
    flat = A.optimal_fixed_vs_dynamic(s, [0.6, 0.6], w, c=0.1, k_max=8)
    assert flat["gain"] == pytest.approx(1.0, abs=1e-12)


# ---- traces from engine statistics ---------------------------------------------------------
def test_trace_from_stats():
    acc = np.array([[[1, 0, 1]], [[0, 0, 0]]], bool)
    stats = SimpleNamespace(k=3, accept_mask=acc, confidence=np.full((2, 1, 3), 0.4),
                            drafted=np.array([[3], [-1]]))
    tr = S.AcceptanceTrace.from_stats(stats)
    assert tr.present.tolist() == [[True], [False]] and tr.k == 3
    run = S.simulate_policy(P.FixedK(k=3), tr)
    assert run.accepted[:, 0].tolist() == [1, 0]
    with pytest.raises(ValueError, match="must propose all k = 3"):
        S.AcceptanceTrace.from_stats(SimpleNamespace(**{**vars(stats),
                                                        "drafted": np.array([[2], [3]])}))
    with pytest.raises(ValueError, match="stats has no 'confidence'"):
        S.AcceptanceTrace.from_stats(SimpleNamespace(k=3, accept_mask=acc, confidence=None,
                                                     drafted=stats.drafted))


def test_policies_import_without_jax():
    code = ("import sys, specsim.policies, specsim.simulate; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib')); "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- engine: the early-stopping draft loop -------------------------------------------------
@pytest.fixture(scope="module")
def tiny():
    import jax

    from specsim import models
    from specsim.drafters import model_drafter
    from specsim.models.config import TINY_LLAMA
    from specsim.models.transformer import init_params, select_layers
    cfg = TINY_LLAMA.replace(layer_loop="scan", eos_token_id=None)
    scale = lambda p, f: jax.tree_util.tree_map_with_path(                # noqa: E731
        lambda path, a: a if "norm" in str(path[-1]) else a * f, p)
    target = models.Model(cfg, scale(init_params(jax.random.PRNGKey(0), cfg), 12.0))
    sub, sub_cfg = select_layers(target.params, cfg, [0, 1])
    small = models.Model(sub_cfg.replace(name="tiny-small"), scale(sub, 0.6))
    return target, model_drafter(small, target)


_PROPOSE_CACHE = {}      # (id(drafter), k, temperature[, policy]) -> compiled result / fn


def _propose_both(drafter, policy, k, k_plan, temperature, conf=None):
    """The drafter's fixed-K scan (``full``) and its policy loop (``got``) on one batch of
    two rows, and `drafters.policy_draft.masked_draft` of the scan (``want``). The scan, its
    state and each policy's program are compiled once per drafter and temperature (the
    plan is a traced argument)."""
    import jax
    import jax.numpy as jnp

    from specsim.drafters import policy_draft as pe
    from specsim.drafters import Context
    from specsim.sampling import SamplingParams
    sp = SamplingParams.make(temperature, vocab_size=drafter.vocab_size)
    ctx = Context(jnp.zeros((2, 32), jnp.int32).at[:, :6].set(
        jnp.asarray([[1, 5, 7, 9, 11, 2], [3, 3, 4, 8, 15, 16]], jnp.int32)),
        jnp.asarray([6, 4], jnp.int32))
    key = jax.random.PRNGKey(3)
    base = (id(drafter), k, temperature)
    if base not in _PROPOSE_CACHE:
        state = jax.jit(drafter.init_state, static_argnums=2)(ctx.tokens[:, :6], ctx.length, 32)
        full = jax.jit(lambda s: drafter.propose(s, ctx, k, key, sp))(state)[1]
        _PROPOSE_CACHE[base] = drafter, state, full      # the drafter kept: its id not reused
    _, state, full = _PROPOSE_CACHE[base]
    if base + (policy,) not in _PROPOSE_CACHE:
        _PROPOSE_CACHE[base + (policy,)] = jax.jit(
            lambda s, plan: drafter.propose_policy(s, ctx, k, key, sp, policy, plan))
    plan = jnp.asarray(k_plan, jnp.int32)
    st, got = _PROPOSE_CACHE[base + (policy,)](state, plan)
    want = pe.masked_draft(policy, full.tokens, full.probs, plan, sp.greedy, k, conf)
    return full, got, want, st, state


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_model_draft_loop_stops_early_with_the_same_drafts(tiny, temperature):
    _, drafter = tiny
    k = 5
    # FixedK: the while loop drafts exactly what the scan drafts
    full, got, _, st, state = _propose_both(drafter, P.FixedK(k=k), k, [k, k], temperature)
    np.testing.assert_array_equal(got.tokens, full.tokens)
    np.testing.assert_allclose(got.probs, full.probs, atol=1e-6)
    assert int(got.steps) == k and np.asarray(got.proposed).all()
    np.testing.assert_array_equal(st.length, state.length)
    # a threshold in the middle of the confidences: rows stop, the loop ends early
    conf = np.asarray(got.confidence)                 # every slot reached: all confidences
    pol = P.ConfidenceThreshold(p_min=float(np.median(conf[:, 1:])), k_max=k)
    full, got, want, _, _ = _propose_both(drafter, pol, k, [k, k], temperature, conf)
    prop = np.asarray(want.proposed)
    assert 0 < prop.sum() < prop.size
    np.testing.assert_array_equal(got.proposed, prop)
    np.testing.assert_allclose(got.probs, want.probs, atol=1e-6)
    np.testing.assert_allclose(got.confidence, want.confidence, atol=1e-6)
    np.testing.assert_array_equal(np.where(prop, got.tokens, -1), np.where(prop, full.tokens, -1))
    reached = np.isfinite(np.asarray(want.confidence))
    assert int(got.steps) == reached.sum(1).max() < k
    # per-row plans, and p_min = 1: one pass (the catch-up), nothing proposed
    _, got, want, _, _ = _propose_both(drafter, P.FixedK(k=k), k, [2, 0], temperature)
    assert np.asarray(got.proposed).sum(1).tolist() == [2, 0] and int(got.steps) == 2
    _, got, _, _, _ = _propose_both(drafter, P.ConfidenceThreshold(p_min=1.0, k_max=k), k,
                                    [k, k], temperature)
    assert not np.asarray(got.proposed).any() and int(got.steps) == 1
    assert (np.asarray(got.probs).sum(-1) == 0).all() if temperature == 0 else True


@pytest.mark.parametrize("lag", [(0, 3), (8, 1), (13, 0)])
def test_model_drafter_sync_catches_up_a_skipped_stretch(tiny, lag):
    """Oracle: a drafter whose cache missed ``lag`` tokens per row, after ``sync``, holds
    the cache (and proposes the drafts) of one prefilled up to the invariant."""
    import jax
    import jax.numpy as jnp

    from specsim.drafters import Context
    from specsim.sampling import SamplingParams
    _, drafter = tiny
    rng = np.random.default_rng(5)
    B, S, n = 2, 48, np.asarray([22, 17])                           # context lengths
    toks = jnp.asarray(rng.integers(1, drafter.vocab_size, (B, S)), jnp.int32)
    ctx = Context(toks, jnp.asarray(n, jnp.int32))
    init = jax.jit(drafter.init_state, static_argnums=2)
    ref = init(toks, jnp.asarray(n - 1, jnp.int32), S)              # at n - 2: in step
    behind = init(toks, jnp.asarray(n - 1 - np.asarray(lag), jnp.int32), S)
    stale = jnp.arange(S)[None, :] >= behind.length[:, None]        # [B, S]: wipe them
    wipe = lambda a: jnp.where(stale[None, :, :, None, None], 0.0, a)  # noqa: E731
    behind = behind._replace(k=wipe(behind.k), v=wipe(behind.v))
    synced, passes = jax.jit(drafter.sync)(behind, ctx)
    np.testing.assert_array_equal(synced.length, n - 2)
    assert int(passes) == -(-max(lag) // 8)                           # width 8 per pass
    for b in range(B):                                                 # filled slots agree
        m = int(n[b]) - 2
        np.testing.assert_allclose(synced.k[:, b, :m], ref.k[:, b, :m], atol=2e-5)
    sp = SamplingParams.make(0.0, vocab_size=drafter.vocab_size)
    key = jax.random.PRNGKey(0)
    prop = jax.jit(lambda s: drafter.propose(s, ctx, 4, key, sp))
    _, want = prop(ref)
    _, got = prop(synced)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_allclose(got.probs, want.probs, atol=1e-5)


# ---- engine: generate_speculative(policy=...) ----------------------------------------------
PROMPTS = [[1, 5, 7, 9, 11], [3, 3], [4, 8, 15, 16, 23, 42, 4, 8, 15, 16, 23]]


@pytest.fixture(scope="module")
def reference(tiny):
    from specsim.decode import generate_autoregressive
    return generate_autoregressive(tiny[0], PROMPTS, 24)


GREEDY_POLICIES = {
    "fixed": P.FixedK(k=4),
    "threshold": P.ConfidenceThreshold(p_min=0.3, k_max=5, k_min=1),
    "heuristic": P.Heuristic(k_init=2, k_max=5),
    # every draft proposed (no p_min cut): the tiny drafter's confidence is low
    "goodput": _goodput(k_max=4, costs=P.Costs.from_ratio(0.3, 4, verify_slope=0.05),
                         p_min=0.0),
    "goodput-defaults": P.Goodput(k_max=4, costs=P.Costs.from_ratio(0.1, 4, verify_slope=0.05)),
    "goodput-p_min": _goodput(k_max=4, costs=P.Costs.from_ratio(0.1, 4, verify_slope=0.05),
                               p_min=0.3),
    "goodput-shared": _goodput(k_max=4, costs=P.Costs.from_ratio(0.2, 4, verify_slope=0.05),
                                prior_alpha=0.8, decay=0.9, width="shared"),
    "goodput-budget": _goodput(k_max=4, costs=P.Costs.from_ratio(0.2, 4, verify_slope=0.05),
                                budget=0.02),
}


# Each policy's program once with every verify width. Not here: "goodput" (p_min 0,
# every draft kept), whose greedy output the verify-widths tests below hold against the
# reference at other widths, and "goodput-budget", whose budget "goodput-defaults" runs.
@pytest.mark.parametrize("name", [n for n in GREEDY_POLICIES
                                  if n not in ("goodput", "goodput-budget")])
def test_greedy_output_equals_autoregressive_with_every_policy(tiny, reference, name):
    from specsim.decode import generate_speculative
    target, drafter = tiny
    pol = GREEDY_POLICIES[name]
    # every width compiled (Goodput's default "auto" pads; see the auto-widths test)
    res = generate_speculative(target, drafter, PROMPTS, 24, policy=pol, verify_widths=None)
    assert res.tokens == reference.tokens and res.finish_reason == reference.finish_reason
    st = res.stats
    a = st.active
    K = pol.k_max
    assert st.k == K and st.k_used.shape == st.accepted.shape and st.confidence.shape[2] == K
    assert ((st.accepted <= st.drafted) & (st.drafted <= st.k_used) & (st.k_used <= K))[a].all()
    np.testing.assert_array_equal(st.accept_mask.sum(2) >= st.accepted, a | ~a)
    assert np.isfinite(st.confidence[a][:, 0][st.k_used[a] > 0]).all()
    # draft passes: the prefill, then in every iteration where some row plans a draft
    # one per slot while any row still drafts (the first always runs); an iteration
    # where no row plans one skips the drafter, caught up later by sync passes
    reached = np.isfinite(st.confidence).sum(2).max(1)            # [I] slots computed
    planned = (st.k_used > 0).any(1)                               # [I]
    loop = np.where(planned, np.maximum(reached, 1), 0).sum()
    if planned.all():
        assert res.draft_passes == 1 + loop
    else:                       # at least one sync pass per return to drafting
        resumed = (planned[1:] & ~planned[:-1]).sum()
        assert 1 + loop + resumed <= res.draft_passes <= 1 + loop + (~planned).sum()
    assert res.target_passes == res.n_iterations + 1
    assert res.meta["single_token_target_passes"] == (st.drafted.max(1) <= 0).sum()
    # each iteration's target pass is as wide as its widest proposal (plus the last token)
    widest = np.maximum(st.drafted.max(1), 0)                          # [I]
    np.testing.assert_array_equal(res.meta["target_passes_by_width"],
                                  np.bincount(widest, minlength=K + 1))
    # the NumPy semantics replayed on the recorded slots give the same decisions
    tr = S.AcceptanceTrace(st.accept_mask, np.nan_to_num(st.confidence), a)
    if name in ("fixed", "threshold"):
        run = S.simulate_policy(pol, tr)
        np.testing.assert_array_equal(run.proposed[a], st.drafted[a])
        np.testing.assert_array_equal(run.accepted[a], st.accepted[a])
    if name == "threshold":
        assert (st.drafted[a] < st.k_used[a]).any() and res.draft_passes < 1 + K * res.n_iterations
    if name == "goodput-p_min":     # rows stop below p_min under the shared plan
        assert (st.drafted[a] < st.k_used[a]).any()
        reached = np.isfinite(st.confidence) & a[..., None]
        stop = reached & ~(np.arange(K) < st.drafted[..., None])         # the stopping slot
        assert (st.confidence[stop] <= pol.p_min).all()
        assert (st.confidence[reached & ~stop] > pol.p_min).all()
    if name.startswith("goodput"):  # one K for the batch: the rows still running share it
        for it in range(len(a)):
            assert len(set(st.k_used[it][a[it]].tolist())) <= 1
    if name == "heuristic":
        k_used = st.k_used[:, 0][a[:, 0]]
        acc = st.accepted[:, 0][a[:, 0]]
        want = np.where(acc[:-1] >= k_used[:-1], np.minimum(k_used[:-1] + 2, K),
                        np.maximum(k_used[:-1] - 1, 1))
        np.testing.assert_array_equal(k_used[1:], want)


@pytest.mark.parametrize("name, widths", [("heuristic", (1, 3, 6)), ("goodput", (2, 5))])
def test_verify_widths_pad_the_pass_and_keep_the_output(tiny, reference, name, widths):
    """A program compiled at fewer verify widths pads each pass to the narrowest width
    that covers the widest proposal: greedy output unchanged, the passes counted at the
    padded width."""
    from specsim.decode import generate_speculative
    target, drafter = tiny
    pol = GREEDY_POLICIES[name]
    res = generate_speculative(target, drafter, PROMPTS, 24, policy=pol, verify_widths=widths)
    assert res.tokens == reference.tokens and res.finish_reason == reference.finish_reason
    st = res.stats
    widest = np.maximum(st.drafted.max(1), 0) + 1                      # [I] tokens to verify
    assert len(np.unique(widest)) > 1                                   # widths vary
    # an iteration where no row planned a draft is the autoregressive step (width 1)
    padded = np.where((st.k_used > 0).any(1), np.asarray(widths)[np.searchsorted(widths, widest)], 1)
    np.testing.assert_array_equal(res.meta["target_passes_by_width"],
                                  np.bincount(padded - 1, minlength=pol.k_max + 1))
    with pytest.raises(ValueError, match=r"verify_widths applies to a policy program only"):
        generate_speculative(target, drafter, PROMPTS, 8, 3, verify_widths=(4,))
    with pytest.raises(ValueError, match=r"include k_max \+ 1"):
        generate_speculative(target, drafter, PROMPTS, 8, policy=pol, verify_widths=(1, 2))


def test_auto_verify_widths_run_goodput_on_its_own_costs(tiny, reference):
    """verify_widths="auto" runs the widths `Costs.fewest_widths` keeps from Goodput's
    own costs, with Goodput planning on those costs bucketed: the same run as the
    explicit route (widths and bucketed costs passed by hand), greedy output unchanged,
    passes counted only at the kept widths."""
    import dataclasses

    from specsim.decode import generate_speculative
    target, drafter = tiny
    pol = GREEDY_POLICIES["goodput"]                    # t(n) = 1, 1.05, ..., 1.20
    ws = pol.costs.fewest_widths()
    assert ws == (1, 3, 5)
    auto = generate_speculative(target, drafter, PROMPTS, 24, policy=pol, verify_widths="auto")
    by_hand = generate_speculative(target, drafter, PROMPTS, 24, verify_widths=ws,
                                   policy=dataclasses.replace(pol, costs=pol.costs.bucketed(ws)))
    assert auto.tokens == by_hand.tokens == reference.tokens
    np.testing.assert_array_equal(auto.stats.k_used, by_hand.stats.k_used)
    assert auto.meta["policy"] == by_hand.meta["policy"] != repr(pol)
    by_width = np.asarray(auto.meta["target_passes_by_width"])
    assert by_width[[1, 3]].sum() == 0 and by_width[[2, 4]].sum() > 0
    # the default; a policy without costs compiles every width under "auto"
    default = generate_speculative(target, drafter, PROMPTS, 24, policy=pol)
    assert default.tokens == auto.tokens
    np.testing.assert_array_equal(default.stats.k_used, auto.stats.k_used)
    heuristic = GREEDY_POLICIES["heuristic"]
    assert P.program_widths(heuristic, 5, "auto") == (P.verify_widths(5), heuristic)
    with pytest.raises(ValueError, match=r"verify_widths must be 'auto', None or a sequence"
                                         r".*got 'fewest' with Goodput"):
        generate_speculative(target, drafter, PROMPTS, 8, policy=pol, verify_widths="fewest")


def _fewest_widths_oracle(t, k_max, tol):
    """The smallest width sets holding 1 and k_max + 1 under which every pass of n =
    2..k_max + 1 tokens padded to the narrowest kept width >= n costs <= (1 + tol)·t(n),
    by enumerating every subset of 2..k_max."""
    import itertools
    inner = range(2, k_max + 1)
    for size in range(len(inner) + 1):
        found = []
        for sub in itertools.combinations(inner, size):
            ws = (1, *sub, k_max + 1)
            pad = [min(w for w in ws if w >= n) for n in range(2, k_max + 2)]
            if all(t[w - 1] <= (1 + tol) * t[n - 1] for n, w in zip(range(2, k_max + 2), pad)):
                found.append(ws)
        if found:
            return found


def test_fewest_verify_widths_against_enumeration():
    """`Costs.fewest_widths` against every subset (on the non-decreasing costs it reads):
    what it keeps is within the tolerance, and no smaller set is."""
    rng = np.random.default_rng(11)
    for trial in range(300):
        k_max = int(rng.integers(1, 8))
        t = np.cumsum(rng.exponential(0.1, k_max + 1) * (rng.random(k_max + 1) < 0.7)) + 1.0
        if trial % 3 == 0:                                  # noisy curves with dips
            t = t * rng.uniform(0.9, 1.1, k_max + 1)
        tol = float(rng.choice([0.0, 0.02, 0.05, 0.1, 0.3]))
        costs = P.Costs(t_draft=0.1, t_target=tuple(t))
        got = costs.fewest_widths(tol)
        oracle = _fewest_widths_oracle(costs.nondecreasing().t_target, k_max, tol)
        assert got in oracle, (t, tol, got, oracle)
    # by hand: a flat curve keeps the ends; the 2-core CPU's step keeps 2 and 3 at 5%
    assert P.Costs.from_ratio(0.1, 8).fewest_widths() == (1, 9)
    cpu = P.Costs(t_draft=0.0, t_target=(24.0, 40.0, 52.0, 55.0, 57.0))
    assert cpu.fewest_widths() == (1, 2, 3, 5)
    assert cpu.fewest_widths(0.1) == (1, 2, 5)
    assert cpu.fewest_widths(0.0) == (1, 2, 3, 4, 5)
    assert cpu.fewest_widths(k_max=2) == (1, 2, 3)
    for bad, match in [(dict(tolerance=-0.1), r"tolerance must be a finite number >= 0"),
                       (dict(k_max=5), r"k_max must be at most len\(t_target\) - 1 = 4"),
                       (dict(k_max=0), r"k_max must be a positive integer")]:
        with pytest.raises(ValueError, match=match):
            cpu.fewest_widths(**bad)
    # "auto" reads the first k_max + 1 pass times of longer costs and buckets them
    pol = _goodput(k_max=2, costs=cpu)
    ws, planned = P.program_widths(pol, 2, "auto")
    assert ws == (1, 2, 3) and planned.costs.t_target == (24.0, 40.0, 52.0)
    assert P.program_widths(pol, 2, None) == ((1, 2, 3), pol)
    ws, planned = P.program_widths(_goodput(k_max=4, costs=cpu), 4, "auto")
    assert ws == (1, 2, 3, 5) and planned.costs.t_target == (24.0, 40.0, 52.0, 57.0, 57.0)


def _matmuls(hlo_text: str) -> int:
    """Matrix products in a lowered program: XLA dots and calls of specsim's CPU kernels
    (`specsim.models.kernels`, which run a decode step's and a verify pass's matmuls and
    attention)."""
    from specsim.models import kernels
    return sum(hlo_text.count(op) for op in ("dot_general", f"@{kernels.TARGET}(",
                                             f"@{kernels.TARGET_INT8}(",
                                             f"@{kernels.TARGET_ATTENTION}("))


def test_each_verify_width_is_one_forward_in_the_program(tiny):
    """The policy program holds one target layer stack and one output head per compiled
    verify width (`decode.policy_verify.verify_head`): the dot products of its
    lowered HLO fall by the same count for each width left out, width 1 included."""
    from specsim import decode
    target, drafter = tiny
    loop = decode.speculative_loop(target, drafter, PROMPTS[:1], 8,
                                   policy=P.ConfidenceThreshold(p_min=0.3, k_max=3))
    dots = {w: _matmuls(loop.lower(widths=w).as_text())
            for w in [(1, 2, 3, 4), (1, 3, 4), (1, 4), (4,)]}
    per_width = dots[(1, 2, 3, 4)] - dots[(1, 3, 4)]
    assert per_width > 0
    assert dots[(1, 3, 4)] - dots[(1, 4)] == per_width == dots[(1, 4)] - dots[(4,)]


def test_only_a_policy_that_plans_off_compiles_the_off_loop(tiny):
    """A policy that never plans K = 0 (``plans_off`` False: FixedK, the threshold, the
    heuristic) runs without the off iterations' loop and its forward pass, and its model
    drafter starts from the drafter's prefill program; the same policy declaring
    ``plans_off`` compiles both and gives the same output and passes."""
    import dataclasses

    from specsim import decode

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class MayPlanOff(P.ConfidenceThreshold):
        plans_off = True

    target, drafter = tiny
    plain, off = P.ConfidenceThreshold(p_min=0.3, k_max=3), MayPlanOff(p_min=0.3, k_max=3)
    assert not plain.plans_off and not P.Heuristic(k_init=1, k_max=2).plans_off
    assert not P.FixedK(k=2).plans_off and _goodput(k_max=2, costs=P.Costs.from_ratio(
        0.2, 2)).plans_off
    loops = {p: decode.speculative_loop(target, drafter, PROMPTS[:1], 8, policy=p)
             for p in (plain, off)}
    assert loops[plain].args[-1] is not None        # the drafter's state, from its program
    assert loops[off].args[-1] is None              # a draft model that primes late
    dots = {p: _matmuls(loop.lower().as_text()) for p, loop in loops.items()}
    per_width = dots[plain] - _matmuls(loops[plain].lower(widths=(2, 3, 4)).as_text())
    assert per_width > 0 and dots[off] - dots[plain] >= per_width   # + the off step's pass
    a, b = (decode.generate_speculative(target, drafter, PROMPTS, 16, policy=p)
            for p in (plain, off))
    assert a.tokens == b.tokens
    assert (a.target_passes, a.draft_passes) == (b.target_passes, b.draft_passes)
    np.testing.assert_array_equal(a.stats.k_used, b.stats.k_used)

    # a policy that says it never plans K = 0 and does stays exact: each such iteration
    # runs the draft step, proposes nothing and verifies one token
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class SaysNeverOff(P.Goodput):
        plans_off = False

    says = SaysNeverOff(k_max=3, costs=P.Costs.from_ratio(2.0, 3))     # plans K = 0
    res = decode.generate_speculative(target, drafter, PROMPTS, 16, policy=says)
    ref = decode.generate_autoregressive(target, PROMPTS, 16)
    assert res.tokens == ref.tokens
    assert (res.stats.k_used[res.stats.active] == 0).all()
    assert (res.stats.drafted[res.stats.active] == 0).all()
    assert res.meta["single_token_target_passes"] == res.n_iterations


def test_p_min_one_is_autoregressive_and_goodput_turns_off(tiny, reference):
    from specsim.decode import generate_speculative
    target, drafter = tiny
    for pol in [P.ConfidenceThreshold(p_min=1.0, k_max=3),
                _goodput(k_max=3, costs=P.Costs.from_ratio(2.0, 3))]:
        res = generate_speculative(target, drafter, PROMPTS, 24, policy=pol)
        assert res.tokens == reference.tokens
        assert res.n_iterations == reference.n_iterations
        assert res.target_passes == reference.target_passes
        assert (res.stats.drafted[res.stats.active] == 0).all()
        # every target pass after the prefill is a one-token (autoregressive) pass
        assert res.meta["single_token_target_passes"] == res.n_iterations
        if isinstance(pol, P.Goodput):
            # K = 0 planned everywhere: every iteration is a plain autoregressive step,
            # the drafter never runs (not even its prefill), the stats say K = 0
            st, a = res.stats, res.stats.active
            assert (st.k_used[a] == 0).all() and (st.accepted[a] == 0).all()
            assert np.isnan(st.confidence).all() and np.isnan(st.overlap).all()
            assert not st.accept_mask.any() and res.draft_passes == 0
        else:
            # p_min = 1 plans drafts and computes the first to see its confidence
            assert res.draft_passes == res.n_iterations + 1


def test_goodput_off_samples_as_autoregressive_decoding(tiny):
    """Oracle: with speculation off throughout, the policy loop runs the autoregressive
    step itself, so at temperature > 0 it draws the very tokens of plain decoding from
    the same seed (the same key stream), not only the same distribution."""
    from specsim.decode import generate_autoregressive, generate_speculative
    target, drafter = tiny
    off = _goodput(k_max=3, costs=P.Costs.from_ratio(2.0, 3))
    for seed in (0, 7):
        want = generate_autoregressive(target, PROMPTS, 24, temperature=1.0, seed=seed)
        got = generate_speculative(target, drafter, PROMPTS, 24, temperature=1.0, seed=seed,
                                   policy=off)
        assert got.tokens == want.tokens and got.draft_passes == 0


@dataclass(frozen=True)
class _OffThenOn:
    """A policy (the `specsim.policies.Policy` interface) that plans no draft in its
    first ``off`` iterations and k_max after: speculation off, then back on."""
    k_max: int
    off: int

    def init(self, batch, xp=np):
        return (xp.zeros((batch,), xp.int32),)

    def plan(self, state, batch, xp=np, active=None):
        return xp.where(state[0] >= self.off, self.k_max, 0).astype(xp.int32)

    def keep(self, j, confidence, xp=np):
        return xp.ones(confidence.shape, bool)

    def update(self, state, k_plan, n_accepted, n_proposed, active, xp=np):
        return (state[0] + active.astype(xp.int32),)


def test_drafting_resumes_after_off_iterations_with_the_drafter_in_step(tiny, reference):
    """Oracle: a drafter left out of the off iterations (its prefill deferred, then
    caught up by `sync`) drafts exactly what one kept in step in every iteration drafts
    (the same drafter with `sync` hidden, so the loop runs it every iteration), while
    running n_off - ceil(n_off / 8) fewer draft passes."""
    import jax

    from specsim.decode import generate_speculative
    from specsim.drafters.model import ModelDrafter

    @jax.tree_util.register_pytree_node_class
    class InStep(ModelDrafter):
        @property
        def sync(self):
            raise AttributeError("sync")

    target, drafter = tiny
    in_step = InStep(drafter.params, drafter.cfg, "in-step")
    n_off = 10
    pol = _OffThenOn(k_max=3, off=n_off)
    lazy = generate_speculative(target, drafter, PROMPTS, 24, policy=pol)
    kept = generate_speculative(target, in_step, PROMPTS, 24, policy=pol)
    for res in (lazy, kept):
        assert res.tokens == reference.tokens
        k_used, a = res.stats.k_used, res.stats.active
        assert (k_used[:n_off] == 0).all() and (k_used[n_off:][a[n_off:]] == 3).all()
    assert lazy.meta["single_token_target_passes"] >= n_off
    np.testing.assert_array_equal(lazy.stats.accepted, kept.stats.accepted)
    np.testing.assert_array_equal(lazy.stats.drafted, kept.stats.drafted)
    np.testing.assert_allclose(lazy.stats.confidence, kept.stats.confidence, atol=1e-5)
    assert lazy.stats.accepted[n_off:].max() > 0          # the drafts are worth comparing
    assert lazy.draft_passes == kept.draft_passes - n_off + -(-n_off // 8)


def test_ngram_drafter_under_a_policy(tiny, reference):
    from specsim.decode import generate_speculative
    from specsim.drafters import NGramDrafter
    target, _ = tiny
    res = generate_speculative(target, NGramDrafter(target.cfg.vocab_size, n=2), PROMPTS, 24,
                               policy=P.Heuristic(k_init=1, k_max=3))
    assert res.tokens == reference.tokens and res.draft_passes == 0


def test_goodput_observe_off_by_hand():
    """Slot 0 of each active row with a free draft counts as reached, and as accepted
    where the draft matched; nothing else moves; judge_off False is the identity."""
    pol = _goodput(k_max=3, costs=P.Costs.from_ratio(0.1, 3))
    acc = np.array([[1.0, 0.5, 0.0], [0.0, 0.0, 0.0], [2.0, 1.0, 0.0]], np.float32)
    reached = np.array([[2.0, 1.0, 0.5], [1.0, 0.0, 0.0], [3.0, 2.0, 1.0]], np.float32)
    proposed = np.array([True, True, False])
    matched = np.array([True, False, True])       # row 2 matched but had no draft
    active = np.array([True, True, True])
    got_acc, got_reached = pol.observe_off((acc, reached), proposed, matched, active)
    np.testing.assert_array_equal(got_acc[:, 0], [2.0, 0.0, 2.0])
    np.testing.assert_array_equal(got_reached[:, 0], [3.0, 2.0, 3.0])
    np.testing.assert_array_equal(got_acc[:, 1:], acc[:, 1:])
    np.testing.assert_array_equal(got_reached[:, 1:], reached[:, 1:])
    inactive = pol.observe_off((acc, reached), proposed, matched, np.zeros(3, bool))
    np.testing.assert_array_equal(inactive[1], reached)
    off = _goodput(k_max=3, costs=P.Costs.from_ratio(0.1, 3), judge_off=False)
    assert off.observe_off((acc, reached), proposed, matched, active) == (acc, reached)


def test_a_paid_judgement_is_charged_to_the_budgets_bank():
    """With a ``budget``, a judgement that cost a draft step (paid) takes t_draft from
    each active row's bank; a free one, or one without a budget, leaves it."""
    costs = P.Costs(t_draft=0.25, t_target=(1.0, 1.5, 1.6))
    pol = _goodput(k_max=2, costs=costs, budget=0.01)
    state = pol.init(3)
    state = state[:-1] + (np.array([0.5, 0.0, 1.0], np.float32),)
    args = (np.ones(3, bool), np.ones(3, bool), np.array([True, True, False]))
    np.testing.assert_allclose(pol.observe_off(state, *args, paid=True)[-1], [0.25, -0.25, 1.0])
    np.testing.assert_array_equal(pol.observe_off(state, *args)[-1], state[-1])
    plain = _goodput(k_max=2, costs=costs)
    s0 = plain.init(3)
    assert len(plain.observe_off(s0, *args, paid=True)) == len(s0) == 2


def test_evidence_while_off_turns_goodput_back_on():
    """A row whose prior says drafting never pays (prior_alpha 0: estimate 0, no
    exploration bonus) stays off for good unless its free first draft is judged while
    off; judged on a trace whose slot-0 drafts are always accepted, it turns on."""
    tr = S.synthetic_trace(60, 4, batch=1, rng=0, calibration=np.ones_like)
    costs = P.Costs.from_ratio(0.0, 4, verify_slope=0.05)
    pol = _goodput(k_max=4, costs=costs, prior_alpha=0.0)
    blind = S.simulate_policy(pol, tr, costs=costs)
    assert (blind.k_plan == 0).all()
    judged = S.simulate_policy(pol, tr, costs=costs, off_draft="free")
    assert judged.k_plan[0, 0] == 0 and (judged.k_plan[-10:] > 0).all()
    assert judged.speedup > 2 * blind.speedup
    no_judge = S.simulate_policy(_goodput(k_max=4, costs=costs, prior_alpha=0.0,
                                           judge_off=False), tr, costs=costs, off_draft="free")
    np.testing.assert_array_equal(no_judge.k_plan, blind.k_plan)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_off_iterations_judge_the_free_draft_against_an_eager_lookup(tiny, temperature):
    """Oracle: with speculation off throughout, the loop's judged first draft at every
    iteration is the n-gram lookup run eagerly on the output so far, compared with the
    token the step then drew; the output is the autoregressive one, token for token
    (the same key stream: nothing was proposed)."""
    import jax.numpy as jnp

    from specsim.decode import generate_autoregressive, generate_speculative
    from specsim.drafters import Context, NGramDrafter
    from specsim.sampling import SamplingParams

    target, _ = tiny
    ngram = NGramDrafter(target.cfg.vocab_size, n=2)
    off = _goodput(k_max=3, costs=P.Costs.from_ratio(2.0, 3))
    prompts = PROMPTS + [[2, 6, 2, 6, 2, 6, 2, 6]]
    want = generate_autoregressive(target, prompts, 24, temperature=temperature, seed=3)
    got = generate_speculative(target, ngram, prompts, 24, temperature=temperature, seed=3,
                               policy=off)
    assert got.tokens == want.tokens and got.draft_passes == 0
    st = got.stats
    assert (st.k_used[st.active] == 0).all()
    sp = SamplingParams.make(temperature, 0, 1.0, vocab_size=target.cfg.vocab_size)
    # one lookup per (row, iteration), all in one batch: the context is the row's output
    # up to the iteration (the lookup reads no token past its length)
    seqs = [list(p) + list(out) for p, out in zip(prompts, got.tokens)]
    width = max(map(len, seqs)) + 8
    cells = [(b, i) for b, out in enumerate(got.tokens) for i in range(len(out) - 1)]
    ctx = Context(jnp.asarray([seqs[b] + [0] * (width - len(seqs[b])) for b, _ in cells],
                              jnp.int32),
                  jnp.asarray([len(prompts[b]) + i + 1 for b, i in cells], jnp.int32))
    _, d = ngram.propose((), ctx, 1, None, sp)
    found = np.asarray(d.probs[:, 0].sum(-1)) > 0
    drafted = np.asarray(d.tokens[:, 0])
    expect = np.full(st.off_judged.shape, -1)
    for r, (b, i) in enumerate(cells):        # iteration i draws out[i + 1]
        if found[r]:
            expect[i, b] = int(drafted[r] == got.tokens[b][i + 1])
    np.testing.assert_array_equal(st.off_judged, expect)
    assert (expect == 0).any() and (expect == -1).any()
    assert (expect == 1).any() or temperature > 0      # greedy loops: lookups match


# Each policy class once, and Goodput's paths: a budget and p_min ("goodput-defaults"),
# no budget with the shared width ("goodput-shared"); the other Goodput settings plan
# with the same replayed code.
@pytest.mark.parametrize("name", ["fixed", "threshold", "heuristic", "goodput-defaults",
                                  "goodput-shared"])
def test_simulation_replays_the_engine_on_its_own_trace(tiny, name):
    """Oracle for `simulate.simulate_policy`: replayed on the trace of its own engine run
    (n-gram lookup, whose empty slots have confidence 0), a policy plans, proposes and
    accepts exactly what the engine did, iteration by iteration and row by row."""
    from specsim.decode import generate_speculative
    from specsim.drafters import NGramDrafter
    from specsim.experiment.policy_runs import trace_from_stats

    target, _ = tiny
    policy = GREEDY_POLICIES[name]
    prompts = PROMPTS + [[2, 6, 2, 6, 2, 6, 2, 6]]
    st = generate_speculative(target, NGramDrafter(target.cfg.vocab_size, n=2), prompts, 24,
                              policy=policy).stats
    # the policy as the engine ran it: Goodput planning on its costs bucketed to the
    # "auto" widths (the default), any other policy unchanged
    _, ran = P.program_widths(policy, policy.k_max)
    assert isinstance(policy, P.Goodput) or ran == policy
    run = S.simulate_policy(ran, trace_from_stats(st), off_draft="free")
    present = st.k_used >= 0
    assert (st.drafted[present] < st.k_used[present]).any()    # lookups ran out: exercised
    # Goodput judges the free first draft in its off iterations (and nothing else does)
    judged = st.off_judged >= 0
    assert judged.any() == isinstance(policy, P.Goodput)
    assert (st.k_used[judged] == 0).all()
    np.testing.assert_array_equal(run.k_plan[present], st.k_used[present])
    np.testing.assert_array_equal(run.proposed[present], st.drafted[present])
    np.testing.assert_array_equal(run.accepted[present], st.accepted[present])


def test_replayed_speedup_of_a_finite_run_is_the_engine_runs(tiny):
    """Replayed on its own trace with the run's ``new_tokens`` (max_new_tokens − 1), a
    static batch's speedup is the finite run's: new_tokens · t(1) over the time of the
    passes the engine ran (its target passes by width), not a rate per iteration, which
    would count what the last iteration accepted past the run's end."""
    from specsim.decode import generate_speculative
    from specsim.drafters import NGramDrafter
    from specsim.experiment.policy_runs import trace_from_stats

    target, _ = tiny
    prompts = PROMPTS + [[2, 6, 2, 6, 2, 6, 2, 6]]
    costs = P.Costs(t_draft=0.0, t_target=(1.0, 1.3, 1.45, 1.5, 1.6))
    for policy in (P.FixedK(k=4), P.Heuristic(k_init=1, k_max=4)):
        res = generate_speculative(target, NGramDrafter(target.cfg.vocab_size, n=2), prompts,
                                   24, policy=policy, eos_token_id=None)
        run = S.simulate_policy(policy, trace_from_stats(res.stats), costs=costs,
                                cost_model="engine", off_draft="free", new_tokens=23)
        passes = np.asarray(res.meta["target_passes_by_width"])
        assert run.speedup == pytest.approx(23 * 1.0 / float(passes @ costs.t_target))
        rate = S.simulate_policy(policy, trace_from_stats(res.stats), costs=costs,
                                 cost_model="engine", off_draft="free")
        assert (run.tokens.sum(0) >= 23).all() and rate.speedup >= run.speedup * (1 - 1e-12)
    # by hand: every draft accepted, 5 tokens an iteration; 12 tokens are reached in the
    # third iteration, whose last 3 tokens the run drops: 12 tokens for 3 verifies, where
    # the rate counts 15; a row that does not reach new_tokens within the trace: the rate
    ones = np.ones((3, 2, 4), bool)
    trace = S.AcceptanceTrace(ones, np.ones((3, 2, 4)), np.ones((3, 2), bool))
    for n, want in ((12, 12 / (3 * 1.6)), (10, 10 / (2 * 1.6)), (16, 5 / 1.6), (None, 5 / 1.6)):
        got = S.simulate_policy(P.FixedK(k=4), trace, costs=costs, new_tokens=n).speedup
        assert got == pytest.approx(want), n


def test_policy_none_is_the_fixed_k_program(tiny):
    from specsim.decode import TRACE_COUNTS, generate_speculative
    target, drafter = tiny
    before = TRACE_COUNTS["speculative-policy"]
    res = generate_speculative(target, drafter, PROMPTS[:1], 8, 3)
    assert res.stats.k_used is None and TRACE_COUNTS["speculative-policy"] == before
    with pytest.raises(ValueError, match=r"k must be None or equal to policy.k_max = 5"):
        generate_speculative(target, drafter, PROMPTS, 8, 4, policy=P.FixedK(k=5))
    with pytest.raises(ValueError, match=r"policy must be None or a specsim.policies policy"):
        generate_speculative(target, drafter, PROMPTS, 8, policy="fast")


def _cache_copies(target, drafter, retrace=False, **kw) -> int:
    """Copies of a [L, B, S, G, E] cache, the target's or the draft model's, in the
    compiled loop program of one small run with ``kw`` (`decode.speculative_loop`: the
    program is compiled from the arguments the run would call it with, and not run).
    ``retrace``: drop the program's traces first (the code it traces was patched); else
    a program this module already traced and compiled is read back."""
    import re

    from specsim import decode

    loop = decode.speculative_loop(target, drafter, PROMPTS[:1], 8, **kw)
    if retrace:
        loop.program.clear_cache()
    hlo = loop.lower().compile().as_text()
    shapes = {rf"f32\[{c.n_layers},1,{loop.static['S']},{c.n_kv_heads},{c.head_dim}\]"
              for c in (target.cfg, drafter.cfg)}
    # not counted: a copy of a broadcast, the zero state a draft model that primes late
    # starts from (made once, where drafting starts; K and V share the broadcast)
    return sum(len(re.findall(rf"= {shape}\S* copy\((?!%(wrapped_)?broadcast)", hlo))
               for shape in shapes)


def test_policy_loop_copies_no_cache(tiny, monkeypatch):
    """The policy program updates the caches in place as the fixed-K program does (XLA
    copies both caches around a `lax.cond` whose branches write them: 4 copies per
    iteration); the check fails on the cond form.
    Neither copies the prefills' caches on entry either (the target's, and the draft
    model's from `drafter_prefill_program`): they are donated to the loop, which returns
    them; the check fails when the drafter's is not donated. Both policy programs are
    checked: a threshold's (the drafter's state donated) and Goodput's (K = 0 allowed:
    the off iterations' loop, and a draft model that primes inside the program)."""
    import jax

    from specsim.decode import calls, policy_loop, policy_verify, speculative
    target, drafter = tiny
    fixed = _cache_copies(target, drafter, k=3)
    policy = P.ConfidenceThreshold(p_min=0.3, k_max=3)
    goodput = _goodput(k_max=3, costs=P.Costs.from_ratio(0.2, 3))
    assert _cache_copies(target, drafter, policy=policy) == fixed == 0
    assert _cache_copies(target, drafter, policy=goodput) == 0
    def cond(pred, fn, state):
        return jax.lax.cond(pred, fn, lambda s: s, state)

    for module in (policy_loop, policy_verify):
        monkeypatch.setattr(module, "once_if", cond)
    assert _cache_copies(target, drafter, retrace=True, policy=policy) > fixed
    monkeypatch.undo()
    policy_loop.policy_program.clear_cache()     # no trace of the patched code left behind
    keeps = jax.jit(speculative.speculative_program.__wrapped__,
                    static_argnames=("cfg", "k", "S", "I"),
                    donate_argnames=("start",))              # the drafter's state not donated
    monkeypatch.setattr(calls, "speculative_program", keeps)
    assert _cache_copies(target, drafter, k=3) > 0


def test_a_late_primed_draft_state_is_made_only_where_drafting_starts(tiny):
    """A draft model that primes late (Goodput, which may plan K = 0) has its state made
    inside the branch that starts drafting, not on entry to the program: the compiled
    program's entry computation holds nothing of the draft cache's shape, and the state
    is not returned. The earlier form (a zero state carried by the whole loop and
    returned) filled and copied the draft caches on every call, drafting or not."""
    import re

    from specsim import decode
    target, drafter = tiny
    loop = decode.speculative_loop(target, drafter, PROMPTS[:1], 8,
                                   policy=_goodput(k_max=3, costs=P.Costs.from_ratio(0.2, 3)))
    assert loop.args[-1] is None                         # primes late
    hlo = loop.lower().compile().as_text()
    c = drafter.cfg
    shape = rf"f32\[{c.n_layers},1,{loop.static['S']},{c.n_kv_heads},{c.head_dim}\]"
    assert re.search(shape, hlo)                         # made in the drafting branch
    entry = hlo[hlo.index("\nENTRY"):]
    entry = entry[:entry.index("\n}")]
    body = entry.split("\n", 2)[2]                        # past the parameters' line
    assert not re.search(shape, body.split("ROOT")[-1])   # not returned
    assert not re.search(rf"= {shape}", body)            # nothing made on entry


# ---- engine: exact in distribution under every policy --------------------------------------
# test_chi2_catches_a_naive_threshold is the power check at this sample size
V_SMALL, CHI_PROMPT, N_SAMPLES = 12, [3, 7, 3, 7, 3], 30_000


from test_decode import chi_models  # noqa: E402,F401  (the same tiny target/draft pair)


def _exact_pairs(model, temperature):
    """p(t1, t2) and p(t2, t3) after the prompt by enumeration (tests/chi2.py)."""
    joint = chi2.exact_joint(model, CHI_PROMPT, temperature)                 # [V, V, V]
    return joint.sum(2), joint.sum(0)


_chi2_pvalue = chi2.chi2_pvalue


def _pair_counts(tokens, a, b):
    return chi2.counts(tokens, (a, b), V_SMALL)


@pytest.mark.parametrize("policy, temperature, widths", [
    # padded verify passes (nothing proposed -> 2 tokens, 2..3 -> 4); every width below
    (P.ConfidenceThreshold(p_min=0.1, k_max=3), 1.0, (2, 4)),
    (P.ConfidenceThreshold(p_min=0.12, k_max=2, k_min=1), 0.7, None),
    (P.Heuristic(k_init=1, k_max=3), 1.0, None),
    (_goodput(k_max=2, costs=P.Costs.from_ratio(0.2, 2)), 1.0, None),
    (_goodput(k_max=3, costs=P.Costs.from_ratio(0.05, 3), p_min=0.12), 1.0, None)])
def test_sampling_is_exact_in_distribution_under_policies(chi_models, policy, temperature,
                                                          widths):
    from specsim.decode import generate_speculative
    from specsim.drafters import model_drafter
    t, d = chi_models
    res = generate_speculative(t, model_drafter(d, t), [CHI_PROMPT] * N_SAMPLES, 3,
                               temperature=temperature, seed=5, policy=policy,
                               verify_widths=widths)
    if widths is not None:
        assert sum(res.meta["target_passes_by_width"][w - 1] for w in widths) == res.n_iterations
    p12, p23 = _exact_pairs(t, temperature)
    pv = (_chi2_pvalue(_pair_counts(res.tokens, 0, 1), p12),
          _chi2_pvalue(_pair_counts(res.tokens, 1, 2), p23))
    assert min(pv) > 1e-3, pv
    st = res.stats
    a = st.active
    assert 0.05 < st.alpha_per_proposal < 0.95
    if getattr(policy, "p_min", 0) > 0:
        # rows really stop on low confidence (the thresholded q' is exercised)
        stopped = (st.drafted < st.k_used)[a].mean()
        beyond = (st.drafted > getattr(policy, "k_min", 0))[a].mean()  # let by
        assert stopped > 0.1 and beyond > 0.05, (stopped, beyond)


def test_chi2_catches_a_naive_threshold(chi_models, monkeypatch):
    """Power check: verifying a thresholded draft against the full q (and sampling the
    stop slot from p) is biased, and the χ² test above sees it."""
    import jax.numpy as jnp

    from specsim.decode import generate_speculative
    from specsim.drafters import model_drafter
    from specsim.drafters import policy_draft as pd

    def naive_slot(policy, j, probs, tokens, conf, reach, greedy):
        proposed = reach & policy.keep(j, conf, jnp)
        return jnp.where(proposed[:, None], probs, 0.0), proposed

    monkeypatch.setattr(pd, "slot", naive_slot)
    t, d = chi_models
    res = generate_speculative(t, model_drafter(d, t), [CHI_PROMPT] * N_SAMPLES, 3,
                               temperature=1.0, seed=5,
                               # a p_min no other test compiles: a fresh program traces
                               # the patched slot
                               policy=P.ConfidenceThreshold(p_min=0.09, k_max=3, k_min=0))
    p12, _ = _exact_pairs(t, 1.0)
    assert _chi2_pvalue(_pair_counts(res.tokens, 0, 1), p12) < 1e-6


def test_verify_widths_and_bucketed_costs_by_hand():
    assert P.verify_widths(3) == (1, 2, 3, 4)
    assert P.verify_widths(3, [4, 1, 4]) == (1, 4)
    assert P.verify_widths(3, np.array([2, 4])) == (2, 4)
    costs = P.Costs(t_draft=0.1, t_target=(1.0, 1.1, 1.2, 1.3, 1.4))
    # a pass over n tokens costs the narrowest compiled width >= n
    assert costs.bucketed((1, 3, 5)).t_target == (1.0, 1.2, 1.2, 1.4, 1.4)
    # K = 0 runs the one-token autoregressive step, compiled apart from the verify widths
    assert costs.bucketed((5,)).t_target == (1.0,) + (1.4,) * 4
    assert costs.bucketed(None) == costs
    assert costs.bucketed((1, 5)).t_draft == 0.1
    # the engine replay charges the padded width: every speculative iteration of a
    # (1, K+1) program pays t_target(K+1), one that proposed nothing t_target(1)
    tr = _trace(500, 4, batch=2, seed=4)
    pol = P.ConfidenceThreshold(p_min=0.6, k_max=4)
    run = S.simulate_policy(pol, tr, costs=costs.bucketed((1, 5)), cost_model="engine")
    widest = run.proposed.max(1)
    np.testing.assert_allclose(run.time, np.maximum(run.draft_steps.max(1), 1) * 0.1
                               + np.where(widest > 0, 1.4, 1.0))


def test_nondecreasing_costs_against_brute_force():
    """Pool-adjacent-violators against the least-squares oracle over every monotone
    step pattern a short vector allows (the optimum pools runs into their means)."""
    import itertools
    rng = np.random.default_rng(7)
    for _ in range(200):
        t = rng.uniform(0.5, 2.0, 5)
        got = np.asarray(P.Costs(t_draft=0.1, t_target=tuple(t)).nondecreasing().t_target)
        best = None
        for cuts in itertools.product([0, 1], repeat=4):            # block boundaries
            edges = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [5]
            fit = np.concatenate([np.full(b - a, t[a:b].mean()) for a, b in zip(edges, edges[1:])])
            if np.all(np.diff(fit) >= -1e-12):
                err = np.sum((fit - t) ** 2)
                best = (err, fit) if best is None or err < best[0] else best
        np.testing.assert_allclose(got, best[1], rtol=1e-12)
        assert np.all(np.diff(got) >= -1e-12)
    c = P.Costs(t_draft=0.2, t_target=(1.0, 1.279, 1.236, 1.158, 1.634))   # a measured curve
    np.testing.assert_allclose(c.nondecreasing().t_target, (1.0, 1.224333, 1.224333, 1.224333,
                                                            1.634), rtol=1e-6)
    assert c.nondecreasing().t_draft == 0.2


def test_goodput_budget_bank_and_margin_by_hand():
    """The bank starts empty, `begin` pays in ε·t(1)·new_tokens; it gains t(1) per token
    and loses the iteration's time by the cost model (the draft steps of the row that
    needed most, a verify over the widest proposal + 1); the margin of K is its worst
    outcome, bank − t(K) + t(1) (every draft rejected: one token); a K with a negative
    margin is not planned (K = 0 always may be)."""
    costs = P.Costs(t_draft=0.1, t_target=(2.0, 2.8, 3.0, 3.2))   # t(1) = 2: units count
    pol = P.Goodput(k_max=3, costs=costs, budget=0.05, recover=None)  # the recovery: below
    state = pol.init(3)
    assert len(state) == 3 and state[2].shape == (3,) and not state[2].any()
    assert len(P.Goodput(k_max=3, costs=costs).init(2)) == 4    # and the floor
    assert len(P.Goodput(k_max=3, costs=costs, budget=None).init(2)) == 2
    state = pol.begin(state, 40)
    np.testing.assert_allclose(state[2], [0.05 * 2.0 * 40] * 3, rtol=1e-6)      # 4.0 each
    assert P.begin(P.FixedK(k=2), (), 40) == ()                # a policy without one
    assert P.begin(pol, state[:2] + (np.zeros(3),), np.array([10, 20, 30]))[2].tolist() == \
        pytest.approx([1.0, 2.0, 3.0])                          # per-row lengths
    # rows: 2 of 3 accepted; none of 3 accepted; absent. widest proposal 3, 3 draft steps
    after = pol.update(state, np.array([3, 3, 3]), np.array([2, 0, 3]), np.array([3, 3, 3]),
                       np.array([True, True, False]))
    paid = 3 * 0.1 + 3.2
    np.testing.assert_allclose(after[2], [4 + 2 * 3 - paid, 4 + 2 * 1 - paid, 4.0], rtol=1e-6)
    # an off iteration (nothing planned) costs the autoregressive step: the bank holds
    off = pol.update(after, np.zeros(3, int), np.zeros(3, int), np.zeros(3, int),
                     np.ones(3, bool))
    np.testing.assert_allclose(off[2], after[2], atol=1e-6)
    # a planned draft that proposed nothing pays one draft step and the one-token pass
    none = pol.update(after, np.array([2, 2, 2]), np.zeros(3, int), np.zeros(3, int),
                      np.ones(3, bool))
    np.testing.assert_allclose(none[2] - after[2], [-0.1] * 3, atol=1e-6)
    t = np.array([2.0, 2.9, 3.2, 3.5])                          # t(K) = K·0.1 + t_target(K+1)
    np.testing.assert_allclose(pol.margin(after), after[2][:, None] - t[None] + 2.0,
                               rtol=1e-5, atol=1e-6)
    # the plan: row 0 alone runs and accepts well, so without a budget it drafts; with a
    # bank short of K's worst loss (t(K) − t(1): 0.9, 1.2, 1.5) that K is not planned, so
    # a bank of 1.0 allows only K = 1 and one of 5.0 plans as if there were no budget
    free = P.Goodput(k_max=3, costs=costs, budget=None)
    only0 = np.array([True, False, False])
    k_free = free.plan(after[:2], 3, np, only0)[0]
    assert k_free > 1
    bank = lambda *b: after[:2] + (np.array(b, np.float32),)     # noqa: E731
    assert pol.plan(bank(0.8, 0, 0), 3, np, only0)[0] == 0
    assert pol.plan(bank(1.0, 0, 0), 3, np, only0)[0] == 1
    assert pol.plan(bank(5.0, 0, 0), 3, np, only0)[0] == k_free
    # a batch plan reads its slowest running row's margin: row 1 short holds it off
    both = np.array([True, True, False])
    assert pol.plan(bank(5.0, 0.5, 0), 3, np, both)[0] == 0


def test_goodput_judges_only_while_its_budget_could_use_it():
    """A paid judgement (a draft step, 0.1 here) runs only while the bank, less that
    step, still covers some K > 0's worst outcome (K = 1: t(1) − t(1 token) = 0.9), read
    over the running rows as the plan reads them; without a budget always; and the module
    helper says None (nothing gates it) for a policy without the method."""
    costs = P.Costs(t_draft=0.1, t_target=(2.0, 2.8, 3.0, 3.2))
    acc = np.zeros((2, 3), np.float32)
    st = lambda *b: (acc, acc, np.array(b, np.float32))       # noqa: E731
    both, first = np.array([True, True]), np.array([True, False])
    pol = P.Goodput(k_max=3, costs=costs, budget=0.05, recover=None)   # recovery: below
    assert bool(pol.may_judge(st(1.0, 1.0), both))           # 1.0 − 0.1 >= 0.9
    assert not bool(pol.may_judge(st(0.99, 1.0), both))      # the slowest row cannot
    assert bool(pol.may_judge(st(1.0, 0.0), first))          # row 1 is done
    shared = P.Goodput(k_max=3, costs=costs, budget=0.05, width="shared", recover=None)
    assert bool(shared.may_judge(st(1.7, 0.4), both))        # summed: 2.1 − 2 × 1.0 >= 0
    assert not bool(shared.may_judge(st(1.5, 0.4), both))
    per_row = P.Goodput(k_max=3, costs=costs, budget=0.05, width="per-row", recover=None)
    assert bool(per_row.may_judge(st(1.0, 0.0), both))       # one row could draft
    assert not bool(per_row.may_judge(st(0.5, 5.0), first))  # the one that could is done
    assert bool(P.Goodput(k_max=3, costs=costs, budget=None).may_judge(st(-9.0, -9.0), both))
    assert P.may_judge(P.FixedK(k=2), (), both) is None


def test_goodput_recovery_probe_by_hand():
    """`Goodput.recovery`: K = 1 past the bank's worst case where slot 0's rate less z
    standard errors, α̂₀ − z·sqrt(α̂₀(1 − α̂₀)/(n + w)), makes K = 1 beat plain decoding
    (t(1)·(1 + α) >= t(K = 1)) and its worst outcome leaves the bank at or above the
    floor, −overdraft × the allowance (set by `begin`); the floor rides through `update`
    and `observe_off`; a paid judgement runs while a recovery could still be afforded."""
    costs = P.Costs(t_draft=0.1, t_target=(2.0, 2.8, 3.0, 3.2))   # K = 1 risks 0.9
    pol = P.Goodput(k_max=3, costs=costs, budget=0.05, recover=1.0, overdraft=0.25)
    state = pol.begin(pol.init(2), 10)                             # allowance 0.05·2·10 = 1
    np.testing.assert_allclose(state[-2], [-0.25, -0.25])
    np.testing.assert_allclose(state[-1], [1.0, 1.0])

    def row_state(hits, seen, bank):      # slot 0 judged `seen` times, `hits` passed
        acc = np.zeros((1, 3), np.float32)
        reached = np.zeros((1, 3), np.float32)
        acc[0, 0], reached[0, 0] = hits, seen
        return (acc, reached, np.float32([-0.25]), np.float32([bank]))

    def lcb(hits, seen, z=1.0):           # the estimate, shrunk as `alpha_estimate` does
        pooled = (hits + 4 * 0.5) / (seen + 4)
        a = (hits + 4 * pooled) / (seen + 4)
        return a - z * np.sqrt(a * (1 - a) / (seen + 4))

    assert lcb(12, 12) * 2.0 >= 0.9 > lcb(2, 4) * 2.0              # the cases below
    strong, weak = row_state(12, 12, 0.7), row_state(2, 4, 0.7)    # bank 0.7 < 0.9
    assert pol.margin(strong)[0, 1] < 0                           # the budget alone: no
    assert pol.recovery(strong).tolist() == [True]                # 0.7 − 0.9 >= −0.25
    assert pol.plan(strong, 1)[0] == 1
    assert pol.recovery(weak).tolist() == [False] and pol.plan(weak, 1)[0] == 0
    deep = row_state(12, 12, 0.6)[:3] + (np.float32([0.64]),)     # 0.64 − 0.9 < −0.25
    assert pol.recovery(deep).tolist() == [False] and pol.plan(deep, 1)[0] == 0
    assert pol.recovery(row_state(12, 12, 0.66)).tolist() == [True]
    assert P.Goodput(k_max=3, costs=costs, budget=0.05, recover=None).plan(
        strong[:2] + strong[3:], 1)[0] == 0
    assert P.Goodput(k_max=3, costs=costs, budget=0.05, recover=0.0, overdraft=0.25).recovery(
        weak).tolist() == [True]            # z 0 reads the estimate itself: 0.5 · 2 >= 0.9
    # the floor passes through update and observe_off; a failed probe pays into it
    one = np.ones(1, bool)
    after = pol.update(strong, np.array([1]), np.array([0]), np.array([1]), one)
    np.testing.assert_allclose(after[-2], [-0.25])
    np.testing.assert_allclose(after[-1], [0.7 + 2.0 - 2.9], rtol=1e-5)   # −0.2
    judged = pol.observe_off(after, one, one, one, np, paid=True)
    np.testing.assert_allclose(judged[-2], [-0.25])
    np.testing.assert_allclose(judged[-1], [-0.3], rtol=1e-5)
    # judging runs while a recovery could still be afforded after its step
    assert bool(pol.may_judge(row_state(0, 0, 0.76), one))       # 0.76 − 0.1 − 0.9 >= −0.25
    assert not bool(pol.may_judge(row_state(0, 0, 0.74), one))


def test_goodput_recovery_drafts_again_after_failed_first_probes():
    """The failure the recovery is for (the policies part's n-gram extraction cell,
    replayed): drafts that fail for the first iterations and then match for good. The
    allowance of a 40-token run pays for one failed probe; the budget alone then never
    drafts again, though the free judgements while off see every first draft pass; with
    the recovery a K = 1 probe backed by that evidence wins, refills the bank and wider
    K follow. Both stay within their bounds."""
    n = 41
    ok = np.zeros((n - 1, 4), bool)
    ok[8:] = True
    table = S.PositionTable(ok=ok, confidence=np.ones((n - 1, 4)))
    costs = P.Costs(t_draft=0.0, t_target=(1.0, 1.25, 1.3, 1.31, 1.31))
    best = max(S.replay_positions(P.FixedK(k=k), table, costs).speedup for k in range(1, 5))
    alone = S.replay_positions(P.Goodput(k_max=4, costs=costs, recover=None), table, costs,
                               off_draft="free")
    run = S.replay_positions(P.Goodput(k_max=4, costs=costs, overdraft=1.0), table, costs,
                             off_draft="free")
    assert (alone.k_plan[4:, 0] == 0).all() and alone.speedup < 0.75 * best
    assert (run.k_plan[:, 0] > 1).any() and run.speedup > 0.9 * best
    assert run.time.sum() <= (1 + 0.015 * 2) * (n - 1) + 1e-9
    assert alone.time.sum() <= 1.015 * (n - 1) + 1e-9


@pytest.mark.parametrize("budget", [0.01, 0.03])
def test_goodput_budget_bounds_the_loss_where_drafting_never_pays(budget):
    """A drafter whose drafts are always rejected, with a prior that believes in it
    (0.9 with the weight of 16 observations): without a budget Goodput's exploration
    (prior, decay) costs it well over 3% of plain decoding; the other defaults without
    a budget (prior 0.5; p_min 0.2, which these drafts of confidence 0.9 pass) lose
    less, and still more than the budget; with budget ε the replayed time stays within
    (1 + ε) of plain decoding's, with no overdraft (the bank covers every draft's worst
    outcome), and so does the default (ε 0.015; this drafter is not judged while off)."""
    n = 400
    tr = S.AcceptanceTrace(np.zeros((n, 1, 4), bool), np.full((n, 1, 4), 0.9),
                           np.ones((n, 1), bool))
    costs = P.Costs(t_draft=0.05, t_target=(1.0, 1.3, 1.35, 1.4, 1.45))
    eager = dict(prior_alpha=0.9, prior_weight=16.0)
    loose = S.simulate_policy(_goodput(k_max=4, costs=costs, **eager), tr, costs=costs)
    safe = S.simulate_policy(_goodput(k_max=4, costs=costs, budget=budget, recover=None,
                                      **eager), tr, costs=costs)
    rescue = S.simulate_policy(_goodput(k_max=4, costs=costs, budget=budget, **eager), tr,
                               costs=costs)
    assert rescue.time.sum() <= (1 + budget * (1 + 1 / 3)) * n + 1e-9   # and its overdraft
    assert loose.speedup < 0.97
    default = S.simulate_policy(_goodput(k_max=4, costs=costs), tr, costs=costs)
    assert loose.speedup < default.speedup < 1.0
    assert safe.time.sum() <= (1 + budget) * n + 1e-9          # no overdraft: worst cases
    assert (safe.k_plan[:, 0] > 0).any()        # it still probes, paid from the budget
    today = S.simulate_policy(P.Goodput(k_max=4, costs=costs), tr, costs=costs)
    assert today.time.sum() <= (1 + 0.015 * (1 + 1 / 3)) * n + 1e-9    # with its overdraft
    assert (today.k_plan[:, 0] > 0).any()


def test_goodput_default_budget_bounds_every_replayed_run():
    """The bound, on exact replays (`replay_positions`) of 300 random position tables of
    every temper (drafts mostly right, mostly wrong, right then wrong, confident or not),
    with the defaults (ε 0.015; a paid first draft judged every ceil(t_draft /
    (0.01·t(1))) off iterations while the bank could still use it, `may_judge`; recovery
    probes down to an overdraft of a third of the allowance): a run's time is at most
    (1 + (1 + 1/3)·ε) of plain decoding's, 2%, judging included, whatever the drafts
    were; with the recovery off, (1 + ε)."""
    rng = np.random.default_rng(25)
    worst, judged, over = np.inf, 0, 0
    for case in range(300):
        n = int(rng.integers(8, 120))
        costs = P.Costs(t_draft=float(rng.choice([0.0, 0.035, 0.2])),
                        t_target=tuple(np.cumsum([1.0] + list(rng.uniform(0.0, 0.5, 4)))))
        off = "paid" if costs.t_draft > 0 else "free"
        p = rng.uniform(0, 1, (n - 1, 1)) ** rng.choice([0.3, 1.0, 3.0])   # per state
        if case % 3 == 0:                          # right early, wrong later
            p = np.where(np.arange(n - 1)[:, None] < n // 3, 0.95, 0.05)
        ok = rng.random((n - 1, 4)) < p
        conf = np.clip(np.where(ok, rng.uniform(0.2, 1.0, ok.shape),
                                rng.uniform(0.0, 1.0, ok.shape)), 0.01, 1.0)
        table = S.PositionTable(ok=ok, confidence=conf)
        run = S.replay_positions(P.Goodput(k_max=4, costs=costs), table, costs, off_draft=off)
        plain = (n - 1) * costs.t_target[0]
        assert run.time.sum() <= (1 + 0.015 * (1 + 1 / 3)) * plain + 1e-9, case
        alone = S.replay_positions(P.Goodput(k_max=4, costs=costs, recover=None), table,
                                   costs, off_draft=off)
        assert alone.time.sum() <= 1.015 * plain + 1e-9, case
        judged += int(run.draft_steps[run.k_plan == 0].sum() > 0)
        over += int(run.time.sum() > 1.015 * plain + 1e-9)
        worst = min(worst, run.speedup)
    assert worst < 1.0               # some tables made it lose: the bound was exercised
    assert judged > 20               # and paid judgements ran (inside the budget)
    assert over > 0                  # and recovery probes lost into the overdraft


def test_goodput_budget_keeps_what_drafting_wins():
    """Where drafting pays (i.i.d. α 0.8, cheap drafts) the budget costs little: the
    first iterations' gains fill the bank, and Goodput with ε 0.01 replays within 2% of
    Goodput without one and above 0.97 of the best fixed K."""
    tr = _trace(300, 4, batch=1, seed=3, confidence_a=8.0, confidence_b=2.0)
    costs = P.Costs(t_draft=0.05, t_target=(1.0, 1.3, 1.35, 1.4, 1.45))
    best = max(S.simulate_policy(P.FixedK(k=k), tr, costs=costs).speedup for k in range(1, 5))
    loose = S.simulate_policy(_goodput(k_max=4, costs=costs), tr, costs=costs).speedup
    safe = S.simulate_policy(_goodput(k_max=4, costs=costs, budget=0.01), tr,
                             costs=costs).speedup
    assert best > 1.5 and safe > 0.98 * loose and safe > 0.97 * best


def test_goodput_plans_with_bucketed_costs():
    """With verify widths (1, K+1) any K > 0 pays the K+1 pass, so Goodput's choice among
    them rests on the draft cost alone: a free draft plans K_max (where all widths would
    plan a shorter K under a steep verify cost), a costly one plans 0."""
    steep = P.Costs(t_draft=0.0, t_target=(1.0, 1.05, 1.6, 2.2, 2.8))
    state = (np.full((1, 4), 2.0), np.full((1, 4), 4.0))                # α̂ ≈ 0.5 at each slot
    every = _goodput(k_max=4, costs=steep).plan(state, 1)
    padded = _goodput(k_max=4, costs=steep.bucketed((1, 5))).plan(state, 1)
    assert every[0] == 1 and padded[0] == 0
    cheap = P.Costs(t_draft=0.0, t_target=(1.0, 1.01, 1.02, 1.03, 1.04))
    assert _goodput(k_max=4, costs=cheap.bucketed((1, 5))).plan(state, 1)[0] == 4


def test_engine_cost_model_in_simulation():
    tr = _trace(2000, 4, batch=2, seed=3)
    costs = P.Costs(t_draft=0.1, t_target=(1.0, 1.1, 1.2, 1.3, 1.4))
    never = S.simulate_policy(P.ConfidenceThreshold(p_min=1.0, k_max=4), tr, costs=costs,
                              cost_model="engine")
    # nothing proposed: one draft pass (the first draft's confidence) and a one-token
    # verify per iteration
    np.testing.assert_allclose(never.time, 1.1)
    assert never.speedup == pytest.approx(1 / 1.1)
    # p_min = 1 computes the first draft to see its confidence: 1.1 in theory too; a
    # policy that plans K = 0 drafts nothing, in theory and in the engine (which skips
    # the drafter when no row plans a draft)
    off = _goodput(k_max=4, costs=P.Costs.from_ratio(3.0, 4))
    np.testing.assert_allclose(S.simulate_policy(off, tr, costs=costs).time, 1.0)
    np.testing.assert_allclose(S.simulate_policy(off, tr, costs=costs, cost_model="engine").time,
                               1.0)
    theory = S.simulate_policy(P.ConfidenceThreshold(p_min=1.0, k_max=4), tr, costs=costs)
    np.testing.assert_allclose(theory.time, 1.1)
    half = S.simulate_policy(P.ConfidenceThreshold(p_min=0.6, k_max=4), tr, costs=costs,
                             cost_model="engine")
    # the engine verifies as wide as the widest proposal (+ the last token)
    some = half.proposed.max(1) > 0
    assert len(np.unique(half.proposed.max(1)[some])) > 1              # widths vary
    np.testing.assert_allclose(half.time, np.maximum(half.draft_steps.max(1), 1) * 0.1
                               + np.asarray(costs.t_target)[half.proposed.max(1)])
    with pytest.raises(ValueError, match="cost_model must be one of"):
        S.simulate_policy(P.FixedK(k=2), tr, costs=costs, cost_model="gpu")


def test_the_judging_period_follows_the_price_of_a_draft():
    """`judge_period`: a free draft every off iteration, a paid one every
    ceil(t_draft / (judge_share · t(1))), none never; 0 without judge_off, for a paid
    draft with judge_share 0, and for a policy without observe_off."""
    costs = P.Costs(t_draft=0.035, t_target=(1.0, 1.65, 1.76))
    g = lambda **kw: _goodput(k_max=2, costs=costs, **kw)          # noqa: E731
    assert [P.judge_period(g(), d) for d in P.OFF_DRAFTS] == [0, 1, 4]
    assert P.judge_period(g(judge_share=0.035), "paid") == 1
    assert P.judge_period(g(judge_share=0.0175), "paid") == 2
    assert P.judge_period(g(judge_share=0.0), "paid") == 0
    assert P.judge_period(g(judge_share=0.0), "free") == 1
    assert P.judge_period(g(judge_off=False), "free") == 0
    free_draft = _goodput(k_max=2, costs=P.Costs(t_draft=0.0, t_target=(1.0, 1.5, 1.6)))
    assert P.judge_period(free_draft, "paid") == 1
    for pol in (P.FixedK(k=2), P.Heuristic(k_init=1, k_max=2)):
        assert [P.judge_period(pol, d) for d in P.OFF_DRAFTS] == [0, 0, 0]
    with pytest.raises(ValueError, match="off_draft must be one of"):
        P.judge_period(g(), "cheap")
    with pytest.raises(ValueError, match="judge_share"):
        g(judge_share=-0.1)


def test_a_replay_judges_a_paid_draft_on_every_nth_off_iteration_at_a_draft_step():
    """A trace of rejections at slots 2+ and acceptances at slot 1: Goodput (prior 0)
    starts off; judging a paid draft every 3rd off iteration, it observes only those
    (i % 3 == 0) until the evidence turns it on, and each costs one draft step; with
    "none" it never turns on, with "free" it turns on sooner."""
    I, K = 40, 3
    accept = np.zeros((I, 1, K), bool)
    accept[:, :, 0] = True
    tr = S.AcceptanceTrace(accept, np.ones((I, 1, K)), np.ones((I, 1), bool))
    costs = P.Costs(t_draft=0.03, t_target=(1.0, 1.5, 1.6, 1.7))
    pol = _goodput(k_max=K, costs=costs, prior_alpha=0.0, judge_share=0.01)
    runs = {d: S.simulate_policy(pol, tr, costs=costs, cost_model="engine", off_draft=d)
            for d in P.OFF_DRAFTS}
    assert (runs["none"].k_plan == 0).all()
    on = {d: int(np.argmax(runs[d].k_plan[:, 0] > 0)) for d in ("free", "paid")}
    assert 0 < on["free"] < on["paid"]
    paid = runs["paid"]
    off = np.arange(on["paid"])
    np.testing.assert_array_equal(paid.draft_steps[off, 0], (off % 3 == 0).astype(int))
    np.testing.assert_allclose(paid.time[off], 1.0 + 0.03 * (off % 3 == 0))
    assert (runs["free"].draft_steps[:on["free"], 0] == 0).all()


def test_goodput_k_hurdle_holds_off_a_marginal_draft():
    """`analytic.goodput_k`'s hurdle h: a K > 0 is chosen only where E(K) / t(K) beats
    K = 0's by more than a factor 1 + h; h = 0 is the plain argmax of the rate, and a
    clear win is chosen through any small hurdle."""
    costs = P.Costs(t_draft=0.0, t_target=(1.0, 1.45, 1.9, 2.35, 2.8))
    for alpha, want in ((0.48, (1, 0)), (0.9, (3, 3))):    # K 1: 1.021x plain; K 3: 1.463x
        got = tuple(int(A.goodput_k(np.full(4, alpha), 0.0, costs.t_target, hurdle=h)[0])
                    for h in (0.0, 0.05))
        e = [1 + sum(alpha ** j for j in range(1, k + 1)) for k in range(5)]
        rate = np.asarray(e) / np.asarray(costs.t_target)
        assert got[0] == int(np.argmax(rate))
        assert got == want
    with pytest.raises(ValueError, match="hurdle"):
        A.goodput_k(np.full(4, 0.5), 0.0, costs.t_target, hurdle=float("nan"))
