"""The quantised self-draft on SmolLM2-135M: acceptance by kind of work and temperature,
the draft's cost ratio c (timed and from bytes), and the speedup over autoregressive
decoding -- every ratio measured side by side in one process.

    python benchmarks/bench_quantized.py [--max-new 32] [--k 4] [--repeats 3] [--quick]

* α per draft slot (accepted drafts over the K slots of every iteration) for int8 and
  int4 (groups of 32) self-drafts, and int8 with the output head quantised too, at
  K = 4 against the fp32 target and against an int8 target (the draft's error relative
  to the target's: asymmetric quantisation). One batch of four rows, one per kind of
  work (`specsim.workloads.KINDS`), per (target, draft, temperature).
* c from timing one forward pass of one token (`bench.make_forward_call`, interleaved
  rounds, medians) of every quantised model over the fp32 one, under both layer loops,
  and from the roofline's bytes (`roofline.forward_cost` with weight_bits).
* Speedup: the same batch's generation time, speculative vs autoregressive (fp32
  target, temperature 0), in interleaved rounds.

Prints the α table by kind of work, c under both layer loops and from bytes, and the
speedups, with the machine and commit.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specsim import bench, models, roofline, workloads  # noqa: E402
from specsim.decode import generate_autoregressive, generate_speculative  # noqa: E402
from specsim.drafters import quantized_self_drafter  # noqa: E402

DRAFTS = {"int8": dict(bits=8), "int4-g32": dict(bits=4, group_size=32),
          "int8+head": dict(bits=8, head=True)}
ROOFLINE_KW = {"fp32": {}, "int8": dict(weight_bits=8), "int4-g32": dict(weight_bits=4, group_size=32),
               "int8+head": dict(weight_bits=8, quantized_head=True)}


def alpha_per_slot(accepted: np.ndarray, k: int) -> np.ndarray:
    """[B]: accepted drafts / (K x iterations the row took part in); accepted [I, B]."""
    active = accepted >= 0
    return np.where(active, accepted, 0).sum(0) / (k * active.sum(0))


def measure_alpha(targets, prompts, args, log):
    rows, runs = [], {}
    for tname, target in targets.items():
        for dname, kw in DRAFTS.items():
            if args.quick and dname == "int8+head":
                continue
            drafter = quantized_self_drafter(target, **kw)
            for temp in (0.0, 1.0):
                t0 = time.perf_counter()
                res = generate_speculative(target, drafter, prompts, args.max_new, args.k, temp,
                                           seed=0)
                a = alpha_per_slot(res.stats.accepted, args.k)
                rows.append({"target": tname, "draft": dname, "temperature": temp,
                             **dict(zip(workloads.KINDS, a)), "all": float(
                                 np.where(res.stats.active, res.stats.accepted, 0).sum()
                                 / (args.k * res.stats.active.sum())),
                             "tokens/iter": res.stats.tokens_per_iteration})
                runs[(tname, dname, temp)] = drafter
                log(f"  alpha {tname:5s} <- {dname:9s} T={temp}: {np.round(a, 3)} "
                    f"({time.perf_counter() - t0:.0f} s incl. compile)")
    return rows, runs


def measure_cost(fp32, args, log):
    """Median one-token pass times of fp32 / int8 / int4 / int8+head, both loops."""
    variants = {"fp32": fp32, "int8": models.quantize_model(fp32, 8),
                "int4-g32": models.quantize_model(fp32, 4, 32),
                "int8+head": models.quantize_model(fp32, 8, head=True)}
    calls = {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*donated buffers.*")
        for loop in ("unroll", "scan"):
            for name, m in variants.items():
                calls[(loop, name)], _ = bench.make_forward_call(
                    m.with_layer_loop(loop), 1, 1, args.cache_len)
        samples = {key: [] for key in calls}
        rng = np.random.default_rng(0)
        keys = list(calls)
        for r in range(args.repeats * 3 + 1):
            for i in rng.permutation(len(keys)):
                t0 = time.perf_counter()
                jax.block_until_ready(calls[keys[i]]())
                if r:
                    samples[keys[i]].append(time.perf_counter() - t0)
    times = {key: float(np.median(v)) for key, v in samples.items()}
    rows = []
    for name in variants:
        cost = roofline.forward_cost(fp32.cfg, 1, 1, args.cache_len, **ROOFLINE_KW[name])
        base = roofline.forward_cost(fp32.cfg, 1, 1, args.cache_len)
        rows.append({"model": name, "ms_unroll": 1e3 * times[("unroll", name)],
                     "ms_scan": 1e3 * times[("scan", name)],
                     "c_unroll": times[("unroll", name)] / times[("unroll", "fp32")],
                     "c_scan": times[("scan", name)] / times[("scan", "fp32")],
                     "weight_MB": dict(cost.bytes_by)["weights"] / 1e6,
                     "c_bytes": cost.bytes / base.bytes})
        log(f"  cost {name}: {rows[-1]}")
    return rows


def measure_speedup(target, drafters, prompts, args):
    """Generation time at temperature 0 of autoregressive vs speculative (each draft),
    interleaved rounds, medians."""
    calls = {"autoregressive": lambda: generate_autoregressive(target, prompts, args.max_new)}
    for dname, d in drafters.items():
        calls[dname] = (lambda d=d: generate_speculative(target, d, prompts, args.max_new,
                                                         args.k, 0.0, seed=0))
    for c in calls.values():
        c()                                                           # compile / warm
    samples = {n: [] for n in calls}
    for _ in range(args.repeats):
        for n, c in calls.items():
            t0 = time.perf_counter()
            c()
            samples[n].append(time.perf_counter() - t0)
    ar = np.asarray(samples["autoregressive"])
    return {n: {"s": float(np.median(v)), "speedup": float(np.median(ar / np.asarray(v)))}
            for n, v in samples.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache-len", type=int, default=512)
    ap.add_argument("--quick", action="store_true", help="skip the int8+head draft")
    args = ap.parse_args(argv)
    log = lambda s: print(s, flush=True)                              # noqa: E731
    env = bench.environment(model="smollm2-135m", dtype="float32", seed=0, k=args.k,
                            max_new=args.max_new)
    log(json.dumps({k: env[k] for k in ("jax", "jaxlib", "backend", "devices", "cpu",
                                        "cpu_count", "git_commit", "date")}))
    # scan: one compiled layer body, so the 16 speculative programs compile in seconds
    fp32 = models.load("smollm2-135m").with_layer_loop("scan")
    targets = {"fp32": fp32, "int8": models.quantize_model(fp32, 8)}
    tok = fp32.tokenizer
    prompts = [workloads.prompt_text(kind, tok) for kind in workloads.KINDS]

    log("cost ratio c (one token per pass, batch 1, cache %d):" % args.cache_len)
    cost_rows = measure_cost(fp32, args, log)
    log(f"alpha per slot, K={args.k}, {args.max_new} new tokens, rows = {workloads.KINDS}:")
    alpha_rows, drafters = measure_alpha(targets, prompts, args, log)
    speed = measure_speedup(fp32, {d: drafters[("fp32", d, 0.0)]
                                   for d in DRAFTS if ("fp32", d, 0.0) in drafters},
                            prompts, args)

    import pandas as pd
    pd.set_option("display.width", 160)
    print("\n== alpha per slot (accepted / K slots), K=%d ==" % args.k)
    print(pd.DataFrame(alpha_rows).round(3).to_string(index=False))
    print("\n== draft cost ratio c = t(draft pass) / t(fp32 pass), 1 token, batch 1 ==")
    print(pd.DataFrame(cost_rows).round(3).to_string(index=False))
    print("\n== speculative vs autoregressive, fp32 target, T=0, batch of 4 kinds, "
          "scan loop (medians of %d interleaved rounds) ==" % args.repeats)
    print(pd.DataFrame(speed).T.round(3).to_string())


if __name__ == "__main__":
    main()
