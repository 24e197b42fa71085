"""Monte-Carlo of the speculative accept/reject process and of its wall time (NumPy).

One iteration drafts K tokens and verifies them; the accepted prefix plus one target
token is kept, so it yields T in {1, ..., K+1} tokens. The simulators below return T for
each iteration (int64 [n_iterations]) so that whole distributions, not only means, can be
compared with the closed forms in ``specsim.analytic`` and with the exact pmfs here:

- ``simulate_iid``         every draft accepted independently with probability alpha;
- ``simulate_positional``  the j-th draft accepted with probability alphas[j];
- ``simulate_markov``      acceptance indicators form a two-state Markov chain along the
                           sequence (``specsim.analytic.markov_transitions``);
- ``replay_masks``         recorded per-iteration accept masks (e.g. from the engine).

``simulate_policy`` replays a draft-length policy (``specsim.policies``) on an
``AcceptanceTrace`` (recorded per-slot accept outcomes and draft confidences, or
``synthetic_trace``), answering "what would p_min = 0.4 have done on my run".

``wall_time`` turns any such sequence into time, tokens/s and speedup given the draft and
verify costs; ``simulate_generation`` does both for i.i.d. acceptance.

Randomness: every simulator takes ``rng`` (a ``np.random.Generator``, a seed, or None)
and is vectorised; 10^6 iterations take a fraction of a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import InvalidArgument
from specsim.validation import (
    positive_int,
    check_draft_length,
    check_nonnegative,
    check_positive,
    check_probability,
)
from specsim.analytic import expected_tokens, markov_start_probability, markov_transitions

__all__ = [
    "BATCHING",
    "replay_masks",
    "simulate_iid",
    "simulate_positional",
    "simulate_markov",
    "tokens_pmf",
    "tokens_pmf_positional",
    "tokens_pmf_markov",
    "WallTime",
    "wall_time",
    "simulate_generation",
    "AcceptanceTrace",
    "synthetic_trace",
    "PolicyRun",
    "simulate_policy",
    "PositionTable",
    "replay_positions",
]

_CHUNK_ELEMENTS = 1 << 22  # uniforms drawn at once: bounds memory at 32 MiB per chunk


def _rng(rng) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _check_count(name: str, n) -> int:
    value = check_draft_length(name, n, minimum=1)
    if value.ndim:
        raise InvalidArgument(f"{name} must be a single integer >= 1 (got shape {value.shape})")
    return int(value)


def _scalar(name: str, arr: np.ndarray) -> float:
    if arr.ndim:
        raise InvalidArgument(f"{name} must be a scalar here (got shape {arr.shape})")
    return float(arr)


# --- tokens per iteration -----------------------------------------------------------------

def _leading_accepts(masks: np.ndarray) -> np.ndarray:
    """Length of the run of True at the start of each row: [N, K] bool -> [N] int64."""
    n, k = masks.shape
    first_reject = masks.argmin(axis=1)                  # first False; 0 if none
    return np.where(masks[np.arange(n), first_reject], k, first_reject).astype(np.int64)


def replay_masks(accept_masks) -> np.ndarray:
    """Tokens per iteration from recorded accept masks.

    accept_masks: [iterations, K] boolean (or 0/1 integer), True where the verifier
    accepted the draft at that position. Only the accepted prefix counts: a True after
    the first False is ignored, as in the real loop (n_acc = sum(cumprod(mask))).
    Returns int64 [iterations]: 1 + length of the leading run of True.
    """
    masks = np.asarray(accept_masks)
    if masks.ndim != 2 or masks.shape[1] < 1:
        raise InvalidArgument("accept_masks must be a 2-D [iterations, K] array with K >= 1 "
                              f"(got shape {masks.shape})")
    if masks.dtype != bool:
        if masks.dtype.kind not in "iu" or not np.isin(masks, (0, 1)).all():
            raise InvalidArgument("accept_masks must be boolean or hold only 0 and 1")
        masks = masks.astype(bool)
    return 1 + _leading_accepts(masks)


def _simulate_bernoulli(rates: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw [n, K] accept masks with P(mask[:, j]) = rates[j], count leading accepts."""
    k = rates.shape[0]
    out = np.empty(n, dtype=np.int64)
    rows = max(1, _CHUNK_ELEMENTS // k)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        masks = rng.random((stop - start, k)) < rates       # [rows, K]
        out[start:stop] = 1 + _leading_accepts(masks)
    return out


def simulate_iid(alpha, k, n_iterations, *, rng=None) -> np.ndarray:
    """Tokens per iteration when each draft is accepted independently with rate alpha.

    Simulates the process itself: K uniforms per iteration, accept where u < alpha,
    keep the leading run, add the bonus/correction token. The exact law of the result
    is the capped geometric ``tokens_pmf(alpha, k)``, mean ``expected_tokens``.
    alpha: scalar in [0, 1]; k, n_iterations: integers >= 1. Returns int64 [n_iterations].
    """
    alpha = _scalar("alpha", check_probability("alpha", alpha))
    k = _check_count("k", k)
    n = _check_count("n_iterations", n_iterations)
    return _simulate_bernoulli(np.full(k, alpha), n, _rng(rng))


def simulate_positional(alphas, n_iterations, *, rng=None) -> np.ndarray:
    """Tokens per iteration when the j-th draft is accepted with probability alphas[j]
    (given the ones before it were). alphas: [K] rates in [0, 1].
    Exact law: ``tokens_pmf_positional``; mean ``expected_tokens_positional``.
    Returns int64 [n_iterations]."""
    alphas = check_probability("alphas", alphas)
    if alphas.ndim != 1 or alphas.shape[0] < 1:
        raise InvalidArgument(f"alphas must be a 1-D array of K >= 1 rates (got shape {alphas.shape})")
    n = _check_count("n_iterations", n_iterations)
    return _simulate_bernoulli(alphas, n, _rng(rng))


def simulate_markov(alpha, rho, k, n_iterations, *, rng=None) -> np.ndarray:
    """Tokens per iteration under two-state Markov acceptance along the sequence.

    The indicator "a draft at this position would be accepted" is the Markov chain of
    ``specsim.analytic.markov_transitions`` (stationary rate alpha, lag-1 correlation
    rho), defined on every generated position, including bonus/correction positions.
    The chain is generated as blocks "run of accepts, then one reject": after a reject the
    run length R is 0 with probability 1 - p01, else geometric with continue probability
    p11. Every reject ends an iteration (a rejected draft, or a bonus token whose latent
    state is "reject"), so a block of L = R + 1 positions holds L // (K+1) full
    iterations of K+1 tokens followed by one of L % (K+1) tokens if that is not 0.
    The first iteration's preceding state is drawn from the stationary law over
    iterations, so the output is stationary from the start.

    Exact law: ``tokens_pmf_markov``; mean ``expected_tokens_markov``.
    alpha, rho: scalars; k, n_iterations: integers >= 1. Returns int64 [n_iterations].
    """
    p01, p11 = (float(p) for p in markov_transitions(alpha, rho))
    if np.ndim(alpha) or np.ndim(rho):
        raise InvalidArgument("alpha and rho must be scalars here")
    k = _check_count("k", k)
    n = _check_count("n_iterations", n_iterations)
    rng = _rng(rng)
    if p11 == 1.0:  # alpha = 1: the chain sits in "accept" forever
        return np.full(n, k + 1, dtype=np.int64)
    start_in_accept = rng.random() < markov_start_probability(alpha, rho, k)
    mean_block = 1.0 + p01 / (1.0 - p11)
    chunks, have, first = [], 0, True
    while have < n:
        m = int((n - have) / max(1.0, mean_block / (k + 1))) + 16   # blocks to draw
        p_first = np.full(m, p01)
        if first:
            p_first[0] = p11 if start_in_accept else p01
            first = False
        runs = np.where(rng.random(m) < p_first, rng.geometric(1.0 - p11, m), 0)
        length = runs + 1                                   # positions per block
        full, rem = np.divmod(length, k + 1)
        counts = full + (rem > 0)                           # iterations per block
        keep = np.searchsorted(np.cumsum(counts), n - have) + 1
        full, rem, counts = full[:keep], rem[:keep], counts[:keep]
        tokens = np.full(int(counts.sum()), k + 1, dtype=np.int64)
        last = np.cumsum(counts) - 1                        # last iteration of each block
        tokens[last[rem > 0]] = rem[rem > 0]
        chunks.append(tokens)
        have += tokens.size
    return np.concatenate(chunks)[:n]


# --- exact laws -----------------------------------------------------------------------------

def tokens_pmf(alpha, k) -> np.ndarray:
    """Exact pmf of tokens per iteration with i.i.d. acceptance (a capped geometric).

    P(T = j) = alpha^(j-1) (1 - alpha) for j = 1..K, P(T = K+1) = alpha^K.
    alpha: rates in [0, 1], any shape; k: a single integer >= 1.
    Returns float64 [..., K+1]; entry j-1 is P(T = j).
    """
    alpha = check_probability("alpha", alpha)
    k = _check_count("k", k)
    return tokens_pmf_positional(np.repeat(alpha[..., None], k, axis=-1))


def tokens_pmf_positional(alphas) -> np.ndarray:
    """Exact pmf of tokens per iteration with per-position acceptance rates.

    With P_j = prod_{i<=j} alphas_i (P_0 = 1): P(T = j) = P_{j-1} - P_j for j <= K and
    P(T = K+1) = P_K. alphas: [..., K]. Returns float64 [..., K+1].
    """
    alphas = check_probability("alphas", alphas)
    if alphas.ndim == 0 or alphas.shape[-1] < 1:
        raise InvalidArgument(f"alphas must have a last axis of length K >= 1 (got shape {alphas.shape})")
    survive = np.concatenate([np.ones(alphas.shape[:-1] + (1,)),
                              np.cumprod(alphas, axis=-1)], axis=-1)   # [..., K+1] P_0..P_K
    pmf = survive.copy()
    pmf[..., :-1] -= survive[..., 1:]
    return pmf


def tokens_pmf_markov(alpha, rho, k) -> np.ndarray:
    """Exact long-run pmf of tokens per iteration under Markov acceptance.

    Given the preceding position's state s, the first draft is accepted with p_s1 and
    later ones with p11: P(T=1 | s) = 1 - p_s1, P(T=j | s) = p_s1 p11^(j-2) (1 - p11)
    for 2 <= j <= K, P(T=K+1 | s) = p_s1 p11^(K-1). Mixed over the stationary start
    state (see ``specsim.analytic.expected_tokens_markov``).
    alpha, rho: scalars; k integer >= 1. Returns float64 [K+1].
    """
    if np.ndim(alpha) or np.ndim(rho):
        raise InvalidArgument("alpha and rho must be scalars here")
    p01, p11 = (float(p) for p in markov_transitions(alpha, rho))
    k = _check_count("k", k)
    pi1 = float(markov_start_probability(alpha, rho, k))
    p_first = (1.0 - pi1) * p01 + pi1 * p11            # P(first draft accepted)
    later = tokens_pmf(p11, k - 1) if k > 1 else np.ones(1)   # law of 1 + later accepts
    return np.concatenate([[1.0 - p_first], p_first * later])


# --- wall time ----------------------------------------------------------------------------

@dataclass(frozen=True)
class WallTime:
    """Outcome of generating ``n_tokens`` tokens, one entry per run ([runs] or scalar).

    iterations: draft-verify iterations needed to reach n_tokens.
    tokens: tokens produced (>= n_tokens: the last iteration may overshoot).
    time: iterations * (K t_draft + t_target_verify), in the units of the costs.
    tokens_per_s: tokens / time.
    speedup: tokens_per_s relative to the autoregressive target, i.e.
        tokens * t_target_1 / time; tends to speedup_from_costs(E, ...) as n_tokens grows.
    """

    n_tokens: int
    iterations: np.ndarray
    tokens: np.ndarray
    time: np.ndarray
    tokens_per_s: np.ndarray
    speedup: np.ndarray


def wall_time(tokens_per_iteration, n_tokens, k, *, t_draft, t_target_1,
              t_target_verify) -> WallTime:
    """Time to generate n_tokens tokens from a sequence of iterations.

    tokens_per_iteration: int [..., iterations] from any simulator or the engine; leading
    axes are independent runs. Each iteration costs K t_draft + t_target_verify
    (t_target_verify = one target pass over K+1 tokens); the autoregressive baseline
    costs t_target_1 per token. Raises ValueError if a run never reaches n_tokens.
    """
    tokens = np.asarray(tokens_per_iteration)
    if tokens.ndim == 0 or tokens.dtype.kind not in "iu" or tokens.dtype == bool:
        raise InvalidArgument("tokens_per_iteration must be an integer array [..., iterations]")
    n_tokens = _check_count("n_tokens", n_tokens)
    k = _check_count("k", k)
    if tokens.size and (tokens.min() < 1 or tokens.max() > k + 1):
        raise InvalidArgument(f"tokens_per_iteration must lie in [1, k + 1] = [1, {k + 1}]")
    t_draft = _scalar("t_draft", check_nonnegative("t_draft", t_draft))
    t_target_1 = _scalar("t_target_1", check_positive("t_target_1", t_target_1))
    t_verify = _scalar("t_target_verify", check_positive("t_target_verify", t_target_verify))
    total = np.cumsum(tokens, axis=-1)                       # [..., iterations]
    if (total[..., -1] < n_tokens).any():
        raise InvalidArgument(f"tokens_per_iteration has too few iterations to reach "
                              f"n_tokens = {n_tokens} in every run")
    iterations = (total < n_tokens).sum(axis=-1) + 1         # first index reaching n_tokens
    produced = np.take_along_axis(total, (iterations - 1)[..., None], axis=-1)[..., 0]
    time = iterations * (k * t_draft + t_verify)
    return WallTime(n_tokens=n_tokens, iterations=iterations, tokens=produced, time=time,
                    tokens_per_s=produced / time, speedup=produced * t_target_1 / time)


def simulate_generation(alpha, k, n_tokens, *, t_draft, t_target_1, t_target_verify,
                        n_runs: int = 1, rng=None) -> WallTime:
    """Simulate ``n_runs`` independent generations of n_tokens with i.i.d. acceptance.

    Draws tokens per iteration with ``simulate_iid`` and times them with ``wall_time``.
    Results have shape [n_runs].
    """
    alpha_f = _scalar("alpha", check_probability("alpha", alpha))
    k = _check_count("k", k)
    n_tokens = _check_count("n_tokens", n_tokens)
    n_runs = _check_count("n_runs", n_runs)
    rng = _rng(rng)
    mean = float(expected_tokens(alpha_f, k))
    # Enough iterations with overwhelming probability; each yields >= 1 token, so
    # n_tokens iterations always suffice and bound the retry.
    per_run = min(n_tokens, int(1.2 * n_tokens / mean + 8 * np.sqrt(n_tokens) + 16))
    while True:
        tokens = simulate_iid(alpha_f, k, n_runs * per_run, rng=rng).reshape(n_runs, per_run)
        if (tokens.sum(axis=1) >= n_tokens).all():
            break
        per_run = n_tokens
    return wall_time(tokens, n_tokens, k, t_draft=t_draft, t_target_1=t_target_1,
                     t_target_verify=t_target_verify)


# --- draft-length policies on acceptance traces --------------------------------------------

@dataclass(frozen=True)
class AcceptanceTrace:
    """What a policy needs from a run, per iteration i and row b, at every draft slot j:

    accept [I, B, K] bool: draft j passes the acceptance test given drafts 0..j−1 (the
        engine tests every slot; a slot counts only while all before it were accepted);
    confidence [I, B, K] float in [0, 1]: the draft's probability of its own token
        (greedy: the draft's top probability);
    present [I, B] bool: row b took part in iteration i.

    Recorded with a policy that drafted every slot (FixedK(K)), a trace answers "what
    would policy P have done" for any P with k_max <= K, under the replay assumption that
    iteration i of row b meets the same (accept, confidence) slots whatever an earlier
    policy decision was (the replay keeps each row's order, so stateful policies see
    the same sequence of outcomes; the text they would have continued is not regenerated).
    Build one with `from_stats` (from `SpeculativeStats` of a FixedK run: the engine
    records ``accept_mask`` [I, B, K] and ``confidence`` [I, B, K] beside ``accepted``,
    ``drafted`` and ``k_used`` [I, B]) or `synthetic_trace`.
    """
    accept: np.ndarray
    confidence: np.ndarray
    present: np.ndarray

    def __post_init__(self):
        acc = np.asarray(self.accept)
        conf = np.asarray(self.confidence, np.float64)
        pres = np.asarray(self.present)
        if acc.ndim != 3 or acc.dtype != bool:
            raise InvalidArgument(f"accept must be a bool array [I, B, K] (got {acc.dtype} "
                             f"{acc.shape})")
        if conf.shape != acc.shape or pres.shape != acc.shape[:2] or pres.dtype != bool:
            raise InvalidArgument(f"confidence must be [I, B, K] = {acc.shape} and present a bool "
                             f"[I, B] (got {conf.shape}, {pres.dtype} {pres.shape})")
        bad = pres[..., None] & ~((conf >= 0) & (conf <= 1))
        if bad.any():
            raise InvalidArgument(f"confidence must lie in [0, 1] where present "
                             f"(got {conf[bad][0]!r})")
        object.__setattr__(self, "confidence", np.where(pres[..., None], conf, 0.0))
        object.__setattr__(self, "accept", acc & pres[..., None])

    @property
    def k(self) -> int:
        return self.accept.shape[2]

    @classmethod
    def from_stats(cls, stats) -> "AcceptanceTrace":
        """From the `SpeculativeStats` of a run whose every present iteration proposed
        all K slots (a FixedK run of a model drafter); raises otherwise, since slots a
        policy did not draft have no recorded outcome."""
        for name in ("accept_mask", "confidence", "drafted"):
            if getattr(stats, name, None) is None:
                raise InvalidArgument(f"stats has no {name!r}: record the run with an engine "
                                 f"that stores per-slot accept outcomes and confidences")
        present = np.asarray(stats.drafted) >= 0
        if (np.asarray(stats.drafted)[present] != stats.k).any():
            raise InvalidArgument(f"every iteration of the run must propose all k = {stats.k} "
                             f"drafts (record the trace with FixedK and a model drafter)")
        conf = np.nan_to_num(np.asarray(stats.confidence, np.float64), nan=0.0)
        return cls(np.asarray(stats.accept_mask, bool), np.clip(conf, 0.0, 1.0), present)


def synthetic_trace(n_iterations, k, *, confidence_a=2.0, confidence_b=1.0,
                    calibration=None, batch=1, rng=None) -> AcceptanceTrace:
    """A trace with i.i.d. slots: confidence s ~ Beta(confidence_a, confidence_b), and
    accept ~ Bernoulli(calibration(s)) (default the identity: a calibrated drafter).
    Its closed forms are `specsim.analytic.threshold_policy` with the same law."""
    n = _check_count("n_iterations", n_iterations)
    k = _check_count("k", k)
    batch = _check_count("batch", batch)
    a = _scalar("confidence_a", check_positive("confidence_a", confidence_a))
    b = _scalar("confidence_b", check_positive("confidence_b", confidence_b))
    rng = _rng(rng)
    s = rng.beta(a, b, size=(n, batch, k))
    g = s if calibration is None else check_probability("calibration(s)", calibration(s))
    accept = rng.random(s.shape) < g
    return AcceptanceTrace(accept, s, np.ones((n, batch), bool))


@dataclass(frozen=True)
class PolicyRun:
    """A policy replayed on a trace, per iteration and row ([I, B]; 0 where absent):
    k_plan (planned K), proposed, draft_steps (drafts computed, incl. one that stopped
    the row), accepted, tokens (= accepted + 1). time [I]: per batched iteration,
    max_b draft_steps · t_draft + t_target(max_b proposed + 1) (None without costs);
    speedup: against autoregressive decoding at the same batch, as a static or a
    continuous batch (`simulate_policy`'s ``batching``)."""
    k_plan: np.ndarray
    proposed: np.ndarray
    draft_steps: np.ndarray
    accepted: np.ndarray
    present: np.ndarray
    time: np.ndarray | None = None
    speedup: float | None = None

    @property
    def tokens(self) -> np.ndarray:
        return np.where(self.present, self.accepted + 1, 0)

    @property
    def tokens_per_iteration(self) -> float:
        return float(self.tokens[self.present].mean())

    @property
    def alpha_per_proposal(self) -> float:
        p = self.proposed[self.present].sum()
        return float(self.accepted[self.present].sum() / p) if p else float("nan")


BATCHING = ("static", "continuous")
"""How a replay charges a batch's time (`simulate_policy`'s ``batching``)."""


def simulate_policy(policy, trace: AcceptanceTrace, *, costs=None,
                    cost_model: str = "theory", batching: str = "static",
                    off_draft: str = "none", new_tokens: int | None = None) -> PolicyRun:
    """Replay ``policy`` (a `specsim.policies` policy) on ``trace``, one batched
    iteration at a time, with the same NumPy semantics the engine traces: plan, propose
    while kept, accept the leading accepted run, update. ``costs``: a
    `specsim.policies.Costs` with at least policy.k_max + 1 pass times, for time and
    speedup. ``cost_model``: "theory" (a batched iteration costs max_b draft_steps draft
    passes and a verify over max_b proposed + 1 tokens) or "engine" (what
    `specsim.decode` runs: at least one draft pass when some row plans a draft, none when
    no row does (the model drafter catches up later, a cost not modelled here: a few
    tokens per pass), and, as in theory, a verify over max_b proposed + 1 tokens: the
    policy loop compiles one verify pass per width by default; for a program compiled
    at fewer widths pass `costs.bucketed(verify_widths)`).

    ``batching``: "static" (what `specsim.decode` runs: the batch iterates until its
    slowest row has its tokens, every iteration costing the whole batch's pass, so the
    speedup is t_target(1) · min_b r_b / mean_i time_i, r_b the replayed tokens per
    iteration of row b over the iterations it is present; with ``new_tokens``, where
    every row reaches them in the trace, the finite run's speedup instead: new_tokens ·
    t_target(1) over the time until the last row has them, since the engine drops what
    a row's last iteration accepted past its end) or "continuous" (a finished
    row's slot is refilled at once, as in a serving engine: time is charged per row
    present, speedup = Σ tokens · t_target(1) / Σ_i time_i · rows present_i). The two
    agree when every row runs at one rate (identical rows, or batch 1); on a mixed
    batch the static batch runs at its slowest row's pace.

    ``off_draft``: what the trace's drafter's first draft costs while speculation is off
    (`specsim.drafters.off_draft`): "none" (a draft model: not judged), "free" (n-gram
    lookup) or "paid" (the feature head: one draft step). On the iterations i with no
    running row planning a draft and i % n == 0, n = `specsim.policies.judge_period`
    (every one for "free"), the engine judges each row's first draft against the step
    and hands the outcome to the policy's ``observe_off``
    (`specsim.policy_engine.judge_off`); the replay does the same with the trace's slot
    0 (proposed where its confidence is > 0, accepted as recorded) and, for "paid",
    charges such an iteration one draft step (``draft_steps`` 1 in every running row),
    a paid one only where `policies.may_judge` allows it. A policy with a ``begin``
    (`Goodput`'s loss budget) starts with the allowance of ``new_tokens`` tokens: the
    engine's is the run's max_new_tokens − 1 (pass it to replay a run's own trace
    exactly); default I, the fewest tokens the replay can yield, so the bound holds on
    the replay."""
    from specsim import policies as P                # NumPy only: theory side

    if batching not in BATCHING:
        raise InvalidArgument(f"batching must be one of {BATCHING} (got {batching!r})")
    policy = P.as_policy(policy)
    period = P.judge_period(policy, off_draft)          # checks off_draft
    if policy.k_max > trace.k:
        raise InvalidArgument(f"policy.k_max ({policy.k_max}) must be <= the trace's k "
                         f"({trace.k}): slots past it were never drafted")
    I, B, _ = trace.accept.shape
    K = policy.k_max
    if new_tokens is not None:
        new_tokens = positive_int("new_tokens", new_tokens)
    state = P.begin(policy, policy.init(B, np), I if new_tokens is None else new_tokens, np)
    out = {n: np.zeros((I, B), np.int64) for n in ("k_plan", "proposed", "draft_steps",
                                                   "accepted")}
    for i in range(I):
        act = trace.present[i]
        state, plan, prop, acc, steps = _iteration(
            policy, state, trace.confidence[i, :, :K], trace.accept[i, :, :K], act,
            bool(period) and i % period == 0, off_draft)
        for name, v in (("k_plan", plan), ("proposed", prop), ("accepted", acc),
                        ("draft_steps", steps)):
            out[name][i] = np.where(act, v, 0)
    run = PolicyRun(present=trace.present, **out)
    if costs is None:
        return run
    if len(costs.t_target) < K + 1:
        raise InvalidArgument(f"costs.t_target must give k_max + 1 = {K + 1} pass times")
    t_target = np.asarray(costs.t_target)
    steps, widest = run.draft_steps.max(1), run.proposed.max(1)            # [I]
    if cost_model == "engine":
        planned = run.k_plan.max(1) > 0                                    # [I]
        steps = np.where(planned, np.maximum(steps, 1), steps)   # off: a judge's step
    elif cost_model != "theory":
        raise InvalidArgument(f"cost_model must be one of 'theory', 'engine' "
                              f"(got {cost_model!r})")
    time = steps * costs.t_draft + t_target[widest]
    return PolicyRun(present=trace.present, time=time,
                     speedup=_replayed_speedup(run, time, t_target[0], batching,
                                               new_tokens), **out)


def _iteration(policy, state, confidence, accept, active, judge: bool, off_draft: str):
    """One batched iteration as the engine runs it, shared by both replays: plan, propose
    while kept (confidence [B, K]), accept the leading accepted run (accept [B, K]),
    update; when ``judge`` (for a paid one, also `policies.may_judge`) and no active row
    planned a draft, the policy's ``observe_off`` takes slot 0 (proposed where its
    confidence is > 0), a draft step for ``off_draft`` "paid".
    → (state, plan, proposed, accepted, draft_steps), [B] each."""
    from specsim import policies as P

    B, K = confidence.shape
    plan = np.asarray(policy.plan(state, B, np, active))
    prop = P.n_proposed(policy, plan, confidence, np)
    acc = np.sum(np.cumprod(accept & (np.arange(K)[None] < prop[:, None]), axis=1), axis=1)
    state = policy.update(state, plan, acc, prop, active, np)
    steps = P.draft_steps(plan, prop, np)
    judge = judge and not (plan[active] > 0).any()
    if judge and off_draft == "paid":            # a paid judgement only where it is worth it
        gate = P.may_judge(policy, state, active, np)
        judge = gate is None or bool(gate)
    if judge:
        state = policy.observe_off(state, active & (confidence[:, 0] > 0), accept[:, 0],
                                   active, np, paid=off_draft == "paid")
        steps = np.full_like(steps, int(off_draft == "paid"))
    return state, plan, prop, acc, steps


def _replayed_speedup(run: PolicyRun, time, t_1: float, batching: str,
                      new_tokens: int | None = None) -> float:
    """Speedup against autoregressive decoding at the same batch (see `simulate_policy`).
    A static batch with ``new_tokens``, where every row of the replay reaches them: the
    finite run's, new_tokens · t_1 over the time of the iterations until the last row
    has them (the engine stops a row there and drops what its last iteration accepted
    beyond them; a rate per iteration would count those tokens). Otherwise the rate:
    tokens per iteration of the slowest row over the mean iteration time."""
    present = run.present
    running = present.any(1)                                              # [I]
    if not running.any():
        return float("nan")
    if batching == "continuous":
        return float(run.tokens.sum() * t_1 / np.sum(time * present.sum(1)))
    rows = present.any(0)                                                 # [B]
    if new_tokens is not None:
        done = np.cumsum(np.where(present, run.tokens, 0), axis=0) >= new_tokens   # [I, B]
        if done[-1, rows].all():
            last = int(done[:, rows].argmax(0).max())          # the last row's iteration
            return float(new_tokens * t_1 / time[:last + 1][running[:last + 1]].sum())
    rate = run.tokens.sum(0)[rows] / present.sum(0)[rows]                 # [B'] tokens/iter
    return float(t_1 * rate.min() / time[running].mean())


@dataclass(frozen=True)
class PositionTable:
    """What a deterministic drafter would propose from every state of one greedy run
    (batch 1), so that any policy can be replayed on it exactly: greedy output does not
    depend on the policy, and neither does the draft a drafter proposes from a given
    prefix (n-gram lookup reads the context; the feature head the target's feature
    there). Row g − 1 is the state with g tokens generated (g = 1..N − 1; the first
    token comes from the prefill): ok [N − 1, K] bool, draft j from there equals output
    token g + j (the leading run of them is what a verify accepts); confidence
    [N − 1, K], the draft's probability of its own token (0: nothing proposed, an
    n-gram lookup without a match). A table recorded at N tokens replays any run of
    2..N tokens (`replay_positions`' ``new_tokens``). `specsim.experiment.position_tables`
    records one with the engine's drafters; a trace recorded from a FixedK run
    (`AcceptanceTrace`) is indexed by iteration instead, so its replays of other
    policies are approximate."""
    ok: np.ndarray
    confidence: np.ndarray

    def __post_init__(self):
        ok = np.asarray(self.ok)
        conf = np.asarray(self.confidence, np.float64)
        if ok.ndim != 2 or ok.shape != conf.shape or ok.shape[0] < 1 or ok.shape[1] < 1:
            raise InvalidArgument(f"ok and confidence must be [N - 1, K] arrays of one shape, "
                                  f"N >= 2, K >= 1 (got {ok.shape} and {conf.shape})")
        if ok.dtype != bool:
            raise InvalidArgument(f"ok must be a bool array (got {ok.dtype})")
        if not (np.isfinite(conf).all() and (conf >= 0).all() and (conf <= 1).all()):
            raise InvalidArgument("confidence must hold probabilities in [0, 1]")
        object.__setattr__(self, "ok", ok)
        object.__setattr__(self, "confidence", conf)

    @property
    def n_tokens(self) -> int:
        return int(self.ok.shape[0]) + 1

    @property
    def k(self) -> int:
        return int(self.ok.shape[1])


def replay_positions(policy, table: PositionTable, costs, *, new_tokens: int | None = None,
                     off_draft: str = "none") -> PolicyRun:
    """Replay ``policy`` on ``table`` exactly as the engine runs it at batch 1, greedy:
    from g tokens, plan K; propose the drafts the policy keeps (`policies.n_proposed`
    on the table's confidences); accept their leading run of ``ok``; update; move to
    g + accepted + 1. An iteration with K = 0 is the autoregressive step (g + 1); on the
    off iterations i with i % `policies.judge_period` == 0 the policy's ``observe_off``
    takes the first draft from g, as `specsim.policy_engine.judge_off` does, charged a
    draft step for ``off_draft`` "paid". The time of an iteration is the engine's: its
    draft steps (at least one when it drafts) times t_draft plus t_target over the
    proposals + 1 tokens. Returns a `PolicyRun` of [I, 1] arrays whose speedup is
    (new_tokens − 1)·t_target(1) / Σ time: plain decoding's steps after the prefill over
    the run's time. ``new_tokens`` (default: the table's N) in 2..N."""
    from specsim import policies as P                # NumPy only: theory side

    policy = P.as_policy(policy)
    period = P.judge_period(policy, off_draft)          # checks off_draft
    if not isinstance(table, PositionTable):
        raise InvalidArgument(f"table must be a PositionTable (got {type(table).__name__})")
    K = policy.k_max
    if K > table.k:
        raise InvalidArgument(f"policy.k_max ({K}) must be <= the table's k ({table.k})")
    n = table.n_tokens if new_tokens is None else new_tokens
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 2 <= n <= table.n_tokens:
        raise InvalidArgument(f"new_tokens must be an integer in 2..{table.n_tokens} (the "
                              f"table's N; got {new_tokens!r})")
    if len(costs.t_target) < K + 1:
        raise InvalidArgument(f"costs.t_target must give k_max + 1 = {K + 1} pass times")
    t_target = np.asarray(costs.t_target, np.float64)
    state, act = P.begin(policy, policy.init(1, np), n - 1, np), np.ones(1, bool)
    rows = {name: [] for name in ("k_plan", "proposed", "draft_steps", "accepted")}
    time, g, i = [], 1, 0
    while g < n:
        state, plan, prop, acc, steps = _iteration(
            policy, state, table.confidence[g - 1:g, :K], table.ok[g - 1:g, :K], act,
            bool(period) and i % period == 0, off_draft)
        plan, prop, acc, steps = int(plan[0]), int(prop[0]), int(acc[0]), int(steps[0])
        if plan > 0:
            steps = max(steps, 1)           # the engine runs a draft pass when it plans one
        time.append(steps * costs.t_draft + t_target[prop])
        for name, v in (("k_plan", plan), ("proposed", prop), ("draft_steps", steps),
                        ("accepted", acc)):
            rows[name].append(v)
        g += acc + 1
        i += 1
    time = np.asarray(time)
    out = {name: np.asarray(v, np.int64)[:, None] for name, v in rows.items()}
    return PolicyRun(present=np.ones((i, 1), bool), time=time,
                     speedup=float((n - 1) * t_target[0] / time.sum()), **out)
