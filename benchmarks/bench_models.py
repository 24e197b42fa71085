"""SmolLM2-135M on this machine: forward latency against tokens per pass, greedy
tokens/s, and the machine's own memory bandwidth and matmul peak, measured in one run.

    python benchmarks/bench_models.py [--quick] [--context 256] [--max-len 512]

Every figure is a median over repeats after compilation and a warm-up call, each timed
call ending in block_until_ready. The decode-step efficiency is the bytes a batch-1
step must read (all weights once + the keys/values of the filled context) divided by
the step time, as a fraction of the measured copy bandwidth.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specsim.models import (arrange_layers, forward, init_cache, kernels,  # noqa: E402
                            load, stack_layers)


def median_time(fn, *args, repeats=7, warmup=1):
    """Median seconds of fn(*args) (compiled beforehand by the caller's first call)."""
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def bandwidth(n_bytes=512 << 20, repeats=7):
    """Copy bandwidth (bytes read + written per second) of a large fp32 array, by XLA
    and by NumPy, and read bandwidth (a sum over it)."""
    # Donated, so the output reuses the input buffer (a fresh 512 MB output would time
    # the kernel's page faulting, not the memory).
    copy = jax.jit(lambda a: a * 1.0001, donate_argnums=0)
    state = {"x": jnp.ones((n_bytes // 4,), jnp.float32)}

    def call():
        state["x"] = copy(state["x"])
        return state["x"]

    jax.block_until_ready(call())
    t = median_time(call, repeats=repeats)
    reduce = jax.jit(lambda a: jnp.sum(a))
    jax.block_until_ready(reduce(state["x"]))
    t_read = median_time(reduce, state["x"], repeats=repeats)
    xs = np.ones(n_bytes // 4, np.float32)
    ys = np.empty_like(xs)
    t_np = median_time(lambda: np.copyto(ys, xs), repeats=repeats)
    return 2 * n_bytes / t, 2 * n_bytes / t_np, n_bytes / t_read


def matmul_peak(n=2048, repeats=7):
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    mm = jax.jit(lambda x, y: x @ y)
    jax.block_until_ready(mm(a, a))
    return 2 * n ** 3 / median_time(mm, a, a, repeats=repeats)


def forward_latency(params, cfg, n_new, context, max_len, repeats):
    """Median seconds of one forward pass over n_new tokens at batch 1 with `context`
    tokens already cached; the cache is donated and its length reset every call, as a
    speculative verifier does."""
    return median_time(_forward_call(params, cfg, n_new, context, max_len), repeats=repeats)


def _forward_call(params, cfg, n_new, context, max_len):
    """The compiled, warmed zero-argument call `forward_latency` times."""
    step = jax.jit(forward, static_argnums=1, donate_argnums=3)
    cache = init_cache(cfg, 1, max_len)
    ctx = jnp.asarray(np.random.default_rng(0).integers(3, cfg.vocab_size, (1, context)),
                      jnp.int32)
    _, cache = step(params, cfg, ctx, cache)                # fill the context
    tokens = jnp.ones((1, n_new), jnp.int32)
    length = np.asarray(cache.length)
    state = {"cache": cache}

    def call():
        logits, c = step(params, cfg, tokens, state["cache"])
        state["cache"] = c._replace(length=jnp.asarray(length))
        return logits

    jax.block_until_ready(call())                             # compile
    return call


def read_fraction(params, cfg, step_bytes, context, max_len, rounds, n_bytes=512 << 20):
    """The decode step's bytes per second over the read bandwidth (a jnp.sum over
    ``n_bytes``), both timed in each of ``rounds`` interleaved rounds (order alternating):
    per-round ratios, so a slow spell of the machine falls on both. Returns (median, min,
    max) of the ratios."""
    step = _forward_call(params, cfg, 1, context, max_len)
    x = jnp.ones((n_bytes // 4,), jnp.float32)
    reduce = jax.jit(jnp.sum)
    jax.block_until_ready(reduce(x))
    calls = (step, lambda: reduce(x))
    ratios = []
    for r in range(rounds):
        t = [0.0, 0.0]
        for i in ((0, 1) if r % 2 else (1, 0)):
            t0 = time.perf_counter()
            jax.block_until_ready(calls[i]())
            t[i] = time.perf_counter() - t0
        ratios.append((step_bytes / t[0]) / (n_bytes / t[1]))
    return float(np.median(ratios)), float(np.min(ratios)), float(np.max(ratios))


def interleaved_forward(model, cfgs, n_new, context, max_len, rounds):
    """Median seconds of one forward pass of ``n_new`` tokens after ``context`` under each
    config of ``cfgs`` (the model's params laid out for each), timed in interleaved rounds
    (the order alternating) so all see the same machine: a list, one per config."""
    layouts = [arrange_layers(model.params, c) for c in cfgs]
    steps = [jax.jit(forward, static_argnums=1) for _ in cfgs]
    ctx = jnp.asarray(np.random.default_rng(0).integers(3, cfgs[0].vocab_size, (1, context)),
                      jnp.int32)
    tokens = jnp.ones((1, n_new), jnp.int32)
    caches = []
    for step, params, c in zip(steps, layouts, cfgs):
        _, cache = step(params, c, ctx, init_cache(c, 1, max_len))
        jax.block_until_ready(step(params, c, tokens, cache))          # compile
        caches.append(cache)
    times = [[] for _ in cfgs]
    for r in range(rounds):
        for i in (range(len(cfgs)) if r % 2 else reversed(range(len(cfgs)))):
            t0 = time.perf_counter()
            jax.block_until_ready(steps[i](layouts[i], cfgs[i], tokens, caches[i]))
            times[i].append(time.perf_counter() - t0)
    return [float(np.median(t)) for t in times]


def greedy_tokens_per_s(model, cfg, prompt_len, n_tokens, max_len, repeats=3):
    """Batch-1 greedy decoding of n_tokens, the whole loop compiled (lax.fori_loop)."""
    def generate(params, prompt, cache):
        logits, cache = forward(params, cfg, prompt, cache)
        first = jnp.argmax(logits[:, -1], -1).astype(jnp.int32)
        out = jnp.zeros((1, n_tokens), jnp.int32).at[:, 0].set(first)

        def body(i, carry):
            out, cache = carry
            logits, cache = forward(params, cfg, jax.lax.dynamic_slice_in_dim(out, i, 1, 1),
                                    cache)
            nxt = jnp.argmax(logits[:, -1], -1).astype(jnp.int32)
            return out.at[:, i + 1].set(nxt), cache

        out, cache = jax.lax.fori_loop(0, n_tokens - 1, body, (out, cache))
        return out

    gen = jax.jit(generate)
    prompt = jnp.asarray(model.tokenizer.encode("The capital of France is")[:prompt_len])[None]
    cache = init_cache(cfg, 1, max_len)
    out = jax.block_until_ready(gen(model.params, prompt, cache))
    t = median_time(gen, model.params, prompt, cache, repeats=repeats, warmup=0)
    return n_tokens / t, model.tokenizer.decode(np.asarray(out[0]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="fewer token counts and repeats")
    args = ap.parse_args(argv)
    n_list = (1, 4, 16) if args.quick else (1, 2, 4, 8, 16, 64)
    repeats = 3 if args.quick else args.repeats

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = "?"
    print(f"jax {jax.__version__}  backend {jax.default_backend()}  devices {jax.devices()}")
    print(f"python {platform.python_version()}  cpu {platform.processor() or platform.machine()}"
          f"  cores {os.cpu_count()}  commit {commit}  dtype float32  seed 0")

    bw, bw_np, bw_read = bandwidth()
    peak = matmul_peak()
    print(f"copy bandwidth: {bw / 1e9:.1f} GB/s (jax)  {bw_np / 1e9:.1f} GB/s (numpy copyto);"
          f"  read bandwidth (jax sum): {bw_read / 1e9:.1f} GB/s")
    print(f"matmul peak (2048^2 fp32): {peak / 1e9:.1f} GFLOP/s")

    t0 = time.perf_counter()
    model = load("smollm2-135m")
    print(f"load smollm2-135m: {time.perf_counter() - t0:.1f} s")
    weight_bytes = sum(a.nbytes for a in jax.tree_util.tree_leaves(model.params))
    cfg0 = model.cfg
    kv_bytes = 2 * cfg0.n_layers * args.context * cfg0.kv_dim * 4

    # Layer loops: a Python loop over per-layer arrays (as the loaders lay them out for
    # "unroll") and lax.scan over stacked arrays.
    variants = {"unroll": (cfg0.replace(layer_loop="unroll"),
                           arrange_layers(model.params, cfg0.replace(layer_loop="unroll"))),
                "scan": (cfg0.replace(layer_loop="scan"), stack_layers(model.params))}
    results = {}
    for name, (cfg, params) in variants.items():
        ns = n_list if name == cfg0.layer_loop else (1, 16)
        for n in ns:
            t = forward_latency(params, cfg, n, args.context, args.max_len, repeats)
            results[name, n] = t
            print(f"  {name:14s} n_new={n:3d} context={args.context} S={args.max_len}: "
                  f"{t * 1e3:8.2f} ms  ({n / t:7.1f} tok/s)")
    del variants
    t1 = results[cfg0.layer_loop, 1]
    achieved = (weight_bytes + kv_bytes) / t1
    print(f"decode step (batch 1): reads {(weight_bytes + kv_bytes) / 1e6:.0f} MB in "
          f"{t1 * 1e3:.2f} ms = {achieved / 1e9:.1f} GB/s = {achieved / bw:.2f} of copy bandwidth, "
          f"{achieved / bw_read:.2f} of read bandwidth")
    rounds = 10 if args.quick else 30
    # per layer loop (the loaded model's first) and matmul (specsim's CPU kernel, XLA's dots)
    for loop in (cfg0.layer_loop, "scan" if cfg0.layer_loop == "unroll" else "unroll"):
        for mm in (cfg0.matmul, "xla"):
            cfg_mm = cfg0.replace(layer_loop=loop, matmul=mm)
            med, lo, hi = read_fraction(arrange_layers(model.params, cfg_mm), cfg_mm,
                                        weight_bytes + kv_bytes, args.context, args.max_len,
                                        rounds)
            print(f"decode step ({loop}, matmul={mm}) against the read bandwidth, both timed "
                  f"in each of {rounds} interleaved rounds: {med:.2f} (median of per-round "
                  f"ratios; range {lo:.2f}-{hi:.2f})")
    for n in (1, 16):
        print(f"scan/unroll latency ratio at n_new={n}: "
              f"{results['scan', n] / results['unroll', n]:.2f}")
    rounds = 10 if args.quick else 30
    for n in (1, 5):
        fused, separate = interleaved_forward(
            model, [cfg0.replace(fused_projections=f) for f in (True, False)], n,
            args.context, args.max_len, rounds)
        print(f"fused projections ({cfg0.layer_loop}, n_new={n}): {fused * 1e3:.2f} ms vs "
              f"separate {separate * 1e3:.2f} ms = {fused / separate:.3f}x (interleaved)")
    # specsim's CPU matmul kernel (cfg.matmul "auto") against XLA's dots, per layer loop
    # and verify width; t(n)/t(1) is what a verify pass costs in decode steps.
    if kernels.use_kernel(cfg0.matmul, 1, cfg0.dtype):
        for loop in ("scan", "unroll"):
            base = cfg0.replace(layer_loop=loop)
            ts = {n: interleaved_forward(model, [base, base.replace(matmul="xla")], n,
                                         args.context, args.max_len, rounds)
                  for n in (1, 2, 5)}
            for n, (k, x) in ts.items():
                print(f"matmul kernel vs xla ({loop}, n_new={n}): {k * 1e3:.2f} ms vs "
                      f"{x * 1e3:.2f} ms = {k / x:.3f}x (interleaved)")
            print(f"  t(n)/t(1), n = 2, 5 ({loop}): kernel "
                  f"{ts[2][0] / ts[1][0]:.2f} {ts[5][0] / ts[1][0]:.2f}, xla "
                  f"{ts[2][1] / ts[1][1]:.2f} {ts[5][1] / ts[1][1]:.2f}")
    else:
        print(f"matmul kernel: not used here ({kernels.unavailable_reason() or 'cfg.matmul'})")
    tps, text = greedy_tokens_per_s(model, cfg0, 8, 32 if args.quick else 64, args.max_len)
    print(f"greedy batch-1 decoding: {tps:.1f} tokens/s  -> {text[:60]!r}")


if __name__ == "__main__":
    main()
