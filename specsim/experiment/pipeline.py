"""The demo as a short pipeline: load the models, set up the shared state, run the
chosen parts in order, return a `DemoResult`. Writing files is the command line's job
(`specsim.report`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from specsim import interrupt, schema
from specsim.experiment import parts as registry
from specsim.experiment.drafters import build_drafters
from specsim.experiment.prompts import encode_prompts, runs_cache_len
from specsim.experiment.settings import DemoSettings
from specsim.experiment.state import DemoResult, DemoState


def load_models(settings: DemoSettings, target=None, draft_model=None):
    """(target, draft model or None), loaded unless given, in ``settings.layer_loop``."""
    from specsim import models

    target = target if target is not None else models.load(settings.target)
    if draft_model is None and settings.draft:
        draft_model = models.load(settings.draft)
    if settings.layer_loop:
        target = target.with_layer_loop(settings.layer_loop)
        if draft_model is not None:
            draft_model = draft_model.with_layer_loop(settings.layer_loop)
    return target, draft_model


def _matmul_in_use(cfg) -> str:
    """Who runs a decode step's matmuls: "kernel" (specsim's CPU kernel,
    `specsim.models.kernels`) or "xla", as `forward` decides it for one row."""
    from specsim.models import kernels
    return "kernel" if kernels.use_kernel(cfg.matmul, 1, cfg.dtype) else "xla"


def prepare(settings: DemoSettings, *, log: Callable[[str], None] = print,
            progress: bool = True, target=None, draft_model=None) -> DemoState:
    """The state every part runs with: models, drafters, prompts, cache size, environment."""
    from specsim import bench

    target, draft_model = load_models(settings, target, draft_model)
    drafters = build_drafters(target, settings, draft_model)
    matmul = _matmul_in_use(target.cfg)
    env = bench.environment(model=target.cfg.name, dtype=target.cfg.dtype, seed=settings.seed,
                            layer_loop=target.cfg.layer_loop, matmul=matmul,
                            demo=dataclasses.asdict(settings))
    log(f"specsim demo: target {target.cfg.name} ({target.cfg.n_params() / 1e6:.0f}M params, "
        f"{target.cfg.dtype}, layer loop {target.cfg.layer_loop}, matmul {matmul}) on "
        f"{env['devices']}; drafters {list(drafters)}")
    prompts = encode_prompts(target, settings.kinds)
    return DemoState(settings=settings, target=target, drafters=drafters, prompts=prompts,
                     cache_len=runs_cache_len(target, prompts, settings), environment=env,
                     log=log, progress=progress)


def machine_state() -> dict:
    """The machine now: its measured ceilings (a 1024² matmul, a 1 GiB copy, larger than
    any cache, so the copy reads memory and not a cache that other tenants share; a few
    seconds) and the load average, so the report can compare the start with the end."""
    import os

    from specsim import bench

    c = bench.measure_ceilings(matmul_size=1024, copy_mib=bench.CEILING_COPY_MIB).iloc[0]
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {"matmul_flops_per_s": float(c["matmul_flops_per_s"]),
            "copy_bytes_per_s": float(c["copy_bytes_per_s"]), "load_1min": float(load[0]),
            "cpu_count": os.cpu_count()}


def run_demo(settings: DemoSettings | None = None, *, log: Callable[[str], None] = print,
             progress: bool = True, target=None, draft_model=None) -> DemoResult:
    """Run the parts ``settings.parts`` asks for (and those they need); return the result.
    ``target``/``draft_model``: already loaded models instead of ``settings``' names."""
    settings = settings or DemoSettings()
    t_start = time.perf_counter()
    state = prepare(settings, log=log, progress=progress, target=target,
                    draft_model=draft_model)
    state.started = t_start
    todo = registry.resolve(settings.parts)
    state.environment["machine_start"] = machine_state()
    for i, part in enumerate(todo, start=1):
        interrupt.check()
        log(f"{i}/{len(todo)} {part.summary} ...")
        state.parts_left = [p.name for p in todo[i - 1:]]
        t_part = time.perf_counter()
        part.run(state)
        state.environment.setdefault("part_wall_s", {})[part.name] = round(
            time.perf_counter() - t_part, 1)
        missing = [t for t in part.produces if t not in state.tables]
        if missing:
            raise RuntimeError(f"part {part.name!r} did not produce {missing}")
    interrupt.check()
    if schema.RUNS in state.tables:
        from specsim.experiment import prior
        state.tables[schema.RUNS] = prior.prior_columns(state, state.tables[schema.RUNS])
    state.environment["machine_end"] = machine_state()
    state.environment["wall_s"] = round(time.perf_counter() - t_start, 1)
    return DemoResult.from_state(state)
