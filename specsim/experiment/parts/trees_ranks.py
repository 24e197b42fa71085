"""Where the target's greedy token sits among a head's candidates, depth by depth, along
the target's own continuation: what any tree of that head can accept (the trees part's
tables ``tree_ranks`` and ``tree_ceiling``).

At each position t of the target's greedy continuation of a prompt, the root is the
kept token y_{t+1} with its feature ĥ_t (what the loop hands a head after an iteration
that ended there). A head ranks its candidates for y_{t+1+d} at depth d = 1..D: the
feature head's cell rolled along y_{t+1..t+d} (the path a tree holds while it is
right), Medusa head d from ĥ_t alone. This gives each position its rank path
r(t) [D] (`RANK_OUTSIDE` where the token is outside the head vocabulary).

Greedy verification of a static tree at t accepts the longest prefix of r(t) the tree
holds, so replaying iterations (t → t + accepted + 1 until `NEW_TOKENS` are out, as the
loop runs) gives the tokens per iteration of any static tree from the rank paths alone:
`replay_tokens`. ``tree_ceiling`` sets the chain (ranks 0 only) against the trees
holding every path of ranks below 8 and below `CEILING_RANKS` at every depth: no tree
whose every node is among its parent's top 8 (or top `CEILING_RANKS`, the dynamic
trees' top-k) accepts more, so a ratio below the goal there means the head's
candidates, not the tree's shape, stop it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from specsim import schema as S

RANK_OUTSIDE = 1 << 30      # the rank of a token outside the head vocabulary
CEILING_RANKS = 32          # the ceiling tree holds every path of ranks below this (the
                            # dynamic trees' top-k, `trees_tokens.DYNAMIC_TOP_K`)
RANK_BINS = ((0, 1, "rank_0"), (1, 2, "rank_1"), (2, 4, "rank_2_3"), (4, 8, "rank_4_7"))


def ranks_of(logits, want_pos) -> np.ndarray:
    """int64 [n]: the rank of column ``want_pos`` [n] (−1: outside, `RANK_OUTSIDE`) in
    each row of ``logits`` [n, Vh] (0 = the largest; ties count against the token)."""
    lg = np.asarray(logits, np.float32)
    pos = np.asarray(want_pos)
    own = lg[np.arange(lg.shape[0]), np.maximum(pos, 0)]
    rank = (lg > own[:, None]).sum(1) + ((lg == own[:, None]).sum(1) - 1)
    return np.where(pos >= 0, rank, RANK_OUTSIDE).astype(np.int64)


def replay_tokens(rank_paths: np.ndarray, max_rank: int, new_tokens: int) -> np.ndarray:
    """Accepted + 1 per iteration (int64 [I]) of greedy decoding with the tree holding
    every rank path whose ranks are all below ``max_rank`` (1: the chain), replayed over
    the rank paths [n, D] of consecutive positions from the first generated token: each
    iteration accepts the leading depths within the tree and moves past them."""
    ok = np.cumprod(np.asarray(rank_paths) < max_rank, axis=1).sum(1)       # [n]
    t, out, emitted = 0, [], 1
    while emitted < new_tokens and t < ok.size:
        out.append(int(ok[t]) + 1)
        emitted += out[-1]
        t += out[-1]
    return np.asarray(out, np.int64)


def head_rank_paths(head, target, tokens: np.ndarray, prompt_lens, feats, depth: int,
                    n_positions: int) -> list[np.ndarray]:
    """Per prompt: the rank paths int64 [n_positions, depth] of ``head`` (a
    `FeatureHeadDrafter` or `MedusaDrafter`) along the greedy continuation ``tokens``
    [B, T] (prompt + continuation) with the target's features ``feats`` [B, T, D]."""
    import jax.numpy as jnp

    from specsim.drafters.feature_head import cell
    from specsim.drafters.medusa import medusa_logits

    head_ids = np.asarray(head.head_ids)
    pos_of = np.full(target.cfg.vocab_size, -1, np.int64)
    pos_of[head_ids] = np.arange(head_ids.size)
    out = []
    for b, P in enumerate(np.asarray(prompt_lens)):
        ts = np.arange(P - 1, P - 1 + n_positions)
        z = jnp.asarray(feats[b, ts], jnp.float32)                          # ĥ_t [n, D]
        medusa = None if hasattr(head, "cell") else np.asarray(
            medusa_logits(head.params, head.head, z))                       # [n, K, Vh]
        cols = []
        for d in range(1, depth + 1):
            if medusa is None:
                z = cell(head.cell, head.embed, z, jnp.asarray(tokens[b, ts + d]), head.eps)
                lg = np.asarray(z @ head.head.T)
            else:
                lg = medusa[:, d - 1]
            cols.append(ranks_of(lg, pos_of[tokens[b, ts + d + 1]]))
        out.append(np.stack(cols, 1))
    return out


def rank_tables(heads: dict, target, prompts: dict, depth: int, new_tokens: int,
                seqs: dict | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``tree_ranks`` (per head, kind, depth: positions and the share of the target's
    token at each rank bin of `RANK_BINS` and below `CEILING_RANKS`) and
    ``tree_ceiling`` (per head and kind: the chain's and the ceiling trees' replayed
    tokens per iteration, ranks below 8 and below `CEILING_RANKS`, and their ratios) for
    ``heads`` (name → drafter) on ``prompts`` (kind → token-id lists of one padded
    length); ``seqs``: their `trees_replay.continuations` when already computed."""
    from specsim.experiment.parts.trees_replay import continuations

    ranks, ceiling = [], []
    n_pos = new_tokens + 1                  # enough positions for any replay
    seqs = seqs if seqs is not None else continuations(target, prompts, depth, new_tokens)
    for kind, rows in prompts.items():
        tokens, lens, feats = seqs[kind]
        for name, head in heads.items():
            paths = head_rank_paths(head, target, tokens, lens, feats, depth, n_pos)
            allp = np.concatenate(paths)
            for d in range(depth):
                row = {"head": name, S.KIND: kind, "depth": d + 1, "positions": len(allp)}
                for lo, hi, label in RANK_BINS:
                    row[label] = float(np.mean((allp[:, d] >= lo) & (allp[:, d] < hi)))
                row["below_8"] = float(np.mean(allp[:, d] < 8))
                row[f"below_{CEILING_RANKS}"] = float(np.mean(allp[:, d] < CEILING_RANKS))
                ranks.append(row)
            chain, top8, top = (np.concatenate([replay_tokens(p, m, new_tokens) for p in paths])
                                .mean() for m in (1, 8, CEILING_RANKS))
            ceiling.append({"head": name, S.KIND: kind, "prompts": len(paths),
                            "chain_tokens_per_iteration": chain,
                            "top8_tokens_per_iteration": top8, "top8_vs_chain": top8 / chain,
                            "ceiling_tokens_per_iteration": top,
                            "ceiling_vs_chain": top / chain, "ceiling_ranks": CEILING_RANKS})
    return pd.DataFrame(ranks), pd.DataFrame(ceiling)
