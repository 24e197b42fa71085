"""benchmarks/bench_peers.py's byte count: what a decode step reads (the peers themselves
are run by command, in a venv with the optional extras)."""

from __future__ import annotations

import contextlib
import io
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


def test_rows_ratios_c_and_read_share_follow_the_rounds(tmp_path):
    """Synthetic rounds (no timing): each column against the medians computed here, the
    CSV written whole, and results_page's section rendering the best speculative setup."""
    bench, page = load("bench_peers"), load("results_page")
    n_new, gbs = 10, [20.0, 25.0, 22.0]
    mb = {"specsim-fp32": 500e6, "specsim-int4a": 100e6, "llama.cpp": 90e6}
    engines = {e: (b, {}) for e, b in mb.items()}
    secs = {("specsim-fp32", "greedy", "code"): [2.0, 2.2, 2.1],
            ("specsim-fp32", bench.STEP, "code"): [0.3, 0.32, 0.31],
            ("specsim-fp32", "self-int4a", "code"): [1.0, 1.1, 1.2],
            ("specsim-int4a", "greedy", "code"): [0.8, 0.9, 0.85],
            ("specsim-int4a", bench.STEP, "code"): [0.25, 0.26, 0.3],
            ("specsim-int4a", "prompt-lookup", "code"): [0.5, 0.45, 0.55],
            ("specsim-int4a", "medusa", "code"): [0.7, 0.8, 0.75],
            ("llama.cpp", "greedy", "code"): [0.7, 0.75, 0.72]}
    same, other = [1, 2, 3], [1, 2, 4]
    outs = {("specsim-fp32", "greedy", "code"): same, ("specsim-fp32", "self-int4a", "code"): same,
            ("specsim-int4a", "greedy", "code"): same,
            ("specsim-int4a", "prompt-lookup", "code"): other,
            ("specsim-int4a", "medusa", "code"): same,
            ("llama.cpp", "greedy", "code"): other}
    prompt = [5, 6]
    # (α per proposal, tokens per iteration); a tree run has no α per proposal
    alphas = {("specsim-fp32", "self-int4a", (5, 6)): (1.0, 7.0),
              ("specsim-int4a", "medusa", (5, 6)): (None, 1.5)}
    rows = bench.measure_rows(engines, secs, outs, gbs, alphas, {"code": prompt}, n_new)
    by = {(r["engine"], r["method"]): r for r in rows}
    assert len(rows) == 6                                   # the one-token calls are no rows
    med = {k[:2]: float(np.median(v)) for k, v in secs.items()}
    fp32 = by["specsim-fp32", "greedy"]
    assert np.isclose(fp32["tokens_per_s"], n_new / 2.1)
    assert fp32["tokens_per_s_lo"] <= fp32["tokens_per_s"] <= fp32["tokens_per_s_hi"]
    step = (med["specsim-fp32", "greedy"] - med["specsim-fp32", bench.STEP]) / (n_new - 1)
    assert np.isclose(fp32["step_ms"], 1e3 * step, rtol=1e-3)
    share = fp32["read_share"]          # per-round ratios' medians: between the extremes
    per_round = [500e6 / ((x - o) / (n_new - 1)) / 1e9 / r for x, o, r in
                 zip(secs["specsim-fp32", "greedy", "code"], secs["specsim-fp32", bench.STEP,
                                                                   "code"], gbs)]
    assert min(per_round) <= share <= max(per_round)
    draft = by["specsim-fp32", "self-int4a"]
    c = ((med["specsim-int4a", "greedy"] - med["specsim-int4a", bench.STEP])
         / (med["specsim-fp32", "greedy"] - med["specsim-fp32", bench.STEP]))
    assert np.isclose(draft["c"], c) and draft["alpha"] == 1.0
    assert draft["tokens_per_iteration"] == 7.0
    tree = by["specsim-int4a", "medusa"]
    assert "alpha" not in tree and tree["tokens_per_iteration"] == 1.5
    assert tree["equals_own_greedy"] is True and "c" not in tree
    assert np.isclose(draft["vs_fp32_greedy"], 2.1 / 1.1)
    assert np.isclose(draft["vs_llamacpp_greedy"], 0.72 / 1.1)
    assert draft["equals_own_greedy"] is True
    assert by["specsim-int4a", "prompt-lookup"]["equals_own_greedy"] is False
    bench.write_out(tmp_path, rows, "report\n", {"command": "python benchmarks/bench_peers.py",
                                                 "git_commit": "0" * 40, "read_gbs": 22.0})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench_peers.txt", "environment.json",
                                                          "peers.csv"]
    section = page.Page()
    page.peers_section(section, tmp_path)
    # the best speculative setup whose output equals its target's greedy, over every
    # method (a head's tree here): not the faster prompt lookup, whose output differs
    claim = section.summary[0]
    assert claim["value"].startswith(f"code: int4a medusa {0.72 / 0.75:.2f} (")
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        bench.report(rows, gbs, n_new, ["specsim-int4a, medusa: a plan"])
    assert "  specsim-int4a, medusa: a plan\n" in text.getvalue()
    assert (f"code: best speculative setup specsim-int4a:medusa: {0.72 / 0.75:.2f} ["
            in text.getvalue())
    assert "read 22.0 GB/s" in claim["measured ceilings"]
