"""Part ``trees``: the feature head's and the Medusa heads' token trees against their
chains at equal drafting depth, on the real target, with the theory's plan beside the
measurement (opt-in: ``specsim demo --parts trees``).

Steps: (1) untimed runs of a probe tree (ranks 0..`PROBE_WIDTH` − 1 below every node
of the top-rank spine, down to `DEPTH`) on the first of `PROMPTS_PER_KIND` shipped
prompts per kind of work give per-(depth, rank) acceptance rates
(`specsim.trees.acceptance_counts`); (2) Sequoia's programme picks the E-optimal tree of
depth <= `DEPTH` for each size in `SIZES`; (3) the chain of `DEPTH` and those trees run
untimed on every prompt; (4) paired interleaved rounds (`specsim.experiment.paired`)
time, per kind, one unit: the plain-decoding baseline, every tree loop on the first
prompt (prefills untimed, `decode.StagedCall`), and the pieces of one iteration
(`trees_costs`: the verify pass over root + nodes and each tree's whole iteration, the
loop body's own function, whose excess over the verify is the drafting as the loop pays
it; the autoregressive step); tokens per iteration and acceptance pool the untimed runs;
(5) `trees.plan_tree` with those measured pass times (verify linear between the widths
measured, drafting a + b·w per level fitted to the trees' drafting times) picks the size
the theory expects fastest on this CPU, against the measured best, and
`trees.plan_per_hardware` says on which datasheet rows a tree pays; (6) the feature
head's score temperature is chosen on calibration prompts, the next
`PROMPTS_PER_KIND` of each kind (`trees_replay`); (7) each head's dynamic tree (the
feature head's also at that temperature), the Medusa heads' chain, and the feature
head's chain and dynamic trees at the deeper depths of `trees_tokens.DEEPER`, run
untimed on the same prompts (`trees_tokens`): tokens per iteration against the head's own chain,
with an interval over prompts; (8) the feature head's larger dynamic trees, replayed
along the target's continuation (`trees_replay`), say what size the tokens goal needs
and what its verify costs; (9) each head's ranks of the target's tokens along its
greedy continuation of the same prompts (`trees_ranks`): where the target's token sits
among the head's candidates per depth, and the most tokens per iteration any tree of
its top candidates can reach.

Tables:

* ``tree_runs``: per (kind, tree): tokens per iteration, its ratio to the chain's, the
  measured speedup over plain decoding (decode time per token, ``settings.clock``) with
  its 95% interval, and the predicted speedup E · t_target(1) / t_iteration (t_draft +
  t_verify, t_draft = t_iteration − t_verify) with E the acceptance model's for a run of
  ``NEW_TOKENS`` (the last iteration's tokens past the end are lost): from the timed
  run's own per-(depth, rank) rates (``E_in_run``, the headline, as the central check
  predicts from a run's measured acceptance) and from the rates pooled over the kind's
  prompts (``pred_speedup_pooled``); and from the timed run's own decode tokens over its
  iterations (``E_effective``, ``pred_speedup_given_tokens``).
* ``tree_plan``: per kind: the planned size, depth and speedup, the measured best, and
  what stops a tree here (`stopping_term`), with the rows where the theory says it pays
  (a best tree `PAYS` times the best chain's speedup or more).
* ``tree_hardware``: `plan_per_hardware` per datasheet row at batch 1, the acceptance
  pooled over the kinds, the feature head's draft pass at its byte ratio to the target's.
* ``tree_acceptance``: accepted and tried per (kind, depth, rank) (`acceptance_table`
  reads it back).
* ``tree_tokens``: per (head, depth, kind, tree): tokens per iteration, its ratio to the
  head's chain of that depth with a 95% interval over prompts (`trees_tokens`).
* ``tree_temperature``: per score temperature and kind, the feature head's dynamic
  tree's tokens per iteration over its chain's on the calibration prompts, and the
  one chosen.
* ``tree_sizes``: per kind and size past the loop's largest, the feature head's
  replayed dynamic tree at the chosen temperature against its chain with the
  interval over prompts, and its verify pass's cost over the chain's (this CPU's
  measured verify line; `VERIFY_ROW`'s roofline).
* ``tree_ranks``, ``tree_ceiling``: per (head, kind, depth) the share of positions at
  each rank; per (head, kind) the chain's and the ceiling tree's tokens per iteration
  (`trees_ranks`).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd

from specsim import schema as S
from specsim.experiment.part import Part
from specsim.experiment.parts import trees_replay as tr
from specsim.experiment.parts import trees_tokens as tt
from specsim.experiment.parts.trees_ranks import rank_tables
from specsim.experiment.state import DemoState
from specsim.experiment.decomposition import finite_run_tokens
from specsim.trees import (PositionalAcceptance, TokenTree, acceptance_counts,
                           expected_tokens, optimal_trees, plan_per_hardware, plan_tree,
                           tokens_pmf)

DEPTH = 4               # drafting depth of the chain and the deepest a tree goes
PROBE_WIDTH = 4         # ranks the probe tree tries at every depth
SIZES = (8, 16, 32)     # node budgets of the measured trees (the chain has DEPTH nodes)
KINDS = ("code", "json")
PROMPTS_PER_KIND = 8    # shipped prompts per kind whose runs give tokens per iteration
NEW_TOKENS = 40
PROMPT_TOKENS = (65, 128)   # prompt lengths used: all pad to 128 slots, one program each
PART_SECONDS = 240.0    # the part's timed rounds end by this long after it starts
PAYS = 1.05             # a tree "pays" where it is this much faster than the best chain
ACCEPTANCE_GAIN = 0.05  # below this gain in tokens per iteration, acceptance stops a tree
TOKENS_GOAL = 1.3       # tokens per iteration a tree should reach over its chain's

TREE_RUNS, TREE_PLAN, TREE_HARDWARE = "tree_runs", "tree_plan", "tree_hardware"
TREE_ACCEPTANCE = "tree_acceptance"
TREE_TOKENS, TREE_RANKS, TREE_CEILING = "tree_tokens", "tree_ranks", "tree_ceiling"
TREE_TEMPERATURE, TREE_SIZES = "tree_temperature", "tree_sizes"
VERIFY_ROW = "h100-sxm"     # the datasheet row a large tree's verify is priced on,
VERIFY_DTYPE = "bfloat16"   # in the dtype a GPU serves in
CHAIN, PROBE = "chain", "probe"


# ---- what is run ----------------------------------------------------------------------
def probe_tree(depth: int = DEPTH, width: int = PROBE_WIDTH) -> TokenTree:
    """Ranks 0..width − 1 below every node of the rank-0 spine, ``depth`` deep: every
    (depth, rank) rate is tried on every iteration that reaches that depth."""
    return TokenTree.from_paths([(0,) * d + (r,) for d in range(depth) for r in range(width)])


def tree_label(tree: TokenTree) -> str:
    return CHAIN if tree.is_chain else f"N={tree.n_nodes}"


def head_drafter(state: DemoState):
    """The feature head the demo runs (or the trained / shipped one), None if none."""
    from specsim.drafters import FeatureHeadDrafter
    from specsim.experiment import drafter_study

    for setup in state.drafters.values():
        if isinstance(setup.drafter, FeatureHeadDrafter):
            return setup.drafter
    path = drafter_study.find_feature_head(state.target.cfg.name)
    return None if path is None else drafter_study.feature_head(path, state.target).drafter


def kind_prompts(target, kind: str, n: int) -> list[list[int]]:
    """``n`` shipped prompts of ``kind`` whose token count lies in `PROMPT_TOKENS` (all
    pad to the same bucket), or random ids for a model without a tokenizer."""
    from specsim.train.samples import encode_prompts, load_prompts

    if target.tokenizer is None:
        rng = np.random.default_rng(len(kind))
        return [list(rng.integers(3, target.cfg.vocab_size, PROMPT_TOKENS[0]))
                for _ in range(n)]
    rows = encode_prompts([p for p in load_prompts() if p["kind"] == kind], target.tokenizer)
    lo, hi = PROMPT_TOKENS
    return [r for r in rows if lo <= len(r) <= hi][:n]


def calibration_prompts(target, kind: str, n: int) -> list[list[int]]:
    """``n`` prompts of ``kind`` after the ``n`` the part reports on (`kind_prompts`):
    what the score temperature is chosen on."""
    rows = kind_prompts(target, kind, 2 * n)[n:]
    if not rows:
        raise ValueError(f"no calibration prompts of kind {kind!r}: the shipped prompt set "
                         f"has at most {n} in {PROMPT_TOKENS} tokens")
    return rows


def _counts(tree: TokenTree, path_end) -> np.ndarray:
    """[2, DEPTH, PROBE_WIDTH] accepted and tried counts of one run (padded)."""
    acc, tried = acceptance_counts(tree, path_end)
    out = np.zeros((2, DEPTH, PROBE_WIDTH), np.int64)
    d, r = acc.shape
    out[0, :d, :r], out[1, :d, :r] = acc, tried
    return out


def acceptance_of(counts: np.ndarray) -> PositionalAcceptance:
    """The rates the part plans with from [2, D, R] accepted and tried counts: rank 0's
    own per depth, and one rate per depth shared by ranks 1..R − 1, pooled from their
    counts. The lower ranks are tried only after rank 0 fails, a few times per run, so
    their own rates are a handful of trials each; a rank that happened to be accepted
    0 times in a few tries would make Sequoia's programme skip it for a lower one. One
    shared conditional rate keeps the marginal rates falling with rank, so the planned
    trees hold the drafter's top candidates."""
    acc, tried = np.asarray(counts[0]), np.asarray(counts[1])
    PositionalAcceptance.from_counts(acc, tried)            # the counts' own checks
    with np.errstate(invalid="ignore", divide="ignore"):
        top = np.where(tried[:, 0] > 0, acc[:, 0] / np.maximum(tried[:, 0], 1), 0.0)
        lo_acc, lo_tried = acc[:, 1:].sum(1), tried[:, 1:].sum(1)
        lower = np.where(lo_tried > 0, lo_acc / np.maximum(lo_tried, 1), 0.0)
    rates = np.concatenate([top[:, None], np.repeat(lower[:, None], acc.shape[1] - 1, 1)], 1)
    return PositionalAcceptance(rates)


def kind_counts(seen: dict) -> dict[str, np.ndarray]:
    """Kind -> [2, DEPTH, PROBE_WIDTH] counts pooled over every run of that kind."""
    out: dict[str, np.ndarray] = {}
    for (kind, _), o in seen.items():
        out[kind] = out.get(kind, 0) + o.counts
    return out


def acceptance_rows(counts: dict[str, np.ndarray]) -> pd.DataFrame:
    """The ``tree_acceptance`` table: accepted and tried per (kind, depth, rank) and the
    conditional rate (NaN where never tried); `acceptance_table` reads it back."""
    rows = [{S.KIND: kind, "depth": d + 1, "rank": r, "accepted": int(c[0, d, r]),
             "tried": int(c[1, d, r]),
             "rate": c[0, d, r] / c[1, d, r] if c[1, d, r] else math.nan}
            for kind, c in counts.items() for d in range(c.shape[1]) for r in range(c.shape[2])]
    return pd.DataFrame(rows)


def acceptance_table(table: pd.DataFrame, kinds=None) -> PositionalAcceptance:
    """The part's rates (`acceptance_of`) from a ``tree_acceptance`` table, counts pooled
    over ``kinds`` (default all): what a notebook plans trees with from a stored run."""
    t = table if kinds is None else table[table[S.KIND].isin(list(kinds))]
    g = t.groupby(["depth", "rank"])[["accepted", "tried"]].sum()
    shape = (int(t["depth"].max()), int(t["rank"].max()) + 1)
    acc, tried = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    for (d, r), row in g.iterrows():
        acc[d - 1, r], tried[d - 1, r] = row["accepted"], row["tried"]
    return acceptance_of(np.stack([acc, tried]))


# ---- costs ------------------------------------------------------------------------------
def verify_times(t1: float, verify: dict[int, float], n_max: int) -> np.ndarray:
    """float64 [n_max]: entry n − 1 = one target pass over n tokens: t1 at n = 1 (the
    autoregressive step), then linear between the verify widths measured (``verify``:
    width → seconds), flat past the widest."""
    xs = np.array([1] + sorted(verify), float)
    ys = np.array([t1] + [verify[n] for n in sorted(verify)], float)
    return np.interp(np.arange(1, n_max + 1), xs, ys)


def draft_line(drafts: dict[TokenTree, float]) -> tuple[float, float]:
    """(a, b) >= 0 of one drafting pass over w nodes costing a + b·w, fitted by
    non-negative least squares to each tree's measured drafting time, Σ over its levels
    (`TokenTree.expanded_per_depth`) of a + b·w."""
    from scipy.optimize import nnls

    rows = np.array([[np.count_nonzero(t.expanded_per_depth()), t.expanded_per_depth().sum()]
                     for t in drafts], float)
    (a, b), _ = nnls(rows, np.array(list(drafts.values()), float))
    return float(a), float(b)


def stopping_term(tokens_gain: float, verify_added: float, draft_added: float) -> str:
    """Which term keeps a tree from paying over the chain: "acceptance" when its
    tokens per iteration gain less than `ACCEPTANCE_GAIN`, else the larger added cost
    ("verify width" or "draft cost", fractions of the chain's iteration time)."""
    if not tokens_gain >= ACCEPTANCE_GAIN:
        return "acceptance"
    return "verify width" if verify_added >= draft_added else "draft cost"


# ---- the part ---------------------------------------------------------------------------
class Observed:
    """What the runs of one (kind, tree) showed: each run's accepted drafts per
    iteration and row (int [I, B], −1 where a row took no part) and the acceptance
    counts of all of them (`_counts`)."""

    def __init__(self):
        self.accepted: list[np.ndarray] = []
        self.counts = np.zeros((2, DEPTH, PROBE_WIDTH), np.int64)

    def add(self, tree: TokenTree | None, accepted, path_end) -> None:
        """One run's iterations; its acceptance counts when ``tree`` (the static tree
        it ran) is given and at most `DEPTH` deep (what the plan reads), none for a
        dynamic tree or a deeper one (`trees_tokens.DEEPER`: tokens per iteration only)."""
        self.accepted.append(np.asarray(accepted))
        if tree is not None and tree.max_depth <= DEPTH:
            self.counts += _counts(tree, np.asarray(path_end))

    @property
    def tokens_per_iteration(self) -> float:
        """Mean accepted + 1 over every iteration of every run (rows that took part)."""
        acc = np.concatenate([a[a >= 0] for a in self.accepted])
        return float((acc + 1).mean())

    @property
    def effective_tokens_per_iteration(self) -> float:
        """Decode tokens kept over iterations (each row's tokens cut at the run's
        NEW_TOKENS − 1 decode tokens, the prefill giving the first): what a run's speedup
        per token has, below the mean when the last iteration accepts past the end."""
        kept = sum(np.minimum(np.where(a >= 0, a + 1, 0).sum(0), NEW_TOKENS - 1).sum()
                   for a in self.accepted)
        return float(kept / sum(int((a >= 0).sum()) for a in self.accepted))


def state_cache(state: DemoState) -> int:
    """Cache slots of every run: the padded prompt, the new tokens and the largest tree."""
    from specsim import decode
    return decode.bucket(decode.bucket(PROMPT_TOKENS[1]) + NEW_TOKENS
                         + max(SIZES + tt.DYNAMIC_SIZES) + 1)


def _common(state: DemoState) -> dict:
    return dict(eos_token_id=None, cache_len=state_cache(state), seed=state.settings.seed)


def _untimed(state, head, trees, rows_of: dict, seen: dict, label=tree_label) -> None:
    """Run every tree on every prompt of ``rows_of`` (kind -> token-id lists), untimed;
    add what each run shows to ``seen[(kind, label(tree))]``. A tree None runs the
    tree drafter ``head``'s own (static, or dynamic: no acceptance counts)."""
    from specsim import decode

    for tree in trees:
        shape = tree if tree is not None else getattr(head, "tree", None)
        for kind, rows in rows_of.items():
            for row in rows:
                res = decode.generate_tree(state.target, head, [row], NEW_TOKENS, tree=tree,
                                           **_common(state))
                seen.setdefault((kind, label(tree)), Observed()).add(
                    shape, res.stats.accepted, res.stats.path_end)


def _timed_calls(state, head, trees, prompts):
    """Compiled zero-argument calls: ("ar", kind), ("run", kind, label) (staged: the
    prefills run untimed before the loop program, whose raw output the call returns),
    ("t1",), ("verify", label), ("iteration", label) (the loop body's own iteration
    program, `trees_costs`); and passes per call of the pass programs."""
    from specsim import decode, pass_costs
    from specsim.decode.staged import StagedCall
    from specsim.drafters.tree import as_tree_drafter
    from specsim.experiment.parts.trees_costs import tree_pass_calls

    s, common = state.settings, _common(state)
    calls, per = {}, {}
    for kind, rows in prompts.items():
        calls[("ar", kind)] = decode.staged_autoregressive(state.target, [rows[0]], NEW_TOKENS,
                                                           **common)
        for tree in trees:
            def setup(tree=tree, row=rows[0]):
                return decode.tree_loop(state.target, head, [row], NEW_TOKENS, tree,
                                        **common), None
            calls[("run", kind, tree_label(tree))] = StagedCall(setup, lambda out, info: out)
    for call in list(calls.values()):
        call()                                                # compiles every loop
    pc = pass_costs.pass_calls(state.target, None, batch=1, cache_len=common["cache_len"],
                               k=DEPTH, steps=s.pass_steps, seed=s.seed)
    calls[("t1",)], per[("t1",)] = pc.target_1, pc.steps
    for tree in trees:
        label = tree_label(tree)
        tc = tree_pass_calls(state.target, as_tree_drafter(head, tree), tree, batch=1,
                             cache_len=common["cache_len"], steps=s.pass_steps, seed=s.seed)
        calls[("verify", label)], per[("verify", label)] = tc.verify, tc.steps
        calls[("iteration", label)], per[("iteration", label)] = tc.iteration, tc.steps
    return calls, per


def _unit_keys(calls, kind: str, labels) -> list[tuple]:
    """One kind's timing unit: its baseline, every tree's run, then the passes the
    predictions read."""
    keys = [("ar", kind)] + [("run", kind, x) for x in labels] + [("t1",)]
    keys += [k for x in labels for k in (("verify", x), ("iteration", x)) if k in calls]
    return keys


def _speedup(state, ar, run):
    """A tree loop's measured speedup over its kind's baseline, with its interval over
    rounds, paired round by round as the central check's runs are."""
    from specsim.experiment.inrun import speedup_interval

    return speedup_interval({"ar": ar, "spec": run}, state.settings)


def _time(state, calls, per, units, budget_s):
    """Paired rounds over ``units`` (lists of call keys): per unit, key -> seconds per
    round (per pass for the pass programs) and key -> the last output; rounds and why
    they stopped. A unit leaves once every run's speedup interval is within
    ``settings.target_half_width``."""
    from specsim.experiment import paired

    s = state.settings
    clock = time.process_time if s.clock == "cpu" else time.perf_counter

    def converged(u, samples):
        ar = np.asarray(samples[0], float)
        return all(_speedup(state, ar, np.asarray(samples[j], float)).half_width
                   <= s.target_half_width
                   for j, key in enumerate(units[u]) if key[0] == "run")

    res = paired.paired_rounds([[calls[k] for k in keys] for keys in units],
                               np.random.default_rng(s.seed), min_rounds=s.repeats,
                               max_rounds=s.max_rounds, budget_s=budget_s,
                               converged=converged, clock=clock, alternate=True)
    times = [{k: np.asarray(v, float).reshape(-1) / per.get(k, 1)
              for k, v in zip(keys, res.samples[u])} for u, keys in enumerate(units)]
    last = [dict(zip(keys, res.outputs[u])) for u, keys in enumerate(units)]
    return times, last, res.rounds, res.stopped


def _median_over_units(times, key) -> float:
    return float(np.median(np.concatenate([t[key] for t in times if key in t])))


def run_rows(state, trees, seen, timed, times, rounds, stopped, units) -> pd.DataFrame:
    """The ``tree_runs`` table (see the module): tokens per iteration over every run of
    (kind, tree) in ``seen``, the timed run's own in ``timed`` (what its speedup had)."""
    t1 = _median_over_units(times, ("t1",))
    rows = []
    for u, keys in enumerate(units):
        kind = keys[0][1]
        acc = acceptance_of(kind_counts(seen)[kind])
        chain_tpi = seen[(kind, CHAIN)].tokens_per_iteration
        for tree in trees:
            label = tree_label(tree)
            tv = _median_over_units(times, ("verify", label))
            t_it = _median_over_units(times, ("iteration", label))
            td = max(t_it - tv, 0.0)        # the drafting as the loop pays it
            tpi = seen[(kind, label)].tokens_per_iteration
            tpi_timed = timed[(kind, label)].tokens_per_iteration
            e_run = timed[(kind, label)].effective_tokens_per_iteration
            iv = _speedup(state, times[u][("ar", kind)], times[u][("run", kind, label)])
            e_model = expected_tokens(tree, acc)
            e_pooled, e_in_run = (finite_run_tokens(tokens_pmf(tree, a), NEW_TOKENS - 1, 1)
                                  for a in (acc, acceptance_of(timed[(kind, label)].counts)))
            rows.append({S.KIND: kind, "tree": label, "n_nodes": tree.n_nodes,
                         "depth": tree.max_depth, "widths": str(tree.nodes_per_depth().tolist()),
                         S.TOKENS_PER_ITERATION: tpi,
                         "tokens_per_iteration_vs_chain": tpi / chain_tpi,
                         "E_model": e_model, S.MEASURED_SPEEDUP: iv.value,
                         S.MEASURED_CI_LO: iv.lo, S.MEASURED_CI_HI: iv.hi,
                         "E_in_run": e_in_run, S.PREDICTED_SPEEDUP: e_in_run * t1 / (td + tv),
                         "pred_speedup_pooled": e_pooled * t1 / (td + tv),
                         "timed_tokens_per_iteration": tpi_timed, S.E_EFFECTIVE: e_run,
                         "pred_speedup_given_tokens": e_run * t1 / (td + tv),
                         S.T_TARGET_1: t1, S.T_VERIFY: tv, S.T_DRAFT: td,
                         "t_iteration": t_it,
                         S.ROUNDS: rounds[u], S.STOPPED: stopped[u],
                         "runs": len(seen[(kind, label)].accepted),
                         S.NEW_TOKENS: NEW_TOKENS, S.CLOCK: state.settings.clock})
    df = pd.DataFrame(rows)
    chain = df[df["tree"] == CHAIN].set_index(S.KIND)[S.MEASURED_SPEEDUP]
    df["speedup_vs_chain"] = df[S.MEASURED_SPEEDUP] / df[S.KIND].map(chain)
    return df


def _cost_model(runs: pd.DataFrame, trees) -> tuple[np.ndarray, tuple[float, float]]:
    """This CPU's measured pass times for `plan_tree`: t_target [max(SIZES) + 1] and the
    drafting line (a, b)."""
    by_label = runs.drop_duplicates("tree").set_index("tree")
    t1 = float(by_label[S.T_TARGET_1].iloc[0])
    verify = {t.n_nodes + 1: float(by_label.loc[tree_label(t), S.T_VERIFY]) for t in trees}
    drafts = {t: float(by_label.loc[tree_label(t), S.T_DRAFT]) for t in trees}
    return verify_times(t1, verify, max(verify)), draft_line(drafts)


def plan_rows(state, runs: pd.DataFrame, seen: dict, trees, head) -> tuple[pd.DataFrame,
                                                                       pd.DataFrame]:
    """The ``tree_plan`` and ``tree_hardware`` tables (see the module)."""
    from specsim.trees import format_plans

    t_target, (a, b) = _cost_model(runs, trees)
    n_max = t_target.size - 1                              # the largest tree measured
    t_draft = a + b * np.arange(1, n_max + 1)
    c_bytes = feature_head_byte_ratio(head, state.target.cfg, state_cache(state))
    counts = kind_counts(seen)
    pooled = acceptance_of(sum(counts.values()))
    hardware = plan_per_hardware(pooled, state.target.cfg, None, max_nodes=n_max,
                                 context=state_cache(state) // 2, draft_cost_ratio=c_bytes,
                                 max_depth=DEPTH)
    hw = pd.DataFrame([{"hardware": name, **p.summary()} for name, p in hardware.items()])
    state.log(format_plans(hardware))
    rows = []
    for kind in counts:
        acc = acceptance_of(counts[kind])
        plan = plan_tree(acc, t_target, t_draft, max_nodes=n_max, max_depth=DEPTH,
                         description=f"this CPU, {kind}")
        g = runs[runs[S.KIND] == kind].sort_values("n_nodes")
        chain = g[g["tree"] == CHAIN].iloc[0]
        best = g.loc[g[S.MEASURED_SPEEDUP].idxmax()]
        sizes = g["n_nodes"].tolist()
        planned_at = int(np.argmin([abs(n - plan.best_n) for n in sizes]))
        measured_at = sizes.index(int(best["n_nodes"]))
        first = g[g["tree"] != CHAIN].iloc[0]
        t_chain = chain[S.T_DRAFT] + chain[S.T_VERIFY]
        term = stopping_term(first[S.TOKENS_PER_ITERATION] / chain[S.TOKENS_PER_ITERATION] - 1,
                             (first[S.T_VERIFY] - chain[S.T_VERIFY]) / t_chain,
                             (first[S.T_DRAFT] - chain[S.T_DRAFT]) / t_chain)
        trees_only = g[g["tree"] != CHAIN]
        top = trees_only.loc[trees_only[S.MEASURED_SPEEDUP].idxmax()]
        pays_here = bool(top[S.MEASURED_CI_LO] > chain[S.MEASURED_SPEEDUP])
        kind_hw = plan_per_hardware(acc, state.target.cfg, None, max_nodes=n_max,
                                    context=state_cache(state) // 2, draft_cost_ratio=c_bytes,
                                    max_depth=DEPTH)
        pays_on = [n for n, p in kind_hw.items() if p.width_gain >= PAYS]
        deepest = g[g["n_nodes"] == g["n_nodes"].max()].iloc[0]
        rows.append({S.KIND: kind, "planned_n": plan.best_n,
                     "planned_depth": plan.best_tree.max_depth,
                     "planned_widths": str(plan.best_tree.nodes_per_depth().tolist()),
                     "planned_speedup": plan.best_speedup,
                     "planned_chain_k": plan.best_chain_k,
                     "planned_chain_speedup": plan.best_chain_speedup,
                     "plan_limited_by": plan.limited_by,
                     "measured_best": best["tree"],
                     "measured_best_speedup": best[S.MEASURED_SPEEDUP],
                     "planned_within_one_size": abs(planned_at - measured_at) <= 1,
                     "tree_pays_here": pays_here,
                     "stopped_by": "" if pays_here else term,
                     "pays_on": " ".join(pays_on),
                     "largest_tree_tokens_vs_chain": deepest["tokens_per_iteration_vs_chain"],
                     "draft_a_s": a, "draft_b_s": b, "c_bytes": c_bytes})
    return pd.DataFrame(rows), hw


def verify_cost(state: DemoState, runs: pd.DataFrame):
    """n → the verify pass over n tokens against the chain's (`DEPTH` + 1 tokens): on
    this CPU from a line a + b·n fitted to the verify times measured (``runs``), and on
    the datasheet row `VERIFY_ROW` in `VERIFY_DTYPE` from the roofline. A pass over more
    tokens costs no less, so where noisy times on a tiny target fit a falling line, the
    slope is 0 and the line their mean (extrapolated, a falling line turns negative)."""
    from specsim.trees import roofline_pass_time

    by = runs.drop_duplicates("tree")
    widths, t = by["n_nodes"].to_numpy(float) + 1, by[S.T_VERIFY].to_numpy(float)
    b, a = np.polyfit(widths, t, 1)
    if b < 0:
        b, a = 0.0, float(np.mean(t))
    chain = float(by.loc[by["tree"] == CHAIN, S.T_VERIFY].iloc[0])
    row = roofline_pass_time(VERIFY_ROW, state.target.cfg, context=state_cache(state) // 2,
                             dtype=VERIFY_DTYPE)

    def cost(n: int) -> dict:
        return {"verify_vs_chain_cpu": (a + b * n) / chain,
                f"verify_vs_chain_{VERIFY_ROW}": row(n) / row(DEPTH + 1)}
    return cost


def feature_head_byte_ratio(head, target_cfg, context: int) -> float:
    """The feature head's bytes per draft step over the target's pass
    (`drafter_study.bytes_ratios`), its cost on a datasheet row relative to the target."""
    from specsim.experiment import drafter_study as study
    d = study.StudyDrafter(head.name, head, "feature-head")
    return float(study.bytes_ratios(d, target_cfg, context)[S.C_BYTES])


def measure(state: DemoState, head) -> None:
    """Steps 1-5 of the module for the feature-head drafter ``head``; adds the tables."""
    t_start = time.perf_counter()
    quick = state.settings.quick
    n_prompts = 1 if quick else PROMPTS_PER_KIND
    prompts = {kind: kind_prompts(state.target, kind, n_prompts) for kind in KINDS}
    probe, seen = probe_tree(), {}
    _untimed(state, head, [probe], {k: rows[:1] for k, rows in prompts.items()}, seen,
             label=lambda tree: PROBE)
    sizes = SIZES[:2] if quick else SIZES
    rates = acceptance_of(sum(o.counts for o in seen.values()))
    opt = optimal_trees(rates, max(sizes), max_depth=DEPTH)
    trees = [TokenTree.chain(DEPTH)] + [opt.trees[n - 1] for n in sizes]
    _untimed(state, head, trees, prompts, seen)
    state.log(f"    trees {[f'{tree_label(t)} {t.nodes_per_depth().tolist()}' for t in trees]}"
              f" on {list(prompts)}, {n_prompts} prompt(s) each; probe and untimed runs in "
              f"{time.perf_counter() - t_start:.0f} s")
    calls, per = _timed_calls(state, head, trees, prompts)
    labels = [tree_label(t) for t in trees]
    units = [_unit_keys(calls, kind, labels) for kind in prompts]
    budget = max(0.0, PART_SECONDS - (time.perf_counter() - t_start))
    times, last, rounds, stopped = _time(state, calls, per, units, budget)
    timed = {}
    for u, kind in enumerate(prompts):             # the timed runs' own iterations
        for tree in trees:
            key = (kind, tree_label(tree))
            _, stats, _, _, path_end = last[u][("run",) + key]
            timed[key] = Observed()
            timed[key].add(tree, stats.accepted, path_end)
    runs = run_rows(state, trees, seen, timed, times, rounds, stopped, units)
    plan, hw = plan_rows(state, runs, seen, trees, head)
    state.tables[TREE_RUNS], state.tables[TREE_PLAN], state.tables[TREE_HARDWARE] = runs, plan, hw
    state.tables[TREE_ACCEPTANCE] = acceptance_rows(kind_counts(seen))
    medusa = tt.medusa_drafter_of(state, TokenTree.chain(DEPTH))
    calibration = {kind: calibration_prompts(state.target, kind, n_prompts) for kind in KINDS}
    temps = tr.temperature_rows(head, tr.continuations(state.target, calibration, DEPTH,
                                                        NEW_TOKENS),
                                DEPTH, tt.DYNAMIC_TOP_K, max(tt.DYNAMIC_SIZES), NEW_TOKENS,
                                tr.SCORE_TEMPERATURES[:2] if quick else tr.SCORE_TEMPERATURES)
    temp = tr.chosen_temperature(temps)
    state.tables[TREE_TEMPERATURE] = temps
    state.tables[TREE_TOKENS] = head_tokens(state, head, medusa, trees, seen, prompts, temp,
                                           tt.DEEPER)
    seqs = tr.continuations(state.target, prompts, DEPTH, NEW_TOKENS)
    state.tables[TREE_SIZES] = tr.size_rows(
        head, tt.FEATURE_HEAD, seqs, DEPTH, tt.DYNAMIC_TOP_K, temp, NEW_TOKENS, TOKENS_GOAL,
        tr.REPLAY_SIZES[:1] if quick else tr.REPLAY_SIZES, verify_cost(state, runs))
    heads = {tt.FEATURE_HEAD: head} | ({tt.MEDUSA: medusa} if medusa is not None else {})
    state.tables[TREE_RANKS], state.tables[TREE_CEILING] = rank_tables(
        heads, state.target, prompts, DEPTH, NEW_TOKENS, seqs)
    fmt = lambda x: f"{x:.3g}"                                             # noqa: E731
    for t in (runs, plan):
        state.log(t.to_string(index=False, float_format=fmt))


def head_tokens(state: DemoState, head, medusa, trees, seen: dict, prompts: dict,
                temperature: float = 1.0, deeper=()) -> pd.DataFrame:
    """Step 7 of the module: the ``tree_tokens`` table (`trees_tokens`) of the feature
    head ``head`` (its dynamic trees' scores also at ``temperature``; its chain and
    dynamic trees also at each depth of ``deeper``) and the Medusa heads ``medusa``
    (None: none), every setup run untimed on every prompt; the feature head's chain and
    static ``trees`` reuse their runs in ``seen``."""
    runs = {(tt.FEATURE_HEAD, DEPTH, kind, tree_label(t)):
            (t.n_nodes, seen[(kind, tree_label(t))].accepted)
            for kind in prompts for t in trees}
    setups_of = tt.head_setups(head, medusa, DEPTH, CHAIN, temperature, deeper)
    for (name, depth), setups in setups_of.items():
        for label, drafter, tree in setups:
            own: dict = {}
            _untimed(state, drafter, [tree], prompts, own, label=lambda _, x=label: x)
            n_nodes = tree.n_nodes if tree is not None else (
                getattr(drafter, "n_nodes", None) or drafter.tree.n_nodes)
            runs.update({(name, depth, kind, label): (n_nodes, own[(kind, label)].accepted)
                         for kind in prompts})
        state.log(f"    {name}, depth {depth}: {[x[0] for x in setups]} on "
                  f"{len(prompts)} kinds")
    return tt.token_rows(runs, CHAIN, TOKENS_GOAL)


def run(state: DemoState) -> None:
    head = head_drafter(state)
    if head is None:
        state.log(f"    no feature head of {state.target.cfg.name}: train one with `specsim "
                  f"train-draft --kind feature-head --target {state.target.cfg.name}`; "
                  f"the trees part has nothing to measure")
        for name in PART.produces:
            state.tables[name] = pd.DataFrame()
        return
    measure(state, head)


PART = Part(name="trees", summary="the feature head's and Medusa heads' token trees "
            "against their chains at equal depth: tokens per iteration, measured and planned "
            "speedup, width per hardware",
            run=run, produces=(TREE_RUNS, TREE_PLAN, TREE_HARDWARE, TREE_ACCEPTANCE,
                               TREE_TOKENS, TREE_RANKS, TREE_CEILING, TREE_TEMPERATURE,
                               TREE_SIZES))
