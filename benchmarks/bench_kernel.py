"""specsim's CPU matmul kernel against XLA's dots on SmolLM2-135M: one forward pass of
n tokens after a filled context (a decode step at n = 1, a verify pass at n = K + 1), for
fp32 and int8 weights and both layer loops, all timed in the same interleaved rounds with
a read of 512 MB (jnp.sum) as the machine's own reference.

    PYTHONPATH=. python benchmarks/bench_kernel.py [--rounds 10] [--widths 1 2 5]
        [--loops scan unroll] [--int8] [--int4] [--context 256] [--max-len 512] [--force]

Prints, per program: the median ms, t(n)/t(1) (what a verify pass costs in decode steps,
the ratio the speedup's cost model reads), the bytes of weights a step reads over that
time, and that rate over the reference's (the median of per-round ratios: a slow spell of
the machine falls on both). `ModelConfig.matmul`: "auto" is the kernel here (up to
`kernels.MAX_ROWS` tokens per pass; ``--force``: "kernel", at any width), "xla" XLA's
dots; int8 is `quantize_model(model, 8)` (per output channel, head left fp32); ``--int4``
adds int4 in groups of 32, symmetric and asymmetric ("int4a"), the head int8 in groups
of 32, each with fp32 activations and with int8 activations ("/x8": x rounded to int8 per
group, integer products, `specsim.models.quantize.ACTIVATIONS`).
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

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from bench_models import _forward_call  # noqa: E402

from specsim.models import kernels, load, quantize_model  # noqa: E402
from specsim.models.quantize import quantize_params  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--widths", type=int, nargs="+", default=[1, 2, 5])
    ap.add_argument("--loops", nargs="+", choices=("scan", "unroll"), default=["scan", "unroll"])
    ap.add_argument("--int8", action="store_true", help="also the int8 model (scan only)")
    ap.add_argument("--int4", action="store_true",
                    help="also int4 in groups of 32, symmetric and with offsets (int4a), the "
                         "head int8 in groups of 32, with fp32 and int8 activations (/x8; "
                         "scan only)")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--force", action="store_true",
                    help="matmul='kernel' (the kernel at any row count, for choosing "
                         "kernels.MAX_ROWS) instead of 'auto'")
    args = ap.parse_args(argv)
    if args.rounds < 1 or min(args.widths) < 1 or 1 not in args.widths:
        ap.error("--rounds must be >= 1 and --widths positive, including 1")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent).stdout.strip()
    print(f"jax {jax.__version__}  backend {jax.default_backend()}  cpu "
          f"{platform.processor() or platform.machine()}  cores {os.cpu_count()}  commit "
          f"{commit}  load {os.getloadavg()[0]:.2f}")
    if not kernels.available():
        print(f"the kernel is unavailable here: {kernels.unavailable_reason()}")
        return
    print(f"kernel library: {kernels.library_path()}")

    model = load("smollm2-135m")
    models = {("fp32", loop): model.with_layer_loop(loop) for loop in args.loops}
    if args.int8:
        models["int8", "scan"] = quantize_model(model, 8)
    if args.int4:
        for name, asym in (("int4", False), ("int4a", True)):
            for act, tag in (("fp32", ""), ("int8", "/x8")):
                params = quantize_params(model.params, model.cfg, 4, 32, head=(8, 32, False),
                                         asymmetric=asym, activations=act)
                models[name + tag, "scan"] = model.replace(params=params).with_layer_loop("scan")
    kv = 2 * model.cfg.n_layers * args.context * model.cfg.kv_dim * 4
    calls, reads = {}, {}
    for (dtype, loop), m in models.items():
        for mm in ("kernel" if args.force else "auto", "xla"):
            cfg = m.cfg.replace(matmul=mm)
            for n in args.widths:
                t0 = time.perf_counter()
                calls[dtype, loop, mm, n] = _forward_call(m.params, cfg, n, args.context,
                                                          args.max_len)
                print(f"compiled {dtype} {loop} {mm} n={n}: {time.perf_counter() - t0:.1f} s",
                      flush=True)
        # a separate head stands in for the embedding, of which a step reads one row
        embed = int(m.params["embed"].nbytes) if "lm_head" in m.params else 0
        reads[dtype, loop] = (sum(int(a.nbytes) for a in jax.tree_util.tree_leaves(m.params))
                              - embed + kv)
    ref_bytes = 512 << 20
    x = jnp.ones((ref_bytes // 4,), jnp.float32)
    reduce = jax.jit(jnp.sum)
    jax.block_until_ready(reduce(x))
    keys = list(calls) + ["sum"]
    fns = dict(calls, sum=lambda: reduce(x))
    times = {k: [] for k in keys}
    for r in range(args.rounds):
        for k in (keys if r % 2 else keys[::-1]):
            t0 = time.perf_counter()
            jax.block_until_ready(fns[k]())
            times[k].append(time.perf_counter() - t0)
    ref = np.array(times["sum"])
    print(f"\nreference read (jnp.sum of 512 MB): median {ref_bytes / np.median(ref) / 1e9:.1f} "
          f"GB/s over {args.rounds} rounds; context {args.context}, cache {args.max_len} slots, "
          f"batch 1")
    print("| weights | loop | matmul | n | ms | t(n)/t(1) | GB/s read | of the reference |")
    print("|---|---|---|---|---|---|---|---|")
    for (dtype, loop, mm, n) in calls:
        t = np.array(times[dtype, loop, mm, n])
        t1 = np.median(times[dtype, loop, mm, 1])
        frac = np.median((reads[dtype, loop] / t) / (ref_bytes / ref))
        print(f"| {dtype} | {loop} | {mm} | {n} | {np.median(t) * 1e3:.2f} | "
              f"{np.median(t) / t1:.2f} | {reads[dtype, loop] / np.median(t) / 1e9:.1f} | "
              f"{frac:.2f} |")


if __name__ == "__main__":
    main()
