"""Record a `specsim.simulate.PositionTable`: what a deterministic drafter proposes from
every state of one greedy run, so that any draft-length policy replays on it exactly
(`specsim.simulate.replay_positions`) without running the model again.

    out = decode.generate_autoregressive(target, [prompt], N).tokens[0]
    table = record(target, drafter, prompt, out, k=4)

Drafters: n-gram lookup (its draft reads the context alone) and the feature head (it
reads the target's final-normed feature at the position that produced the last token,
which a forward over prompt + output gives for every position at once). A draft
model's draft depends on its own cache as well; it is not recorded here.
Shapes: P prompt tokens, N output tokens, K drafts, D model width.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specsim.drafters import FeatureHeadDrafter, NGramDrafter
from specsim.drafters.base import Context
from specsim.drafters.feature_head import cell
from specsim.models.compiler import jit
from specsim.errors import InvalidArgument
from specsim.sampling import SamplingParams
from specsim.simulate import PositionTable

__all__ = ["record", "DRAFTERS"]

DRAFTERS = (NGramDrafter, FeatureHeadDrafter)


def record(target, drafter, prompt, output, k: int) -> PositionTable:
    """The table of ``drafter`` on one greedy run: ``prompt`` (token ids, P) and the
    ``output`` greedy decoding gave for it (token ids, N >= 2), K = ``k`` drafts from
    each state g = 1..N − 1 (g tokens generated)."""
    if not isinstance(drafter, DRAFTERS):
        raise InvalidArgument(f"drafter must be one of {[d.__name__ for d in DRAFTERS]} "
                              f"(got {type(drafter).__name__}): a draft model's draft "
                              f"depends on its cache, not recorded here")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InvalidArgument(f"k must be a positive integer (got {k!r})")
    prompt, output = np.asarray(prompt, np.int32), np.asarray(output, np.int32)
    if prompt.ndim != 1 or output.ndim != 1 or len(prompt) < 1 or len(output) < 2:
        raise InvalidArgument(f"prompt and output must be token-id lists, the prompt "
                              f"non-empty and the output at least 2 tokens (got "
                              f"{prompt.shape} and {output.shape})")
    full = np.concatenate([prompt, output])
    P, N = len(prompt), len(output)
    g = np.arange(1, N)                                                     # states
    if isinstance(drafter, NGramDrafter):
        drafts, conf = _ngram(drafter, full, P + g, k)
    else:
        drafts, conf = _feature_head(target, drafter, full, P, g, k)
    src = g[:, None] + np.arange(k)[None]                                   # [N-1, K]
    want = np.where(src < N, output[np.minimum(src, N - 1)], -1)
    return PositionTable(ok=(drafts == want) & (conf > 0), confidence=conf)


def _ngram(drafter, full, lengths, k):
    """Drafts and confidences (1 proposed, 0 not) from each context length."""
    tokens = np.zeros((len(lengths), _bucket(len(full) + k)), np.int32)
    tokens[:, :len(full)] = full
    lengths = np.asarray(lengths, np.int32)
    rows = _bucket(len(lengths))                  # pad the states too: one program per size
    length = np.concatenate([lengths, np.full(rows - len(lengths), lengths[-1], np.int32)])
    tokens = np.concatenate([tokens, np.repeat(tokens[-1:], rows - len(tokens), 0)])
    drafts, conf = _ngram_propose(drafter, jnp.asarray(tokens), jnp.asarray(length), k)
    return np.asarray(drafts)[:len(lengths)], np.asarray(conf, np.float64)[:len(lengths)]


@jit(static_argnames="k")
def _ngram_propose(drafter, tokens, length, k):
    _, d = drafter.propose((), Context(tokens, length), k, jax.random.PRNGKey(0),
                           SamplingParams.make())
    return d.tokens, d.probs.max(-1)


def _feature_head(target, drafter, full, P, g, k):
    """The head's greedy chain from the feature that produced output token g − 1."""
    toks = np.zeros((1, _bucket(len(full))), np.int32)
    toks[0, :len(full)] = full
    feats = _features(target.params, jnp.asarray(toks), target.cfg)[0]      # [T, D]
    rows = _bucket(len(g))
    pick = np.concatenate([g, np.full(rows - len(g), g[-1])])
    drafts, conf = _chain(drafter, feats[P + pick - 2], jnp.asarray(full[P + pick - 1]), k)
    return np.asarray(drafts)[:len(g)], np.asarray(conf, np.float64)[:len(g)]


@jit(static_argnames="cfg")
def _features(params, tokens, cfg):
    from specsim.models.transformer import forward_hidden, init_cache
    return forward_hidden(params, cfg, tokens, init_cache(cfg, 1, tokens.shape[1]))[0]


@jit(static_argnames="k")
def _chain(drafter, z0, x, k):                           # [G, D], [G] -> [G, K] twice
    def step(carry, _):
        z, tok = carry
        z = cell(drafter.cell, drafter.embed, z, tok, drafter.eps)
        logits = z @ drafter.head.T                                         # [G, Vh]
        i = jnp.argmax(logits, -1)
        p = jnp.take_along_axis(jax.nn.softmax(logits, -1), i[:, None], 1)[:, 0]
        nxt = drafter.head_ids[i].astype(jnp.int32)
        return (z, nxt), (nxt, p)
    _, (d, c) = jax.lax.scan(step, (z0, x), None, length=k)
    return d.T, c.T


def _bucket(n: int) -> int:
    """Pad lengths to a power of two (at least 64), so runs share compiled programs."""
    return max(64, 1 << int(np.ceil(np.log2(n))))
