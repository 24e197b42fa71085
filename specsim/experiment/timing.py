"""Helpers the timed parts share: a speculative run's acceptance columns, and a cache of
prefill timings."""

from __future__ import annotations

import warnings

from specsim import schema


def acceptance_fields(stats) -> dict[str, float]:
    """The runs table's acceptance columns of one speculative run (`SpeculativeStats`):
    α and the per-position rates per draft slot, with each position's sample count."""
    rates, counts = stats.per_position_per_slot, stats.per_position_counts
    return {schema.ALPHA: stats.alpha_per_slot, schema.ALPHA_PROPOSED: stats.alpha_per_proposal,
            schema.TOKENS_PER_ITERATION: stats.tokens_per_iteration,
            schema.MEAN_OVERLAP: stats.mean_overlap, **schema.position_fields(rates, counts)}


class PrefillTimer:
    """The median time of one prefill pass per (model, padded prompt, cache, batch,
    logits), measured once and reused. ``logits`` (`bench.make_forward_call`): "last"
    for a target (its prefill draws the first token from the last position), "none" for
    a draft model (its prefill only fills its cache)."""

    def __init__(self, repeats: int):
        self.repeats = repeats
        self._cache: dict = {}

    def __call__(self, model, padded_prompt: int, cache_len: int, batch: int = 1,
                 logits: str = "last") -> float:
        from specsim import bench

        key = (model.cfg.name, padded_prompt, cache_len, batch, logits)
        if key not in self._cache:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*donated buffers.*")
                call, _ = bench.make_forward_call(model, padded_prompt, batch, cache_len,
                                                  logits=logits)
                self._cache[key] = bench.time_calls(call, repeats=self.repeats, warmup=1).median
        return self._cache[key]
