"""What a generation returns: the tokens, the shapes it ran at, and per-iteration
statistics of a speculative run. Plain NumPy (no JAX), so measurement and report code can
read results without the engine.

Two acceptance rates, named as in DESIGN.md (say which one wherever an α is printed):

- ``alpha_per_slot``: accepted drafts over the K draft slots of every iteration; a slot
  the drafter left empty counts as a rejection (the verify pass paid for it). This is the
  α of E(α, K) = (1 − α^(K+1)) / (1 − α) for a run at draft length K.
- ``alpha_per_proposal``: accepted drafts over drafts actually proposed (``alpha`` is
  its older name, kept as an alias).

Shapes: I iterations of the batched loop, B batch, K draft length.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["ShapePlan", "SpeculativeStats", "GenerationResult"]


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


@dataclass(frozen=True)
class SpeculativeStats:
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
    def alpha(self) -> float:
        """Alias of `alpha_per_proposal` (accepted / proposed), kept for old callers."""
        return self.alpha_per_proposal

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

    @property
    def per_position_acceptance(self) -> np.ndarray:
        """Alias of `per_position_per_proposal`, kept for old callers."""
        return self.per_position_per_proposal

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


@dataclass(frozen=True)
class GenerationResult:
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

    @property
    def n_generated(self) -> int:
        return sum(len(t) for t in self.tokens)
