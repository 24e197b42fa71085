"""SmolLM2-135M decoded by specsim and by its peers, same prompts, one run.

    python benchmarks/bench_peers.py [--quick] [--max-new-tokens 64] [--repeats 3] [--k 4]
        [--xla-too]

Engines and methods (greedy, batch 1, exactly ``--max-new-tokens`` new tokens per prompt):

* specsim, fp32 weights (and int8 weight-only when `models.load(..., quantize="int8")`
  exists, with the tied head kept fp32 and, "specsim-int8-head", quantised too):
  `generate_autoregressive`, and prompt lookup (`NGramDrafter`, K drafts) via
  `generate_speculative`; compiled before timing.
* Hugging Face transformers (torch, CPU) on the same fp32 weights (written as an HF
  folder by `specsim.models.hf.save_hf`): ``generate(do_sample=False)`` and
  ``generate(prompt_lookup_num_tokens=K)``.
* llama.cpp through llama-cpp-python (the optional extra ``specsim[peers]``) on the
  embedded Q4_1 GGUF: greedy, and ``LlamaPromptLookupDecoding``. Skipped, and said so,
  when the package is not importable.

Printed: tokens/s (median over --repeats of the whole prompt set), the ratio to
transformers and to specsim fp32 greedy, the weight bytes each engine reads per token,
and for llama.cpp the ratio per byte: (tokens/s × weight bytes) of specsim over the same
for llama.cpp, i.e. how close each engine gets to streaming its own weights. Timings on a
shared machine are noisy: read the ratios measured side by side, not the absolute rates.
"""

from __future__ import annotations

import argparse
import inspect
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
from specsim.drafters import NGramDrafter  # noqa: E402

PROMPTS = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n"
    "        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
    "Rewrite fibonacci(n) above without recursion:\n",
    "The cat sat on the mat. The dog sat on the log. The bird sat on the",
    "Summarise: Speculative decoding drafts several tokens with a cheap model and "
    "verifies them with the large model in one pass. Summary: Speculative decoding",
]


def timed(fn, repeats: int) -> tuple[float, object]:
    """Median seconds of fn() over ``repeats`` calls after one untimed warm-up call."""
    out = fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


# ---- engines: each returns {method: (seconds, tokens per prompt)} --------------------------
def run_specsim(model, prompts, n_new, k, repeats):
    drafter = NGramDrafter(model.cfg.vocab_size, n=3)

    def greedy():
        return [generate_autoregressive(model, [p], n_new, eos_token_id=None).tokens[0]
                for p in prompts]

    def lookup():
        return [generate_speculative(model, drafter, [p], n_new, k=k,
                                     eos_token_id=None).tokens[0] for p in prompts]
    return {"greedy": timed(greedy, repeats), "prompt-lookup": timed(lookup, repeats)}


def run_transformers(model, prompts, n_new, k, repeats):
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
    return {"greedy": timed(gen, repeats),
            "prompt-lookup": timed(lambda: gen(prompt_lookup_num_tokens=k), repeats)}


def run_llamacpp(gguf: Path, prompts, n_new, k, repeats):
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
    return {"greedy": timed(lambda: gen(plain), repeats),
            "prompt-lookup": timed(lambda: gen(lookup), repeats)}


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
    print(f"\n{n_tokens} new tokens in all per run; median of repeats; noisy shared machine")
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


def _xla_dots(model):
    """``model`` run with XLA's dots instead of specsim's CPU kernel (`ModelConfig.matmul`)."""
    return model.replace(cfg=model.cfg.replace(matmul="xla"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one prompt, 32 tokens, 1 repeat")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k", type=int, default=4, help="prompt-lookup drafts per iteration")
    ap.add_argument("--xla-too", action="store_true",
                    help="also specsim with XLA's dots (matmul='xla') where its CPU kernel "
                         "runs (the engine before specsim.models.kernels), same run")
    args = ap.parse_args(argv)
    n_new, repeats = (32, 1) if args.quick else (args.max_new_tokens, args.repeats)
    fp32 = models.load("smollm2-135m")
    prompts = [list(fp32.tokenizer.encode(t)) for t in (PROMPTS[:1] if args.quick else PROMPTS)]
    total = n_new * len(prompts)
    results = {}                                     # engine -> (weight bytes, {method: ...})
    results["specsim-fp32"] = (weight_bytes(fp32.params),
                               run_specsim(fp32, prompts, n_new, args.k, repeats))
    if args.xla_too:
        results["specsim-fp32-xla"] = (weight_bytes(fp32.params),
                                       run_specsim(_xla_dots(fp32), prompts, n_new, args.k,
                                                   repeats))
    if "quantize" in inspect.signature(models.load).parameters:
        q8 = models.load("smollm2-135m", quantize="int8")
        results["specsim-int8"] = (weight_bytes(q8.params),
                                   run_specsim(q8, prompts, n_new, args.k, repeats))
        # the tied head quantised too (its own int8 lm_head; the embedding stays fp32
        # for the lookup): llama.cpp's GGUF quantises token_embd, which is its head
        q8h = models.load("smollm2-135m", quantize="int8", quantize_head=True)
        results["specsim-int8-head"] = (weight_bytes(q8h.params),
                                        run_specsim(q8h, prompts, n_new, args.k, repeats))
        if args.xla_too:
            results["specsim-int8-xla"] = (weight_bytes(q8.params),
                                           run_specsim(_xla_dots(q8), prompts, n_new, args.k,
                                                       repeats))
    else:
        print("skipped specsim int8: models.load has no quantize= here")
    try:
        results["transformers"] = (weight_bytes(fp32.params),
                                   run_transformers(fp32, prompts, n_new, args.k, repeats))
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
        results["llama.cpp"] = (gguf_tensor_bytes(gguf),
                                run_llamacpp(gguf, prompts, n_new, args.k, repeats))
    ref = results.get("transformers", (0, {}))[1].get("greedy", (0, None))[1]
    rows = [dict(engine=e, method=m, tps=total / sec, bytes=nbytes,
                 agree="-" if ref is None else f"{sum(a == b for a, b in zip(out, ref))}/{len(ref)}")
            for e, (nbytes, by_method) in results.items() for m, (sec, out) in by_method.items()]
    report(rows, total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
