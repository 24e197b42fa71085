"""Compile time of five forward passes (widths 1..5) in one program under XLA:CPU options, and
the one-token step time of each. .venv-test/bin/python data/compile-cpu-s19/probe_opts.py"""
import time, statistics, jax, jax.numpy as jnp
from specsim import models
from specsim.models import transformer as T
target = models.load("smollm2-135m").with_layer_loop("scan")
cfg, params = target.cfg, target.params
cache = T.init_cache(cfg, 1, 256)
def fw(w):
    def f(params, cache):
        toks = jnp.zeros((1, w), jnp.int32)
        h, c = T.forward_hidden(params, cfg, toks, cache)
        return T.project(params, cfg, h), c
    return f
def multi(params, cache):
    outs = []
    for w in (1, 2, 3, 4, 5):
        o, cache = fw(w)(params, cache)
        outs.append(o.sum())
    return outs, cache
OPTS = {"default": {}, "noexp": {"xla_llvm_disable_expensive_passes": True},
        "split4": {"xla_cpu_parallel_codegen_split_count": 4},
        "xnn": {"xla_cpu_use_xnnpack": True},
        "noslp": {"xla_cpu_disable_slp_vectorizer": True},
        "nounroll": {"xla_cpu_disable_loop_unrolling": True},
        "fusionemit": {"xla_cpu_use_fusion_emitters": True},
        "nofusionemit": {"xla_cpu_use_fusion_emitters": False},
        }
res = {k: [] for k in OPTS}
step = {k: [] for k in OPTS}
exes = {}
for rep in range(3):
    for name, o in OPTS.items():
        jax.clear_caches()
        t0 = time.perf_counter()
        try:
            exes[name] = jax.jit(multi).lower(params, cache).compile(compiler_options=o)
        except Exception as e:
            print(name, "fails", str(e)[:200]); res[name].append(float("nan")); continue
        res[name].append(time.perf_counter() - t0)
# run time: width-1 decode step compiled with each option
steps = {}
for name, o in OPTS.items():
    jax.clear_caches()
    try:
        steps[name] = jax.jit(fw(1)).lower(params, cache).compile(compiler_options=o)
    except Exception: pass
for rep in range(15):
    for name, ex in steps.items():
        t0 = time.perf_counter(); jax.block_until_ready(ex(params, cache)); step[name].append(time.perf_counter() - t0)
for name in OPTS:
    print(f"{name:14s} compile5 {[round(x,2) for x in res[name]]}  step ms {1e3*statistics.median(step[name]) if step[name] else float('nan'):.1f}", flush=True)
