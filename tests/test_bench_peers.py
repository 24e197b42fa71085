"""benchmarks/bench_peers.py's byte count: what a decode step reads (the peers themselves
are run by command, in a venv with the optional extras)."""

from __future__ import annotations

import jax
import numpy as np
from benchmark_script import load

from specsim import models
from specsim.models.config import TINY_LLAMA
from specsim.models.transformer import init_params


def _nbytes(tree) -> int:
    return sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(tree))


def test_weight_bytes_count_the_head_a_step_reads():
    """A tied head is the embedding, read whole each step; a separate head (untied, or
    the int8 lm_head of a quantised tied model) stands in for it, and the embedding is
    then only looked up (one row a token)."""
    weight_bytes = load("bench_peers").weight_bytes
    cfg = TINY_LLAMA.replace(tie_embeddings=True)
    tied = models.Model(cfg, init_params(jax.random.PRNGKey(0), cfg))
    assert "lm_head" not in tied.params
    assert weight_bytes(tied.params) == _nbytes(tied.params)
    q = models.quantize_model(tied, 8)
    assert "lm_head" not in q.params and weight_bytes(q.params) == _nbytes(q.params)
    qh = models.quantize_model(tied, 8, head=True)
    embed = _nbytes(qh.params["embed"])
    assert weight_bytes(qh.params) == _nbytes(qh.params) - embed
    head = _nbytes(qh.params["lm_head"])      # int8 values and one fp32 scale a column
    assert 0.25 <= head / embed < 0.3
    untied = models.load("tiny-llama")
    assert "lm_head" in untied.params
    assert weight_bytes(untied.params) == _nbytes(untied.params) - \
        _nbytes(untied.params["embed"])
