"""SmolLM2-135M decoded by specsim and by its peers, same prompts, one run.

    python benchmarks/bench_peers.py [--quick] [--max-new-tokens 96] [--repeats 5] [--k 4]
        [--self-k 6] [--kinds code json] [--methods ...] [--formats ...]
        [--int4-activations int8|fp32] [--xla-too] [--out DIR]

Prompts: one per kind of work (`specsim.workloads`, default code and JSON), in the
model's chat template, the same token ids for every engine; every number is given per
kind. Engines and methods (greedy, batch 1, exactly ``--max-new-tokens`` new tokens):

* specsim with fp32 weights (the embedded GGUF dequantised), int8 (one scale per output
  column, the head int8 too), and two int4 formats in groups of 32: "int4" symmetric,
  the head too (the fewest bytes), and "int4a" asymmetric (scale and offset per group:
  the GGUF's Q4_1 layers exactly) with the head int8 in groups of 32 (the GGUF's Q8_0
  head exactly), so that its self-draft is the fp32 target to fp32 rounding (see
  `specsim.models.quantize`). "int4" rounds x to int8 per group in its products
  (llama.cpp's Q8 activations, integer products in the kernel: a cheaper step, and its
  self-draft's α no lower); "int4a" keeps x fp32 (rounding x would cost its self-draft
  α, docs/studies/int4.md); ``--int4-activations`` sets both. Methods:
  `generate_autoregressive` ("greedy"), prompt
  lookup (`NGramDrafter`, ``--k`` drafts, and "prompt-lookup-plan": the K the theory
  plans for each kind's prompt from costs and α measured before the rounds,
  `plan_lookup`), and over the fp32 and int8 targets the int4
  self-drafts (``--self-k`` drafts) in the two int4 formats ("self-int4",
  "self-int4a"): the int4 targets' own weights and format as a `ModelDrafter`, so an int4
  target's greedy step costs what the draft step does, and c is its time over the
  target's greedy step (prefill excluded). Over the fp32, int4 and int4a targets also the
  trained heads shipped in specsim/data/drafts, greedy: the feature head ("feature-head",
  EAGLE-style, a chain of K drafts) and the Medusa heads ("medusa", a token tree verified
  in one pass), their K and tree picked before the rounds by the theory from costs and
  acceptance measured on the same target and prompts (`plan_heads`; trees of at most
  `MAX_NODES` nodes, so that the verify pass stays on the kernel).
* Hugging Face transformers (torch, CPU) on the same fp32 weights, when importable:
  ``generate(do_sample=False)`` and ``generate(prompt_lookup_num_tokens=K)``.
* llama.cpp through llama-cpp-python (the optional extra ``specsim[peers]``) on the
  embedded Q4_1 GGUF: greedy, and ``LlamaPromptLookupDecoding``. Skipped, and said so,
  when the package is not importable.

Timing: every (engine, method, kind) once untimed (compiling specsim's programs), then
``--repeats`` interleaved rounds, each timing every one once (the order reversed every
other round), and a 512 MB read (``jnp.sum``) as the machine's own read bandwidth in the
same rounds. Printed per kind: tokens/s and its ratios to specsim fp32 greedy and to
llama.cpp greedy with 95% intervals over the rounds (`specsim.experiment.intervals`), a
greedy step's weight reads as a share of the read bandwidth, α of the speculative
methods (tokens per iteration E too), whether each one's output equals its own target's
greedy output, and c of the int4 draft steps; then the heads' plans and the goals' lines
(the fastest speculative setup per kind, over every method run). ``--out DIR`` also
writes ``peers.csv`` (those rows), ``bench_peers.txt`` (what was printed) and
``environment.json`` (command, commit, machine, wall time), which
`benchmarks/results_page.py` renders. Read the ratios measured
side by side; on a shared machine the absolute rates move.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specsim import analytic, models  # noqa: E402
from specsim.decode import (generate_autoregressive, generate_speculative,  # noqa: E402
                            generate_tree)
from specsim.drafters import (NGramDrafter, feature_head_drafter,  # noqa: E402
                              medusa_drafter)
from specsim.drafters.model import ModelDrafter  # noqa: E402
from specsim.experiment.intervals import bootstrap  # noqa: E402
from specsim.models.kernels import MAX_ROWS  # noqa: E402
from specsim.models.quantize import ACTIVATIONS, quantize_params  # noqa: E402
from specsim.pass_costs import pass_calls  # noqa: E402
from specsim.sampling import SamplingParams  # noqa: E402
from specsim.trees.measured import measured_acceptance  # noqa: E402
from specsim.trees.speedup import plan_tree  # noqa: E402
from specsim.trees.tree import TokenTree  # noqa: E402
from specsim.workloads import KINDS, prompt_text  # noqa: E402

HEADS = ("feature-head", "medusa")      # the trained heads shipped in specsim/data/drafts
PLANNED_LOOKUP = "prompt-lookup-plan"   # prompt lookup at the K the theory plans per kind
METHODS = ("greedy", "prompt-lookup", PLANNED_LOOKUP, "self-int4", "self-int4a", *HEADS)
SPECULATIVE = METHODS[1:]
# specsim's weight formats: (layers' bits, group size, asymmetric), the head's, what the
# products do with x (`quantize.ACTIVATIONS`); None: fp32
HEAD8 = (8, 32, False)                  # the GGUF's Q8_0 head, exactly
FORMATS = {"fp32": None, "int8": ((8, None, False), (8, None, False), "fp32"),
           "int4": ((4, 32, False), (4, 32, False), "int8"),
           "int4a": ((4, 32, True), HEAD8, "fp32")}
SELF_DRAFTS = {"self-int4": "int4", "self-int4a": "int4a"}   # method -> the draft's format
SELF_TARGETS = ("fp32", "int8")                               # targets the self-drafts serve
HEAD_TARGETS = ("fp32", "int4", "int4a")                      # targets the shipped heads serve
# The heads' plans: the feature head probed at K 4, Medusa with a 7-node tree (ranks 0-1 at
# depths 1-2, rank 0 down to depth 4); a verify pass of at most MAX_ROWS tokens stays on
# the kernel for every format (a wider one runs XLA's dots for fp32 and fp32-activation
# weights, which dequantise a quantised target per pass; `kernels.integer_products`).
PROBE_K = 4
PROBE_TREE = ((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 0, 0))
MAX_NODES = MAX_ROWS - 1
STEP = "greedy-1"        # a greedy call of one new token: its time is the prefill's and one step's


def quantized(model, fmt, int4_activations: str | None = None):
    """``model`` in ``fmt`` (a `FORMATS` value), laid out for the scan as
    `models.quantize_model` does; ``int4_activations`` (of `quantize.ACTIVATIONS`), where
    given, replaces an int4 format's own."""
    (bits, group, asym), head, activations = fmt
    if bits == 4 and int4_activations is not None:
        activations = int4_activations
    params = quantize_params(model.params, model.cfg, bits, group, head=head, asymmetric=asym,
                             activations=activations)
    return model.replace(cfg=model.cfg.replace(name=f"{model.cfg.name}-int{bits}"),
                         params=params).with_layer_loop("scan")


# ---- engines: each returns {method: a function decoding one prompt -> its new tokens} --------
def run_specsim(model, n_new, k, self_drafts=(), self_k=6, alphas=None, heads=(),
                lookup_ks=None):
    """Greedy, greedy of one token (`STEP`), prompt lookup, the given self-drafts
    (``{method: drafter}``) and heads (``{method: (drafter, K)}``, K None: the drafter's
    own tree, `generate_tree`) on ``model``, and with ``lookup_ks`` ({prompt ids as a
    tuple: K}, `plan_lookup`) prompt lookup at each prompt's planned K; a speculative
    call records (α per proposal, tokens per iteration) in ``alphas[method, prompt]``."""
    ngram = NGramDrafter(model.cfg.vocab_size, n=3)
    drafters = {"prompt-lookup": (ngram, k),
                **({PLANNED_LOOKUP: (ngram, dict(lookup_ks))} if lookup_ks else {}),
                **{m: (d, self_k) for m, d in dict(self_drafts).items()}, **dict(heads)}
    alphas = {} if alphas is None else alphas

    def greedy(p):
        return generate_autoregressive(model, [p], n_new, eos_token_id=None).tokens[0]

    def speculative(method):
        drafter, ks = drafters[method]

        def run(p):
            kk = ks[tuple(p)] if isinstance(ks, dict) else ks
            r = (generate_tree(model, drafter, [p], n_new, eos_token_id=None) if kk is None
                 else generate_speculative(model, drafter, [p], n_new, k=kk, eos_token_id=None))
            alphas[method, tuple(p)] = (None if kk is None else float(r.stats.alpha_per_proposal),
                                        tokens_per_iteration(r.stats))
            return r.tokens[0]
        return run
    return {"greedy": greedy, STEP: lambda p: generate_autoregressive(
        model, [p], 1, eos_token_id=None).tokens[0], **{m: speculative(m) for m in drafters}}


def tokens_per_iteration(stats) -> float:
    """E measured: tokens a row kept per iteration (its accepted drafts plus one)."""
    acc = np.asarray(stats.accepted)
    return float(1.0 + acc[acc >= 0].mean())


# ---- the shipped heads: K and tree from the theory, with costs and acceptance measured here ----
def _timed_medians(calls: dict, rounds: int) -> dict:
    """Median seconds of each zero-argument call over ``rounds`` interleaved rounds."""
    import jax
    times = {key: [] for key in calls}
    for r in range(rounds):
        for key in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
            t0 = time.perf_counter()
            jax.block_until_ready(calls[key]())
            times[key].append(time.perf_counter() - t0)
    return {key: float(np.median(v)) for key, v in times.items()}


def plan_heads(model, prompts: dict, n_new: int, rounds: int = 5):
    """The shipped feature head and Medusa heads over ``model`` (the copies in
    specsim/data/drafts, or newer ones trained into the cache), each with the K or tree the
    theory picks from what is measured here: t(1) and t(5), the target's pass over 1 and
    over 5 tokens, and the feature head's draft step (`specsim.pass_costs`), t(n) linear
    in between and beyond (the kernel's passes are); one Medusa step (all heads, one
    call); the feature head's α from a greedy run at K 4 on every prompt
    (`analytic.alpha_from_expected_tokens`), Medusa's rates per depth and rank from runs
    of `PROBE_TREE` (`trees.measured_acceptance`). Feature head: the K of 1..`MAX_NODES`
    with the largest `analytic.speedup_from_costs` (verify over K+1 at t(K+1)); Medusa: the
    fastest tree of at most `MAX_NODES` nodes (`trees.speedup.plan_tree`, one draft call
    per iteration; a tree's verify pass attends with XLA's masked attention, dearer than
    the chain's t(n) it is planned with). → ({method: (drafter, K or None for the tree)},
    [a line per head])."""
    import jax
    from specsim.experiment.drafter_study import find_feature_head
    from specsim.train.medusa import find_medusa_heads
    name = model.cfg.name.split("-int")[0]
    fh = feature_head_drafter(model, find_feature_head(name))
    medusa_file = find_medusa_heads(name)
    probe_tree = TokenTree.from_paths(PROBE_TREE)
    probe = medusa_drafter(model, medusa_file, tree=probe_tree)
    sp = SamplingParams.make(0.0, vocab_size=model.cfg.vocab_size)
    pc = pass_calls(model, fh, batch=1, cache_len=512, k=PROBE_K)
    key = jax.random.PRNGKey(0)

    @jax.jit
    def medusa_steps(d, z):
        """pc.steps Medusa calls in one program, each reading the one before."""
        def body(i, z):
            tokens = d.propose_tree(z, None, key, sp)[1].tokens
            return z + 1e-9 * tokens[:, :1].astype(z.dtype)
        return jax.lax.fori_loop(0, pc.steps, body, z)

    state = jax.numpy.full((1, model.cfg.d_model), 0.01, jax.numpy.float32)   # a feature
    jax.block_until_ready(medusa_steps(probe, state))
    med = _timed_medians({"t1": pc.target_1, "tv": pc.verify, "draft": pc.draft,
                          "medusa": lambda: medusa_steps(probe, state)},
                         rounds)
    t1, tv = med["t1"] / pc.steps, med["tv"] / pc.steps
    t_draft, t_medusa = med["draft"] / (pc.steps * PROBE_K), med["medusa"] / pc.steps
    t_target = t1 + (tv - t1) / PROBE_K * np.arange(MAX_NODES + 1)        # t(n), n = 1..8
    k_fh, alpha, e_probe, s_fh = _planned_k(model, fh, list(prompts.values()), n_new, t1, tv,
                                            t_draft)
    ends = np.concatenate([generate_tree(model, probe, [p], n_new, eos_token_id=None
                                         ).stats.path_end.ravel() for p in prompts.values()])
    plan = plan_tree(measured_acceptance(probe_tree, ends[ends >= 0]), t_target,
                     [t_medusa] * MAX_NODES,
                     max_nodes=MAX_NODES, drafting="one_pass")
    tree = plan.best_tree
    lines = [f"feature-head: alpha {alpha:.2f} (E {e_probe:.2f} at K {PROBE_K}), c "
             f"{t_draft / t1:.3f}, t(5)/t(1) {tv / t1:.2f} -> K {k_fh}, predicted "
             f"{s_fh:.2f}x greedy",
             f"medusa: one call {t_medusa / t1:.3f} of a step; tree of {tree.n_nodes} nodes "
             f"(per depth {tree.nodes_per_depth().tolist()}), E "
             f"{plan.expected_tokens[plan.best_n - 1]:.2f}, predicted "
             f"{plan.best_speedup:.2f}x greedy"]
    heads = {"feature-head": (fh, k_fh),
             "medusa": (medusa_drafter(model, medusa_file, tree=tree), None)}
    return heads, lines


def plan_lookup(model, prompts: dict, n_new: int, rounds: int = 5):
    """Prompt lookup's K per kind of ``prompts``, as the theory plans it from what is
    measured here: t(1) and t(5) and the n-gram draft (`specsim.pass_costs`, t(n) linear
    in between and beyond, as `plan_heads`), and α from a greedy run at K 4 on the
    kind's prompt (`analytic.alpha_from_expected_tokens`): the K of 1..`MAX_NODES` with
    the largest `analytic.speedup_from_costs`. → ({prompt ids as a tuple: K}, [a line
    per kind])."""
    ngram = NGramDrafter(model.cfg.vocab_size, n=3)
    pc = pass_calls(model, ngram, batch=1, cache_len=512, k=PROBE_K)
    med = _timed_medians({"t1": pc.target_1, "tv": pc.verify, "draft": pc.draft}, rounds)
    t1, tv = med["t1"] / pc.steps, med["tv"] / pc.steps
    t_draft = med["draft"] / (pc.steps * PROBE_K)
    planned, lines = {}, []
    for kind, p in prompts.items():
        k, alpha, e_probe, best = _planned_k(model, ngram, [p], n_new, t1, tv, t_draft)
        planned[tuple(p)] = k
        lines.append(f"{PLANNED_LOOKUP} {kind}: alpha {alpha:.2f} (E {e_probe:.2f} at K "
                     f"{PROBE_K}), c {t_draft / t1:.3f}, t(5)/t(1) {tv / t1:.2f} -> K {k}, "
                     f"predicted {best:.2f}x greedy")
    return planned, lines


def _planned_k(model, drafter, prompts: list, n_new: int, t1: float, tv: float,
               t_draft: float):
    """The chain's K of 1..`MAX_NODES` with the largest `analytic.speedup_from_costs`,
    from α of greedy runs of ``drafter`` at K `PROBE_K` over ``prompts``
    (`analytic.alpha_from_expected_tokens`), a draft step of ``t_draft`` and
    t(K + 1) linear through t(1) = ``t1`` and t(`PROBE_K` + 1) = ``tv``.
    → (K, α, E at the probe's K, the predicted speedup over greedy)."""
    kept = np.concatenate([generate_speculative(model, drafter, [p], n_new, k=PROBE_K,
                                                eos_token_id=None).stats.accepted.ravel()
                           for p in prompts])
    e_probe = 1.0 + kept[kept >= 0].mean()
    alpha = float(analytic.alpha_from_expected_tokens(e_probe, PROBE_K))
    ks = np.arange(1, MAX_NODES + 1)
    s = analytic.speedup_from_costs(analytic.expected_tokens(alpha, ks), ks, t_draft, t1,
                                    t1 + (tv - t1) / PROBE_K * ks)
    return int(ks[np.argmax(s)]), alpha, e_probe, float(s.max())


def run_transformers(model, n_new, k):
    import torch
    from transformers import AutoModelForCausalLM

    from specsim.models.hf import save_hf

    with tempfile.TemporaryDirectory() as folder:
        save_hf(model.replace(tokenizer=None), folder)
        hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()

    def gen(p, **kw):
        with torch.inference_mode():
            ids = torch.tensor([p])
            seq = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=n_new, min_new_tokens=n_new, pad_token_id=0, **kw)
        return seq[0, len(p):].tolist()
    return {"greedy": gen, "prompt-lookup": lambda p: gen(p, prompt_lookup_num_tokens=k)}


def run_llamacpp(gguf: Path, n_new, k):
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    def make(draft=None):
        return llama_cpp.Llama(model_path=str(gguf), n_ctx=1024, n_threads=os.cpu_count(),
                               verbose=False, draft_model=draft)

    def gen(llm):
        def run(p):
            llm.reset()
            toks = []
            for t in llm.generate(p, temp=0.0, top_k=1):
                toks.append(int(t))
                if len(toks) == n_new:
                    break
            return toks
        return run
    plain, lookup = make(), make(LlamaPromptLookupDecoding(num_pred_tokens=k))
    return {"greedy": gen(plain), "prompt-lookup": gen(lookup)}


def interleaved(calls: dict, repeats: int, read_bytes: int = 512 << 20):
    """Each of ``calls`` ({key: fn}) once untimed, then ``repeats`` rounds timing each
    once (order reversed every other round) beside a ``read_bytes`` jnp.sum. Returns
    ({key: [seconds per round]}, {key: output of its last call}, [read GB/s per round])."""
    import jax
    import jax.numpy as jnp
    x = jnp.ones((read_bytes // 4,), jnp.float32)
    read = jax.jit(jnp.sum)
    jax.block_until_ready(read(x))
    outs = {}
    for key, fn in calls.items():
        t0 = time.perf_counter()
        outs[key] = fn()
        print(f"warm-up {' '.join(key)}: {time.perf_counter() - t0:.1f} s", flush=True)
    secs, gbs = {key: [] for key in calls}, []
    for r in range(repeats):
        order = list(calls) if r % 2 == 0 else list(calls)[::-1]
        for key in order:
            t0 = time.perf_counter()
            outs[key] = calls[key]()
            secs[key].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        jax.block_until_ready(read(x))
        gbs.append(read_bytes / (time.perf_counter() - t0) / 1e9)
        print(f"round {r + 1}/{repeats} done", flush=True)
    return secs, outs, gbs


# ---- bookkeeping ------------------------------------------------------------------------------
def weight_bytes(params) -> int:
    """Bytes a decode step reads: every array leaf (quantised leaves count their stored
    bytes), less the embedding where a separate (quantised) head stands in for it: a step
    then reads one row of the table, not the table."""
    import jax
    size = lambda tree: int(sum(np.asarray(x).nbytes if not hasattr(x, "nbytes")  # noqa: E731
                                else x.nbytes for x in jax.tree_util.tree_leaves(tree)))
    return size(params) - (size(params["embed"]) if "lm_head" in params else 0)


def gguf_tensor_bytes(path: Path) -> int:
    from gguf import GGUFReader
    return int(sum(t.n_bytes for t in GGUFReader(str(path)).tensors))


def _interval(series: dict, statistic) -> tuple[float, float, float]:
    iv = bootstrap(series, statistic, positive=True)
    return iv.value, iv.lo, iv.hi


def _fmt(v) -> str:
    return "-" if v is None else f"{v[0]:.2f} [{v[1]:.2f}, {v[2]:.2f}]"


COLUMNS = ["engine", "method", "kind", "tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi",
           "vs_fp32_greedy", "vs_fp32_greedy_lo", "vs_fp32_greedy_hi", "vs_llamacpp_greedy",
           "vs_llamacpp_greedy_lo", "vs_llamacpp_greedy_hi", "weight_mb", "step_ms",
           "read_share", "read_share_lo", "read_share_hi", "c", "c_lo", "c_hi", "alpha",
           "equals_own_greedy", "agrees_with_hf_greedy", "tokens_per_iteration"]


def measure_rows(engines, secs, outs, gbs, alphas, prompts, n_new):
    """One row per timed (engine, method, kind): the columns of `COLUMNS`. A greedy
    row's decode step is (t(n_new tokens) - t(1 token)) / (n_new - 1), prefill excluded;
    its weight reads over that step as a share of the same rounds' read bandwidth. c (a
    self-draft row): the draft format's greedy step over its target's, round by round."""
    rows = []
    for (engine, method, kind) in secs:
        if method == STEP:
            continue
        x, p = secs[engine, method, kind], prompts[kind]
        row = dict(engine=engine, method=method, kind=kind,
                   weight_mb=round(engines[engine][0] / 1e6, 1))
        row["tokens_per_s"], row["tokens_per_s_lo"], row["tokens_per_s_hi"] = _interval(
            {"x": x}, lambda m: n_new / m["x"])
        for col, ref in (("vs_fp32_greedy", ("specsim-fp32", "greedy")),
                         ("vs_llamacpp_greedy", ("llama.cpp", "greedy"))):
            b = secs.get((*ref, kind))
            if b is not None:
                row[col], row[col + "_lo"], row[col + "_hi"] = _interval(
                    {"b": b, "x": x}, lambda m: m["b"] / m["x"])
        one = secs.get((engine, STEP, kind))
        if method == "greedy" and one is not None and n_new > 1:
            step = lambda m: (m["x"] - m["one"]) / (n_new - 1)       # noqa: E731
            row["step_ms"] = round(1e3 * float(np.median(step({"x": np.asarray(x),
                                                              "one": np.asarray(one)}))), 3)
            row["read_share"], row["read_share_lo"], row["read_share_hi"] = _interval(
                {"x": x, "one": one, "r": gbs},
                lambda m: engines[engine][0] / step(m) / 1e9 / m["r"])
        draft = SELF_DRAFTS.get(method)
        target = secs.get((engine, "greedy", kind)), secs.get((engine, STEP, kind))
        mine = (secs.get((f"specsim-{draft}", "greedy", kind)),
                secs.get((f"specsim-{draft}", STEP, kind)))
        if draft and None not in target + mine and n_new > 1:
            row["c"], row["c_lo"], row["c_hi"] = _interval(
                {"d": mine[0], "d1": mine[1], "t": target[0], "t1": target[1]},
                lambda m: (m["d"] - m["d1"]) / (m["t"] - m["t1"]))
        if (engine, method, tuple(p)) in alphas:
            alpha, e = alphas[engine, method, tuple(p)]
            if alpha is not None:
                row["alpha"] = round(alpha, 4)
            row["tokens_per_iteration"] = round(e, 3)
        own = outs.get((engine, "greedy", kind))
        if method != "greedy" and own is not None:
            row["equals_own_greedy"] = outs[engine, method, kind] == own
        hf = outs.get(("transformers", "greedy", kind))
        if hf is not None:
            row["agrees_with_hf_greedy"] = outs[engine, method, kind] == hf
        rows.append(row)
    return rows


def report(rows, gbs, n_new, plans=()):
    """The table per kind, the shipped heads' plans (`plan_heads`), then the goals' lines."""
    read = float(np.median(gbs))
    get = lambda r, c: (r[c], r[c + "_lo"], r[c + "_hi"]) if c in r else None   # noqa: E731
    print(f"\n{n_new} new tokens per prompt; {len(gbs)} interleaved rounds; medians and 95% "
          f"intervals over rounds; read bandwidth (jnp.sum of 512 MB) median {read:.1f} GB/s")
    print(f"{'engine:method':34s} {'kind':5s} {'tokens/s':>21s} {'vs fp32 greedy':>19s} "
          f"{'vs llama.cpp greedy':>19s} {'MB':>6s} {'step ms':>7s} {'of read':>19s} "
          f"{'c':>19s} {'alpha':>6s} {'E':>5s}  = own greedy")
    for r in rows:
        same = r.get("equals_own_greedy")
        print(f"{r['engine'] + ':' + r['method']:34s} {r['kind']:5s} "
              f"{_fmt(get(r, 'tokens_per_s')):>21s} {_fmt(get(r, 'vs_fp32_greedy')):>19s} "
              f"{_fmt(get(r, 'vs_llamacpp_greedy')):>19s} {r['weight_mb']:6.1f} "
              f"{r.get('step_ms', float('nan')):7.2f} {_fmt(get(r, 'read_share')):>19s} "
              f"{_fmt(get(r, 'c')):>19s} {r.get('alpha', float('nan')):6.3f} "
              f"{r.get('tokens_per_iteration', float('nan')):5.2f}  "
              f"{'-' if same is None else same}")
    if plans:
        print("\nplans: the shipped heads and prompt lookup (K and tree from the theory, "
              "with the costs and acceptance measured before the rounds):")
        for line in plans:
            print(f"  {line}")
    print("\ngoals (per kind):")
    for kind in dict.fromkeys(r["kind"] for r in rows):
        mine = [r for r in rows if r["kind"] == kind]
        for r in mine:
            if r["engine"].startswith("specsim-int4") and "read_share" in r:
                print(f"  {kind}: {r['engine']} greedy step at {_fmt(get(r, 'read_share'))} "
                      f"of the read bandwidth (goal >= 0.7)")
        for r in mine:
            if r["engine"] == "specsim-fp32" and r["method"] in SELF_DRAFTS:
                print(f"  {kind}: fp32 target, {r['method']}: c {_fmt(get(r, 'c'))} (goal <= 0.3), "
                      f"{_fmt(get(r, 'vs_fp32_greedy'))}x fp32 greedy (goal >= 1.5), output "
                      f"equal to the target's greedy: {r.get('equals_own_greedy')}")
        spec = [r for r in mine if r["engine"].startswith("specsim") and r["method"] in SPECULATIVE
                and r.get("equals_own_greedy") and "vs_llamacpp_greedy" in r]
        if spec:
            best = max(spec, key=lambda r: r["vs_llamacpp_greedy"])
            print(f"  {kind}: best speculative setup {best['engine']}:{best['method']}: "
                  f"{_fmt(get(best, 'vs_llamacpp_greedy'))}x llama.cpp greedy (goal >= 1.0), "
                  f"output equal to its target's greedy")


def write_out(out: Path, rows, text: str, env: dict) -> None:
    """peers.csv, bench_peers.txt and environment.json into ``out``, each written whole
    to a temporary file and renamed."""
    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.DictWriter(buf, COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: r.get(c, "") for c in COLUMNS})
    for name, body in (("peers.csv", buf.getvalue()), ("bench_peers.txt", text),
                       ("environment.json", json.dumps(env, indent=1) + "\n")):
        tmp = out / f".{name}.tmp"
        tmp.write_text(body)
        tmp.replace(out / name)


def environment(argv, wall_s: float, read_gbs: float) -> dict:
    import jax
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parents[1]).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True,
                               cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    except OSError:
        commit, dirty = "", ""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        cpu = next((ln.split(":", 1)[1].strip() for ln in
                    Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), cpu)
    versions = {}
    for name in ("llama_cpp", "torch", "transformers"):
        with contextlib.suppress(ImportError):
            versions[name] = __import__(name).__version__
    return {"command": "python benchmarks/bench_peers.py " + " ".join(argv),
            "git_commit": commit + ("+dirty" if dirty else ""),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "cpu": cpu,
            "cpu_count": os.cpu_count(), "wall_s": round(wall_s), "jax": jax.__version__,
            "read_gbs": round(read_gbs, 1), "peers": versions}


def _xla_dots(model):
    """``model`` run with XLA's dots instead of specsim's CPU kernel (`ModelConfig.matmul`)."""
    return model.replace(cfg=model.cfg.replace(matmul="xla"))


def build_engines(fp32, n_new, k, self_k, want, formats=tuple(FORMATS), prompts=None,
                  plans=None, int4_activations=None):
    """{engine: (weight bytes a step reads, {method: fn(prompt)})} for the specsim
    ``formats`` (of `FORMATS`, int4 with ``int4_activations``), and the α record. With
    ``prompts`` ({kind: token ids}), the shipped heads over `HEAD_TARGETS` as `plan_heads`
    plans them on those prompts, its lines appended to ``plans``."""
    alphas, engines = {}, {}
    plans = [] if plans is None else plans
    targets = {f"specsim-{name}": fp32 if FORMATS[name] is None
               else quantized(fp32, FORMATS[name], int4_activations) for name in formats}
    for engine, model in targets.items():
        selfs = {}
        if engine.removeprefix("specsim-") in SELF_TARGETS:
            for method, draft in SELF_DRAFTS.items():
                if want(method):
                    q = quantized(model, FORMATS[draft], int4_activations)
                    selfs[method] = ModelDrafter(q.params, q.cfg, f"quantized-self:{draft}")
        heads = {}
        if prompts and engine.removeprefix("specsim-") in HEAD_TARGETS \
                and any(want(m) for m in HEADS):
            planned, lines = plan_heads(model, prompts, n_new)
            heads = {m: v for m, v in planned.items() if want(m)}
            plans += [f"{engine}, {line}" for line in lines]
            print(*plans[-len(lines):], sep="\n", flush=True)
        lookup_ks = None
        if prompts and want(PLANNED_LOOKUP):
            lookup_ks, lines = plan_lookup(model, prompts, n_new)
            plans += [f"{engine}, {line}" for line in lines]
            print(*plans[-len(lines):], sep="\n", flush=True)
        got = {}
        runs = run_specsim(model, n_new, k, selfs, self_k, got, heads, lookup_ks)
        engines[engine] = (weight_bytes(model.params), runs)
        alphas[engine] = got
    return engines, alphas


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the code prompt, 16 tokens, 1 round")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=5, help="interleaved timed rounds")
    ap.add_argument("--k", type=int, default=4, help="prompt-lookup drafts per iteration")
    ap.add_argument("--self-k", type=int, default=6,
                    help="drafts per iteration of the int4 self-drafts")
    ap.add_argument("--kinds", nargs="+", default=["code", "json"], choices=KINDS,
                    help="kinds of work, one prompt each (specsim.workloads)")
    ap.add_argument("--methods", nargs="+", default=None,
                    help=f"only these methods, of {', '.join(METHODS)}; default all")
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=list(FORMATS),
                    help="specsim's weight formats to run (default all; a self-draft's c needs "
                         "its format among them)")
    ap.add_argument("--int4-activations", default=None, choices=ACTIVATIONS,
                    help="what both int4 formats' products do with x: int8 (rounded per "
                         "group of 32, integer products) or fp32 (as it is); default each "
                         "format's own (int4 int8, int4a fp32)")
    ap.add_argument("--xla-too", action="store_true",
                    help="also specsim fp32 and int8 with XLA's dots (matmul='xla'), greedy")
    ap.add_argument("--peers", nargs="*", default=["transformers", "llama.cpp"],
                    choices=["transformers", "llama.cpp"],
                    help="peers to run where importable (default both; none: specsim only)")
    ap.add_argument("--out", type=Path, default=None,
                    help="also write peers.csv, bench_peers.txt and environment.json here")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.max_new_tokens < 2 or args.k < 1 or args.self_k < 1:
        ap.error("--repeats, --k and --self-k must be positive, --max-new-tokens at least 2")
    if args.methods is not None and not set(args.methods) <= set(METHODS):
        ap.error(f"--methods must be among {METHODS}, got {args.methods}")
    t_start = time.perf_counter()
    n_new, repeats = (16, 1) if args.quick else (args.max_new_tokens, args.repeats)
    kinds = ["code"] if args.quick else args.kinds
    want = lambda m: args.methods is None or m in args.methods          # noqa: E731
    fp32 = models.load("smollm2-135m")
    prompts = {kind: list(fp32.tokenizer.encode(prompt_text(kind, fp32.tokenizer)))
               for kind in kinds}
    plans = []
    engines, alphas = build_engines(fp32, n_new, args.k, args.self_k, want, args.formats,
                                    prompts, plans, args.int4_activations)
    if args.xla_too:
        for name in ("fp32", "int8"):
            model = _xla_dots(fp32 if name == "fp32" else quantized(fp32, FORMATS[name]))
            engines[f"specsim-{name}-xla"] = (weight_bytes(model.params),
                                              run_specsim(model, n_new, args.k))
    if "transformers" in args.peers:
        try:
            engines["transformers"] = (weight_bytes(fp32.params),
                                       run_transformers(fp32, n_new, args.k))
        except ImportError as err:
            print(f"skipped transformers: {err}")
    if "llama.cpp" in args.peers:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            print("skipped llama.cpp: llama-cpp-python is not installed "
                  "(pip install 'specsim[peers]' to compare against it)")
        else:
            from specsim.models.embedded import smollm2_path
            gguf = smollm2_path()
            engines["llama.cpp"] = (gguf_tensor_bytes(gguf), run_llamacpp(gguf, n_new, args.k))
    calls = {}
    for kind, p in prompts.items():
        for e, (_, by_method) in engines.items():
            for m, fn in by_method.items():
                if want(m) or m in ("greedy", STEP):
                    calls[e, m, kind] = (lambda fn=fn, p=p: fn(p))
    secs, outs, gbs = interleaved(calls, repeats)
    all_alphas = {(e, m, p): a for e, got in alphas.items() for (m, p), a in got.items()}
    rows = measure_rows(engines, secs, outs, gbs, all_alphas, prompts, n_new)
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        report(rows, gbs, n_new, plans)
    print(text.getvalue(), end="")
    if args.out is not None:
        env = environment(argv, time.perf_counter() - t_start, float(np.median(gbs)))
        write_out(args.out, rows, text.getvalue(), env)
        print(f"wrote {args.out}/peers.csv, bench_peers.txt and environment.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
