"""The demo's ``trees`` part (specsim.experiment.parts.trees and trees_costs; its report section specsim.report.trees)
and the bad inputs of the tree theory it reads.

Oracles: the cost model's interpolation and least-squares line against hand-worked
numbers; `plan_per_hardware` with a draft cost ratio against `plan_tree` given the same
draft times explicitly; the part end to end on a tiny target with a random feature head,
whose chain row's tokens per iteration must equal `generate_speculative`'s at K = DEPTH
(the chain loop, not the tree loop) on the same prompt; the replay of a head's trees
along the target's continuation against the tree loop's own accepted counts, and greedy
verification by hand."""

import jax
import numpy as np
import pandas as pd
import pytest

from specsim import decode, roofline
from specsim.drafters import feature_head_drafter
from specsim.drafters.feature_head import init_cell
from specsim.drafters.dynamic_tree import dynamic_tree_drafter
from specsim.drafters.tree import as_tree_drafter
from specsim.errors import InvalidArgument
from specsim.experiment.parts import PARTS, resolve
from specsim.experiment.parts import trees as part
from specsim.experiment.parts import trees_ranks as tr
from specsim.experiment.parts import trees_replay as rp
from specsim.experiment.parts import trees_tokens as tt
from specsim.experiment.parts.trees_costs import tree_pass_calls
from specsim.report.trees import best_tree_lines, goal_lines, prediction_lines, trees_section
from specsim.models import Model
from specsim.models.config import LLAMA31_8B, TINY_LLAMA
from specsim.models.transformer import init_params
from specsim.trees import (PositionalAcceptance, TokenTree, plan_per_hardware, plan_tree,
                           roofline_pass_time)


# ---- the cost model and the verdicts ----------------------------------------------------
def test_verify_times_interpolate_between_measured_widths():
    t = part.verify_times(1.0, {5: 2.0, 9: 4.0}, 10)
    np.testing.assert_allclose(t, [1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.0])


def test_draft_line_recovers_the_pass_cost_it_was_built_from():
    a, b = 0.002, 0.0003
    trees = [TokenTree.chain(4), TokenTree.from_top_k([3, 2, 1]),
             TokenTree.from_paths([(0,), (1,), (0, 0), (0, 1), (0, 2), (0, 0, 0)])]
    # by hand: the chain 4 passes over 1 node; [3, 2, 1] passes over 1, 3, 6 nodes; the
    # last tree 3 passes over 1 node (only (0,) and (0, 0) have children)
    hand = {trees[0]: 4 * (a + b), trees[1]: 3 * a + 10 * b, trees[2]: 3 * a + 3 * b}
    assert part.draft_line(hand) == pytest.approx((a, b), rel=1e-9)
    # a slope that would come out negative is clipped to zero, the rest is the intercept
    fa, fb = part.draft_line({trees[0]: 0.004, trees[1]: 0.003})
    assert fb == 0.0 and fa > 0


def test_stopping_term_names_acceptance_verify_or_draft():
    assert part.stopping_term(0.01, 0.5, 0.1) == "acceptance"
    assert part.stopping_term(float("nan"), 0.5, 0.1) == "acceptance"
    assert part.stopping_term(0.2, 0.5, 0.1) == "verify width"
    assert part.stopping_term(0.2, 0.05, 0.3) == "draft cost"


def test_probe_tree_tries_every_rank_at_every_depth_of_the_spine():
    tree = part.probe_tree(3, 2)
    assert tree.n_nodes == 6
    assert sorted(tree.paths()) == [(0,), (0, 0), (0, 0, 0), (0, 0, 1), (0, 1), (1,)]


def test_draft_cost_ratio_is_plan_tree_with_those_draft_times():
    rates = PositionalAcceptance.same_at_every_depth([0.6, 0.2, 0.1], depth=4)
    got = plan_per_hardware(rates, LLAMA31_8B, hardware=["a100-80gb"], max_nodes=12,
                            batch=32, draft_cost_ratio=0.1)["a100-80gb"]
    t = roofline_pass_time("a100-80gb", LLAMA31_8B, batch=32, context=512, dtype="bfloat16")
    want = plan_tree(rates, t, [0.1 * t(n) for n in range(1, 13)], max_nodes=12)
    np.testing.assert_allclose(got.speedup, want.speedup)
    assert got.best_n == want.best_n and got.limited_by == want.limited_by


# ---- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize("call, message", [
    (lambda: plan_per_hardware(PositionalAcceptance([[0.5]]), LLAMA31_8B, max_nodes=1,
                               draft_cost_ratio=-0.1), r"^draft_cost_ratio must be a finite"),
    (lambda: plan_per_hardware(PositionalAcceptance([[0.5]]), LLAMA31_8B, max_nodes=1,
                               draft_cost_ratio=float("nan")), r"^draft_cost_ratio must be"),
    (lambda: plan_per_hardware(PositionalAcceptance([[0.5]]), LLAMA31_8B, LLAMA31_8B,
                               max_nodes=1, draft_cost_ratio=0.1),
     r"^give draft_cfg or draft_cost_ratio, not both"),
    (lambda: plan_per_hardware(PositionalAcceptance([[0.5]]), LLAMA31_8B, max_nodes=0),
     r"^max_nodes must be a positive integer \(got 0\)"),
    (lambda: plan_per_hardware(PositionalAcceptance([[0.5]]), LLAMA31_8B, hardware=["nope"],
                               max_nodes=1), r"^hardware must be one of .* \(got 'nope'\)"),
    (lambda: roofline_pass_time("nope", LLAMA31_8B), r"^hardware must be one of"),
    (lambda: TokenTree.from_paths([(0,), 5]), r"^paths\[1\] must be a sequence of ranks"),
    (lambda: TokenTree.from_paths(["01"]), r"^paths\[0\] must be a sequence of ranks"),
])
def test_bad_tree_planning_input_names_the_argument(call, message):
    with pytest.raises(InvalidArgument, match=message):
        call()


# ---- the tiny end to end ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny():
    """A tiny llama with room for the part's cache, and a random feature head for it."""
    cfg = TINY_LLAMA.replace(layer_loop="scan", max_seq_len=512)
    target = Model(cfg, jax.tree_util.tree_map(lambda a: a * 6.0,
                                               init_params(jax.random.PRNGKey(0), cfg)))
    cell = init_cell(jax.random.PRNGKey(3), cfg.d_model, 16)
    cell["w_out"] = 0.05 * jax.random.normal(jax.random.PRNGKey(4), cell["w_out"].shape)
    return target, feature_head_drafter(target, (cell, np.arange(cfg.vocab_size)))


def test_tree_pass_calls_reject_bad_input_and_run(tiny):
    target, head = tiny
    tree = TokenTree.from_top_k([2, 2])
    with pytest.raises(InvalidArgument, match=r"^tree must be a specsim.trees.TokenTree"):
        tree_pass_calls(target, None, [-1, 0], batch=1, cache_len=64)
    with pytest.raises(InvalidArgument, match=r"^cache_len \(12\) too small for a tree of 6"):
        tree_pass_calls(target, None, tree, batch=1, cache_len=12)
    with pytest.raises(InvalidArgument, match=r"^steps must be an integer >= 1"):
        tree_pass_calls(target, None, tree, batch=1, cache_len=64, steps=0)
    calls = tree_pass_calls(target, as_tree_drafter(head, tree), tree, batch=2, cache_len=64,
                            steps=2)
    ends, overlaps = (np.asarray(x) for x in calls.verify())
    assert ends.shape == (2,) and ((0 <= ends) & (ends <= tree.n_nodes)).all()
    assert ((overlaps >= 0) & (overlaps <= 2 * tree.n_nodes)).all()   # 2 steps, 0 <= β <= 1
    stats, ends = calls.iteration()
    assert np.asarray(ends).shape == (2, 2) and np.asarray(stats.drafted).tolist() == [[6, 6]] * 2
    assert tree_pass_calls(target, None, tree, batch=1, cache_len=64).iteration is None


@pytest.mark.parametrize("layers", [None, (0, 1, 2), (0, 1)], ids=["feature head",
                                                                    "all layers", "two layers"])
def test_tree_iteration_is_the_loop_body(tiny, layers):
    """The tree iteration program runs the tree loop's body: the drafter proposes the
    tree, the target verifies it, and its first iteration accepts the deepest node whose
    every token on the way is the target's argmax after its prefix (oracle: the tree
    drafter's own proposal and the model's plain forward over each node's path at the
    same state); its state is donated. The feature head (random) accepts nothing, the
    target's own layers everything, two of its three layers some rows 0, 1 or 2 deep."""
    from specsim.drafters import layer_skip_drafter
    from specsim.drafters.base import Context
    from specsim.models.transformer import forward
    from specsim.sampling import SamplingParams

    target, head = tiny
    tree, B = TokenTree.from_top_k([6, 2]), 6
    base = head if layers is None else layer_skip_drafter(target, list(layers))
    tree_drafter = as_tree_drafter(base, tree)
    call = tree_pass_calls(target, tree_drafter, tree, batch=B, cache_len=64, steps=1).iteration
    tokens, cache, dstate = jax.tree_util.tree_map(jax.numpy.copy, call.state)
    length, key = call.args[3], call.args[4]
    sp = SamplingParams.make(0.0, 0, 1.0, vocab_size=target.cfg.vocab_size)
    _, draft = tree_drafter.propose_tree(dstate, Context(tokens, length),
                                         jax.random.split(key, 3)[1], sp)
    root = np.asarray(tokens)[np.arange(B), np.asarray(length) - 1]
    nodes = np.asarray(draft.tokens)                                         # [B, C]
    accepted = np.ones((B, tree.n_nodes), bool)
    for v in range(tree.n_nodes):
        path = [v]
        while tree.parents[path[0]] >= 0:
            path.insert(0, int(tree.parents[path[0]]))
        window = np.concatenate([root[:, None], nodes[:, path]], 1)          # [B, depth + 1]
        logits, _ = forward(target.params, target.cfg, jax.numpy.asarray(window), cache)
        accepted[:, v] = (np.argmax(np.asarray(logits)[:, :-1], -1) == nodes[:, path]).all(1)
    depth = np.where(accepted, tree.depths[None], 0)
    want = depth.max(1)
    deepest = np.where(want > 0, np.argmax(depth, 1) + 1, 0)                 # verify index
    stats, ends = call()
    np.testing.assert_array_equal(np.asarray(stats.accepted)[0], want)
    np.testing.assert_array_equal(np.asarray(ends)[0], deepest)
    assert np.asarray(stats.drafted)[0].tolist() == [tree.n_nodes] * B
    before = call.state[1].k.unsafe_buffer_pointer()
    call()
    assert call.state[1].k.unsafe_buffer_pointer() == before
    if layers == (0, 1, 2):
        assert (want == tree.max_depth).all()


def test_trees_is_an_opt_in_part():
    from specsim.experiment.settings import DEFAULT_PARTS, DEMO_PARTS
    assert "trees" in PARTS and "trees" not in DEMO_PARTS + DEFAULT_PARTS
    assert [p.name for p in resolve(["trees"])] == ["trees"]


def test_the_part_end_to_end_on_a_tiny_target(tiny, monkeypatch):
    from specsim.drafters.medusa import medusa_drafter
    from specsim.experiment.pipeline import prepare
    from specsim.experiment.settings import DemoSettings

    target, head = tiny
    D = target.cfg.d_model
    k1, k2 = jax.random.split(jax.random.PRNGKey(7))
    heads = {"w": 0.3 * jax.random.normal(k1, (part.DEPTH, D, D)) / np.sqrt(D),
             "b": 0.1 * jax.random.normal(k2, (part.DEPTH, D))}
    monkeypatch.setattr(tt, "medusa_drafter_of", lambda state, tree: medusa_drafter(
        state.target, (heads, np.arange(target.cfg.vocab_size)), tree=tree))
    lines = []
    settings = DemoSettings(parts=("trees",), quick=True, drafters=("ngram",), repeats=2,
                            max_rounds=2, pass_steps=2, bootstrap_draws=50)
    state = prepare(settings, target=target, log=lines.append, progress=False)
    part.measure(state, head)
    runs, plan = state.tables[part.TREE_RUNS], state.tables[part.TREE_PLAN]
    hw = state.tables[part.TREE_HARDWARE]
    assert sorted(runs["kind"].unique()) == sorted(part.KINDS)
    assert list(runs[runs["kind"] == "code"]["n_nodes"]) == [part.DEPTH, *part.SIZES[:2]]
    assert (runs["depth"] <= part.DEPTH).all()
    chain = runs[runs["tree"] == part.CHAIN]
    assert (chain["tokens_per_iteration_vs_chain"] == 1).all()
    np.testing.assert_allclose(chain["speedup_vs_chain"], 1.0)
    # the chain row's tokens per iteration from the tree loop = the chain loop's
    for kind in part.KINDS:
        prompt = part.kind_prompts(target, kind, 1)
        ref = decode.generate_speculative(target, head, prompt, part.NEW_TOKENS, k=part.DEPTH,
                                          eos_token_id=None, cache_len=part.state_cache(state))
        got = chain[chain["kind"] == kind]["timed_tokens_per_iteration"].item()
        assert got == pytest.approx(ref.stats.tokens_per_iteration)
        # what the speedup per token has: the loop's decode tokens over its iterations
        got = chain[chain["kind"] == kind]["E_effective"].item()
        assert got == pytest.approx((ref.n_generated - 1) / ref.n_iterations)
    # the drafting is what the loop body's iteration costs beyond its verify pass
    np.testing.assert_allclose(runs["t_draft"],
                               np.maximum(runs["t_iteration"] - runs["t_verify"], 0.0))
    np.testing.assert_allclose(runs["pred_speedup_given_tokens"], runs["E_effective"]
                               * runs["t_target_1"] / (runs["t_draft"] + runs["t_verify"]))
    for col in ("measured_speedup", "predicted_speedup", "t_verify", "t_target_1"):
        assert (runs[col] > 0).all(), col
    # the plan's verdicts follow from its own columns
    assert set(plan["kind"]) == set(part.KINDS)
    for _, r in plan.iterrows():
        g = runs[runs["kind"] == r["kind"]].sort_values("n_nodes")
        sizes = list(g["n_nodes"])
        assert r["measured_best"] == g.loc[g["measured_speedup"].idxmax(), "tree"]
        near = int(np.argmin([abs(n - r["planned_n"]) for n in sizes]))
        best = list(g["tree"]).index(r["measured_best"])
        assert r["planned_within_one_size"] == (abs(near - best) <= 1)
        assert (r["stopped_by"] == "") == r["tree_pays_here"]
        rows = set(r["pays_on"].split()) if isinstance(r["pays_on"], str) else set()
        assert rows <= set(roofline.hardware_names())
    assert set(hw["hardware"]) == set(roofline.hardware_names())
    # tokens per iteration per head: the feature head's chain and static trees are the
    # part's own runs; each tree's ratio is over its own head's chain
    tokens = state.tables[part.TREE_TOKENS]
    dyn = [tt.dynamic_label(n) for n in tt.DYNAMIC_SIZES]
    # the score temperature: the grid's best mean ratio on the calibration prompts
    temps = state.tables[part.TREE_TEMPERATURE]
    assert list(temps["temperature"].unique()) == list(rp.SCORE_TEMPERATURES[:2])
    mean = temps.groupby("temperature", sort=False)["tokens_per_iteration_vs_chain"].mean()
    chosen = rp.chosen_temperature(temps)
    assert chosen == mean.index[int(np.argmax(mean.to_numpy()))]
    tempered = [tt.dynamic_label(n, chosen) for n in tt.DYNAMIC_SIZES] if chosen != 1 else []
    for kind in part.KINDS:
        got = tokens[(tokens["kind"] == kind) & (tokens["depth"] == part.DEPTH)]
        assert list(got[got["head"] == tt.FEATURE_HEAD]["tree"]) == \
            list(runs[runs["kind"] == kind]["tree"]) + dyn + tempered
        assert list(got[got["head"] == tt.MEDUSA]["tree"]) == [part.CHAIN] + dyn
        same = runs[runs["kind"] == kind].set_index("tree")["tokens_per_iteration"]
        mine = got[got["head"] == tt.FEATURE_HEAD].set_index("tree")["tokens_per_iteration"]
        np.testing.assert_allclose(mine[same.index], same)
        for d in tt.DEEPER:         # the feature head deeper: its own chain of d, as the
            deep = tokens[(tokens["kind"] == kind) & (tokens["depth"] == d)]   # chain loop
            assert list(deep["head"].unique()) == [tt.FEATURE_HEAD]
            assert list(deep["tree"]) == [part.CHAIN] + dyn + tempered
            ref = decode.generate_speculative(target, head, part.kind_prompts(target, kind, 1),
                                              part.NEW_TOKENS, k=d, eos_token_id=None,
                                              cache_len=part.state_cache(state))
            want = tt.prompt_totals([np.asarray(ref.stats.accepted)])
            assert deep.set_index("tree").loc[part.CHAIN, "tokens_per_iteration"] == \
                pytest.approx(want[0].sum() / want[1].sum())
            assert (deep["tokens_per_iteration"] <= d + 1).all()
        for (h, d), g in tokens[tokens["kind"] == kind].groupby(["head", "depth"]):
            g = g.set_index("tree")
            np.testing.assert_allclose(g["tokens_per_iteration_vs_chain"],
                                       g["tokens_per_iteration"] / g.loc[part.CHAIN,
                                                                         "tokens_per_iteration"])
    assert (tokens["tokens_per_iteration"] >= 1).all()
    text = "\n".join(trees_section(type("R", (), {"tables": state.tables})()))
    assert "## Token trees" in text and "tokens per iteration are" in text
    assert f"- {tt.MEDUSA}, depth {part.DEPTH}, code: {dyn[-1]} gives" in text
    assert f"- {tt.FEATURE_HEAD}, depth {tt.DEEPER[0]}, code: " in text
    assert "one prompt, no interval" in text                     # quick: one prompt per kind
    # the larger trees, replayed: their chain is the loop's chain, their ratio over it
    sizes = state.tables[part.TREE_SIZES]
    assert sorted(sizes["kind"]) == sorted(part.KINDS)
    assert (sizes["n_nodes"] == rp.REPLAY_SIZES[0]).all() and (sizes["temperature"] == chosen).all()
    for _, r in sizes.iterrows():
        loop_chain = tokens[(tokens["head"] == tt.FEATURE_HEAD) & (tokens["kind"] == r["kind"])
                            & (tokens["tree"] == part.CHAIN) & (tokens["depth"] == part.DEPTH)
                            ]["tokens_per_iteration"].item()
        assert r["chain_tokens_per_iteration"] == pytest.approx(loop_chain)
        assert r["tokens_per_iteration_vs_chain"] == pytest.approx(
            r["tokens_per_iteration"] / loop_chain)
    assert (sizes["verify_vs_chain_cpu"] > 0).all()
    assert (sizes[f"verify_vs_chain_{part.VERIFY_ROW}"] >= 1).all()
    assert "(chosen)" in text and "Larger dynamic trees" in text
    # the ranks replayed along the greedy continuation give the loop's own chain
    ceiling = state.tables[part.TREE_CEILING].set_index(["head", "kind"])
    for (h, kind), r in ceiling.iterrows():
        chain_row = tokens[(tokens["head"] == h) & (tokens["kind"] == kind)
                           & (tokens["tree"] == part.CHAIN) & (tokens["depth"] == part.DEPTH)]
        assert r["chain_tokens_per_iteration"] == pytest.approx(
            chain_row["tokens_per_iteration"].item())
        assert r["chain_tokens_per_iteration"] <= r["top8_tokens_per_iteration"] \
            <= r["ceiling_tokens_per_iteration"]
    ranks = state.tables[part.TREE_RANKS]
    assert len(ranks) == 2 * len(part.KINDS) * part.DEPTH
    bins = ranks[["rank_0", "rank_1", "rank_2_3", "rank_4_7"]].sum(axis=1)
    np.testing.assert_allclose(bins, ranks["below_8"])
    assert "at most" in text and "tree_ranks" in text


def test_verify_cost_extends_the_measured_verify_line(tiny):
    """On this CPU the verify pass over n tokens costs the line through the measured
    verify times (exact here: they lie on one), over the chain's; on the datasheet row it
    grows with n from 1 at the chain's width."""
    target, _ = tiny
    widths = np.array([part.DEPTH, 8, 16, 32])
    runs = pd.DataFrame({"tree": [part.CHAIN, "N=8", "N=16", "N=32"], "n_nodes": widths,
                         "t_verify": 0.01 + 0.002 * (widths + 1)})
    state = type("State", (), {"target": target, "settings": None})()
    cost = part.verify_cost(state, runs)
    chain = 0.01 + 0.002 * (part.DEPTH + 1)
    assert cost(129)["verify_vs_chain_cpu"] == pytest.approx((0.01 + 0.002 * 129) / chain)
    row = f"verify_vs_chain_{part.VERIFY_ROW}"
    assert cost(part.DEPTH + 1)[row] == pytest.approx(1.0)
    assert 1.0 < cost(65)[row] < cost(257)[row]
    # noisy times that fall with width (a tiny target on a busy machine): no falling
    # line, which would turn negative at 129 tokens, but their mean
    runs["t_verify"] = [0.030, 0.029, 0.026, 0.018]
    flat = part.verify_cost(state, runs)(129)["verify_vs_chain_cpu"]
    assert flat == pytest.approx(np.mean(runs["t_verify"]) / 0.030)


def test_head_setups_add_the_tempered_dynamic_tree_and_the_deeper_chain(tiny):
    _, head = tiny
    setups = tt.head_setups(head, None, 3, part.CHAIN, temperature=1.25, deeper=(5,))
    n = tt.DYNAMIC_SIZES[-1]
    assert list(setups) == [(tt.FEATURE_HEAD, 3), (tt.FEATURE_HEAD, 5)]
    assert [label for label, _, _ in setups[(tt.FEATURE_HEAD, 3)]] == [
        f"dynamic N={n}", f"dynamic N={n} T=1.25"]
    assert [d.temperature for _, d, _ in setups[(tt.FEATURE_HEAD, 3)]] == [1.0, 1.25]
    assert [d.max_depth for _, d, _ in setups[(tt.FEATURE_HEAD, 3)]] == [3, 3]
    deep = setups[(tt.FEATURE_HEAD, 5)]
    assert [label for label, _, _ in deep] == [part.CHAIN, f"dynamic N={n}",
                                               f"dynamic N={n} T=1.25"]
    assert deep[0][1] is head and deep[0][2].is_chain and deep[0][2].n_nodes == 5
    assert [d.max_depth for _, d, _ in deep[1:]] == [5, 5]
    assert list(tt.head_setups(head, None, 3, part.CHAIN)) == [(tt.FEATURE_HEAD, 3)]
    assert len(tt.head_setups(head, None, 3, part.CHAIN)[(tt.FEATURE_HEAD, 3)]) == 1


def test_token_rows_compare_each_tree_with_the_chain_of_its_own_depth():
    # depth 4: chain 2 tokens per iteration (accepted 1 each), tree 3; depth 5: chain 3, tree 3
    runs = {("h", 4, "code", "chain"): (4, [np.array([1, 1]), np.array([1])]),
            ("h", 4, "code", "T"): (64, [np.array([2, 2]), np.array([2])]),
            ("h", 5, "code", "chain"): (5, [np.array([2, 2]), np.array([2])]),
            ("h", 5, "code", "T"): (64, [np.array([2, 2]), np.array([2])])}
    rows = tt.token_rows(runs, "chain", 1.3).set_index(["depth", "tree"])
    assert rows.loc[(4, "T"), "tokens_per_iteration_vs_chain"] == pytest.approx(1.5)
    assert bool(rows.loc[(4, "T"), "reaches_goal"])
    assert rows.loc[(5, "T"), "tokens_per_iteration_vs_chain"] == pytest.approx(1.0)
    assert not bool(rows.loc[(5, "T"), "reaches_goal"])


def test_accepted_depth_by_hand():
    # nodes 0 and 1 below the root, 2 below 0, 3 below 1, 4 below 2; tokens 5..9
    parents = np.array([[-1, -1, 0, 1, 2]] * 3)
    tokens = np.array([[5, 6, 7, 8, 9]] * 3)
    # row 0: 5, 7, 9 → depth 3; row 1: 6, 8 → 2; row 2: no depth-1 node is 4, so the 7
    # and 9 below 5 do not count → 0
    truth = np.array([[5, 7, 9], [6, 8, 1], [4, 7, 9]])
    assert rp.accepted_depth(parents, tokens, truth).tolist() == [3, 2, 0]


def test_replay_gives_the_loops_iterations(tiny):
    """Replayed along the target's continuation, a head's chain and a dynamic tree at a
    score temperature give, prompt by prompt, the tree loop's accepted + 1 per
    iteration."""
    target, head = tiny
    prompts = {"x": [[3, 5, 7, 9, 11, 13, 2], [2, 4, 6, 8, 10, 12, 14, 16, 18]]}
    n_new, depth = 20, 3
    seqs = rp.continuations(target, prompts, depth, n_new)
    for d in (rp.chain_of(head, depth),
              dynamic_tree_drafter(head, 4, depth, 10, expand=10, temperature=1.5)):
        got = rp.replay(d, *seqs["x"], n_new)
        for row, g in zip(prompts["x"], got):
            res = decode.generate_tree(target, d, [row], n_new, eos_token_id=None)
            acc = np.asarray(res.stats.accepted).reshape(-1)
            assert g.tolist() == (acc[acc >= 0] + 1).tolist()
    with pytest.raises(ValueError, match="tokens must hold"):
        rp.replay(rp.chain_of(head, depth), *seqs["x"], n_new + 10)


def test_ranks_and_replay_by_hand():
    logits = np.array([[0.1, 0.9, 0.5, 0.5], [3.0, 1.0, 2.0, 0.0]])
    # row 0: column 2 ties column 3 (the tie counts against it) below column 1 → rank 2;
    # row 1: column 0 is the largest → 0; a token outside the head → RANK_OUTSIDE
    assert tr.ranks_of(logits, [2, 0]).tolist() == [2, 0]
    assert tr.ranks_of(logits, [-1, 3]).tolist() == [tr.RANK_OUTSIDE, 3]
    paths = np.array([[0, 0, 1], [0, 5, 0], [2, 0, 0], [0, 0, 0], [9, 0, 0], [0, 1, 0],
                      [1, 1, 1], [0, 0, 0]])
    # chain: t=0 accepts 2 (→ t=3), t=3 accepts 3 (→ t=7), t=7 accepts 3: 3, 4, 4
    assert tr.replay_tokens(paths, 1, 100).tolist() == [3, 4, 4]
    # ranks < 3: t=0 3 (→ 4), t=4 0 (→ 5), t=5 3 (→ 9: past the end)
    assert tr.replay_tokens(paths, 3, 100).tolist() == [4, 1, 4]
    assert tr.replay_tokens(paths, 1, 4).tolist() == [3]         # 1 + 3 tokens: done


def test_ratio_interval_pools_prompts_and_resamples_them():
    # by hand: tree 30/10 = 3.0 and chain 24/12 = 2.0 tokens per iteration → 1.5
    tree = (np.array([12, 18]), np.array([4, 6]))
    chain = (np.array([10, 14]), np.array([5, 7]))
    iv = tt.ratio_interval(tree, chain)
    assert iv.value == pytest.approx(1.5)
    assert iv.lo == pytest.approx(1.5) and iv.hi == pytest.approx(1.5)  # equal per-prompt ratios
    uneven = tt.ratio_interval((np.array([12, 30]), np.array([4, 6])), chain)
    assert uneven.value == pytest.approx((42 / 10) / 2.0)
    assert uneven.lo < 1.5 * 1.01 and uneven.hi > 2.5 * 0.99      # per prompt: 1.5 and 2.5
    assert tt.prompt_totals([np.array([3, 0, -1]), np.array([[1], [4]])])[0].tolist() == [5, 7]
    with pytest.raises(InvalidArgument, match="^tree and chain must give"):
        tt.ratio_interval(tree, (chain[0][:1], chain[1][:1]))
    with pytest.raises(InvalidArgument, match="at least one iteration"):
        tt.ratio_interval((tree[0], np.array([4, 0])), chain)


def test_best_tree_lines_pick_each_heads_best_tree_per_depth_with_its_interval():
    tokens = pd.DataFrame({
        "head": ["medusa"] * 3 + ["feature head"] * 4, "depth": [4] * 5 + [5] * 2,
        "kind": ["code"] * 7,
        "tree": ["chain", "dynamic N=64", "N=32", "chain", "dynamic N=64", "chain",
                 "dynamic N=64"],
        "n_nodes": [4, 64, 32, 4, 64, 5, 64],
        "tokens_per_iteration_vs_chain": [1, 1.33, 1.2, 1, 1.18, 1, 1.37],
        "vs_chain_ci_lo": [1, 1.2, 1.1, 1, 1.04, 1, 1.15],
        "vs_chain_ci_hi": [1, 1.47, 1.3, 1, 1.32, 1, 1.61], "prompts": [8] * 7})
    assert best_tree_lines(tokens) == [
        "- medusa, depth 4, code: dynamic N=64 gives 1.33× the chain's tokens per iteration "
        "(95% interval over 8 prompts 1.20-1.47; reaches 1.3×)",
        "- feature head, depth 4, code: dynamic N=64 gives 1.18× the chain's tokens per "
        "iteration (95% interval over 8 prompts 1.04-1.32; below 1.3×)",
        "- feature head, depth 5, code: dynamic N=64 gives 1.37× the chain's tokens per "
        "iteration (95% interval over 8 prompts 1.15-1.61; reaches 1.3×)"]


def test_goal_lines_say_whether_the_tree_reaches_the_goal():
    plan = pd.DataFrame({"kind": ["code", "json"], "largest_tree_tokens_vs_chain": [1.31, 1.1]})
    lines = goal_lines(plan)
    assert "1.31× the chain's (reaches 1.3×)" in lines[0]
    assert "1.10× the chain's (below 1.3×)" in lines[1]


def test_prediction_lines_give_mean_and_worst_error_by_hand():
    runs = pd.DataFrame({"measured_speedup": [2.0, 1.0], "predicted_speedup": [2.1, 0.97],
                         "pred_speedup_given_tokens": [2.0, 1.12]})
    lines = prediction_lines(runs)
    assert len(lines) == 2                       # no pooled column, no line for it
    assert "mean absolute error 4.0%, worst 5.0% over 2 runs" in lines[0]
    assert "given the timed run's own tokens" in lines[1] and "worst 12.0%" in lines[1]


def test_acceptance_table_reads_back_the_counts_it_was_written_from():
    rng = np.random.default_rng(0)
    tried = rng.integers(0, 20, (2, part.DEPTH, part.PROBE_WIDTH))
    acc = rng.integers(0, 1 + tried)
    counts = {"code": np.stack([acc[0], tried[0]]), "json": np.stack([acc[1], tried[1]])}
    table = part.acceptance_rows(counts)
    assert len(table) == 2 * part.DEPTH * part.PROBE_WIDTH
    want = part.acceptance_of(np.stack([acc[0], tried[0]]))
    np.testing.assert_allclose(part.acceptance_table(table, ["code"]).rates, want.rates)
    pooled = part.acceptance_of(np.stack([acc.sum(0), tried.sum(0)]))
    np.testing.assert_allclose(part.acceptance_table(table).rates, pooled.rates)


def test_acceptance_of_shares_one_rate_among_the_lower_ranks():
    accepted = np.array([[5, 0, 3, 1], [4, 0, 0, 0]])
    tried = np.array([[10, 8, 6, 2], [8, 0, 0, 0]])
    rates = part.acceptance_of(np.stack([accepted, tried])).rates
    # by hand: depth 1 rank 0 5/10, ranks 1-3 (0+3+1)/(8+6+2); depth 2 4/8, none tried below
    np.testing.assert_allclose(rates, [[0.5, 0.25, 0.25, 0.25], [0.5, 0.0, 0.0, 0.0]])
    with pytest.raises(InvalidArgument, match="accepted must not exceed tried"):
        part.acceptance_of(np.stack([tried + 1, tried]))


def test_the_stored_run_plans_what_its_own_tables_give():
    """data/trees-cpu: `plan_tree` from the stored pass times and acceptance counts (the
    notebook's route) gives the planned size and speedup the part stored."""
    from pathlib import Path
    folder = Path(__file__).resolve().parents[1] / "data" / "trees-cpu"
    runs = pd.read_csv(folder / f"{part.TREE_RUNS}.csv")
    plan = pd.read_csv(folder / f"{part.TREE_PLAN}.csv")
    acc = pd.read_csv(folder / f"{part.TREE_ACCEPTANCE}.csv")
    first = runs.drop_duplicates("tree")
    t_target = part.verify_times(float(first["t_target_1"].iloc[0]),
                                 dict(zip(first["n_nodes"] + 1, first["t_verify"])),
                                 int(first["n_nodes"].max()) + 1)
    n_max = t_target.size - 1
    for _, row in plan.iterrows():
        t_draft = row["draft_a_s"] + row["draft_b_s"] * np.arange(1, n_max + 1)
        p = plan_tree(part.acceptance_table(acc, [row["kind"]]), t_target, t_draft,
                      max_nodes=n_max, max_depth=part.DEPTH)
        assert p.best_n == row["planned_n"]
        assert p.best_speedup == pytest.approx(row["planned_speedup"], rel=1e-9)
    assert set(runs["kind"]) == set(part.KINDS) and (runs["depth"] <= part.DEPTH).all()


def test_a_tree_over_the_cache_names_the_cache(tiny):
    """A tree drafter's node count (static or a dynamic tree's slots) that, with the
    prompt and the new tokens, does not fit the cache is an InvalidArgument naming the
    tree and the cache, before anything compiles."""
    from specsim.decode import TRACE_COUNTS
    from specsim.decode.tree_loop import generate_tree
    from specsim.drafters.dynamic_tree import dynamic_tree_drafter

    target, head = tiny
    before = dict(TRACE_COUNTS)
    prompt = [[1, 2, 3, 4, 5]]
    with pytest.raises(InvalidArgument, match=r"^tree has 20 nodes: .* cache_len allows 32"):
        generate_tree(target, head, prompt, 8, tree=TokenTree.from_top_k([4, 4]), cache_len=32)
    dynamic = dynamic_tree_drafter(head, 4, 4, 20)
    with pytest.raises(InvalidArgument, match=r"^tree has \d+ nodes: .* cache_len allows 32"):
        generate_tree(target, dynamic, prompt, 8, cache_len=32)
    assert dict(TRACE_COUNTS) == before
