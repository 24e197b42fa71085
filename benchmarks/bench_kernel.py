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

``--parts``: instead, where an int4 step's time goes (symmetric int4 in groups of 32,
head int4 too, int8 activations: `bench_peers.py`'s "int4"): the step against the same
step with one part taken out (the norms made identities, the attention made a pass-through
of q, the head left out: a timing ablation, its outputs meaningless), fp32's step and the
reference, interleaved (`specsim.bench.interleaved_rounds`, the least of 3 runs a turn);
medians, each ablated step over the whole one and both steps' share of the read bandwidth
with 95% intervals (`specsim.experiment.intervals`).
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

from specsim.bench import interleaved_rounds  # noqa: E402
from specsim.experiment.intervals import bootstrap, ratio_of_medians  # noqa: E402
from specsim.models import kernels, load, quantize_model  # noqa: E402
from specsim.models import transformer as tr  # noqa: E402
from specsim.models.quantize import quantize_params  # noqa: E402

# --parts: each ablation, the transformer functions it replaces while its step is traced
PARTS = {
    "no norms": {"_norm": lambda x, scale, bias, cfg: x},
    "no attention": {"_attention_in_place":
                     lambda q, k_all, v_all, layer, positions, cfg: q.reshape(*q.shape[:2], -1)},
    "no head": {"project": lambda params, cfg, x: x},
}


def _ablated_call(model, label, replaced, context, max_len):
    """`_forward_call` of ``model``'s decode step traced with ``replaced`` transformer
    functions (a config renamed for ``label``, so the step is traced anew)."""
    saved = {name: getattr(tr, name) for name in replaced}
    try:
        for name, fn in replaced.items():
            setattr(tr, name, fn)
        cfg = model.cfg.replace(name=f"{model.cfg.name} {label}")
        return _forward_call(model.params, cfg, 1, context, max_len)
    finally:
        for name, fn in saved.items():
            setattr(tr, name, fn)


def step_parts(model, rounds: int, context: int, max_len: int) -> None:
    """Print where an int4 step's time goes (``--parts``, the module docstring)."""
    from bench_peers import weight_bytes
    int4 = model.replace(params=quantize_params(model.params, model.cfg, 4, 32, head=True,
                                                activations="int8")).with_layer_loop("scan")
    fp32 = model.with_layer_loop("scan")
    calls = {"int4 step": _ablated_call(int4, "", {}, context, max_len)}
    for label, replaced in PARTS.items():
        calls[f"int4, {label}"] = _ablated_call(int4, label, replaced, context, max_len)
    calls["fp32 step"] = _ablated_call(fp32, "", {}, context, max_len)
    ref_bytes = 512 << 20
    x = jnp.ones((ref_bytes // 4,), jnp.float32)
    reduce = jax.jit(jnp.sum)
    jax.block_until_ready(reduce(x))
    calls["read"] = lambda: reduce(x)
    names = list(calls)
    samples, _ = interleaved_rounds([calls[k] for k in names], rounds,
                                    np.random.default_rng(0), inner=3)
    t = dict(zip(names, samples))
    print(f"\n{rounds} interleaved rounds, context {context}; read bandwidth (jnp.sum of "
          f"512 MB) {ref_bytes / np.median(t['read']) / 1e9:.1f} GB/s")
    print("| step | ms | over the int4 step |\n|---|---|---|")
    for k in names[:-1]:
        iv = ratio_of_medians(t[k], t["int4 step"])
        print(f"| {k} | {np.median(t[k]) * 1e3:.2f} | {iv.value:.3f} [{iv.lo:.3f}, {iv.hi:.3f}] |")
    for k, m in (("int4 step", int4), ("fp32 step", fp32)):
        b = weight_bytes(m.params)
        iv = bootstrap({"s": t[k], "r": t["read"]},
                       lambda d: (b / d["s"]) / (ref_bytes / d["r"]), positive=True)
        print(f"{k}: {b / 1e6:.1f} MB of weights, {b / np.median(t[k]) / 1e9:.1f} GB/s, "
              f"{iv.value:.2f} [{iv.lo:.2f}, {iv.hi:.2f}] of the read bandwidth")


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
    ap.add_argument("--parts", action="store_true",
                    help="instead: where an int4 step's time goes (ablations, see above)")
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
    if args.parts:
        step_parts(model, args.rounds, args.context, args.max_len)
        return
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
