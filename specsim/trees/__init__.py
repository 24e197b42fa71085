"""Token trees for speculative decoding: shapes, acceptance theory, optimal and dynamic
trees, and their speedup per hardware (NumPy only; importable without JAX).

- `specsim.trees.tree`: `TokenTree` (parents, ranks, depths; ancestor and verify masks,
  positions; `PaddedTree` for a static capacity) and its constructors `chain`,
  `from_top_k`, `from_paths`, `from_parents`.
- `specsim.trees.acceptance`: the positional acceptance model `PositionalAcceptance`,
  the closed form `expected_tokens` and `tokens_pmf`, the simulator `simulate_tree`.
- `specsim.trees.optimal`: Sequoia's dynamic programme, `optimal_trees`/`optimal_tree`.
- `specsim.trees.dynamic`: EAGLE-2's expansion and rerank, `path_scores`,
  `nodes_to_expand`, `select_best_nodes`.
- `specsim.trees.measured`: per-(depth, rank) rates from a tree run's path ends
  (`measured_acceptance`), for Sequoia's programme.
- `specsim.trees.speedup`: `tree_speedup`, `plan_tree` (best (shape, N) and break-even
  N for given pass times), `plan_per_hardware` over ``data/hardware.csv``.

docs/trees.md states the model and the formulas.
"""

from specsim.trees.acceptance import (PositionalAcceptance, TreeRun, expected_tokens,
                                      node_probabilities, simulate_tree, tokens_pmf)
from specsim.trees.dynamic import nodes_to_expand, path_scores, select_best_nodes
from specsim.trees.measured import acceptance_counts, measured_acceptance
from specsim.trees.optimal import OptimalTrees, optimal_tree, optimal_trees, tree_capacity
from specsim.trees.speedup import (DRAFTING, PassTime, TreePlan, draft_time, format_plans,
                                   plan_per_hardware, plan_tree, roofline_pass_time,
                                   tree_speedup)
from specsim.trees.tree import MAX_NODES, PaddedTree, TokenTree

__all__ = [
    "TokenTree", "PaddedTree", "MAX_NODES",
    "PositionalAcceptance", "node_probabilities", "expected_tokens", "tokens_pmf",
    "TreeRun", "simulate_tree",
    "OptimalTrees", "optimal_trees", "optimal_tree", "tree_capacity",
    "path_scores", "nodes_to_expand", "select_best_nodes",
    "acceptance_counts", "measured_acceptance",
    "PassTime", "DRAFTING", "roofline_pass_time", "draft_time", "tree_speedup",
    "TreePlan", "plan_tree", "plan_per_hardware", "format_plans",
]
