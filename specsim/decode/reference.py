"""The target's greedy continuation of prompts, as a reference a measuring drafter reads
(`specsim.drafters.instrument_drafter` proposes from it)."""

from __future__ import annotations

import numpy as np

from specsim.decode.calls import generate_autoregressive

__all__ = ["reference_tokens"]


def reference_tokens(target, prompts, n_new: int, *, cache_len: int | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The target's greedy continuation of each prompt (no stop at end-of-sequence):
    ([B, N] int32 prompt + continuation per row, zero padded; [B] prompt lengths).
    ``cache_len``: as `generate_autoregressive` (the baseline's, to share its compiled
    program)."""
    if isinstance(prompts, str) or (prompts and isinstance(prompts[0], (int, np.integer))):
        prompts = [prompts]
    rows = [list(target.tokenizer.encode(p)) if isinstance(p, str) else
            [int(t) for t in np.asarray(p).reshape(-1)] for p in prompts]
    res = generate_autoregressive(target, rows, int(n_new), temperature=0.0,
                                  eos_token_id=None, cache_len=cache_len)
    full = [p + t for p, t in zip(rows, res.tokens)]
    out = np.zeros((len(full), max(map(len, full))), np.int32)
    for b, r in enumerate(full):
        out[b, :len(r)] = r
    return out, np.asarray([len(r) for r in rows], np.int32)
