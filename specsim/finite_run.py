"""Finite runs: how many iterations a run of n tokens per row takes, and how far its
measured tokens per iteration strays from the acceptance model's by its own draw (NumPy).

A run of ``n_tokens`` decode tokens per row at ``batch`` rows ends when its slowest row
has its tokens, so its effective tokens per iteration is n / E[max_b I_b], below the
per-iteration mean E. ``iterations_pmf`` and ``expected_iterations`` give the
distribution and mean of max_b I_b from a tokens-per-iteration pmf
(`specsim.simulate.tokens_pmf_positional`); ``acceptance_term_draws`` simulates runs to
give the spread of the in-run prediction's acceptance term (docs/measurement.md,
"Coverage and the run's own draw").
"""

from __future__ import annotations

import numpy as np

from specsim.errors import InvalidArgument
from specsim.simulate import _check_count, _leading_accepts, _rng, tokens_pmf_positional
from specsim.validation import check_probability

__all__ = ["iterations_pmf", "expected_iterations", "acceptance_term_draws"]


def iterations_pmf(pmf, n_tokens: int, batch: int = 1) -> np.ndarray:
    """The distribution of the iterations a finite run takes: entry i is P(max over
    ``batch`` independent rows of the iterations each needs to produce at least
    ``n_tokens`` tokens = i), each iteration yielding j tokens with probability
    ``pmf[j-1]`` (j = 1..K+1). The batched loop runs until its slowest row is done.
    Returns float64 [I_max + 1] (entry 0 is 0), summing to 1 up to 1e-12."""
    pmf = np.asarray(pmf, float).reshape(-1)
    if pmf.size < 1 or np.any(pmf < 0) or not np.isclose(pmf.sum(), 1.0):
        raise InvalidArgument("pmf must be a probability vector over 1..K+1 tokens")
    for name, v in (("n_tokens", n_tokens), ("batch", batch)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InvalidArgument(f"{name} must be an integer >= 1, got {v!r}")
    mass = np.zeros(n_tokens)          # P(not done, m tokens so far), m < n
    mass[0] = 1.0
    survival = [1.0]                   # P(I > i) of one row
    while survival[-1] > 1e-12:
        nxt = np.zeros(n_tokens)
        for j, p in enumerate(pmf, start=1):
            nxt[j:] += p * mass[:n_tokens - j]
        mass = nxt
        survival.append(float(mass.sum()))
    cdf = (1.0 - np.asarray(survival)) ** batch        # P(max_b I_b <= i)
    return np.diff(cdf, prepend=0.0)


def expected_iterations(pmf, n_tokens: int, batch: int = 1) -> float:
    """E[max over ``batch`` independent rows of the iterations needed to produce at least
    ``n_tokens`` tokens] (`iterations_pmf`'s mean)."""
    dist = iterations_pmf(pmf, n_tokens, batch)
    return float(np.arange(dist.size) @ dist)


def acceptance_term_draws(rates, n_tokens: int, batch: int = 1, *, draws: int = 400,
                          rng=None) -> np.ndarray:
    """The acceptance term of the in-run prediction, 100 ln(E_model / E_eff), over
    ``draws`` runs simulated from per-position rates ``rates`` [K]: each run of
    ``batch`` rows produces at least ``n_tokens`` tokens per row; its rates are measured
    from its own iterations as the engine measures them, E_model is `expected_iterations`'s
    n / E[I] at those rates and E_eff is n / the iterations the run took. The spread is a
    finite run's own draw (mostly its last iteration's overshoot and, with batch > 1,
    which row is slowest), which no timing interval holds. Returns float64 [draws]."""
    rates = check_probability("rates", rates)
    if rates.ndim != 1 or rates.size < 1:
        raise InvalidArgument(f"rates must be a 1-D array of K >= 1 rates, got shape {rates.shape}")
    n = _check_count("n_tokens", n_tokens)
    b = _check_count("batch", batch)
    d = _check_count("draws", draws)
    k = rates.size
    accepts = _rng(rng).random((d, b, n, k)) < rates                    # [D, B, n, K]
    a = _leading_accepts(accepts.reshape(-1, k)).reshape(d, b, n)     # accepted per iteration
    total = np.cumsum(a + 1, axis=-1)                                   # tokens after i iterations
    iters = (total < n).sum(axis=-1) + 1                                # [D, B] iterations per row
    live = np.arange(n) < iters[..., None]                              # iterations a row ran
    pos = np.arange(1, k + 1)
    reached = ((a[..., None] >= pos - 1) & live[..., None]).sum(axis=(1, 2))   # [D, K]
    accepted = ((a[..., None] >= pos) & live[..., None]).sum(axis=(1, 2))
    measured = np.divide(accepted, reached, out=np.zeros((d, k)), where=reached > 0)
    out = np.empty(d)
    for i in range(d):
        e_model = n / expected_iterations(tokens_pmf_positional(measured[i]), n, b)
        out[i] = 100.0 * np.log(e_model * iters[i].max() / n)
    return out
