"""The prompts every run of the demo starts from, and the cache slots they need (a
module of its own so that the parts and the pipeline that runs them both read it)."""

from __future__ import annotations

import numpy as np

from specsim.experiment.settings import DemoSettings


def encode_prompts(target, kinds) -> dict[str, list[int]]:
    """Kind of work -> prompt token ids (random ids for a model without a tokenizer)."""
    from specsim import workloads

    tok = target.tokenizer
    if tok is None:
        return {kind: list(np.random.default_rng(len(kind)).integers(3, target.cfg.vocab_size, 48))
                for kind in kinds}
    return {kind: tok.encode(workloads.prompt_text(kind, tok)) for kind in kinds}


def runs_cache_len(target, prompts: dict, settings: DemoSettings) -> int:
    """The cache slots every run uses (so the sweep measures that context)."""
    from specsim import decode

    P = decode.bucket(max(len(p) for p in prompts.values()))
    S = decode.bucket(P + settings.max_new_tokens + max(settings.ks) + 1)
    return min(S, target.cfg.max_seq_len)
