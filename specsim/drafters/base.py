"""The drafter interface: the context a drafter sees, the draft it returns, and the
protocol the speculative loop calls (see `specsim.drafters` for the contract)."""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp

from specsim.sampling import SamplingParams
from specsim.policies import OFF_DRAFTS

__all__ = ["Context", "Draft", "Drafter", "check_drafter", "drafts_free", "gather_last",
           "OFF_DRAFTS", "off_draft", "reads_target_hidden"]


class Context(NamedTuple):
    tokens: jax.Array  # [B, N] int32: prompt + output so far, garbage past `length`
    length: jax.Array  # [B] int32: valid tokens per row


class Draft(NamedTuple):
    tokens: jax.Array  # [B, K] int32
    probs: jax.Array   # [B, K, V] fp32; a zero row = no proposal


@runtime_checkable
class Drafter(Protocol):
    """What the speculative loop needs from a drafter (all methods are traced)."""
    vocab_size: int
    name: str

    def init_state(self, prompts: jax.Array, prompt_lens: jax.Array, cache_len: int) -> Any: ...

    def propose(self, state: Any, context: Context, k: int, key: jax.Array,
                sampling: SamplingParams) -> tuple[Any, Draft]: ...

    def commit(self, state: Any, n_accepted: jax.Array, active: jax.Array) -> Any: ...

    def passes_per_iteration(self, k: int) -> int: ...

    def max_cache_len(self) -> int | None: ...

    # Optional: ``drafts_free = True`` says the proposal costs no model pass, keeps no
    # state (init_state returns ()) and is one-hot, from the context alone (n-gram
    # lookup); the policy loop then judges its first draft in iterations where no row
    # drafts, for a policy with ``observe_off`` (`specsim.policy_engine.judge_off`).
    # Optional: a drafter with ``reads_target_hidden = True`` also implements
    #   observe(state, hidden [B, T, D], index [B], active [B]) -> state
    # and is handed the target's final-normed features after the prefill (T = 1, index 0)
    # and after every verify pass (T = K+1, index = n_accepted: the feature that
    # produced the row's last kept token).


def drafts_free(drafter) -> bool:
    """Whether ``drafter`` says its draft is free (``drafts_free``, see `Drafter`)."""
    return bool(getattr(drafter, "drafts_free", False))


def reads_target_hidden(drafter) -> bool:
    """Whether ``drafter`` takes the target's features through ``observe`` (static)."""
    return bool(getattr(drafter, "reads_target_hidden", False))


def off_draft(drafter) -> str:
    """Whether the policy loop can judge ``drafter``'s first draft in an iteration where
    no row drafts (`specsim.policy_engine.judge_off`), and at what price: "free" (its
    draft is free, ``drafts_free``: n-gram lookup), "paid" (it reads the target's
    features, which every off step hands it, so its state is current and one draft step
    computes the draft: the feature head), "none" (any other: a draft model's cache is
    left behind while speculation is off). What `specsim.simulate.simulate_policy`'s
    ``off_draft`` should be for its traces."""
    return "free" if drafts_free(drafter) else "paid" if reads_target_hidden(drafter) \
        else "none"


def gather_last(tokens: jax.Array, length: jax.Array, back: int) -> jax.Array:
    """tokens[b, length[b] - back] for each row → [B]."""
    idx = jnp.clip(length - back, 0, tokens.shape[1] - 1)
    return jnp.take_along_axis(tokens, idx[:, None], axis=1)[:, 0]


def check_drafter(drafter, vocab_size: int) -> None:
    """Eager compatibility checks between a drafter and a target vocabulary."""
    missing = [m for m in ("init_state", "propose", "commit", "passes_per_iteration",
                           "max_cache_len") if not callable(getattr(drafter, m, None))]
    if getattr(drafter, "reads_target_hidden", False) and not callable(
            getattr(drafter, "observe", None)):
        missing.append("observe")
    if missing:
        raise ValueError(f"drafter must implement the Drafter interface; missing {missing}")
    if int(drafter.vocab_size) != int(vocab_size):
        raise ValueError(
            f"drafter vocabulary ({drafter.vocab_size} tokens, {drafter.name}) does not match "
            f"the target's ({vocab_size} tokens); a draft model must share the target's "
            f"tokenizer")
