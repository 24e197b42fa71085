"""What a generation returns: the tokens, the shapes it ran at, and per-iteration
statistics of a speculative run. Plain NumPy (no JAX), so measurement and report code can
read results without the engine.

Two acceptance rates, named as in docs/design.md (say which one wherever an α is printed):

- ``alpha_per_slot``: accepted drafts over the K draft slots of every iteration; a slot
  the drafter left empty counts as a rejection (the verify pass paid for it). This is the
  α of E(α, K) = (1 − α^(K+1)) / (1 − α) for a run at draft length K.
- ``alpha_per_proposal``: accepted drafts over drafts actually proposed.

Shapes: I iterations of the batched loop, B batch, K draft length.

Both classes read themselves: ``summary()`` (also what ``print`` and ``repr`` show),
``_repr_html_`` for notebooks, ``to_frame()`` for a pandas view. Per-position rates come
with their sample counts and a Wilson binomial interval (`binomial_interval`), so a rate
measured on a handful of samples does not read as a trend.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as _sps

__all__ = ["ShapePlan", "SpeculativeStats", "GenerationResult", "binomial_interval"]

FEW_SAMPLES = 30      # below this many samples a per-position rate is flagged "few"


def binomial_interval(successes, trials, level: float = 0.95):
    """Wilson score interval of a binomial rate: (low, high) arrays shaped like the
    inputs, NaN where ``trials`` is 0. Unlike the normal (Wald) interval it stays inside
    [0, 1] and is not empty at 0 or n successes."""
    x = np.asarray(successes, float)
    n = np.asarray(trials, float)
    z = float(_sps.norm.ppf(0.5 + level / 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        p = x / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = np.where(n > 0, np.clip(centre - half, 0.0, 1.0), np.nan)
    high = np.where(n > 0, np.clip(centre + half, 0.0, 1.0), np.nan)
    return low, high


def _f(x, digits: int = 3) -> str:
    """A float for a summary: "n/a" for NaN or None."""
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.{digits}g}"


@dataclass(frozen=True, kw_only=True)
class ShapePlan:
    """The compiled shapes of one generation call (see `specsim.decode.plan_shapes`).

    padded_prompt: P, prompt slots of the prefill (bucketed); cache_len: S, KV slots of
    every cache (and of the token buffer); iterations: I, the size of the iteration
    buffer (bucketed max_new_tokens). Calls with equal plans reuse one compiled program.
    """
    padded_prompt: int
    cache_len: int
    iterations: int


def _ratio(num, den) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(num, float) / np.asarray(den, float)


class _Readable:
    """What a result shows when printed or displayed in a notebook: ``summary()`` (a few
    lines, never the raw arrays) as its repr and str; ``_head_html()`` its headline lines
    for ``_repr_html_``."""

    def summary(self) -> str:                      # pragma: no cover - each class has one
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.summary()

    def __str__(self) -> str:
        return self.summary()

    def _head_html(self) -> str:
        return "<br>".join(html.escape(x) for x in self._headline())


@dataclass(frozen=True, repr=False)
class SpeculativeStats(_Readable):
    """Per-iteration statistics of a speculative run.

    accepted[i, b]: drafts accepted by row b in iteration i (−1 where the row had already
    finished); drafted[i, b]: real proposals in that iteration (K for a model drafter;
    fewer for n-gram lookup without a full match; −1 when finished); overlap[i, b, j]: the
    measured β = Σ min(p, q) at verified position j (NaN where there was no proposal or
    the row had finished)."""
    k: int
    accepted: np.ndarray   # [I, B] int
    drafted: np.ndarray    # [I, B] int
    overlap: np.ndarray    # [I, B, K] float
    # Recorded under a draft-length policy (``generate_speculative(policy=...)``; None
    # without one): k_used[i, b] the row's planned K (−1 when finished); confidence
    # [i, b, j] the draft's probability of its own token at slots the row reached (NaN
    # elsewhere); accept_mask[i, b, j] the acceptance test passed at a proposed slot.
    # `specsim.simulate.AcceptanceTrace.from_stats` turns a FixedK run into a trace.
    k_used: np.ndarray | None = None       # [I, B] int
    confidence: np.ndarray | None = None   # [I, B, K] float
    accept_mask: np.ndarray | None = None  # [I, B, K] bool
    # off_judged[i, b]: in an iteration with speculation off, the drafter's first draft
    # (n-gram lookup: free, every off iteration; the feature head: one draft step, every
    # n-th) put to the acceptance test against the step: 1 passed, 0 not, −1 none judged
    # (`specsim.policy_engine.judge_off`).
    off_judged: np.ndarray | None = None   # [I, B] int
    # Recorded by a tree run (`specsim.decode.generate_tree`): path_end[i, b] the verify
    # index where the accepted path ended (0 = the root, node j at j + 1; −1 when
    # finished); `specsim.trees.measured_acceptance` turns it into per-(depth, rank) rates.
    path_end: np.ndarray | None = None     # [I, B] int

    @property
    def active(self) -> np.ndarray:
        """[I, B] bool: the row took part in the iteration."""
        return self.accepted >= 0

    # ---- whole-run rates ----------------------------------------------------------------
    @property
    def alpha_per_slot(self) -> float:
        """Accepted drafts / (K × iterations rows took part in); empty slots count as
        rejections."""
        a = self.active
        n = a.sum()
        return float(self.accepted[a].sum() / (self.k * n)) if n else float("nan")

    @property
    def alpha_per_proposal(self) -> float:
        """Accepted drafts / proposed drafts over the whole run."""
        a = self.active
        total = self.drafted[a].sum()
        return float(self.accepted[a].sum() / total) if total else float("nan")

    @property
    def alpha_per_row(self) -> np.ndarray:
        """[B]: accepted / proposed per row."""
        a = self.active
        return _ratio(np.where(a, self.accepted, 0).sum(0), np.where(a, self.drafted, 0).sum(0))

    # ---- per position ---------------------------------------------------------------------
    def _reached(self) -> np.ndarray:
        """[K, I, B]: the row's iteration reached draft position j (drafts 0..j−1 accepted)."""
        j = np.arange(self.k)[:, None, None]
        return self.active & (self.accepted >= j)

    def _passed(self) -> np.ndarray:
        j = np.arange(self.k)[:, None, None]
        return self.active & (self.accepted > j)                            # [K, I, B]

    @property
    def per_position_counts(self) -> np.ndarray:
        """[K] int: samples reaching each draft position (every earlier draft accepted);
        the denominators of `per_position_per_slot`, for binomial intervals."""
        return self._reached().sum((1, 2))

    @property
    def per_position_accepted(self) -> np.ndarray:
        """[K] int: samples accepted at each draft position (the numerators)."""
        return self._passed().sum((1, 2))

    @property
    def per_position_per_slot(self) -> np.ndarray:
        """[K]: α_j = P(draft j accepted | drafts 1..j−1 accepted), an empty slot counting
        as a rejection; the rates of E = 1 + Σₖ Πⱼ≤ₖ αⱼ for this run's drafter."""
        return _ratio(self.per_position_accepted, self.per_position_counts)

    @property
    def per_position_proposed_counts(self) -> np.ndarray:
        """[K] int: samples reaching each position with a draft proposed there."""
        j = np.arange(self.k)[:, None, None]
        return (self._reached() & (self.drafted > j)).sum((1, 2))

    @property
    def per_position_per_proposal(self) -> np.ndarray:
        """[K]: α_j = P(draft j accepted | drafts 1..j−1 accepted and draft j proposed)."""
        return _ratio(self.per_position_accepted, self.per_position_proposed_counts)

    # ---- other summaries ------------------------------------------------------------------
    @property
    def tokens_per_iteration(self) -> float:
        """Mean of n_accepted + 1 over the iterations each row took part in."""
        a = self.active
        return float((self.accepted[a] + 1).mean()) if a.any() else float("nan")

    @property
    def mean_overlap(self) -> float:
        """Mean measured β over all verified positions with a proposal."""
        return float(np.nanmean(self.overlap)) if np.isfinite(self.overlap).any() else float("nan")

    @property
    def iterations_per_row(self) -> np.ndarray:
        return self.active.sum(0)

    # ---- reading it -----------------------------------------------------------------------
    def to_frame(self, level: float = 0.95):
        """One row per draft position (1..K): ``reached`` (samples with every earlier
        draft accepted), ``accepted``, ``alpha_per_slot`` with its Wilson interval
        (``low``, ``high`` at ``level``), ``proposed`` and ``alpha_per_proposal``."""
        import pandas as pd
        low, high = binomial_interval(self.per_position_accepted, self.per_position_counts,
                                      level)
        return pd.DataFrame({
            "position": np.arange(1, self.k + 1),
            "reached": self.per_position_counts, "accepted": self.per_position_accepted,
            "alpha_per_slot": self.per_position_per_slot, "low": low, "high": high,
            "proposed": self.per_position_proposed_counts,
            "alpha_per_proposal": self.per_position_per_proposal}).set_index("position")

    def _headline(self) -> list[str]:
        a = self.active
        return [f"K = {self.k}, {self.accepted.shape[1]} rows, {self.accepted.shape[0]} "
                f"iterations ({int(a.sum())} row-iterations)",
                f"alpha_per_slot {_f(self.alpha_per_slot)} (accepted / K slots; an empty "
                f"slot counts as a rejection)",
                f"alpha_per_proposal {_f(self.alpha_per_proposal)} (accepted / drafts "
                f"proposed)",
                f"tokens per iteration {_f(self.tokens_per_iteration)} (accepted + 1, mean "
                f"over row-iterations); mean overlap beta {_f(self.mean_overlap)}"]

    def summary(self, level: float = 0.95) -> str:
        """A few lines: the two α's (named), tokens per iteration, iterations, and per
        draft position the rate per slot with its sample count and interval."""
        lines = ["SpeculativeStats: " + self._headline()[0], *self._headline()[1:],
                 f"per position: alpha_per_slot [{level:.0%} Wilson interval] (accepted/"
                 f"reached)"]
        for j, r in self.to_frame(level).iterrows():
            few = "  few samples" if r.reached < FEW_SAMPLES else ""
            lines.append(f"  {j:>2}: {_f(r.alpha_per_slot)} [{_f(r.low)}, {_f(r.high)}] "
                         f"({int(r.accepted)}/{int(r.reached)}){few}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = self._head_html()
        table = self.to_frame().to_html(float_format=lambda v: f"{v:.3g}", na_rep="n/a")
        return (f"<div><b>SpeculativeStats</b><br>{head}<br>per position (low, high: "
                f"95% Wilson interval of alpha_per_slot)<br>{table}</div>")


@dataclass(frozen=True, repr=False)
class GenerationResult(_Readable):
    """tokens: the new tokens of each row (prompt excluded, trimmed at its stop);
    text: their decoding when the model has a tokenizer; finish_reason per row: "eos",
    "length" or "nonfinite"; nonfinite [B] bool: the row met non-finite logits.
    n_iterations: loop iterations after the prefill (batched); target_passes and
    draft_passes count forward passes of the batch (prefill included); plan: the shapes
    the call compiled for (``meta`` repeats them as "padded_prompt" and "cache_len")."""
    tokens: list[list[int]]
    text: list[str] | None
    prompt_lengths: list[int]
    finish_reason: list[str]
    nonfinite: np.ndarray
    n_iterations: int
    target_passes: int
    draft_passes: int
    stats: SpeculativeStats | None = None
    meta: dict = field(default_factory=dict)
    plan: ShapePlan | None = None
    # Set by decode.generate_*: wall_s, seconds of the call (prompt encoding, prefill,
    # the loop, copying tokens back, decoding text) less compile_s, the seconds JAX spent
    # tracing, lowering and compiling (or reading the persistent cache) inside the call.
    wall_s: float | None = None
    compile_s: float | None = None

    @property
    def n_generated(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def tokens_per_s(self) -> float:
        """New tokens of all rows per second of ``wall_s`` (compile excluded)."""
        ok = self.wall_s is not None and self.wall_s > 0
        return self.n_generated / self.wall_s if ok else float("nan")

    @property
    def ms_per_token(self) -> float:
        """Milliseconds of ``wall_s`` per new token of the batch (1000 / tokens_per_s)."""
        return 1000.0 / self.tokens_per_s if self.tokens_per_s > 0 else float("nan")

    def to_frame(self):
        """One row per prompt: prompt_length, new_tokens, finish_reason, iterations
        (that row took part in), alpha_per_proposal of the row, text."""
        import pandas as pd
        B = len(self.tokens)
        iters = self.stats.iterations_per_row if self.stats is not None else \
            [len(t) for t in self.tokens]
        alpha = self.stats.alpha_per_row if self.stats is not None else [np.nan] * B
        return pd.DataFrame({
            "prompt_length": self.prompt_lengths, "new_tokens": [len(t) for t in self.tokens],
            "finish_reason": self.finish_reason, "iterations": iters,
            "alpha_per_proposal": alpha,
            "text": self.text if self.text is not None else [None] * B},
            index=pd.RangeIndex(B, name="row"))

    def _headline(self) -> list[str]:
        reasons = ", ".join(f"{r} x{self.finish_reason.count(r)}"
                            for r in dict.fromkeys(self.finish_reason))
        lines = [f"{len(self.tokens)} rows, {self.n_generated} new tokens "
                 f"({', '.join(str(len(t)) for t in self.tokens)}); finish: {reasons}"]
        if self.wall_s is not None:
            comp = f"; compile {self.compile_s:.2f} s excluded" if self.compile_s else ""
            lines.append(f"wall {self.wall_s:.3f} s{comp}: {_f(self.tokens_per_s, 4)} "
                         f"tokens/s, {_f(self.ms_per_token)} ms/token (batch throughput)")
        shapes = "" if self.plan is None else (
            f"; shapes: prompt {self.plan.padded_prompt}, cache_len {self.plan.cache_len}, "
            f"iterations {self.plan.iterations}")
        lines.append(f"{self.n_iterations} iterations, {self.target_passes} target passes, "
                     f"{self.draft_passes} draft passes{shapes}")
        return lines

    def summary(self) -> str:
        """A few lines: rows, tokens, finish reasons, wall time and tokens/s, iterations
        and passes, then the speculative statistics' summary when there are any."""
        lines = ["GenerationResult: " + self._headline()[0], *self._headline()[1:]]
        if self.stats is not None:
            lines.append(self.stats.summary())
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = self._head_html()
        stats = "" if self.stats is None else self.stats._repr_html_()
        return f"<div><b>GenerationResult</b><br>{head}{stats}</div>"
