"""The χ² oracle the exactness tests share: the exact joint law of three sampled tokens
after a prompt (enumerated with uncached full forwards of a model on a small
vocabulary) and a goodness-of-fit p-value for observed counts against it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as scistats

from specsim.models.transformer import forward, init_cache
from specsim.sampling import logits_to_probs

FORWARD = jax.jit(forward, static_argnums=1)          # the uncached oracle


def exact_joint(model, prompt, temperature, top_k=0, top_p=1.0) -> np.ndarray:
    """p(t1, t2, t3 | prompt) [V, V, V] by enumeration (V = the model's vocabulary)."""
    V, P = model.cfg.vocab_size, len(prompt)
    t1, t2 = np.meshgrid(np.arange(V), np.arange(V), indexing="ij")
    seqs = np.concatenate([np.tile(prompt, (V * V, 1)), t1.reshape(-1, 1),
                           t2.reshape(-1, 1)], axis=1)                       # [V², P+2]
    logits, _ = FORWARD(
        model.params, model.cfg, jnp.asarray(seqs, jnp.int32), init_cache(model.cfg, V * V, 16))
    probs = np.asarray(logits_to_probs(logits[:, P - 1:], temperature, top_k, top_p),
                       np.float64)                                            # [V², 3, V]
    p1 = probs[0, 0]                                                          # [V]
    p2 = probs[::V, 1]                                                        # [V(t1), V]
    p3 = probs[:, 2].reshape(V, V, V)                                         # [t1, t2, V]
    return p1[:, None, None] * p2[:, :, None] * p3


def counts(tokens, axes, vocab: int) -> np.ndarray:
    """Counts of the token tuples at ``axes`` of each sampled row → [V]*len(axes)."""
    arr = np.asarray(tokens)[:, list(axes)]
    idx = np.ravel_multi_index(arr.T, (vocab,) * len(axes))
    return np.bincount(idx, minlength=vocab ** len(axes)).reshape((vocab,) * len(axes))


def chi2_pvalue(observed, expected_probs) -> float:
    """χ² goodness of fit, cells with expected count < 5 pooled into one; 0 when a cell of
    probability 0 was observed (an impossible draw)."""
    observed, expected = observed.ravel(), expected_probs.ravel() * observed.sum()
    small = expected < 5
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    if (obs[~keep] > 0).any():
        return 0.0
    exp = exp[keep] * obs[keep].sum() / exp[keep].sum()                      # exact totals
    return scistats.chisquare(obs[keep], exp).pvalue
