"""Measure → fit → predict → compare: the end-to-end check behind ``specsim demo``.

1. Measure the machine's ceilings and a forward sweep of the target and of every model
   drafter (tokens per pass, batch, context), and fit a roofline to each
   (`specsim.bench`, `specsim.fit`).
2. Run autoregressive and speculative generation (`specsim.decode`) for each drafter,
   draft length K and temperature on prompts from four kinds of work
   (`specsim.workloads`), timing each run and its prefill.
3. Predict every run's speedup from its measured acceptance with the fitted costs::

       S = E · t_T(1) / (K · t_D(1) + t_T(K+1))        (analytic.speedup_from_costs)

   twice: with E from one α under the i.i.d. model (E = (1 − α^(K+1)) / (1 − α)), and
   with E from the per-position rates α₁…α_K (E = 1 + Σₖ Πⱼ≤ₖ αⱼ, which equals the run's
   measured mean tokens per iteration, so that prediction tests the cost model alone).
   The measured speedup is the ratio of decode times per new token (run time minus
   prefill; the end-of-sequence token is ignored so every run produces exactly
   ``max_new_tokens``), against one autoregressive baseline per temperature (the median
   over kinds of work and rounds: its work does not depend on the text).
4. Predict, from datasheet rows and the model's own FLOPs and bytes, the speedup the
   same acceptance would give on other hardware (roofline only: no launch overhead).
5. Write ``report.md``, CSV files and figures.

Acceptance counts: α here is accepted drafts over the K draft *slots* of every
iteration. For a model drafter every slot holds a proposal; n-gram lookup sometimes has
fewer (or none), and an empty slot is paid for by the verify pass like a rejected one,
so it counts as a rejection. ``alpha_proposed`` (accepted / proposed) is reported too.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from specsim import analytic
from specsim.workloads import KINDS

DRAFTER_KINDS = ("ngram", "layer-skip")
DEFAULT_HARDWARE = ("a100-80gb", "h100-sxm", "h200", "tpu-v5e")


@dataclass(frozen=True, kw_only=True)
class DemoSettings:
    """What the demo runs. ``layer_skip``: the layer ids the self-draft keeps (default:
    all but the middle fifth — dropping more makes α collapse on an untrained model)."""
    target: str = "smollm2-135m"
    draft: str | None = None
    drafters: tuple[str, ...] = DRAFTER_KINDS
    layer_skip: tuple[int, ...] | None = None
    ngram_n: int = 3
    ks: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
    temperatures: tuple[float, ...] = (0.0, 1.0)
    kinds: tuple[str, ...] = KINDS
    max_new_tokens: int = 48
    repeats: int = 2
    sweep_repeats: int = 7
    hardware: tuple[str, ...] = DEFAULT_HARDWARE
    hardware_dtype: str = "bfloat16"
    # lax.scan compiles each speculative program 2-3x faster than the unrolled loop and
    # runs the whole generation within 5-12% of it on this CPU (see the README).
    layer_loop: str | None = "scan"
    seed: int = 0
    out_dir: str = "results/demo"
    quick: bool = False

    def __post_init__(self):
        if not self.ks or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                              for v in self.ks):
            raise ValueError(f"ks must be a non-empty tuple of integers >= 1, got {self.ks!r}")
        bad = [d for d in self.drafters if d not in DRAFTER_KINDS]
        if bad:
            raise ValueError(f"drafters must be among {DRAFTER_KINDS}, got {bad}")
        bad = [k for k in self.kinds if k not in KINDS]
        if bad or not self.kinds:
            raise ValueError(f"kinds must be a non-empty subset of {KINDS}, got {self.kinds!r}")
        if not self.temperatures or any(not (t >= 0 and math.isfinite(t)) for t in self.temperatures):
            raise ValueError(f"temperatures must be finite numbers >= 0, got {self.temperatures!r}")
        for name in ("max_new_tokens", "repeats", "sweep_repeats"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")

    @classmethod
    def quick_settings(cls, **changes) -> "DemoSettings":
        """A smaller run (fewer K, kinds and tokens) that keeps every step."""
        base = dict(ks=(2, 4), kinds=("code", "prose"), max_new_tokens=40, repeats=2,
                    sweep_repeats=5, quick=True)
        base.update(changes)
        return cls(**base)


@dataclass
class DemoResult:
    settings: DemoSettings
    environment: dict
    ceilings: object          # DataFrame, one row per device
    sweeps: object            # DataFrame, every model's forward sweep
    fits: dict                # model name -> RooflineFit
    runs: object              # DataFrame, one row per generation run
    hardware: object          # DataFrame, datasheet predictions
    files: list = field(default_factory=list)

    def mape(self, column: str = "pred_speedup_iid") -> float:
        spec = self.runs[self.runs["drafter"] != "autoregressive"]
        err = (spec[column] - spec["measured_speedup"]).abs() / spec["measured_speedup"]
        return float(100 * err.mean())


# ---- drafters and their cost models ---------------------------------------------------------
def default_layer_skip(n_layers: int) -> tuple[int, ...]:
    """All layers but a block of the middle fifth (at least one layer dropped)."""
    drop = max(1, n_layers // 5)
    start = (n_layers - drop) // 2
    return tuple(i for i in range(n_layers) if not start <= i < start + drop)


def build_drafters(target, settings: DemoSettings, draft_model=None) -> dict:
    """name -> (drafter, draft Model or None). The Model is what the draft step costs
    (None for n-gram lookup, whose proposals are a few gathers inside the loop)."""
    from specsim import drafters as dr
    from specsim.models import Model
    out = {}
    for kind in settings.drafters:
        if kind == "ngram":
            out[f"ngram-{settings.ngram_n}"] = (
                dr.NGramDrafter(target.cfg.vocab_size, n=settings.ngram_n), None)
        elif kind == "layer-skip":
            layers = settings.layer_skip or default_layer_skip(target.cfg.n_layers)
            d = dr.layer_skip_drafter(target, layers)
            # the drafter's own gathered layers, as a Model for sweeping its cost
            out[d.name] = (d, Model(d.cfg, d.params, None, f"layer-skip of {target.source}"))
    if draft_model is not None:
        d = dr.model_drafter(draft_model, target)
        out[d.name] = (d, draft_model)
    return out


# ---- one timed generation --------------------------------------------------------------------
def warmup_tokens(max_new_tokens: int) -> int:
    """The fewest new tokens that still use the same iteration buffer (the engine pads
    max_new_tokens to `decode.bucket`), so a warm-up compiles the same program cheaply."""
    from specsim.decode import bucket

    b = bucket(max_new_tokens)
    n = max_new_tokens
    while n > 1 and bucket(n - 1) == b:
        n -= 1
    return n


def _prefill_time(model, padded_prompt: int, cache_len: int, repeats: int) -> float:
    from specsim import bench

    call, _ = bench.make_forward_call(model, padded_prompt, 1, cache_len)
    return bench.time_calls(call, repeats=repeats, warmup=1).median


def alpha_by_slot(accepted: np.ndarray, k: int) -> tuple[float, np.ndarray]:
    """α over draft slots and the per-position rates from accepted counts [I, B]
    (−1 = row finished): α_j = P(accepted ≥ j+1 | accepted ≥ j)."""
    a = accepted[accepted >= 0].astype(float)
    if a.size == 0:
        return math.nan, np.full(k, math.nan)
    alpha = float(a.sum() / (k * a.size))
    reached = np.array([(a >= j).sum() for j in range(k)], float)
    passed = np.array([(a >= j + 1).sum() for j in range(k)], float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return alpha, passed / reached


def _swept(sweeps, model_name: str, n: int, context: int) -> float:
    """The sweep's median time of one pass of ``n`` tokens at batch 1 and ``context``."""
    row = sweeps[(sweeps["model"] == model_name) & (sweeps["n_tokens"] == n)
                 & (sweeps["batch"] == 1) & (sweeps["context"] == context)]
    if row.empty:
        return math.nan
    return float(row["time_s"].iloc[0])


def _predict(E, k, fit_t, fit_d, cfg_t, cfg_d, context):
    t1 = float(fit_t.predict_forward(cfg_t, 1, 1, context))
    tv = float(fit_t.predict_forward(cfg_t, k + 1, 1, context))
    td = 0.0 if fit_d is None else float(fit_d.predict_forward(cfg_d, 1, 1, context))
    return float(analytic.speedup_from_costs(E, k, td, t1, tv)), t1, tv, td


# ---- the pipeline ----------------------------------------------------------------------------
def _time_generation(target, drafters: dict, prompts: dict, settings: DemoSettings,
                    S: int, log, progress: bool):
    """Run and time every (temperature, drafter, K) on every kind of work; one row
    per run with its timings (medians over the rounds) and acceptance statistics."""
    import pandas as pd

    from specsim import decode

    rows = []
    prefill_cache: dict = {}

    def prefill_s(model, P_, S_):
        key = (model.cfg.name, P_, S_)
        if key not in prefill_cache:
            prefill_cache[key] = _prefill_time(model, P_, S_, max(3, settings.repeats))
        return prefill_cache[key]

    configs = [(temp, "autoregressive", None, 0) for temp in settings.temperatures]
    configs += [(temp, name, d, k) for temp in settings.temperatures
                for name, d in drafters.items() for k in settings.ks]
    iterator = configs
    if progress:
        from tqdm.auto import tqdm
        iterator = tqdm(configs, desc="generation", unit="config")
    def make_call(temp, d, k, ids, max_new):
        if d is None:
            return lambda: decode.generate_autoregressive(
                target, [ids], max_new, temperature=temp, seed=settings.seed,
                eos_token_id=None, cache_len=S)
        return lambda: decode.generate_speculative(
            target, d[0], [ids], max_new, k=k, temperature=temp, seed=settings.seed,
            eos_token_id=None, cache_len=S)

    # Compile every program first (one untimed call each, shared by every kind of work:
    # same padded prompt, cache and iteration buffer, fewer tokens), then time in rounds,
    # each round every (setting, kind) once in a fresh random order, so bursts of load on
    # this shared machine fall on baseline and speculative runs alike.
    warm_new = warmup_tokens(settings.max_new_tokens)
    t_phase = time.perf_counter()
    for temp, name, d, k in iterator:
        make_call(temp, d, k, prompts[settings.kinds[0]], warm_new)()
    log(f"    compiled {len(configs)} programs in {time.perf_counter() - t_phase:.0f} s")
    jobs = [(cfg_, kind) for cfg_ in configs for kind in settings.kinds]
    # The baseline is timed three times per round (it is cheap, and one baseline serves
    # every speculative run at its temperature, so its noise counts most).
    jobs += [(cfg_, kind) for cfg_ in configs if cfg_[2] is None
             for kind in settings.kinds] * 2
    samples: list[list[float]] = [[] for _ in jobs]
    results: list = [None] * len(jobs)
    order = np.random.default_rng(settings.seed)
    t_phase = time.perf_counter()
    for _ in range(settings.repeats):
        for i in order.permutation(len(jobs)):
            (temp, _, d, k), kind = jobs[i]
            call = make_call(temp, d, k, prompts[kind], settings.max_new_tokens)
            t0 = time.perf_counter()
            results[i] = call()
            samples[i].append(time.perf_counter() - t0)
    log(f"    timed {len(jobs)} runs x {settings.repeats} rounds in "
        f"{time.perf_counter() - t_phase:.0f} s")
    merged: dict = {}
    for i, job in enumerate(jobs):
        key = (job[0][0], job[0][1], job[0][3], job[1])
        if key in merged:
            merged[key][1].extend(samples[i])
        else:
            merged[key] = (i, list(samples[i]))
    for i, times in merged.values():
        ((temp, name, d, k), kind) = jobs[i]
        res, times = results[i], np.asarray(times)
        t_run = float(np.median(times))
        P_run, S_run = res.meta["padded_prompt"], res.meta["cache_len"]
        t_pre = prefill_s(target, P_run, S_run)
        draft_m = None if d is None else d[1]
        if draft_m is not None:
            t_pre += prefill_s(draft_m, P_run, S_run)
        row = dict(temperature=temp, drafter=name, k=k, kind=kind,
                   new_tokens=res.n_generated, iterations=res.n_iterations,
                   target_passes=res.target_passes, draft_passes=res.draft_passes,
                   time_s=t_run, time_spread_s=float(times.max() - times.min()),
                   prefill_s=t_pre, decode_s=t_run - t_pre, padded_prompt=P_run,
                   cache_len=S_run, text=(res.text[0] if res.text else ""))
        if res.stats is not None:
            alpha, rates = alpha_by_slot(res.stats.accepted, k)
            row.update(alpha=alpha, alpha_proposed=res.stats.alpha,
                       tokens_per_iteration=res.stats.tokens_per_iteration,
                       mean_overlap=res.stats.mean_overlap,
                       per_position=json.dumps([round(float(r), 4) for r in rates]))
        rows.append(row)
    return pd.DataFrame(rows)


def _add_predictions(runs, target, drafters: dict, sweeps, fits: dict):
    """Each speculative run's predicted speedups (fitted and swept costs) beside its
    measured speedup against the autoregressive baseline at its temperature."""
    import pandas as pd

    fit_t = fits[target.cfg.name]
    # The baseline's work does not depend on the text (same shapes, same number of
    # passes), so one baseline per temperature, the median decode time per token over
    # every kind and round, carries less of this machine's noise than one per kind.
    ar = runs[runs["drafter"] == "autoregressive"]
    base_rate = {t: float(np.median(g["decode_s"] / g["new_tokens"]))
                 for t, g in ar.groupby("temperature")}
    # (each row's decode_s is already the median of its rounds)
    preds = []
    for _, r in runs.iterrows():
        if r["drafter"] == "autoregressive":
            preds.append({})
            continue
        k = int(r["k"])
        dm = drafters[r["drafter"]][1]
        fit_d = None if dm is None else fits[dm.cfg.name]
        cfg_d = None if dm is None else dm.cfg
        rates = np.array(json.loads(r["per_position"]), float)
        E_iid = float(analytic.expected_tokens(r["alpha"], k))
        E_pos = float(analytic.expected_tokens_positional(np.nan_to_num(rates, nan=0.0)))
        s_iid, t1, tv, td = _predict(E_iid, k, fit_t, fit_d, target.cfg, cfg_d, r["cache_len"])
        s_pos = _predict(E_pos, k, fit_t, fit_d, target.cfg, cfg_d, r["cache_len"])[0]
        c = td / t1
        # The same closed form with the sweep's own medians instead of the fit: what is
        # left of the error is the loop and the finite run, not the roofline.
        m1 = _swept(sweeps, target.cfg.name, 1, r["cache_len"])
        mv = _swept(sweeps, target.cfg.name, k + 1, r["cache_len"])
        md = 0.0 if dm is None else _swept(sweeps, dm.cfg.name, 1, r["cache_len"])
        s_meas = float(analytic.speedup_from_costs(E_pos, k, md, m1, mv))
        measured = base_rate[r["temperature"]] / (r["decode_s"] / r["new_tokens"])
        accounted = r["iterations"] * (k * td + tv)
        preds.append(dict(E_iid=E_iid, E_positional=E_pos, c_fit=c, t_target_1=t1,
                          t_verify=tv, t_draft=td, t_target_1_swept=m1, t_verify_swept=mv,
                          t_draft_swept=md,
                          pred_speedup_iid=s_iid, pred_speedup_positional=s_pos,
                          pred_speedup_swept_costs=s_meas,
                          pred_speedup_constant_cost=float(analytic.speedup(r["alpha"], k, c)),
                          measured_speedup=measured,
                          loop_overhead_ratio=r["decode_s"] / accounted))
    return pd.concat([runs, pd.DataFrame(preds, index=runs.index)], axis=1)


def run_demo(settings: DemoSettings | None = None, *, log: Callable[[str], None] = print,
             progress: bool = True, target=None, draft_model=None) -> DemoResult:
    """Run the whole experiment; write ``settings.out_dir``; return a `DemoResult`."""
    import pandas as pd

    from specsim import bench, decode, fit, models, workloads

    settings = settings or DemoSettings()
    t_start = time.perf_counter()
    if target is None:
        target = models.load(settings.target)
    if settings.layer_loop:
        target = target.with_layer_loop(settings.layer_loop)
    if draft_model is None and settings.draft:
        draft_model = models.load(settings.draft)
    if draft_model is not None and settings.layer_loop:
        draft_model = draft_model.with_layer_loop(settings.layer_loop)
    drafters = build_drafters(target, settings, draft_model)
    env = bench.environment(model=target.cfg.name, dtype=target.cfg.dtype, seed=settings.seed,
                            layer_loop=target.cfg.layer_loop, demo=dataclasses.asdict(settings))
    log(f"specsim demo: target {target.cfg.name} ({target.cfg.n_params() / 1e6:.0f}M params, "
        f"{target.cfg.dtype}, layer loop {target.cfg.layer_loop}) on {env['devices']}; "
        f"drafters {list(drafters)}")

    # Prompts, and the cache size every run will use (so the sweep measures that context).
    tok = target.tokenizer
    prompts = {}
    for kind in settings.kinds:
        text = workloads.prompt_text(kind, tok)
        prompts[kind] = tok.encode(text) if tok is not None else list(
            np.random.default_rng(len(kind)).integers(3, target.cfg.vocab_size, 48))
    k_max = max(settings.ks)
    P = decode.bucket(max(len(p) for p in prompts.values()))
    S = decode.bucket(P + settings.max_new_tokens + k_max + 1)
    S = min(S, target.cfg.max_seq_len)

    # 1. ceilings, sweeps, fits --------------------------------------------------------------
    log("1/4 measuring the machine's ceilings and forward sweeps ...")
    ceilings = bench.measure_ceilings(matmul_size=1024 if settings.quick else 2048,
                                      copy_mib=128 if settings.quick else 256)
    base_ns = {1, 4, 16, 64} if settings.quick else {1, 2, 4, 8, 16, 32, 64}
    ns = sorted(base_ns | {k + 1 for k in settings.ks})
    points = [(n, 1, S) for n in ns] + [(1, 1, c) for c in (S // 2, 2 * S) if c >= 1]
    points += [(8, b, S) for b in ((2, 4) if settings.quick else (2, 4, 8))]
    sweep_models = {target.cfg.name: target}
    for name, (_, m) in drafters.items():
        if m is not None:
            sweep_models[m.cfg.name] = m
    sweeps, fits = [], {}
    for name, m in sweep_models.items():
        df = bench.sweep_forward(m, points, repeats=settings.sweep_repeats, warmup=1,
                                 progress=progress)
        sweeps.append(df)
        both = {kind: fit.fit_sweep(df, kind=kind, holdout=0.25, seed=settings.seed)
                for kind in fit.KINDS}
        for kind, f in both.items():
            log(f"    {name} ({kind}): t0 {f.t0 * 1e3:.2f} ms, P {f.peak_flops / 1e9:.1f} "
                f"GFLOP/s, W {f.bandwidth / 1e9:.1f} GB/s, R2 {f.r2:.3f}, held-out MAPE "
                f"{f.mape_heldout:.1f}%")
        # The prediction uses the form that predicts the held-out points better.
        fits[name] = min(both.values(), key=lambda f: f.mape_heldout)
    sweeps = pd.concat(sweeps, ignore_index=True)

    # 2-3. generation, then predictions -----------------------------------------------------
    log("2/4 running autoregressive and speculative generation ...")
    runs = _time_generation(target, drafters, prompts, settings, S, log, progress)
    log("3/4 predicting speedups from measured acceptance and fitted costs ...")
    runs = _add_predictions(runs, target, drafters, sweeps, fits)

    # 4. other hardware -----------------------------------------------------------------------
    log("4/4 predicting the same acceptance on datasheet hardware ...")
    hw_rows = _hardware_predictions(runs, target, drafters, settings, S, fits)

    result = DemoResult(settings, env, ceilings, sweeps, fits, runs, hw_rows)
    env["wall_s"] = round(time.perf_counter() - t_start, 1)
    from specsim import report
    result.files = report.write_demo(result, Path(settings.out_dir))
    log(report.summary_table(result))
    log(f"wrote {settings.out_dir}/ ({len(result.files)} files) in {env['wall_s']:.0f} s")
    return result


def _hardware_predictions(runs, target, drafters, settings, S, fits):
    """Speedup of each (drafter, temperature, K) at the mean measured α, on this machine
    (fitted rooflines) and on datasheet rows (roofline of the model's FLOPs and bytes in
    ``settings.hardware_dtype``, no fixed overhead)."""
    import pandas as pd

    from specsim import roofline

    spec = runs[runs["drafter"] != "autoregressive"]
    grouped = spec.groupby(["drafter", "temperature", "k"], as_index=False)["alpha"].mean()
    hws = [roofline.load_hardware(h) for h in settings.hardware]
    fit_t = fits[target.cfg.name]
    rows = []
    for _, g in grouped.iterrows():
        k = int(g["k"])
        dm = drafters[g["drafter"]][1]
        E = float(analytic.expected_tokens(g["alpha"], k))
        here = _predict(E, k, fit_t, None if dm is None else fits[dm.cfg.name], target.cfg,
                        None if dm is None else dm.cfg, S)[0]
        entries = [("this machine (fit)", here)]
        for hw in hws:
            def t(cfg, n, hw=hw):
                cost = roofline.forward_cost(cfg, 1, n, S, settings.hardware_dtype)
                return roofline.predict_time(hw, cost)
            td = 0.0 if dm is None else t(dm.cfg, 1)
            entries.append((hw.name, float(analytic.speedup_from_costs(
                E, k, td, t(target.cfg, 1), t(target.cfg, k + 1)))))
        for name, s in entries:
            rows.append(dict(drafter=g["drafter"], temperature=g["temperature"], k=k,
                             alpha=g["alpha"], hardware=name, pred_speedup=s))
    return pd.DataFrame(rows)


def enable_compilation_cache(path: str | Path | None = None) -> Path:
    """Keep XLA's compiled programs on disk (default ``~/.cache/specsim/jax``), so a second
    demo on this machine skips most compilation. Timings never include compilation."""
    import os

    import jax

    path = Path(path or os.environ.get("SPECSIM_JAX_CACHE",
                                       Path.home() / ".cache" / "specsim" / "jax"))
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    return path
