"""Greedy tree decoding replayed along the target's own continuation, without the loop:
the tokens per iteration of a head's dynamic trees for score temperatures and sizes the
trees part does not run in the loop (its tables ``tree_temperature`` and ``tree_sizes``).

At temperature 0 the loop emits the target's greedy continuation y whatever the tree,
and an iteration that starts with the kept token y_{t+1} (root) and the target's
feature ĥ_t keeps the deepest node whose path is y_{t+2..}, then starts again where it
ended. The features along y are computed once over the whole sequence
(`specsim.train.feature_head.target_features`), so one `propose_tree` per iteration,
every prompt's row at its own position, replays the loop's iterations with no target
pass (tests: the loop's own tokens per iteration).

The score temperature (`specsim.drafters.dynamic_tree`) is chosen on calibration
prompts, shipped prompts of the same kinds apart from those the part reports on: the
grid's temperature with the largest mean ratio of tokens per iteration to the chain's.
Shapes: B prompts, T sequence, N nodes, D depth.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from specsim import schema as S

SCORE_TEMPERATURES = (1.0, 1.25, 1.5)   # the grid the calibration prompts choose from
REPLAY_SIZES = (128,)           # dynamic trees past the loop's largest, replayed at the chosen
                                # temperature


def accepted_depth(parents: np.ndarray, tokens: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """int64 [B]: greedy verification of trees given by ``parents`` [B, N] (−1 = the
    root; parents before children) and ``tokens`` [B, N] against the target's tokens
    ``truth`` [B, D] after the root: the depth of the deepest node whose path is a
    prefix of ``truth`` (0: none)."""
    parents, tokens, truth = (np.asarray(x) for x in (parents, tokens, truth))
    B, N = parents.shape
    depth = np.zeros((B, N), np.int64)
    match = np.zeros((B, N), bool)
    rows = np.arange(B)
    for i in range(N):
        p = parents[:, i]
        up = p >= 0
        depth[:, i] = np.where(up, depth[rows, np.maximum(p, 0)] + 1, 1)
        d = depth[:, i]
        ok = d <= truth.shape[1]
        want = truth[rows, np.minimum(d, truth.shape[1]) - 1]
        match[:, i] = ok & (tokens[:, i] == want) & np.where(up, match[rows, np.maximum(p, 0)],
                                                             True)
    return np.where(match, depth, 0).max(1)


@functools.cache
def _proposer():
    """propose(drafter, z [B, D], root [B]) → the greedy tree ``drafter`` proposes from
    the features z below the kept tokens root (the context it reads is its last
    token), compiled once per drafter configuration and shapes."""
    import jax
    import jax.numpy as jnp

    from specsim.drafters.base import Context
    from specsim.sampling import SamplingParams

    return jax.jit(lambda d, z, root: d.propose_tree(
        z, Context(root[:, None], jnp.ones_like(root)), jax.random.PRNGKey(0),
        SamplingParams.make(0.0))[1])


def replay(drafter, tokens: np.ndarray, prompt_lens, feats: np.ndarray, new_tokens: int
           ) -> list[np.ndarray]:
    """Per prompt: accepted + 1 per iteration (int64 [I]) of greedy decoding with the
    tree drafter ``drafter`` (a `DynamicTreeDrafter` over a head whose state is the
    target's feature, the feature head or Medusa heads) for ``new_tokens`` tokens, the
    prefill's first one included, as the loop runs them: ``tokens`` [B, T] the prompts
    and the target's greedy continuation (at least new_tokens + depth past each
    prompt), ``feats`` [B, T, D] the target's features along them."""
    import jax.numpy as jnp

    tokens = np.asarray(tokens)
    lens = np.asarray(prompt_lens, np.int64)
    D = drafter.max_depth
    if tokens.shape[1] < lens.max() + new_tokens + D:
        raise ValueError(f"tokens must hold new_tokens + depth = {new_tokens + D} tokens "
                         f"past each prompt (got {tokens.shape[1]} slots)")
    B, rows = len(lens), np.arange(len(lens))
    t, emitted = lens - 1, np.ones(len(lens), np.int64)   # ĥ_{P−1} gave the first token
    out: list[list[int]] = [[] for _ in range(B)]
    last = tokens.shape[1] - D - 2          # finished rows stay in range, ignored
    while (emitted < new_tokens).any():
        at = np.minimum(t, last)
        draft = _proposer()(drafter, jnp.asarray(feats[rows, at], jnp.float32),
                         jnp.asarray(tokens[rows, at + 1], jnp.int32))
        truth = tokens[rows[:, None], at[:, None] + 2 + np.arange(D)[None]]
        acc = accepted_depth(np.asarray(draft.parents), np.asarray(draft.tokens), truth)
        for b in np.flatnonzero(emitted < new_tokens):
            out[b].append(int(acc[b]) + 1)
        run = emitted < new_tokens
        emitted = np.where(run, emitted + acc + 1, emitted)
        t = np.where(run, t + acc + 1, t)
    return [np.asarray(o, np.int64) for o in out]


def continuations(target, prompts: dict, depth: int, new_tokens: int) -> dict:
    """Kind → (tokens [B, T], prompt lengths [B], features [B, T, D]): the target's greedy
    continuation of ``prompts`` (kind → token-id lists) long enough for `replay` and
    `specsim.experiment.parts.trees_ranks`, and its features along it."""
    from specsim.decode import reference_tokens
    from specsim.train.feature_head import target_features

    out = {}
    for kind, rows in prompts.items():
        tokens, lens = reference_tokens(target, rows, new_tokens + 1 + depth + 1)
        out[kind] = (tokens, lens, target_features(target, tokens, batch=len(rows)))
    return out


def _totals(runs) -> tuple[np.ndarray, np.ndarray]:
    from specsim.experiment.parts.trees_tokens import prompt_totals
    return prompt_totals([r - 1 for r in runs])


def chain_of(head, depth: int):
    """The head's chain of ``depth`` as a dynamic tree (top-1, ``depth`` nodes)."""
    from specsim.drafters.dynamic_tree import dynamic_tree_drafter
    return dynamic_tree_drafter(head, 1, depth, depth, name=f"{head.name}:chain")


def temperature_rows(head, seqs: dict, depth: int, top_k: int, n_nodes: int, new_tokens: int,
                     grid=SCORE_TEMPERATURES) -> pd.DataFrame:
    """The ``tree_temperature`` table: per score temperature of ``grid`` and kind of
    ``seqs`` (`continuations` of the calibration prompts), the dynamic tree's (``top_k``,
    ``n_nodes`` kept and expanded per depth) tokens per iteration over its chain's, and
    ``chosen``: the temperature with the largest mean ratio over the kinds (ties to the
    earlier one)."""
    from specsim.drafters.dynamic_tree import dynamic_tree_drafter

    chain = {k: _totals(replay(chain_of(head, depth), *s, new_tokens)) for k, s in seqs.items()}
    rows = []
    for temp in grid:
        d = dynamic_tree_drafter(head, top_k, depth, n_nodes, expand=n_nodes, temperature=temp)
        for kind, s in seqs.items():
            tok, its = _totals(replay(d, *s, new_tokens))
            ratio = (tok.sum() / its.sum()) / (chain[kind][0].sum() / chain[kind][1].sum())
            rows.append({"temperature": float(temp), S.KIND: kind, "n_nodes": n_nodes,
                         S.TOKENS_PER_ITERATION: tok.sum() / its.sum(),
                         "tokens_per_iteration_vs_chain": ratio, "prompts": len(tok)})
    df = pd.DataFrame(rows)
    mean = df.groupby("temperature", sort=False)["tokens_per_iteration_vs_chain"].mean()
    df["chosen"] = df["temperature"] == float(mean.idxmax())
    return df


def chosen_temperature(table: pd.DataFrame) -> float:
    """The temperature a ``tree_temperature`` table chose."""
    return float(table.loc[table["chosen"], "temperature"].iloc[0])


def size_rows(head, name: str, seqs: dict, depth: int, top_k: int, temperature: float,
              new_tokens: int, goal: float, sizes=REPLAY_SIZES, verify_cost=None
              ) -> pd.DataFrame:
    """The ``tree_sizes`` table: per kind of ``seqs`` (`continuations` of the prompts
    the part reports on) and size N of ``sizes``, the replayed dynamic tree's (``top_k``,
    N kept and expanded per depth, scores at ``temperature``) tokens per iteration over
    the replayed chain's with the 95% interval over prompts
    (`trees_tokens.ratio_interval`), whether it reaches ``goal``, and
    ``verify_cost(N + 1)`` (a dict of columns; None: none) beside it."""
    from specsim.drafters.dynamic_tree import dynamic_tree_drafter
    from specsim.experiment.parts.trees_tokens import ratio_interval

    rows = []
    for kind, s in seqs.items():
        chain = _totals(replay(chain_of(head, depth), *s, new_tokens))
        for n in sizes:
            d = dynamic_tree_drafter(head, top_k, depth, n, expand=n, temperature=temperature)
            tree = _totals(replay(d, *s, new_tokens))
            iv = ratio_interval(tree, chain)
            rows.append({"head": name, S.KIND: kind, "n_nodes": n, "temperature": temperature,
                         S.TOKENS_PER_ITERATION: tree[0].sum() / tree[1].sum(),
                         "chain_tokens_per_iteration": chain[0].sum() / chain[1].sum(),
                         "tokens_per_iteration_vs_chain": iv.value, "vs_chain_ci_lo": iv.lo,
                         "vs_chain_ci_hi": iv.hi, "reaches_goal": bool(iv.value >= goal),
                         "prompts": len(tree[0]),
                         **(verify_cost(n + 1) if verify_cost is not None else {})})
    return pd.DataFrame(rows)
