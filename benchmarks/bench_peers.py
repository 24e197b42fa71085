"""SmolLM2-135M decoded by specsim and by its peers, same prompts, one run.

    python benchmarks/bench_peers.py [--quick] [--max-new-tokens 64] [--repeats 5] [--k 4]
        [--self-k 4] [--xla-too]

Engines and methods (greedy, batch 1, exactly ``--max-new-tokens`` new tokens per prompt):

* specsim with fp32, int8 (one scale per output column) and int4 (groups of 32) weights,
  each also with its tied head quantised ("-head": its own lm_head; the embedding stays
  fp32 for the lookup, as llama.cpp's GGUF quantises token_embd, its head):
  `generate_autoregressive` ("greedy"), prompt lookup (`NGramDrafter`, ``--k`` drafts)
  via `generate_speculative`, and over the fp32 and int8 targets the int4 self-draft
  (`quantized_self_drafter(target, bits=4)`, ``--self-k`` drafts; "self-int4-head" with
  its head quantised too); compiled before timing.
* Hugging Face transformers (torch, CPU) on the same fp32 weights (written as an HF
  folder by `specsim.models.hf.save_hf`): ``generate(do_sample=False)`` and
  ``generate(prompt_lookup_num_tokens=K)``.
* llama.cpp through llama-cpp-python (the optional extra ``specsim[peers]``) on the
  embedded Q4_1 GGUF: greedy, and ``LlamaPromptLookupDecoding``. Skipped, and said so,
  when the package is not importable.

Timing: every method once untimed (compiling specsim's programs), then ``--repeats``
interleaved rounds, each timing every method once over the whole prompt set (the order
reversed every other round), and a 512 MB read (``jnp.sum``) as the machine's own read
bandwidth in the same rounds. Printed: first a table of medians (tokens/s, the ratio to
transformers and to specsim fp32 greedy, the weight bytes each engine reads per token,
those bytes times tokens/s, agreement with transformers' greedy output), then per method
tokens/s and its speedups over specsim fp32 greedy and llama.cpp greedy with 95%
intervals over the rounds (`specsim.experiment.intervals`: bootstrap over rounds, at
least the Student-t width), a greedy step's weight reads as a share of the read
bandwidth, the acceptance of the speculative methods, and whether each speculative
method's output equals its own target's greedy output. Read the ratios measured side by
side; on a shared machine the absolute rates move.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specsim import models  # noqa: E402
from specsim.decode import generate_autoregressive, generate_speculative  # noqa: E402
from specsim.drafters import NGramDrafter, quantized_self_drafter  # noqa: E402
from specsim.experiment.intervals import bootstrap  # noqa: E402

METHODS = ("greedy", "prompt-lookup", "self-int4", "self-int4-head")
PROMPTS = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n"
    "        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
    "Rewrite fibonacci(n) above without recursion:\n",
    "The cat sat on the mat. The dog sat on the log. The bird sat on the",
    "Summarise: Speculative decoding drafts several tokens with a cheap model and "
    "verifies them with the large model in one pass. Summary: Speculative decoding",
]


# ---- engines: each returns {method: a function decoding every prompt -> tokens per prompt} --
def run_specsim(model, prompts, n_new, k, self_drafts=(), self_k=4, alphas=None):
    """Greedy, prompt lookup and the given self-drafts (``{method: drafter}``) on
    ``model``; the speculative methods record their acceptance in ``alphas[method]``."""
    drafters = {"prompt-lookup": (NGramDrafter(model.cfg.vocab_size, n=3), k),
                **{m: (d, self_k) for m, d in dict(self_drafts).items()}}
    alphas = {} if alphas is None else alphas

    def greedy():
        return [generate_autoregressive(model, [p], n_new, eos_token_id=None).tokens[0]
                for p in prompts]

    def speculative(method):
        drafter, kk = drafters[method]

        def run():
            res = [generate_speculative(model, drafter, [p], n_new, k=kk, eos_token_id=None)
                   for p in prompts]
            alphas[method] = float(np.mean([r.stats.alpha_per_proposal for r in res]))
            return [r.tokens[0] for r in res]
        return run
    return {"greedy": greedy, **{m: speculative(m) for m in drafters}}


def run_transformers(model, prompts, n_new, k):
    import torch
    from transformers import AutoModelForCausalLM

    from specsim.models.hf import save_hf

    with tempfile.TemporaryDirectory() as folder:
        save_hf(model.replace(tokenizer=None), folder)
        hf = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()

    def gen(**kw):
        out = []
        with torch.inference_mode():
            for p in prompts:
                ids = torch.tensor([p])
                seq = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                  max_new_tokens=n_new, min_new_tokens=n_new,
                                  pad_token_id=0, **kw)
                out.append(seq[0, len(p):].tolist())
        return out
    return {"greedy": gen, "prompt-lookup": lambda: gen(prompt_lookup_num_tokens=k)}


def run_llamacpp(gguf: Path, prompts, n_new, k):
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    def make(draft=None):
        return llama_cpp.Llama(model_path=str(gguf), n_ctx=512, n_threads=os.cpu_count(),
                               verbose=False, draft_model=draft)

    def gen(llm):
        out = []
        for p in prompts:
            llm.reset()
            toks = []
            for t in llm.generate(p, temp=0.0, top_k=1):
                toks.append(int(t))
                if len(toks) == n_new:
                    break
            out.append(toks)
        return out
    plain, lookup = make(), make(LlamaPromptLookupDecoding(num_pred_tokens=k))
    return {"greedy": lambda: gen(plain), "prompt-lookup": lambda: gen(lookup)}


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


def report(rows, n_tokens):
    base = {m: r["tps"] for r in rows for m in [r["method"]] if r["engine"] == "transformers"}
    ours = next((r["tps"] for r in rows if r["engine"] == "specsim-fp32"
                 and r["method"] == "greedy"), float("nan"))
    print(f"\n{n_tokens} new tokens in all per run; medians of the interleaved rounds")
    print(f"{'engine':18s} {'method':14s} {'tokens/s':>9s} {'vs HF':>7s} {'vs specsim':>10s} "
          f"{'weights MB':>10s} {'GB/s of weights':>15s}  agrees with HF greedy")
    for r in rows:
        vs_hf = r["tps"] / base.get(r["method"], float("nan"))
        print(f"{r['engine']:18s} {r['method']:14s} {r['tps']:9.1f} {vs_hf:7.2f} "
              f"{r['tps'] / ours:10.2f} {r['bytes'] / 1e6:10.1f} "
              f"{r['tps'] * r['bytes'] / 1e9:15.2f}  {r['agree']}")
    llama = {r["method"]: r for r in rows if r["engine"] == "llama.cpp"}
    for r in rows:
        if r["engine"].startswith("specsim") and r["method"] in llama:
            other = llama[r["method"]]
            print(f"{r['engine']} {r['method']}: tokens/s {r['tps'] / other['tps']:.2f}x "
                  f"llama.cpp's; per byte of weights read {r['tps'] * r['bytes'] / (other['tps'] * other['bytes']):.2f}x")


def _interval(series: dict, statistic) -> str:
    iv = bootstrap(series, statistic)
    return f"{iv.value:.2f} [{iv.lo:.2f}, {iv.hi:.2f}]"


def report_intervals(rows, secs, outs, gbs, alphas, n_tokens):
    """Per method: tokens/s and speedups with 95% intervals over the interleaved rounds,
    a greedy step's weight reads as a share of the read bandwidth, α, and whether a
    speculative method's output equals its target's greedy output."""
    read = float(np.median(gbs))
    fp32 = secs.get(("specsim-fp32", "greedy"))
    llama = secs.get(("llama.cpp", "greedy"))
    print(f"\n{len(gbs)} interleaved rounds; 95% intervals over rounds; read bandwidth "
          f"(jnp.sum of 512 MB) median {read:.1f} GB/s")
    print(f"{'engine:method':33s} {'tokens/s [95%]':>24s} {'vs fp32 greedy':>22s} "
          f"{'vs llama.cpp greedy':>22s} {'of read':>7s} {'alpha':>6s}  = own greedy")
    for r in rows:
        key = (r["engine"], r["method"])
        x = secs[key]
        tps = _interval({"x": x}, lambda m: n_tokens / m["x"])
        vs = _interval({"b": fp32, "x": x}, lambda m: m["b"] / m["x"]) if fp32 else "-"
        vl = _interval({"b": llama, "x": x}, lambda m: m["b"] / m["x"]) if llama else "-"
        share = (f"{r['tps'] * r['bytes'] / 1e9 / read:7.2f}" if r["method"] == "greedy"
                 else f"{'-':>7s}")
        alpha = f"{alphas[key]:6.3f}" if key in alphas else f"{'-':>6s}"
        own = outs.get((r["engine"], "greedy"))
        same = ("-" if r["method"] == "greedy" or own is None else
                f"{sum(a == b for a, b in zip(outs[key], own))}/{len(own)}")
        print(f"{r['engine'] + ':' + r['method']:33s} {tps:>24s} {vs:>22s} {vl:>22s} {share} "
              f"{alpha}  {same}")
    for engine in ("specsim-int4", "specsim-int4-head"):
        if fp32 and (engine, "greedy") in secs:
            c = _interval({"d": secs[engine, "greedy"], "t": fp32}, lambda m: m["d"] / m["t"])
            print(f"c of an int4 draft step ({engine} greedy over specsim-fp32 greedy, "
                  f"step for step): {c}")


def _xla_dots(model):
    """``model`` run with XLA's dots instead of specsim's CPU kernel (`ModelConfig.matmul`)."""
    return model.replace(cfg=model.cfg.replace(matmul="xla"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one prompt, 32 tokens, 1 round")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5, help="interleaved timed rounds")
    ap.add_argument("--k", type=int, default=4, help="prompt-lookup drafts per iteration")
    ap.add_argument("--self-k", type=int, default=4,
                    help="drafts per iteration of the int4 self-draft")
    ap.add_argument("--methods", nargs="+", default=None,
                    help=f"only these methods, of {', '.join(METHODS)}; default all")
    ap.add_argument("--xla-too", action="store_true",
                    help="also specsim with XLA's dots (matmul='xla') where its CPU kernel "
                         "runs (the engine before specsim.models.kernels), same run")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.max_new_tokens < 1 or args.k < 1 or args.self_k < 1:
        ap.error("--repeats, --max-new-tokens, --k and --self-k must be positive")
    if args.methods is not None and not set(args.methods) <= set(METHODS):
        ap.error(f"--methods must be among {METHODS}, got {args.methods}")
    n_new, repeats = (32, 1) if args.quick else (args.max_new_tokens, args.repeats)
    fp32 = models.load("smollm2-135m")
    prompts = [list(fp32.tokenizer.encode(t)) for t in (PROMPTS[:1] if args.quick else PROMPTS)]
    total = n_new * len(prompts)
    q8 = models.quantize_model(fp32, 8)
    # "-head": the tied head quantised too (its own lm_head; the embedding stays fp32 for
    # the lookup): llama.cpp's GGUF quantises token_embd, which is its head
    targets = {"specsim-fp32": (fp32, {"self-int4": dict(), "self-int4-head": dict(head=True)}),
               "specsim-int8": (q8, {"self-int4": dict()}),
               "specsim-int8-head": (models.quantize_model(fp32, 8, head=True), {}),
               "specsim-int4": (models.quantize_model(fp32, 4), {}),
               "specsim-int4-head": (models.quantize_model(fp32, 4, head=True), {})}
    if args.xla_too:
        targets["specsim-fp32-xla"] = (_xla_dots(fp32), {})
        targets["specsim-int8-xla"] = (_xla_dots(q8), {})
    engines, alphas = {}, {}                    # engine -> (weight bytes, {method: fn})
    for engine, (model, selfs) in targets.items():
        drafts = {m: quantized_self_drafter(model, 4, **kw) for m, kw in selfs.items()}
        got = {}
        runs = run_specsim(model, prompts, n_new, args.k, drafts, args.self_k, got)
        engines[engine] = (weight_bytes(model.params), runs)
        alphas[engine] = got
    try:
        engines["transformers"] = (weight_bytes(fp32.params),
                                   run_transformers(fp32, prompts, n_new, args.k))
    except ImportError as err:
        print(f"skipped transformers: {err}")
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("skipped llama.cpp: llama-cpp-python is not installed "
              "(pip install 'specsim[peers]' to compare against it)")
    else:
        from specsim.models.embedded import smollm2_path
        gguf = smollm2_path()
        engines["llama.cpp"] = (gguf_tensor_bytes(gguf),
                                run_llamacpp(gguf, prompts, n_new, args.k))
    calls = {(e, m): fn for e, (_, by_method) in engines.items() for m, fn in by_method.items()
             if args.methods is None or m in args.methods}
    secs, outs, gbs = interleaved(calls, repeats)
    ref = outs.get(("transformers", "greedy"))
    agree = lambda out: ("-" if ref is None                                # noqa: E731
                         else f"{sum(a == b for a, b in zip(out, ref))}/{len(ref)}")
    rows = [dict(engine=e, method=m, tps=total / statistics.median(secs[e, m]),
                 bytes=engines[e][0], agree=agree(outs[e, m])) for e, m in calls]
    report(rows, total)
    report_intervals(rows, secs, outs, gbs,
                     {(e, m): a for e, got in alphas.items() for m, a in got.items()}, total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
