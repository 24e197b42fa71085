"""The trees part's tokens-per-iteration comparison: each head's trees against its own
chain at equal drafting depth, over several prompts per kind of work, untimed.

Heads: the feature head (`specsim.drafters.feature_head`) and Medusa heads
(`specsim.drafters.medusa`, the trained default or the shipped ones:
`specsim.train.medusa.find_medusa_heads`). Trees of each head at the part's `DEPTH`: its
chain (rank 0 at every depth), for the feature head the part's static trees (Sequoia's
for its probed rates), and a dynamic tree of `DYNAMIC_SIZES` nodes
(`specsim.drafters.dynamic_tree`): per row and iteration, the N best paths by the
head's path log-probability among the `DYNAMIC_TOP_K` best children of every expanded
node, N nodes expanded per depth (EAGLE-2's rerank with a frontier as wide as the tree:
where the head is unsure at depth 1, the tree goes wide there), scored by the head's
probabilities and, for the feature head, also at the score temperature its
calibration prompts chose (`trees_replay`). The feature head drafts one level per
step, so its chain and dynamic trees also run at each depth of `DEEPER`: Medusa's four
heads fix its depth, the feature head's is a choice, and a tree's gain over the chain
grows with depth (at depth d the chain keeps all d drafts with probability ∏ α_j, and
a tree recovers every level where a lower rank was right). Greedy, so every run emits
the target's own continuation and only the iteration count differs.

Tokens per iteration pool every iteration of a kind's prompts (total tokens over total
iterations); the ratio to the chain's has a 95% interval over prompts: a paired
bootstrap resampling prompts (the same ones for tree and chain), widened to the
Student-t interval of the per-prompt ratios (`specsim.experiment.intervals.interval`).
Tokens per iteration is a count, so a busy machine does not move it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from specsim import schema as S
from specsim.errors import InvalidArgument
from specsim.trees import TokenTree

DYNAMIC_TOP_K = 32          # children per expanded node of a dynamic tree
DYNAMIC_SIZES = (64,)       # nodes a dynamic tree keeps (and expands per depth)
DEEPER = (5,)               # the feature head's chain and dynamic trees also run this deep:
                            # EAGLE-2's evaluations draft 5 deep (60 nodes, top 10)
TOKEN_PROMPTS = 8           # prompts per kind whose runs give the tokens per iteration
BOOTSTRAP_DRAWS = 2000

TREE_TOKENS = "tree_tokens"
FEATURE_HEAD, MEDUSA = "feature head", "medusa"


def dynamic_label(n: int, temperature: float = 1.0) -> str:
    return f"dynamic N={n}" + (f" T={temperature:g}" if temperature != 1.0 else "")


def prompt_totals(accepted_runs) -> tuple[np.ndarray, np.ndarray]:
    """Per run (one prompt each): (tokens, iterations) int64 [R] from its accepted
    drafts per iteration (int [I] or [I, 1], −1 where the row took no part)."""
    tokens, its = [], []
    for a in accepted_runs:
        a = np.asarray(a).reshape(-1)
        a = a[a >= 0]
        tokens.append(int((a + 1).sum()))
        its.append(a.size)
    return np.asarray(tokens, np.int64), np.asarray(its, np.int64)


def ratio_interval(tree: tuple[np.ndarray, np.ndarray], chain: tuple[np.ndarray, np.ndarray],
                   draws: int = BOOTSTRAP_DRAWS, seed: int = 0):
    """The tree's tokens per iteration over the chain's, both pooled over the same
    prompts (``(tokens [R], iterations [R])`` each), with its 95% interval over prompts
    (module docstring). → `specsim.experiment.intervals.Interval`."""
    from specsim.experiment.intervals import interval

    (tt, ti), (ct, ci) = (tuple(np.asarray(x, float) for x in pair) for pair in (tree, chain))
    if not (tt.shape == ti.shape == ct.shape == ci.shape) or tt.ndim != 1 or not tt.size:
        raise InvalidArgument(f"tree and chain must give (tokens, iterations) over the same "
                              f"prompts, 1-D and non-empty (got shapes {tt.shape}, "
                              f"{ti.shape}, {ct.shape}, {ci.shape})")
    if (ti <= 0).any() or (ci <= 0).any():
        raise InvalidArgument("every prompt must have run at least one iteration")
    idx = np.random.default_rng(seed).integers(0, tt.size, (int(draws), tt.size))
    value = (tt.sum() / ti.sum()) / (ct.sum() / ci.sum())
    boot = (tt[idx].sum(1) / ti[idx].sum(1)) / (ct[idx].sum(1) / ci[idx].sum(1))
    return interval(value, boot, (tt / ti) / (ct / ci), positive=True)


def medusa_drafter_of(state, tree: TokenTree):
    """The Medusa heads of the target (`find_medusa_heads`) proposing ``tree``, or None
    when there are none."""
    from specsim.drafters.medusa import medusa_drafter
    from specsim.train.medusa import find_medusa_heads

    path = find_medusa_heads(state.target.cfg.name)
    return None if path is None else medusa_drafter(state.target, path, tree=tree)


def head_setups(feature_head, medusa, depth: int, chain_label: str,
                temperature: float = 1.0, deeper=()) -> dict[tuple[str, int], list]:
    """(head name, depth) → [(tree label, drafter, tree or None)] to run: the feature
    head's dynamic trees ``depth`` deep (its chain and static trees there run in the
    part's own step), with path scores at 1 (EAGLE-2's) and, when it differs, at
    ``temperature``, and at every depth of ``deeper`` its chain (labelled
    ``chain_label``) and the same dynamic trees; the Medusa heads' chain and dynamic
    trees ``depth`` deep (one head per depth); a head that is None is left out."""
    from specsim.drafters.dynamic_tree import dynamic_tree_drafter

    def dynamic(head, d, temp=1.0):
        return [(dynamic_label(n, temp), dynamic_tree_drafter(head, DYNAMIC_TOP_K, d, n,
                                                              expand=n, temperature=temp), None)
                for n in DYNAMIC_SIZES]

    def both(head, d):
        return dynamic(head, d) + (dynamic(head, d, temperature) if temperature != 1.0 else [])

    out = {}
    if feature_head is not None:
        out[(FEATURE_HEAD, depth)] = both(feature_head, depth)
        for d in deeper:
            out[(FEATURE_HEAD, d)] = [(chain_label, feature_head, TokenTree.chain(d)),
                                      *both(feature_head, d)]
    if medusa is not None:
        out[(MEDUSA, depth)] = [(chain_label, dataclasses.replace(
            medusa, tree=TokenTree.chain(depth)), None), *dynamic(medusa, depth)]
    return out


def token_rows(runs: dict, chain_label: str, goal: float) -> pd.DataFrame:
    """The ``tree_tokens`` table from ``runs[(head, depth, kind, label)] = (n_nodes,
    [accepted per prompt])`` (the chain's label ``chain_label``): tokens per iteration,
    its ratio to the same head's chain of the same depth on the same prompts with the
    95% interval, whether it reaches ``goal``, prompts and iterations."""
    rows = []
    for (head, depth, kind, label), (n_nodes, accepted) in runs.items():
        tree = prompt_totals(accepted)
        iv = ratio_interval(tree, prompt_totals(runs[(head, depth, kind, chain_label)][1]))
        rows.append({"head": head, "depth": depth, S.KIND: kind, "tree": label,
                     "n_nodes": n_nodes, S.TOKENS_PER_ITERATION: tree[0].sum() / tree[1].sum(),
                     "tokens_per_iteration_vs_chain": iv.value, "vs_chain_ci_lo": iv.lo,
                     "vs_chain_ci_hi": iv.hi, "reaches_goal": bool(iv.value >= goal),
                     "prompts": len(accepted), "iterations": int(tree[1].sum())})
    return pd.DataFrame(rows)
