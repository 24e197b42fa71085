"""Closed forms of speculative decoding and their inverses (NumPy only, no JAX).

Notation (docs/design.md): ``alpha`` = probability that one drafted token is accepted,
``k`` = draft length K (tokens drafted per iteration), ``c`` = time of one draft step /
time of one target step, ``c_hat`` = arithmetic of one draft step / one target step.
One iteration drafts K tokens, verifies them in one target pass, keeps the accepted
prefix and adds one token from the target, so it yields between 1 and K+1 tokens.

Every function broadcasts its array arguments against each other (grids of alpha, K, c)
and validates them eagerly: bad values raise ``InvalidArgument`` (a ``ValueError``)
naming the argument and the allowed range. Scalars in give NumPy scalars out; arrays in give arrays of the
broadcast shape.

References: Leviathan, Kalman & Matias, "Fast Inference from Transformers via
Speculative Decoding", ICML 2023 (Thm 3.8 speedup, Thm 3.11 arithmetic, Table 1).
"""

from __future__ import annotations

import numpy as np

from specsim.errors import InvalidArgument
from specsim.validation import (
    as_float_array,
    broadcast,
    check_distribution,
    check_draft_length,
    check_nonnegative,
    check_positive,
    check_probability,
)

__all__ = [
    "DEFAULT_K_MAX",
    "expected_tokens",
    "expected_tokens_positional",
    "expected_tokens_markov",
    "markov_transitions",
    "markov_start_probability",
    "rho_bounds",
    "speedup",
    "speedup_from_costs",
    "optimal_k",
    "ops_factor",
    "break_even_alpha",
    "alpha_from_expected_tokens",
    "implied_cost_ratio",
    "acceptance_rate",
    "speedup_table",
    "format_speedup_table",
    "threshold_policy",
    "speedup_threshold",
    "optimal_fixed_vs_dynamic",
    "goodput_k",
]

DEFAULT_K_MAX = 64
"""Largest draft length ``optimal_k`` considers unless told otherwise."""


def _shape(**named) -> tuple[int, ...]:
    """Broadcast shape of the named arrays; a mismatch names them all."""
    try:
        return np.broadcast_shapes(*(np.shape(v) for v in named.values()))
    except ValueError:
        shapes = ", ".join(f"{k} {np.shape(v)}" for k, v in named.items())
        raise InvalidArgument(f"{', '.join(named)} must broadcast against each other "
                              f"(got shapes {shapes})") from None


def _out(x: np.ndarray):
    """NumPy scalar for 0-d results, the array otherwise."""
    return x[()] if isinstance(x, np.ndarray) and x.ndim == 0 else x


# --- expected tokens per iteration ----------------------------------------------------

def _expected_tokens(alpha: np.ndarray, k: np.ndarray) -> np.ndarray:
    """E = sum_{i=0..K} alpha^i without validation.

    Written as E = -expm1((K+1) log1p(-d)) / d with d = 1 - alpha (exact in floating
    point for alpha >= 1/2), which keeps full relative accuracy as alpha -> 1, where the
    textbook ratio (1 - alpha^(K+1)) / (1 - alpha) cancels catastrophically.
    At d = 0 the limit K + 1 is returned exactly.
    """
    d = 1.0 - alpha
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.asarray(-np.expm1((k + 1) * np.log1p(-d)) / d)
    at_one = d == 0.0
    if at_one.any():  # np.where costs as much as the expm1; pay it only when needed
        e = np.where(at_one, k + 1.0, e)
    return e


def expected_tokens(alpha, k):
    """Expected tokens per iteration with i.i.d. acceptance.

    E(alpha, K) = 1 + alpha + ... + alpha^K = (1 - alpha^(K+1)) / (1 - alpha), equal to
    K + 1 at alpha = 1 (Leviathan et al. 2023, Eq. 1). Accurate to a few ulp for every
    alpha in [0, 1], including within 1e-12 of 1.

    alpha: acceptance rate in [0, 1], any shape. k: integer draft length >= 1.
    Returns float64 of the broadcast shape of (alpha, k).
    """
    alpha = check_probability("alpha", alpha)
    k = check_draft_length("k", k)
    _shape(alpha=alpha, k=k)
    return _out(_expected_tokens(alpha, k))


def expected_tokens_positional(alphas):
    """Expected tokens per iteration with a different acceptance rate at each position.

    E = 1 + sum_{k=1..K} prod_{j<=k} alpha_j, where alpha_j is the probability that the
    j-th drafted token is accepted given that the ones before it were.

    alphas: [..., K] rates in [0, 1]; the last axis is the draft position (K >= 1).
    Returns float64 of shape [...].
    """
    alphas = check_probability("alphas", alphas)
    if alphas.ndim == 0 or alphas.shape[-1] < 1:
        raise InvalidArgument("alphas must have a last axis of length K >= 1 "
                              f"(got shape {alphas.shape})")
    return _out(1.0 + np.cumprod(alphas, axis=-1).sum(axis=-1))


def rho_bounds(alpha):
    """The admissible lag-1 correlations of the two-state Markov acceptance model at
    stationary rate ``alpha``: ``lower <= rho < upper`` with
    lower = max(-alpha/(1-alpha), -(1-alpha)/alpha) (0 at alpha in {0, 1}) and upper = 1
    (excluded: rho = 1 freezes the chain). At ``lower`` itself one state is left with
    certainty; see ``markov_transitions``.

    Returns (lower, upper), float64 of alpha's shape.
    """
    alpha = check_probability("alpha", alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        lower = np.maximum(np.where(alpha < 1, -alpha / (1 - alpha), 0.0),
                           np.where(alpha > 0, -(1 - alpha) / alpha, 0.0))
    return _out(lower), _out(np.ones_like(lower))


def markov_transitions(alpha, rho):
    """Transition probabilities of the two-state Markov acceptance model.

    The indicator "the draft at this position would be accepted" is a stationary
    two-state Markov chain along the generated sequence with
    P(accept | previous accepted) = p11 and P(accept | previous rejected) = p01.
    It is parametrised by its stationary acceptance rate alpha = p01 / (1 - p11 + p01)
    and its lag-1 autocorrelation rho = p11 - p01:

        p11 = alpha + rho (1 - alpha),    p01 = alpha (1 - rho).

    rho = 0 is i.i.d. acceptance; rho > 0 clusters rejections (hard stretches of text).
    Valid rho (``rho_bounds``): max(-alpha/(1-alpha), -(1-alpha)/alpha) <= rho < 1
    (rho = 1 would freeze the chain); at alpha in {0, 1} the chain is constant and rho
    must lie in [0, 1).

    Returns (p01, p11), float64 arrays of the broadcast shape.
    """
    alpha = check_probability("alpha", alpha)
    rho = as_float_array("rho", rho)
    alpha, rho = broadcast(alpha=alpha, rho=rho)
    lower = np.asarray(rho_bounds(alpha)[0])
    bad = ~((rho >= lower) & (rho < 1.0))
    if bad.any():
        i = np.flatnonzero(bad.ravel())[0]
        raise InvalidArgument(
            f"rho must lie in [max(-alpha/(1-alpha), -(1-alpha)/alpha), 1) = "
            f"[{lower.ravel()[i]:.6g}, 1) for alpha = {alpha.ravel()[i]:.6g} "
            f"(got {rho.ravel()[i]!r})")
    p11 = alpha + rho * (1.0 - alpha)
    p01 = alpha * (1.0 - rho)
    return _out(p01), _out(p11)


def _markov_start_weights(p01, p11, k):
    """pi1 from the transition probabilities (no validation)."""
    p11k = p11 ** k
    return p01 * p11k / (1.0 - p11k * p11 + p01 * p11k)


def markov_start_probability(alpha, rho, k):
    """Stationary probability pi1, over iterations, that the position just before an
    iteration's first draft is in the "accept" state of the Markov acceptance model
    (see ``expected_tokens_markov``): pi1 = p01 p11^K / (1 - p11^(K+1) + p01 p11^K).

    Returns float64 of the broadcast shape of (alpha, rho, k).
    """
    p01, p11 = markov_transitions(alpha, rho)
    k = check_draft_length("k", k)
    _shape(alpha=p01, k=k)
    return _out(_markov_start_weights(p01, p11, k))


def expected_tokens_markov(alpha, rho, k):
    """Expected tokens per iteration under two-state Markov acceptance (long-run mean).

    Model: see ``markov_transitions``. An iteration whose preceding position was in
    state s in {0, 1} accepts its first draft with probability p_s1 (p01 or p11) and each
    later one with p11, so E_s = 1 + p_s1 (1 - p11^K) / (1 - p11). A rejection ends an
    iteration in state 0; after K acceptances the bonus token's position is in state 1
    with probability p11. The start state therefore is itself a Markov chain over
    iterations, with stationary P(s = 1) = pi1 = p01 p11^K / (1 - p11^(K+1) + p01 p11^K),
    and E = (1 - pi1) E_0 + pi1 E_1. With rho = 0 this is ``expected_tokens(alpha, k)``.

    Returns float64 of the broadcast shape of (alpha, rho, k).
    """
    p01, p11 = markov_transitions(alpha, rho)
    k = check_draft_length("k", k)
    _shape(alpha=p01, k=k)
    run = _expected_tokens(p11, k - 1)  # 1 + p11 + ... + p11^(K-1) = (1 - p11^K)/(1 - p11)
    pi1 = _markov_start_weights(p01, p11, k)
    return _out(1.0 + ((1.0 - pi1) * p01 + pi1 * p11) * run)


# --- speedup and arithmetic -----------------------------------------------------------

def speedup(alpha, k, c):
    """Walltime speedup over autoregressive decoding with constant step costs.

    S = (1 - alpha^(K+1)) / ((1 - alpha)(K c + 1)) = E(alpha, K) / (K c + 1)
    (Leviathan et al. 2023, Thm 3.8), assuming verifying K+1 tokens costs one target
    step. alpha in [0, 1]; k integer >= 1; c = draft step / target step, finite >= 0.
    Returns float64 of the broadcast shape.
    """
    alpha = check_probability("alpha", alpha)
    k = check_draft_length("k", k)
    c = check_nonnegative("c", c)
    _shape(alpha=alpha, k=k, c=c)
    return _out(_expected_tokens(alpha, k) / (k * c + 1.0))


def speedup_from_costs(expected_tokens, k, t_draft, t_target_1, t_target_verify):
    """Speedup from measured (or roofline-predicted) forward-pass times.

    S = E * t_target(1) / (K * t_draft(1) + t_target(K+1)), where t_target(n) is one
    target pass over n new tokens (``t_target_verify`` = t_target(K+1)) and ``t_draft``
    one draft step. E in [1, K+1] (e.g. from ``expected_tokens`` or measured);
    t_draft finite >= 0 (0 for a free drafter such as n-gram lookup); both target
    times finite > 0. Returns float64 of the broadcast shape.
    """
    e = as_float_array("expected_tokens", expected_tokens)
    k = check_draft_length("k", k)
    t_draft = check_nonnegative("t_draft", t_draft)
    t_target_1 = check_positive("t_target_1", t_target_1)
    t_target_verify = check_positive("t_target_verify", t_target_verify)
    _shape(expected_tokens=e, k=k, t_draft=t_draft, t_target_1=t_target_1,
           t_target_verify=t_target_verify)
    bad = ~((e >= 1.0) & (e <= k + 1))
    if bad.any():
        raise InvalidArgument("expected_tokens must lie in [1, k + 1] "
                              f"(got {np.broadcast_to(e, bad.shape)[bad].ravel()[0]!r})")
    return _out(e * t_target_1 / (k * t_draft + t_target_verify))


def ops_factor(alpha, k, c_hat):
    """Factor by which total arithmetic grows under speculative decoding.

    F = (1 - alpha)(K c_hat + K + 1) / (1 - alpha^(K+1)) = (K c_hat + K + 1) / E
    (Leviathan et al. 2023, Thm 3.11); c_hat = arithmetic of a draft step relative to a
    target step, finite >= 0. Returns float64 of the broadcast shape.
    """
    alpha = check_probability("alpha", alpha)
    k = check_draft_length("k", k)
    c_hat = check_nonnegative("c_hat", c_hat)
    _shape(alpha=alpha, k=k, c_hat=c_hat)
    return _out((k * c_hat + k + 1.0) / _expected_tokens(alpha, k))


def optimal_k(alpha, c, k_max=DEFAULT_K_MAX):
    """The draft length in [1, k_max] that maximises ``speedup(alpha, K, c)``.

    S(K) = E(K) / (K c + 1) is a concave sequence over an affine positive one, hence
    unimodal in K (its plateaus can only sit at the maximum). So the rising test
    S(K+1) > S(K)  <=>  alpha^(K+1) (K c + 1) > c E(K)  holds for a prefix of K and the
    optimum is found by a binary search on it: about log2(k_max) vectorised steps, each
    one exp over the grid, no loop over K. Ties go to the smallest K (alpha = 0 gives
    K* = 1; c = 0 with alpha > 0 gives K* = k_max).

    alpha in [0, 1]; c finite >= 0; k_max integer >= 1; all broadcast.
    Returns (k_star int64, speedup float64), both of the broadcast shape.
    """
    alpha = check_probability("alpha", alpha)
    c = check_nonnegative("c", c)
    k_max = check_draft_length("k_max", k_max)
    shape = _shape(alpha=alpha, c=c, k_max=k_max)
    d = 1.0 - alpha
    with np.errstate(divide="ignore"):
        log_alpha = np.log(alpha)                    # -inf at alpha = 0
    # Rising test at K-1 for a candidate K: S(K) > S(K-1)  <=>  alpha^K (K c d + (1-c) d
    # + c) > c  <=>  alpha^K (K c + 1 - c) > c (1 - alpha^K) / d, with 1 - alpha^K from
    # expm1 (exact to rounding even when d is below an ulp of c: the difference form
    # loses the margin d (1 - c) there) and its limit K at alpha = 1 (d = 0), where
    # S = (K+1)/(Kc+1) rises iff c < 1.
    inv_d = np.where(d > 0.0, 1.0 / np.where(d > 0.0, d, 1.0), 0.0)
    at_one = d == 0.0
    k_cap = k_max.astype(np.float64)
    # Branchless binary search: K* = 1 + #{K < k_max : S(K+1) > S(K)} and that set is a
    # prefix, so add power-of-two steps largest first, keeping a step when the candidate
    # still rises. Candidates past k_max are tested at k_max (still a prefix test) and the
    # result clamped at the end; ``reach`` (the largest K reachable so far) skips the
    # clamp while no candidate can pass k_max (always, for k_max = 2^m: 16, 32, 64).
    # Preallocated buffers: this loop is memory-bound.
    k_star = np.ones(shape)
    cand, t, u, w = np.empty(shape), np.empty(shape), np.empty(shape), np.empty(shape)
    keep = np.empty(shape, dtype=bool)
    step = 1 << max(int(k_cap.max(initial=1.0)) - 1, 1).bit_length() - 1
    reach, cap_min = 1, k_cap.min(initial=np.inf)
    while step >= 1:
        np.add(k_star, step, out=cand)
        reach += step
        if reach > cap_min:
            np.minimum(cand, k_cap, out=cand)
        np.multiply(cand, log_alpha, out=u)
        np.expm1(u, out=w)
        np.negative(w, out=w)                        # 1 - alpha^K
        w *= inv_d
        np.copyto(w, cand, where=at_one)             # (1 - alpha^K) / d, limit K at d = 0
        w *= c
        np.exp(u, out=u)                             # alpha^K
        np.multiply(cand, c, out=t)
        t += 1.0
        t -= c
        t *= u
        np.greater(t, w, out=keep)
        k_star += keep * float(step)
        step >>= 1
    if reach > cap_min:
        np.minimum(k_star, k_cap, out=k_star)
    k_star = k_star.astype(np.int64)
    return _out(k_star), _out(_expected_tokens(alpha, k_star) / (k_star * c + 1.0))


# --- inverses ---------------------------------------------------------------------------

def _invert_expected_tokens(target: np.ndarray, k: np.ndarray) -> np.ndarray:
    """alpha in [0, 1] with E(alpha, K) = target, for target in [1, K+1].

    E is strictly increasing in alpha, so 60 bisection steps on [0, 1] pin the root to
    below one ulp; the endpoints are returned exactly.
    """
    target, k = np.broadcast_arrays(target, k)
    lo = np.zeros(target.shape)
    hi = np.ones(target.shape)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        above = _expected_tokens(mid, k) >= target
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    root = 0.5 * (lo + hi)
    root = np.where(target <= 1.0, 0.0, root)
    return np.where(target >= k + 1.0, 1.0, root)


def alpha_from_expected_tokens(expected_tokens, k):
    """The i.i.d. acceptance rate alpha with E(alpha, K) = expected_tokens.

    Inverse of ``expected_tokens`` in alpha (for reported mean accepted lengths).
    expected_tokens in [1, K+1]; k integer >= 1. Returns float64 in [0, 1].
    """
    e = as_float_array("expected_tokens", expected_tokens)
    k = check_draft_length("k", k)
    _shape(expected_tokens=e, k=k)
    bad = ~((e >= 1.0) & (e <= k + 1))
    if bad.any():
        raise InvalidArgument("expected_tokens must lie in [1, k + 1] "
                              f"(got {np.broadcast_to(e, bad.shape)[bad].ravel()[0]!r})")
    return _out(_invert_expected_tokens(e, k))


def break_even_alpha(k, c):
    """The acceptance rate at which speculative decoding exactly breaks even (S = 1).

    Solves E(alpha, K) = K c + 1 for alpha in [0, 1]; speedup(alpha, K, c) > 1 exactly
    when alpha > break_even_alpha(K, c). Special values: c = 0 gives 0 (never slower);
    c = 1 gives 1; for c > 1 no alpha in [0, 1] reaches S = 1 and the result is
    ``np.inf``, so ``alpha > break_even_alpha(k, c)`` stays a correct test.
    k integer >= 1; c finite >= 0. Returns float64 of the broadcast shape.
    """
    k = check_draft_length("k", k)
    c = check_nonnegative("c", c)
    _shape(k=k, c=c)
    target = k * c + 1.0
    reachable = c <= 1.0
    alpha = _invert_expected_tokens(np.where(reachable, target, 1.0), k)
    return _out(np.where(reachable, alpha, np.inf))


def implied_cost_ratio(alpha, k, speedup):
    """The cost ratio c that, with (alpha, K), explains a reported speedup.

    Inverts S = E(alpha, K) / (K c + 1):  c = (E / S - 1) / K.
    speedup must lie in (0, E(alpha, K)]: a larger speedup is impossible at that alpha
    for any c >= 0 (values above E by less than 1e-12 relative are clipped to c = 0).
    Returns float64 >= 0 of the broadcast shape.
    """
    alpha = check_probability("alpha", alpha)
    k = check_draft_length("k", k)
    s = check_positive("speedup", speedup)
    _shape(alpha=alpha, k=k, speedup=s)
    e = _expected_tokens(alpha, k)
    bad = s > e * (1.0 + 1e-12)
    if bad.any():
        i = np.flatnonzero(bad.ravel())[0]
        raise InvalidArgument(
            "speedup must lie in (0, expected_tokens(alpha, k)] = "
            f"(0, {np.broadcast_to(e, bad.shape).ravel()[i]:.6g}] "
            f"(got {np.broadcast_to(s, bad.shape).ravel()[i]!r})")
    return _out(np.maximum((e / s - 1.0) / k, 0.0))


# --- acceptance from distributions ------------------------------------------------------

def acceptance_rate(target_probs, draft_probs, *, lenience=1.0):
    """Probability that a token drawn from the draft distribution is accepted.

    Exact speculative sampling accepts a drafted x with probability
    min(1, target(x) / draft(x)), so the acceptance rate is
    beta = sum_x min(target(x), draft(x)) = 1 - TV(target, draft)  (lenience = 1).

    Lenient variant (Leviathan et al. 2023, Appendix A.5), lenience l in (0, 1]:
    the draft probability is scaled by l before the comparison, i.e. x is accepted with
    probability min(1, target(x) / (l draft(x))) and a rejection resamples from
    norm(max(0, target - l draft)). Then
    beta_l = sum_x draft(x) min(1, target(x) / (l draft(x))) = sum_x min(draft(x), target(x) / l),
    which rises to 1 as l -> 0. For l < 1 the output no longer follows the target
    distribution exactly; l trades quality for speed.

    target_probs, draft_probs: [..., V] distributions over the last axis (finite, >= 0,
    summing to 1 within 1e-6), broadcast against each other.
    Returns float64 of shape [...].
    """
    target = check_distribution("target_probs", target_probs)
    draft = check_distribution("draft_probs", draft_probs)
    _shape(target_probs=target, draft_probs=draft)
    l = as_float_array("lenience", lenience)
    if l.ndim or not (0.0 < l <= 1.0):
        raise InvalidArgument(f"lenience must be a scalar in (0, 1] (got {lenience!r})")
    if l == 1.0:
        beta = np.minimum(target, draft).sum(axis=-1)
    else:
        beta = np.minimum(draft, target / l).sum(axis=-1)
    return _out(np.minimum(beta, 1.0))


# --- tables ---------------------------------------------------------------------------------

def speedup_table(alpha, k, c) -> dict[str, np.ndarray]:
    """Long-form table of every (alpha, K, c) combination of three 1-D inputs.

    Returns columns (1-D arrays of equal length, c slowest, then alpha, then K fastest):
    alpha, k, c, expected_tokens, speedup. ``pandas.DataFrame(speedup_table(...))``
    turns it into a frame.
    """
    alpha = np.atleast_1d(check_probability("alpha", alpha)).ravel()
    k = np.atleast_1d(check_draft_length("k", k)).ravel()
    c = np.atleast_1d(check_nonnegative("c", c)).ravel()
    cc, aa, kk = (g.ravel() for g in np.meshgrid(c, alpha, k, indexing="ij"))
    e = _expected_tokens(aa, kk)
    return {"alpha": aa, "k": kk, "c": cc, "expected_tokens": e,
            "speedup": e / (kk * cc + 1.0)}


def format_speedup_table(table: dict[str, np.ndarray], *, digits: int = 3) -> str:
    """Render ``speedup_table`` output as text: one row per (c, alpha), one column per K,
    entries = speedup; the best K of each row is marked with '*'."""
    ks = np.unique(table["k"])
    width = max(digits + 4, 6)
    lines = ["c       alpha  " + "".join(f"{'K=' + str(k):>{width + 1}}" for k in ks)]
    for c in np.unique(table["c"]):
        for a in np.unique(table["alpha"][table["c"] == c]):
            row = (table["c"] == c) & (table["alpha"] == a)
            s = table["speedup"][row][np.argsort(table["k"][row])]
            best = int(np.argmax(s))
            cells = "".join(f"{v:>{width}.{digits}f}{'*' if i == best else ' '}"
                            for i, v in enumerate(s))
            lines.append(f"{c:<7.4g} {a:<6.4g} {cells}")
    return "\n".join(lines)


# --- dynamic draft length: confidence thresholds and goodput ------------------------------

def _confidence_law(confidence, p_accept, weights):
    """Validated (s [M], g [M], w [M] summing to 1) of the draft-confidence law."""
    s = check_probability("confidence", confidence).reshape(-1)
    if s.size == 0:
        raise InvalidArgument("confidence must hold at least one value (got none)")
    g = s if p_accept is None else check_probability("p_accept", p_accept).reshape(-1)
    w = np.ones_like(s) if weights is None else check_nonnegative("weights", weights).reshape(-1)
    if g.shape != s.shape or w.shape != s.shape:
        raise InvalidArgument(f"confidence, p_accept and weights must have the same length "
                         f"(got {s.size}, {g.size}, {w.size})")
    if w.sum() <= 0:
        raise InvalidArgument("weights must not all be 0")
    return s, g, w / w.sum()


def _threshold_ks(k_max, k_min) -> tuple[int, int]:
    k_max = int(check_draft_length("k_max", k_max))
    k_min = int(check_draft_length("k_min", k_min, minimum=0))
    if k_min > k_max:
        raise InvalidArgument(f"k_min must be <= k_max (got k_min={k_min}, k_max={k_max})")
    return k_max, k_min


def threshold_policy(confidence, p_accept=None, weights=None, *, p_min, k_max, k_min=0):
    """Expected outcome of one iteration of the confidence-threshold policy.

    Model: at every draft position the draft's confidence s (its probability of the token
    it drew) is an independent draw from the law (``confidence`` values s_m with
    ``weights`` w_m, e.g. a histogram or the samples of a recorded trace), and the draft
    is accepted with probability g(s) (``p_accept`` g_m, the calibration; default g(s) = s,
    a calibrated drafter; for samples of a trace pass their 0/1 accept outcomes).
    Draft j (0-based) is proposed when every earlier draft was and j < k_min or
    s_j > p_min (see `specsim.policies.ConfidenceThreshold`). Let

        α = E[g(s)]                 (accept, below k_min)
        γ = E[g(s) 1{s > p_min}]    (proposed and accepted, at and past k_min)
        π = P(s > p_min)            (proposed, past k_min)
        n = k_max − k_min.

    The accepted run is at least m long iff its first m drafts were proposed and
    accepted, whose probability factorises over positions, so

        E[T] = 1 + Σ_{m=1}^{k_min} α^m + α^{k_min} Σ_{m=1}^{n} γ^m,
        P(N_proposed = k_min + m) = π^m (1 − π) for m < n, and π^n for m = n,
        E[draft steps] = k_min + Σ_{m=0}^{n−1} π^m   (the draft that stops the row is
                                                     computed, then dropped).

    With k_min = k_max (or p_min = 0 under a law with s > 0) this is the fixed-K form
    E = (1 − α^{K+1}) / (1 − α). ``p_min`` broadcasts (a grid); k_max, k_min integers.
    Returns dict(expected_tokens, expected_proposed, expected_draft_steps: [...p_min],
    proposed_pmf: [...p_min, k_max + 1], entry i = P(N_proposed = i)).
    """
    s, g, w = _confidence_law(confidence, p_accept, weights)
    k_max, k_min = _threshold_ks(k_max, k_min)
    p_min = check_probability("p_min", p_min)
    above = s > p_min[..., None]                                        # [..., M]
    alpha = float(np.sum(w * g))
    gamma = np.sum(w * g * above, -1)                                   # [...]
    pi = np.clip(np.sum(w * above, -1), 0.0, 1.0)
    n = k_max - k_min
    m = np.arange(1, n + 1)                                             # [n]
    head = float(np.sum(alpha ** np.arange(1, k_min + 1)))
    tokens = 1.0 + head + alpha ** k_min * np.sum(gamma[..., None] ** m, -1)
    pi_m = pi[..., None] ** np.arange(n + 1)                            # [..., n+1]
    tail = pi_m.copy()
    tail[..., :-1] -= pi_m[..., 1:]                                     # P(m proposed past k_min)
    pmf = np.zeros(p_min.shape + (k_max + 1,))
    pmf[..., k_min:] = tail
    steps = k_min + np.sum(pi_m[..., :n], -1)
    proposed = k_min + np.sum(tail * np.arange(n + 1), -1)
    return dict(expected_tokens=_out(tokens), expected_proposed=_out(proposed),
                expected_draft_steps=_out(steps), proposed_pmf=pmf)


def _verify_ratio(verify_cost, k_max: int) -> np.ndarray:
    if verify_cost is None:
        return np.ones(k_max + 1)
    r = check_positive("verify_cost", verify_cost).reshape(-1)
    if r.size < k_max + 1:
        raise InvalidArgument(f"verify_cost must give k_max + 1 = {k_max + 1} pass times "
                         f"(got {r.size})")
    return r[:k_max + 1] / r[0]


def speedup_threshold(confidence, p_accept=None, weights=None, *, p_min, k_max, k_min=0,
                      c, verify_cost=None):
    """Speedup of the confidence-threshold policy over autoregressive decoding:

        S = E[T] / (c · E[draft steps] + Σ_i P(N_proposed = i) r(i + 1)),

    r(n) = t_target(n) / t_target(1) (``verify_cost``: pass times for n = 1..k_max+1, in
    any unit; default all equal, Leviathan's constant-cost model; the engine's fixed
    K_max buffer verifies k_max + 1 positions every iteration, i.e. r(k_max + 1) always).
    Law and policy as `threshold_policy`; c = draft step / target step, finite >= 0.
    """
    out = threshold_policy(confidence, p_accept, weights, p_min=p_min, k_max=k_max,
                           k_min=k_min)
    c = float(check_nonnegative("c", c))
    r = _verify_ratio(verify_cost, int(k_max))
    time = c * out["expected_draft_steps"] + np.sum(out["proposed_pmf"] * r, -1)
    return _out(out["expected_tokens"] / time)


def optimal_fixed_vs_dynamic(confidence, p_accept=None, weights=None, *, c, k_max,
                             p_min_grid=None, verify_cost=None):
    """The best fixed K against the best confidence-threshold policy, same law and costs.

    Fixed K is the threshold policy with k_min = k_max = K (E = (1 − α^{K+1})/(1 − α),
    K draft steps, verify over K + 1). The dynamic side searches p_min over
    ``p_min_grid`` (default: 0, the law's distinct confidences and 1; the expected
    outcome only changes at those values) and its own k_max' in 1..k_max, with k_min = 0.
    Under i.i.d. positions a threshold on the current draft's confidence is the natural
    dynamic rule: whether to draft one more depends only on the next draft's chance
    g(s) of being accepted, which the confidence reveals. Returns dict(fixed_k,
    fixed_speedup, p_min, k_max, dynamic_speedup, gain = dynamic / fixed).
    """
    s, g, w = _confidence_law(confidence, p_accept, weights)
    k_max = int(check_draft_length("k_max", k_max))
    if p_min_grid is None:
        p_min_grid = np.unique(np.concatenate([[0.0, 1.0], s]))
    grid = check_probability("p_min_grid", p_min_grid).reshape(-1)
    best_fixed = max(((float(speedup_threshold(s, g, w, p_min=0.0, k_max=k, k_min=k, c=c,
                                               verify_cost=verify_cost)), k)
                      for k in range(1, k_max + 1)))
    best_dyn = (-np.inf, 0.0, 0)
    for k in range(1, k_max + 1):
        sp = np.atleast_1d(speedup_threshold(s, g, w, p_min=grid, k_max=k, c=c,
                                             verify_cost=verify_cost))
        i = int(np.argmax(sp))
        if sp[i] > best_dyn[0]:
            best_dyn = (float(sp[i]), float(grid[i]), k)
    return dict(fixed_k=best_fixed[1], fixed_speedup=best_fixed[0], p_min=best_dyn[1],
                k_max=best_dyn[2], dynamic_speedup=best_dyn[0],
                gain=best_dyn[0] / best_fixed[0])


def goodput_k(alphas, t_draft, t_target, *, shared: bool = False, hurdle: float = 0.0):
    """The draft length K in 0..len(alphas) maximising expected tokens per unit time,

        E(K) / (K t_draft + t_target(K + 1)),   E(K) = 1 + Σ_{k≤K} Π_{j≤k} α_j,

    with K = 0 meaning no speculation (E = 1 per target step t_target(1)); ties go to
    the smaller K. alphas [..., K_max] per-position rates; t_draft >= 0; t_target
    [K_max + 1] pass times over 1..K_max+1 tokens. Returns (k int64 [...], goodput
    [...] tokens per unit time). The reference for `specsim.policies.Goodput`.

    ``shared``: the rows of alphas [..., B, K_max] are one batch whose iteration costs
    t(K) for its widest row (a batched engine drafts and verifies as wide as the widest
    proposal), so every row drafts the same K, the one maximising Σ_b E_b(K) / t(K);
    returns (k [...], the batch's goodput [...]).

    ``hurdle`` >= 0: a K > 0 is chosen only where its rate beats K = 0's by more than a
    factor 1 + hurdle (its rate divided by 1 + hurdle enters the argmax; the goodput
    returned is the chosen K's own), as `specsim.policies.Goodput` plans.
    """
    hurdle = float(check_nonnegative("hurdle", hurdle))
    alphas = check_probability("alphas", alphas)
    if alphas.ndim == 0 or alphas.shape[-1] < 1:
        raise InvalidArgument(f"alphas must have a last axis of length K_max >= 1 "
                         f"(got shape {alphas.shape})")
    k_max = alphas.shape[-1]
    t_draft = float(check_nonnegative("t_draft", t_draft))
    t_target = check_positive("t_target", t_target).reshape(-1)
    if t_target.size < k_max + 1:
        raise InvalidArgument(f"t_target must give K_max + 1 = {k_max + 1} pass times "
                         f"(got {t_target.size})")
    if shared and alphas.ndim < 2:
        raise InvalidArgument(f"alphas must be [..., B, K_max] with shared=True "
                              f"(got shape {alphas.shape})")
    surv = np.cumprod(alphas, -1)
    e = 1.0 + np.concatenate([np.zeros(alphas.shape[:-1] + (1,)), np.cumsum(surv, -1)], -1)
    if shared:
        e = e.sum(-2)                                                  # [..., K_max + 1]
    rate = e / (np.arange(k_max + 1) * t_draft + t_target[:k_max + 1])
    k = np.argmax(np.where(np.arange(k_max + 1) > 0, rate / (1.0 + hurdle), rate), -1)
    return _out(k.astype(np.int64)), _out(np.take_along_axis(rate, k[..., None], -1)[..., 0])
