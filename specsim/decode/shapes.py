"""What a generation call compiles for, decided on the host before anything runs: the
prompts encoded and checked, the end-of-sequence id, and the padded sizes.

Shapes: B batch, P padded prompt, S cache slots (= the token buffer N), I iteration
buffer. `plan_shapes` pads P, S and I to buckets (`bucket`) so that calls of similar
sizes reuse one compiled program; the `ShapePlan` is carried as ``result.plan``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from specsim.errors import InvalidArgument
from specsim.models.config import ModelConfig
from specsim.results import ShapePlan
from specsim.validation import nonnegative_int, positive_int

__all__ = ["bucket", "prompt_bucket", "plan_shapes", "warmup_tokens", "encode_prompts",
           "resolve_eos", "pad_prompts"]


def bucket(n: int, minimum: int = 16) -> int:
    """Pad a size to a bucket: powers of two up to 512, then multiples of 256."""
    n = max(int(n), minimum)
    if n <= 512:
        return 1 << (n - 1).bit_length()
    return -(-n // 256) * 256


def prompt_bucket(n: int, minimum: int = 8) -> int:
    """Pad a prompt length to a bucket: powers of two up to 64, then multiples of 32 up to
    512, then `bucket`'s. Finer than `bucket` because the prefill computes every padded
    slot (a 133-token prompt fills 160 slots, not 256), at the price of one prefill
    program per 32 tokens of prompt length."""
    n = max(int(n), minimum)
    if n <= 64:
        return 1 << (n - 1).bit_length()
    if n <= 512:
        return -(-n // 32) * 32
    return bucket(n)


def encode_prompts(prompts, model, cfg: ModelConfig) -> list[list[int]]:
    """``prompts`` (one prompt or a list; strings need ``model.tokenizer``) as checked
    token-id lists: non-empty, integer, inside the vocabulary."""
    if isinstance(prompts, str) or (isinstance(prompts, Sequence) and prompts
                                    and isinstance(prompts[0], (int, np.integer))):
        prompts = [prompts]
    if isinstance(prompts, np.ndarray):
        prompts = [list(r) for r in (prompts if prompts.ndim == 2 else prompts[None])]
    if not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise ValueError("prompts must be a non-empty list of token-id lists (or strings)")
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            if getattr(model, "tokenizer", None) is None:
                raise ValueError(f"prompts[{i}] is a string but the model has no tokenizer; "
                                 f"pass token ids")
            p = list(model.tokenizer.encode(p))
        p = list(np.asarray(p).reshape(-1)) if not isinstance(p, list) else p
        if len(p) == 0:
            raise ValueError(f"prompts[{i}] is empty; every prompt needs at least one token")
        arr = np.asarray(p)
        if arr.dtype.kind not in "iu":
            raise ValueError(f"prompts[{i}] must hold integer token ids, got dtype {arr.dtype}")
        if arr.min() < 0 or arr.max() >= cfg.vocab_size:
            raise ValueError(f"prompts[{i}] token ids must lie in [0, {cfg.vocab_size - 1}], "
                             f"got min {arr.min()}, max {arr.max()}")
        out.append([int(t) for t in arr])
    return out


def resolve_eos(eos_token_id, cfg: ModelConfig) -> int:
    """The end-of-sequence id a loop stops at: "auto" is the config's, None is −1 (never
    stop early), else a checked token id."""
    if eos_token_id == "auto":
        eos_token_id = cfg.eos_token_id
    if eos_token_id is None:
        return -1
    if isinstance(eos_token_id, (bool, np.bool_)) \
            or not isinstance(eos_token_id, (int, np.integer)) \
            or not 0 <= eos_token_id < cfg.vocab_size:
        raise InvalidArgument(f"eos_token_id must be None, 'auto' or a token id in "
                              f"[0, {cfg.vocab_size - 1}] (got {eos_token_id!r})")
    return int(eos_token_id)


def plan_shapes(prompts, max_new_tokens: int, k: int = 0,
                caps: int | Sequence[tuple[int, str]] = (), cache_len: int | None = None
                ) -> ShapePlan:
    """The shapes a generation call compiles for: the padded prompt P, the cache (and
    token buffer) slots S and the iteration buffer I, each bucketed with `bucket` so that
    calls of similar sizes share one program.

    ``prompts``: token-id lists (or their lengths); ``k``: draft length (0 for the
    autoregressive loop; a speculative run needs k + 1 slots of headroom); ``caps``: the
    largest cache allowed, an int or (limit, description) pairs such as
    ``[(cfg.max_seq_len, "max_seq_len of tiny-llama")]``; ``cache_len``: a fixed S
    (default: bucketed to need). Raises InvalidArgument when the longest prompt +
    max_new_tokens (+ k + 1) does not fit.
    """
    max_new = positive_int("max_new_tokens", max_new_tokens)
    k = nonnegative_int("k", k)
    lengths = [p if isinstance(p, (int, np.integer)) else len(p) for p in prompts]
    if not lengths:
        raise InvalidArgument("prompts must hold at least one prompt")
    if isinstance(caps, (int, np.integer)):
        caps = [(int(caps), "the cache limit")]
    caps = list(caps) or [(1 << 62, "no limit")]
    longest = positive_int("longest prompt", max(lengths))
    k_extra = k + 1 if k else 0
    need = longest + max_new + k_extra
    cap, cap_what = min(caps, key=lambda c: c[0])
    if cache_len is not None:
        cache_len = positive_int("cache_len", cache_len)
        if cache_len > cap:
            raise InvalidArgument(f"cache_len ({cache_len}) exceeds {cap_what} ({cap})")
        cap, cap_what = cache_len, "cache_len"
    if need > cap:
        extra = f" + k ({k}) + 1" if k else ""
        raise InvalidArgument(
            f"prompt too long for the cache: longest prompt ({longest}) + max_new_tokens "
            f"({max_new}){extra} = {need} positions, but {cap_what} allows {cap}")
    P = min(prompt_bucket(longest), cap)
    S = cache_len if cache_len is not None else min(bucket(max(need, P)), cap)
    return ShapePlan(padded_prompt=P, cache_len=S, iterations=bucket(max_new))


def warmup_tokens(max_new_tokens: int) -> int:
    """The fewest new tokens whose iteration buffer equals that of ``max_new_tokens``
    (`plan_shapes` buckets it), so a warm-up call compiles the same program cheaply."""
    max_new = positive_int("max_new_tokens", max_new_tokens)
    b = bucket(max_new)
    n = max_new
    while n > 1 and bucket(n - 1) == b:
        n -= 1
    return n


def pad_prompts(prompts: list[list[int]], P: int) -> tuple[np.ndarray, np.ndarray]:
    """→ (token ids [B, P] int32, zero padded; prompt lengths [B] int32)."""
    arr = np.zeros((len(prompts), P), np.int32)
    for b, p in enumerate(prompts):
        arr[b, :len(p)] = p
    return arr, np.asarray([len(p) for p in prompts], np.int32)
