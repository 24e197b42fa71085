"""specsim.trees: tree shapes, positional acceptance, optimal and dynamic trees, speedup."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from specsim import analytic, roofline
from specsim import simulate as S
from specsim.errors import InvalidArgument
from specsim.trees import (PositionalAcceptance, TokenTree, draft_time, expected_tokens,
                           node_probabilities, nodes_to_expand, optimal_tree, optimal_trees, path_scores,
                           plan_per_hardware, plan_tree, roofline_pass_time,
                           select_best_nodes, simulate_tree, tokens_pmf, tree_capacity,
                           tree_speedup)


def random_tree(rng, n: int, max_children: int = 3) -> TokenTree:
    """A random tree of n nodes in topological order, ranks by sibling order."""
    parents = []
    for i in range(n):
        choices = [q for q in range(-1, i) if parents.count(q) < max_children]
        parents.append(int(rng.choice(choices)))
    return TokenTree.from_parents(parents)


# ---- tree shapes ------------------------------------------------------------------------

def test_chain_is_todays_verify_layout():
    t = TokenTree.chain(4)
    assert t.parents.tolist() == [-1, 0, 1, 2]
    assert t.depths.tolist() == [1, 2, 3, 4] and t.ranks.tolist() == [0, 0, 0, 0]
    assert t.is_chain and t.n_nodes == 4
    np.testing.assert_array_equal(t.verify_mask(), np.tril(np.ones((5, 5), bool)))
    assert t.verify_positions().tolist() == [0, 1, 2, 3, 4]
    assert t.expanded_per_depth().tolist() == [1, 1, 1, 1]


def test_top_k_tree_by_hand():
    t = TokenTree.from_top_k([2, 2])
    assert t.parents.tolist() == [-1, -1, 0, 0, 1, 1]
    assert t.ranks.tolist() == [0, 1, 0, 1, 0, 1]
    assert t.paths() == ((0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1))
    assert t.nodes_per_depth().tolist() == [2, 4]
    assert t.expanded_per_depth().tolist() == [1, 2]
    want = np.array([[1, 0, 0, 0, 0, 0, 0],          # root
                     [1, 1, 0, 0, 0, 0, 0],          # (0,)
                     [1, 0, 1, 0, 0, 0, 0],          # (1,)
                     [1, 1, 0, 1, 0, 0, 0],          # (0, 0)
                     [1, 1, 0, 0, 1, 0, 0],          # (0, 1)
                     [1, 0, 1, 0, 0, 1, 0],          # (1, 0)
                     [1, 0, 1, 0, 0, 0, 1]], bool)   # (1, 1)
    np.testing.assert_array_equal(t.verify_mask(), want)
    assert t.verify_positions().tolist() == [0, 1, 1, 2, 2, 2, 2]
    assert TokenTree.from_top_k([1, 1, 1]) == TokenTree.chain(3)
    assert TokenTree.from_top_k([4, 2, 1]).n_nodes == 4 + 8 + 8


def test_paths_round_trip_and_medusa_order():
    paths = [(0, 0, 0), (1,), (0,), (0, 1), (0, 0), (2,), (1, 0)]
    t = TokenTree.from_paths(paths)
    assert t.paths() == ((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0))
    assert TokenTree.from_paths(t.paths()) == t
    assert t.depths.tolist() == [1, 1, 1, 2, 2, 2, 3]


def test_ancestor_mask_matches_paths_on_random_trees():
    rng = np.random.default_rng(3)
    for _ in range(20):
        t = random_tree(rng, int(rng.integers(1, 15)))
        mask = t.ancestor_mask()
        for i in range(t.n_nodes):
            want = np.zeros(t.n_nodes, bool)
            want[t.path_to(i)] = True
            np.testing.assert_array_equal(mask[i], want)
            assert t.depths[i] == len(t.path_to(i))


def test_padded_tree_masks_padding_out():
    t = TokenTree.from_top_k([2, 1])
    p = t.padded(7)
    assert p.capacity == 7 and p.n_nodes == 4
    assert p.valid.tolist() == [True] * 4 + [False] * 3
    assert p.parents[4:].tolist() == [-1] * 3 and p.depths[4:].tolist() == [0] * 3
    np.testing.assert_array_equal(p.mask[:5, :5], t.verify_mask())
    assert not p.mask[:5, 5:].any()                       # no real token sees padding
    np.testing.assert_array_equal(p.mask[5:, 0], True)    # padding rows are never empty
    assert p.mask[5:, 1:].sum() == 3
    assert p.positions.tolist() == [0, 1, 1, 2, 2, 0, 0, 0]
    assert p.tree() == t
    with pytest.raises(InvalidArgument, match=r"^capacity must be at least the tree's "
                                              r"n_nodes = 4 \(got 3\)"):
        t.padded(3)


@pytest.mark.parametrize("parents, ranks, message", [
    ([], None, r"^parents must list at least one node"),
    ([0], None, r"^parents must describe a tree: nodes \[0\] form a cycle"),
    ([1, 0], None, r"^parents must describe a tree: nodes \[0, 1\] form a cycle"),
    ([-1, 2, -1], None, r"^parents must list every parent before its child "
                        r"\(parents\[1\] = 2 >= 1\)"),
    ([-1, -2], None, r"^parents\[1\] must be -1 \(a child of the root\) or a node index"),
    ([-1, 7], None, r"^parents\[1\] must be -1 .* in \[0, 1\] \(got 7\)"),
    ([-1, 0.5], None, r"^parents must hold integers"),
    ([True, False], None, r"^parents must be a sequence of integers"),
    ([[-1, 0]], None, r"^parents must be one-dimensional"),
    ([-1, -1], [0, 0], r"^ranks must differ between siblings: nodes 0 and 1"),
    ([-1, 0], [0, -1], r"^ranks must be integers >= 0"),
    ([-1, 0], [0], r"^ranks must give one rank per node"),
])
def test_malformed_trees_name_the_argument(parents, ranks, message):
    with pytest.raises(InvalidArgument, match=message):
        TokenTree.from_parents(parents, ranks)


@pytest.mark.parametrize("build, message", [
    (lambda: TokenTree.chain(0), r"^k must be a positive integer \(got 0\)"),
    (lambda: TokenTree.from_top_k([]), r"^top_k must list one integer >= 1 per depth"),
    (lambda: TokenTree.from_top_k([2, 0]), r"^top_k must list one integer >= 1"),
    (lambda: TokenTree.from_top_k([64, 64]), r"^top_k \[64, 64\] gives 4160 nodes"),
    (lambda: TokenTree.from_paths([]), r"^paths must list at least one path"),
    (lambda: TokenTree.from_paths([(0,), (0, 1, 0)]), r"^paths must be prefix-closed: "
                                                     r"\(0, 1, 0\) needs its parent path"),
    (lambda: TokenTree.from_paths([(0,), (0,)]), r"^paths must not repeat a path"),
    (lambda: TokenTree.from_paths([(0,), ()]), r"^paths\[1\] is empty"),
    (lambda: TokenTree.from_paths([(-1,)]), r"^paths\[0\] must hold ranks >= 0"),
    (lambda: TokenTree.chain(3).subtree([0, 2]), r"^keep must contain each kept node's "
                                                 r"parent \(node 2 is kept"),
    (lambda: TokenTree.chain(3).subtree(np.zeros(3, bool)), r"^keep must name at least one"),
])
def test_bad_constructor_input(build, message):
    with pytest.raises(InvalidArgument, match=message):
        build()


# ---- positional acceptance: closed form ---------------------------------------------------

def test_marginal_rates_by_hand_and_back():
    a = PositionalAcceptance([[0.6, 0.5, 0.3], [1.0, 0.5, 0.5]])
    np.testing.assert_allclose(a.marginal, [[0.6, 0.2, 0.06], [1.0, 0.0, 0.0]], atol=1e-15)
    b = PositionalAcceptance.from_marginal([[0.6, 0.2, 0.06], [0.5, 0.5, 0.0]])
    np.testing.assert_allclose(b.rates, [[0.6, 0.5, 0.3], [0.5, 1.0, 0.0]], atol=1e-15)
    with pytest.raises(InvalidArgument, match=r"^marginal must sum to at most 1 .* row 1 "
                                              r"\(depth 2\) sums to 1.1"):
        PositionalAcceptance.from_marginal([[0.5, 0.5], [0.6, 0.5]])
    with pytest.raises(InvalidArgument, match=r"^rates must lie in \[0, 1\] \(got 1.5\)"):
        PositionalAcceptance([[1.5]])
    with pytest.raises(InvalidArgument, match=r"^rates must be a 2-D \[depth, rank\]"):
        PositionalAcceptance([0.5, 0.4])


def test_rates_from_counts():
    a = PositionalAcceptance.from_counts([[6, 1], [0, 0]], [[10, 4], [5, 0]])
    np.testing.assert_allclose(a.rates, [[0.6, 0.25], [0.0, 0.0]])
    with pytest.raises(InvalidArgument, match=r"^accepted must not exceed tried"):
        PositionalAcceptance.from_counts([[3]], [[2]])


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 1.0])
@pytest.mark.parametrize("k", [1, 4, 9])
def test_chain_equals_leviathan(alpha, k):
    a = PositionalAcceptance.same_at_every_depth([alpha, 0.5], k)
    assert expected_tokens(TokenTree.chain(k), a) == pytest.approx(
        float(analytic.expected_tokens(alpha, k)), rel=1e-13)


def test_chain_with_per_depth_rates_equals_positional_form():
    alphas = np.array([0.9, 0.7, 0.75, 0.4, 0.2])
    a = PositionalAcceptance(alphas[:, None])
    assert expected_tokens(TokenTree.chain(5), a) == pytest.approx(
        float(analytic.expected_tokens_positional(alphas)), rel=1e-13)
    np.testing.assert_allclose(tokens_pmf(TokenTree.chain(5), a),
                               S.tokens_pmf_positional(alphas), atol=1e-15)


def test_tree_expected_tokens_by_hand():
    # depth 1: p = (0.6, 0.5) -> q = (0.6, 0.2); depth 2: p = (0.5, 0.4) -> q = (0.5, 0.2)
    a = PositionalAcceptance([[0.6, 0.5], [0.5, 0.4]])
    t = TokenTree.from_paths([(0,), (1,), (0, 0), (0, 1), (1, 0)])
    probs = [0.6, 0.2, 0.6 * 0.5, 0.6 * 0.2, 0.2 * 0.5]
    np.testing.assert_allclose(node_probabilities(t, a), probs, rtol=1e-14)
    assert expected_tokens(t, a) == pytest.approx(1 + sum(probs), rel=1e-14)
    # P(T = 1) = 1 - 0.8, P(T = 3) = 0.3 + 0.12 + 0.1, P(T = 2) = the rest
    np.testing.assert_allclose(tokens_pmf(t, a), [0.2, 0.8 - 0.52, 0.52], atol=1e-15)


def test_ranks_with_gaps_use_their_own_rate():
    a = PositionalAcceptance([[0.5, 0.5, 0.5]])          # q = 0.5, 0.25, 0.125
    t = TokenTree.from_paths([(0,), (2,)])
    assert expected_tokens(t, a) == pytest.approx(1 + 0.5 + 0.125)


def test_tree_beyond_the_rates_is_refused():
    a = PositionalAcceptance([[0.5, 0.4], [0.5, 0.4]])
    with pytest.raises(InvalidArgument, match=r"^tree reaches depth 3 but the acceptance "
                                              r"rates cover depths 1..2"):
        expected_tokens(TokenTree.chain(3), a)
    with pytest.raises(InvalidArgument, match=r"^tree uses rank 2 but the acceptance rates "
                                              r"cover ranks 0..1"):
        expected_tokens(TokenTree.from_top_k([3]), a)
    with pytest.raises(InvalidArgument, match=r"^acceptance must be a PositionalAcceptance"):
        expected_tokens(TokenTree.chain(1), [[0.5]])


# ---- positional acceptance: simulation ------------------------------------------------------

def _last_node_law(tree, a) -> np.ndarray:
    """P(deepest accepted node = v) for v = root (-1, entry 0), 0, ..., N-1."""
    prob = node_probabilities(tree, a)
    law = np.concatenate([[1.0], prob])
    for i, q in enumerate(tree.parents.tolist()):
        law[q + 1] -= prob[i]
    return law


@pytest.mark.parametrize("tree", [TokenTree.chain(5), TokenTree.from_top_k([3, 2, 1]),
                                  TokenTree.from_paths([(0,), (2,), (0, 1), (2, 0),
                                                        (0, 1, 0), (0, 1, 1)])])
def test_simulator_agrees_with_closed_form(tree):
    a = PositionalAcceptance([[0.7, 0.4, 0.5], [0.6, 0.5, 0.2], [0.8, 0.3, 0.9],
                              [0.5, 0.5, 0.5], [0.9, 0.1, 0.1]])
    run = simulate_tree(tree, a, 200_000, rng=11)
    e = expected_tokens(tree, a)
    se = run.tokens.std() / np.sqrt(run.tokens.size)
    assert abs(run.tokens.mean() - e) < 4 * se
    law = _last_node_law(tree, a)
    observed = np.bincount(run.last_node + 1, minlength=tree.n_nodes + 1)
    keep = law > 0
    assert observed[~keep].sum() == 0
    assert stats.chisquare(observed[keep], law[keep] * observed.sum()).pvalue > 1e-4
    if not tree.is_chain:   # the test has power: p read as the marginal rate is rejected
        wrong = np.empty(tree.n_nodes)
        for i, q in enumerate(tree.parents.tolist()):
            wrong[i] = a.rates[tree.depths[i] - 1, tree.ranks[i]] * (wrong[q] if q >= 0 else 1)
        assert abs(run.tokens.mean() - (1 + wrong.sum())) > 10 * se


def test_simulator_is_seeded():
    t, a = TokenTree.from_top_k([2, 2]), PositionalAcceptance([[0.5, 0.5], [0.5, 0.5]])
    np.testing.assert_array_equal(simulate_tree(t, a, 1000, rng=5).tokens,
                                  simulate_tree(t, a, 1000, rng=5).tokens)


# ---- optimal trees ---------------------------------------------------------------------------

def all_trees(n: int, depth: int, width: int):
    """Every prefix-closed set of n rank paths with depth <= depth and ranks < width."""
    found = {frozenset()}
    for _ in range(n):
        grown = set()
        for paths in found:
            frontier = [(r,) for r in range(width)] + [p + (r,) for p in paths
                                                        if len(p) < depth
                                                        for r in range(width)]
            grown.update(paths | {f} for f in frontier if f not in paths)
        found = grown
    return found


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_optimal_trees_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    a = PositionalAcceptance(rng.uniform(0.05, 0.95, size=(3, 3)))   # rates not sorted
    opt = optimal_trees(a, 6)
    for n in range(1, 7):
        best = max(expected_tokens(TokenTree.from_paths(p), a) for p in all_trees(n, 3, 3))
        tree, e = opt[n]
        assert tree.n_nodes == n
        assert e == pytest.approx(best, rel=1e-12)
        assert expected_tokens(tree, a) == pytest.approx(e, rel=1e-12)


def test_optimal_tree_with_a_depth_limit_matches_brute_force():
    a = PositionalAcceptance([[0.8, 0.5], [0.9, 0.2], [0.95, 0.9]])
    for n in range(1, 7):
        best = max(expected_tokens(TokenTree.from_paths(p), a) for p in all_trees(n, 2, 2))
        tree, e = optimal_tree(a, n, max_depth=2)
        assert tree.max_depth <= 2 and e == pytest.approx(best, rel=1e-12)


def test_one_rank_gives_the_chain_and_sure_acceptance_gives_depth():
    a = PositionalAcceptance.same_at_every_depth([0.7], 8)
    tree, e = optimal_tree(a, 5)
    assert tree == TokenTree.chain(5)
    assert e == pytest.approx(float(analytic.expected_tokens(0.7, 5)))
    sure = PositionalAcceptance.same_at_every_depth([1.0, 0.5], 6)
    assert optimal_tree(sure, 6)[1] == pytest.approx(7.0)


def test_optimal_tree_bad_budgets():
    a = PositionalAcceptance([[0.5, 0.5], [0.5, 0.5]])
    assert tree_capacity(2, 2) == 6
    with pytest.raises(InvalidArgument, match=r"^n_nodes must be a positive integer "
                                              r"\(got 0\)"):
        optimal_tree(a, 0)
    with pytest.raises(InvalidArgument, match=r"^max_nodes must be at most 6, the nodes a "
                                              r"tree of depth 2 and 2 ranks holds \(got 7\)"):
        optimal_trees(a, 7)
    with pytest.raises(InvalidArgument, match=r"^max_depth must be at most the depths the "
                                              r"rates cover, 2 \(got 3\)"):
        optimal_trees(a, 3, max_depth=3)


# ---- dynamic trees (EAGLE-2's rerank) ---------------------------------------------------------

def _closed_subsets(tree: TokenTree, n: int):
    for keep in itertools.combinations(range(tree.n_nodes), n):
        s = set(keep)
        if all(tree.parents[i] < 0 or tree.parents[i] in s for i in keep):
            yield keep


def test_rerank_keeps_a_tree_with_the_best_score_sum():
    rng = np.random.default_rng(7)
    for case in range(30):
        cand = random_tree(rng, 9)
        local = rng.uniform(0, 1, cand.n_nodes)
        if case % 3 == 0:
            local[rng.uniform(size=cand.n_nodes) < 0.4] = 1.0     # ties along paths
        scores = path_scores(cand, local)
        for n in (1, 3, 6):
            sub, kept = select_best_nodes(cand, scores, n)
            assert sub.n_nodes == n and len(kept) == n
            assert all(cand.parents[i] < 0 or cand.parents[i] in kept for i in kept)
            assert sub.paths() == tuple(cand.paths()[i] for i in kept)
            best = max(scores[list(k)].sum() for k in _closed_subsets(cand, n))
            assert scores[kept].sum() == pytest.approx(best, rel=1e-12)


def test_expansion_picks_the_best_deepest_nodes():
    t = TokenTree.from_top_k([2, 3])
    scores = path_scores(t, [0.6, 0.3, 0.5, 0.2, 0.1, 0.9, 0.05, 0.01])
    # depth-2 path scores: 0.3, 0.12, 0.06, 0.27, 0.015, 0.003
    assert nodes_to_expand(t, scores, 2).tolist() == [2, 5]
    assert nodes_to_expand(t, scores, 10).tolist() == [2, 5, 3, 4, 6, 7]


def test_path_scores_by_hand_and_bad_scores():
    t = TokenTree.from_paths([(0,), (1,), (0, 0)])
    np.testing.assert_allclose(path_scores(t, [0.5, 0.3, 0.8]), [0.5, 0.3, 0.4])
    with pytest.raises(InvalidArgument, match=r"^path_scores must not increase from a node "
                                              r"to its child \(node 2: 0.6 > its parent's 0.5\)"):
        select_best_nodes(t, [0.5, 0.3, 0.6], 2)
    with pytest.raises(InvalidArgument, match=r"^n_nodes must be at most the candidates' "
                                              r"n_nodes = 3 \(got 4\)"):
        select_best_nodes(t, [0.5, 0.3, 0.4], 4)
    with pytest.raises(InvalidArgument, match=r"^scores must give one value per node"):
        path_scores(t, [0.5, 0.3])


# ---- speedup ------------------------------------------------------------------------------------

def test_chain_speedup_equals_leviathan_from_costs():
    a = PositionalAcceptance.same_at_every_depth([0.75], 6)
    t_target = [1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 1.7]           # 1..7 tokens
    for k in range(1, 7):
        got = tree_speedup(TokenTree.chain(k), a, t_target, lambda n: 0.2 + 0.0 * n)
        want = analytic.speedup_from_costs(analytic.expected_tokens(0.75, k), k, 0.2, 1.0,
                                           t_target[k])
        assert got == pytest.approx(float(want), rel=1e-13)


def test_tree_speedup_by_hand():
    a = PositionalAcceptance([[0.6, 0.5], [0.5, 0.4]])          # q = (0.6, 0.2), (0.5, 0.2)
    t = TokenTree.from_top_k([2, 2])
    e = 1 + 0.6 + 0.2 + 0.6 * (0.5 + 0.2) + 0.2 * (0.5 + 0.2)
    verify = lambda n: 1.0 + 0.25 * (n - 1)                     # noqa: E731
    drafter = lambda n: 0.1 + 0.01 * n                          # noqa: E731
    assert draft_time(t, drafter) == pytest.approx(0.11 + 0.12)  # widths 1 then 2
    assert draft_time(t, drafter, drafting="one_pass") == pytest.approx(0.11)
    assert draft_time(t, None) == 0.0
    assert tree_speedup(t, a, verify, drafter) == pytest.approx(e / (0.23 + 2.5))
    assert tree_speedup(t, a, verify) == pytest.approx(e / 2.5)
    with pytest.raises(InvalidArgument, match=r"^t_target must give pass times for 1..7 "
                                              r"tokens \(got 3\)"):
        tree_speedup(t, a, [1.0, 1.0, 1.0])
    with pytest.raises(InvalidArgument, match=r"^t_target must be finite and > 0 seconds"):
        tree_speedup(t, a, lambda n: 0.0)
    with pytest.raises(InvalidArgument, match=r"^drafting must be one of"):
        draft_time(t, drafter, drafting="tree")


def test_plan_by_hand_width_beats_depth_until_the_verify_widens():
    # q = (0.6, 0.2) at depth 1 and (0.2, 0.16) at depth 2; verify free up to 3 tokens.
    # Two nodes: (0,), (1,) give E = 1.8; the chain 1.72; (0,), (0, 1) 1.696.
    a = PositionalAcceptance([[0.6, 0.5], [0.2, 0.2]])
    verify = lambda n: 1.0 if n <= 3 else 10.0                  # noqa: E731
    plan = plan_tree(a, verify, max_nodes=4)
    assert plan.best_n == 2
    assert plan.best_tree.paths() == ((0,), (1,))
    assert plan.best_speedup == pytest.approx(1.8)
    np.testing.assert_allclose(plan.chain_speedup, [1.6, 1.72])
    assert plan.best_chain_k == 2 and plan.width_gain == pytest.approx(1.8 / 1.72)
    assert plan.break_even_n == 2
    # three nodes: (0,), (1,), (0, 0) with E = 1.8 + 0.6 * 0.2 = 1.92, at 10x the verify
    assert plan.trees[2].paths() == ((0,), (1,), (0, 0))
    assert plan.expected_tokens[2] == pytest.approx(1.92)
    assert plan.speedup[2] == pytest.approx(0.192)
    assert plan.next_tokens_gain == pytest.approx(1.92 / 1.8 - 1)
    assert plan.next_verify_cost == pytest.approx(9.0) and plan.next_draft_cost == 0.0
    assert plan.limited_by == "verify width"


def test_plan_without_a_limit_in_reach_says_so():
    a = PositionalAcceptance.same_at_every_depth([0.8, 0.5], 4)
    plan = plan_tree(a, lambda n: 1.0, max_nodes=5)             # verify free at every width
    assert plan.best_n == 5 and plan.limited_by == "node budget"
    assert plan.break_even_n is None
    assert plan.best_speedup == pytest.approx(optimal_tree(a, 5)[1])


def test_roofline_pass_time_by_hand_and_plans_per_row():
    from specsim.models.config import SMOLLM2_135M, SMOLLM2_360M

    hw = roofline.load_hardware("h100-sxm")
    t = roofline_pass_time("h100-sxm", SMOLLM2_360M, batch=4, context=100, dtype="bfloat16",
                           overhead=2e-5)
    cost = roofline.forward_cost(SMOLLM2_360M, batch=4, n_tokens=9, context=109,
                                 dtype="bfloat16")
    assert t(9) == pytest.approx(2e-5 + max(cost.flops / hw.peak("bfloat16"),
                                            cost.bytes / hw.bandwidth), rel=1e-12)
    a = PositionalAcceptance.same_at_every_depth([0.7, 0.4, 0.3], 5)
    plans = plan_per_hardware(a, SMOLLM2_360M, SMOLLM2_135M, ["h100-sxm", "l4"],
                              max_nodes=12, batch=32, context=256, overhead=1e-5)
    assert list(plans) == ["h100-sxm", "l4"]
    for name, plan in plans.items():
        kw = dict(batch=32, context=256, dtype="bfloat16", overhead=1e-5)
        target = roofline_pass_time(name, SMOLLM2_360M, **kw)
        drafter = roofline_pass_time(name, SMOLLM2_135M, **kw)
        assert plan.best_speedup == pytest.approx(
            tree_speedup(plan.best_tree, a, target, drafter), rel=1e-12)
        for n in range(1, 13):   # no candidate of the search beats the plan's pick
            for d in range(1, 6):
                if n <= tree_capacity(d, 3):
                    tree = optimal_tree(a, n, max_depth=d)[0]
                    assert tree_speedup(tree, a, target, drafter) <= plan.speedup[n - 1] + 1e-12


def test_pass_time_from_a_fitted_roofline():
    from specsim.fit import RooflineFit
    from specsim.models.config import SMOLLM2_135M

    fit = RooflineFit(kind="max", t0=3e-4, peak_flops=2e11, bandwidth=1.5e10, p=np.inf,
                      t0_se=0.0, peak_flops_se=0.0, bandwidth_se=0.0, p_se=np.nan, r2=1.0,
                      r2_log=1.0, mape_train=0.0, mape_heldout=np.nan, n_train=10,
                      n_heldout=0, heldout_index=(), seed=0, holdout=0.0)
    t = roofline_pass_time(fit, SMOLLM2_135M, batch=2, context=64, dtype="float32")
    cost = roofline.forward_cost(SMOLLM2_135M, batch=2, n_tokens=5, context=69,
                                 dtype="float32")
    assert t(5) == pytest.approx(3e-4 + max(cost.flops / 2e11, cost.bytes / 1.5e10), rel=1e-12)
    a = PositionalAcceptance.same_at_every_depth([0.6, 0.3], 4)
    plans = plan_per_hardware(a, SMOLLM2_135M, None, [fit], max_nodes=6, batch=2,
                              context=64, dtype="float32", drafting="one_pass")
    assert list(plans) == ["fitted roofline (max)"]
    assert plans["fitted roofline (max)"].best_speedup == pytest.approx(
        max(tree_speedup(optimal_tree(a, n)[0], a, t) for n in range(1, 7)), rel=1e-12)
    with pytest.raises(InvalidArgument, match=r"^hardware must be a roofline.Hardware"):
        roofline_pass_time(3.0, SMOLLM2_135M)


def test_tree_modules_import_without_jax():
    code = ("import sys, specsim.trees; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib')); "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
