"""Timing done right, the machine's own ceilings, and forward-pass sweeps.

    stats = time_fn(f, x, repeats=10, warmup=2)         # median, spread, every sample
    ceil = measure_ceilings()                            # FLOP/s and bytes/s per device
    df = sweep_forward(model, points=default_points())   # latency vs (n_tokens, batch, context)
    save_measurements(df, "cpu-smollm2-135m", environment(model=model.name, seed=0))

Rules every number here follows: the program is compiled before the timed region; warm-up
calls run first; every call ends with ``block_until_ready``; we repeat and quote medians
(mean, std, min, max and quartiles are kept as the spread). Measurement files are CSV plus
a JSON sidecar holding one metadata record per run (jax/jaxlib versions, devices, dtype,
model, seed, git commit, date, host); rows carry the ``run_id`` that joins them. Both files
are written atomically (temporary file + ``os.replace``), and a re-run appends its rows.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from specsim import schema, validation
from specsim.errors import InvalidArgument
from specsim.resources import data_path
from specsim.roofline import forward_cost

RESULTS_DIR = Path("results")                  # what a user measures: under the working directory
MEASUREMENTS_DIR = RESULTS_DIR / "measurements"  # `specsim bench` writes here unless told --out
REFERENCE_DIR = data_path("measurements")      # the reference sweep, shipped with the package


# ---- timing --------------------------------------------------------------------------
@dataclass(frozen=True)
class TimingStats:
    """Seconds per call: median first, the spread next to it, every sample kept."""
    median: float
    mean: float
    std: float
    min: float
    max: float
    q25: float
    q75: float
    repeats: int
    warmup: int
    times: tuple[float, ...]

    @property
    def iqr(self) -> float:
        return self.q75 - self.q25

    @property
    def rel_iqr(self) -> float:
        """Interquartile range relative to the median (a unitless spread)."""
        return self.iqr / self.median

    def as_dict(self, prefix: str = "") -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "times"}
        d["iqr"] = self.iqr
        return {f"{prefix}{k}": v for k, v in d.items()}


def _check_counts(repeats, warmup) -> tuple[int, int]:
    return validation.positive_int("repeats", repeats), validation.nonnegative_int("warmup", warmup)


def _block(out):
    import jax

    return jax.block_until_ready(out)


def stats_from_times(times: Sequence[float], warmup: int = 0) -> TimingStats:
    t = np.asarray(times, float)
    if t.size == 0:
        raise InvalidArgument("times must hold at least one sample")
    q25, q50, q75 = np.percentile(t, [25, 50, 75])
    return TimingStats(median=float(q50), mean=float(t.mean()), std=float(t.std()),
                       min=float(t.min()), max=float(t.max()), q25=float(q25), q75=float(q75),
                       repeats=int(t.size), warmup=int(warmup), times=tuple(map(float, t)))


def time_calls(call: Callable[[], object], repeats: int = 10, warmup: int = 2) -> TimingStats:
    """Time a zero-argument callable (which may carry state between calls, e.g. a donated
    KV cache fed back). Its result is blocked on inside the timed region."""
    repeats, warmup = _check_counts(repeats, warmup)
    for _ in range(warmup):
        _block(call())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _block(call())
        times.append(time.perf_counter() - t0)
    return stats_from_times(times, warmup)


def time_fn(fn: Callable, *args, repeats: int = 10, warmup: int = 2, **kwargs) -> TimingStats:
    """Time ``fn(*args, **kwargs)``: ``warmup`` untimed calls (the first one compiles a
    jitted ``fn``), then ``repeats`` timed calls each ending in ``block_until_ready``.
    Pass an already compiled function to keep compilation out of the warm-up as well."""
    return time_calls(lambda: fn(*args, **kwargs), repeats=repeats, warmup=warmup)


def interleaved_rounds(calls: Sequence[Callable[[], object]], rounds: int, rng, *,
                       warmup: int = 0, inner: int = 1,
                       on_call: Callable[[int], None] | None = None,
                       progress: str | None = None,
                       clock: Callable[[], float] = time.perf_counter
                       ) -> tuple[list[list[float]], list]:
    """Time already compiled zero-argument ``calls`` in ``rounds`` rounds, each round
    every call in a fresh order drawn from ``rng`` (a `numpy.random.Generator`), and
    drop the first ``warmup`` rounds. On a shared machine a burst of load then falls on
    every call alike, so ratios between calls stay fair.

    Each turn runs a call ``inner`` times back to back and keeps the fastest: another
    process on a shared machine only ever adds to a call's time, so the least of a few
    runs of the same work is its cost with the least interference (Python's ``timeit``
    reasons the same way); the rounds still pair the calls. A ``clock`` that reads
    several clocks at once (an array: wall and CPU time) keeps the least of each.

    Returns ``(samples, outputs)``: ``samples[i]`` the seconds of call i in the kept
    rounds, ``outputs[i]`` its last result (blocked on inside the timed region).
    ``on_call(i)`` runs after every turn; ``progress`` (a label) shows a tqdm bar over
    all rounds × calls with the time elapsed and remaining (every round times the same
    calls, so the rate of the rounds so far predicts the rest well). ``clock``: the
    timer (`time.process_time` counts this process's CPU time, which time-slicing by
    other processes on a shared machine does not inflate). A call with a ``prepare``
    method (`specsim.decode.StagedCall`) has it run just before its timed region, with
    ``copies=inner`` where ``inner`` > 1 (one prepared state per run), so only the rest
    of the call is timed."""
    rounds = validation.positive_int("rounds", rounds)
    warmup = validation.nonnegative_int("warmup", warmup)
    inner = validation.positive_int("inner", inner)
    if warmup >= rounds:
        raise InvalidArgument(f"warmup must be below rounds ({rounds}) (got {warmup})")
    samples: list[list[float]] = [[] for _ in calls]
    outputs: list = [None] * len(calls)
    bar = _bar(progress, rounds * len(calls))
    try:
        for r in range(rounds):
            for i in rng.permutation(len(calls)):
                prepare = getattr(calls[i], "prepare", None)
                if prepare is not None:          # a `decode.StagedCall`: untimed setup
                    prepare(**({"copies": inner} if inner > 1 else {}))
                runs = []
                for _ in range(inner):
                    t0 = clock()
                    outputs[i] = _block(calls[i]())
                    runs.append(clock() - t0)
                if r >= warmup:           # the least run, by each reading of the clock
                    samples[i].append(runs[0] if inner == 1 else np.min(runs, axis=0))
                if on_call is not None:
                    on_call(int(i))
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix_str(f"round {r + 1}/{rounds}", refresh=False)
    finally:
        if bar is not None:
            bar.close()
    return samples, outputs


def _bar(label: str | None, total: int):
    """A tqdm bar (elapsed < remaining, rate) labelled ``label``; None without a label."""
    if not label:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=label, unit="run")


# ---- metadata ------------------------------------------------------------------------
def _git_commit(repo: Path | None = None) -> str:
    """The commit of the checkout specsim is imported from (``+dirty`` when ``specsim/``
    has uncommitted changes); "unknown" for an installed package or without git."""
    repo = Path(__file__).resolve().parents[1] if repo is None else Path(repo)
    if not (repo / ".git").exists():
        return "unknown"
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        commit = out.stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "specsim"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (commit + ("+dirty" if dirty else "")) if commit else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(**extra) -> dict:
    """Where and with what a number was measured: jax/jaxlib versions, devices, host, CPU,
    git commit, UTC date, ``XLA_FLAGS`` and the compiler options specsim's programs were
    compiled with (`specsim.models.compiler.options`); ``extra`` (model, dtype, seed,
    ...) is merged in."""
    import jax
    import jaxlib

    from specsim.models import compiler

    meta = {
        "run_id": uuid.uuid4().hex[:12],
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "backend": jax.default_backend(),
        "devices": [f"{d.platform}:{d.device_kind}" for d in jax.devices()],
        "hostname": socket.gethostname(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "git_commit": _git_commit(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "compiler_options": compiler.options(),
    }
    meta.update(extra)
    return meta


# ---- ceilings ------------------------------------------------------------------------
CEILING_COPY_MIB = 1024
"""The demo's copy ceiling buffer: larger than any cache, so the copy reads memory, not a
cache other tenants of the host share (docs/measurement.md, "The machine's state")."""


def measure_ceilings(devices=None, *, matmul_size: int = 2048, copy_mib: int = 256,
                     dtype: str = "float32", repeats: int = 5, warmup: int = 2):
    """The machine's own ceilings, per device: a square matmul of ``matmul_size`` (FLOP/s,
    counting 2·n³) and an elementwise ``y = x + 1`` over ``copy_mib`` MiB (bytes/s,
    counting the read and the write). Returns a DataFrame, one row per device."""
    import jax
    import jax.numpy as jnp
    import pandas as pd

    validation.positive_int("matmul_size", matmul_size, minimum=16)
    validation.positive_int("copy_mib", copy_mib)
    dt = jnp.dtype(dtype)
    rows = []
    for dev in devices or jax.devices():
        key = jax.random.PRNGKey(0)
        a = jax.device_put(jax.random.normal(key, (matmul_size, matmul_size), dt), dev)
        b = jax.device_put(jax.random.normal(jax.random.fold_in(key, 1),
                                             (matmul_size, matmul_size), dt), dev)
        mm = jax.jit(jnp.matmul).lower(a, b).compile()
        t_mm = time_fn(mm, a, b, repeats=repeats, warmup=warmup)
        # In place (donated and fed back): a fresh output buffer per call would time the
        # kernel's first-touch page faults, not the memory bandwidth.
        n_elem = copy_mib * 2**20 // dt.itemsize
        cp = jax.jit(lambda v: v + 1, donate_argnums=0).lower(
            jax.ShapeDtypeStruct((n_elem,), dt)).compile()
        buf = {"x": jax.device_put(jnp.ones((n_elem,), dt), dev)}

        def copy_call():
            buf["x"] = cp(buf["x"])
            return buf["x"]

        t_cp = time_calls(copy_call, repeats=repeats, warmup=warmup)
        rows.append({
            "device": str(dev), "platform": dev.platform, "device_kind": dev.device_kind,
            "dtype": dt.name,
            "matmul_size": matmul_size, "matmul_flops": 2.0 * matmul_size**3,
            "matmul_flops_per_s": 2.0 * matmul_size**3 / t_mm.median,
            **t_mm.as_dict("matmul_"),
            "copy_bytes": 2.0 * n_elem * dt.itemsize,
            "copy_bytes_per_s": 2.0 * n_elem * dt.itemsize / t_cp.median,
            **t_cp.as_dict("copy_"),
        })
    return pd.DataFrame(rows)


# ---- forward sweeps ------------------------------------------------------------------
def default_points(quick: bool = False) -> list[tuple[int, int, int]]:
    """(n_tokens, batch, context) points along three axes through a base point (not the
    full grid): tokens per pass 1..256 at batch 1, context 256; batch 1..32 at 8 tokens;
    context 128..4096 at 1 and 16 tokens. The long axes reach well into the compute-bound
    regime, so latencies span more than a decade and the fit sees both ceilings.
    ``quick`` keeps a coarser subset."""
    if quick:
        ns, bs, cs, base_n = (1, 4, 16, 64), (1, 4), (128, 2048), (1, 16)
    else:
        ns = (1, 2, 4, 8, 16, 32, 64, 128, 256)
        bs, cs, base_n = (1, 2, 4, 8, 16, 32), (128, 512, 1024, 2048, 4096), (1, 16)
    pts = {(n, 1, 256) for n in ns}
    pts |= {(8 if not quick else 16, b, 256) for b in bs}
    for n in base_n:
        pts |= {(n, 1, c) for c in cs}
    return sorted(pts, key=lambda p: (p[1] * p[0], p[2], p[0]))


def _check_points(points) -> list[tuple[int, int, int]]:
    out = []
    for p in points:
        try:
            n, b, c = (int(v) for v in p)
        except (TypeError, ValueError):
            raise InvalidArgument(f"points must be (n_tokens, batch, context) triples, got {p!r}") from None
        if n < 1 or b < 1 or c < n:
            raise InvalidArgument(f"point {p!r}: need n_tokens >= 1, batch >= 1, context >= n_tokens")
        out.append((n, b, c))
    if not out:
        raise InvalidArgument("points must hold at least one (n_tokens, batch, context) triple")
    return out


LOGITS = ("all", "last", "none")


def make_forward_call(model, n_tokens: int, batch: int, context: int, *, seed: int = 0,
                      device=None, logits: str = "all"):
    """A compiled one-pass call for timing, and its compile time in seconds.

    The parameters are laid out for ``cfg.layer_loop`` (`arrange_layers`). The cache has
    ``context`` slots with ``length = context - n_tokens`` (so the new tokens
    fill the last slots); it is donated and fed back, and ``length`` is reset inside the
    compiled program, so every call does the same work on the same buffers.

    ``logits``: which positions go through the output head. "all" (a forward pass, as
    the sweeps time it), "last" (a prefill as `specsim.decode` runs the target's: the
    head at one position) or "none" (a draft model's prefill, whose logits the run
    never computes; the call returns the last position's features). For SmolLM2's
    layer-skip draft at 32 prompt tokens the head over all of them is a quarter of the
    pass (docs/studies/prefill-timing.md)."""
    import jax
    import jax.numpy as jnp

    from specsim.models import compiler
    from specsim.models.transformer import (KVCache, arrange_layers, forward_hidden,
                                            init_cache, project)

    validation.choice("logits", logits, LOGITS)
    cfg = model.cfg
    dev = device or jax.devices()[0]
    # time the layer layout the configured loop runs fastest on (random presets come
    # stacked; a stacked model under layer_loop="unroll" would time the scan fallback)
    params = jax.device_put(arrange_layers(model.params, cfg), dev)
    rng = np.random.default_rng(seed)
    tokens = jax.device_put(jnp.asarray(rng.integers(0, cfg.vocab_size, (batch, n_tokens)),
                                        jnp.int32), dev)
    cache = init_cache(cfg, batch, context)
    cache = jax.device_put(cache._replace(
        length=jnp.full((batch,), context - n_tokens, jnp.int32)), dev)

    def step(params, tokens, cache):
        h, new = forward_hidden(params, cfg, tokens, cache)
        out = (project(params, cfg, h) if logits == "all" else
               project(params, cfg, h[:, -1:]) if logits == "last" else h[:, -1])
        return out, KVCache(new.k, new.v, cache.length)

    t0 = time.perf_counter()
    compiled = compiler.jit(step, donate_argnums=(2,)).lower(params, tokens, cache).compile()
    compile_s = time.perf_counter() - t0
    state = {"cache": cache}

    def call():
        logits, state["cache"] = compiled(params, tokens, state["cache"])
        return logits

    return call, compile_s


def sweep_forward(model, points: Iterable | None = None, *, repeats: int = 7,
                  warmup: int = 2, seed: int = 0, device=None, progress: bool = True,
                  quick: bool = False, interleave: bool = True):
    """Time one forward pass of ``model`` at every (n_tokens, batch, context) point
    (default `default_points(quick)`). Returns a DataFrame: the point, the median and
    spread of the latency, the compile time, and the model's FLOPs and bytes from
    `specsim.roofline.forward_cost` (context = cache slots read).

    ``interleave`` (default): compile every point first, then run ``warmup + repeats``
    rounds, each timing every point once in a fresh seeded random order, and discard the
    warm-up rounds. On a shared machine a burst of load from other processes then lands on
    all points alike instead of on whichever point happened to be running, so ratios
    between points stay fair. ``interleave=False`` times the points one after another."""
    import warnings

    import pandas as pd

    pts = _check_points(default_points(quick) if points is None else points)
    repeats, warmup = _check_counts(repeats, warmup)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        total = len(pts) * (1 + (warmup + repeats if interleave else 0))
        bar = tqdm(total=total, desc=f"sweep {model.cfg.name}", unit="pass")
    stats, compile_times = [], []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*donated buffers.*")
        if interleave:
            calls = []
            for n, b, c in pts:
                call, compile_s = make_forward_call(model, n, b, c, seed=seed, device=device)
                calls.append(call)
                compile_times.append(compile_s)
                if bar is not None:
                    bar.update(1)
            tick = None if bar is None else (lambda i: bar.update(1))
            samples, _ = interleaved_rounds(calls, warmup + repeats,
                                            np.random.default_rng(seed), warmup=warmup,
                                            on_call=tick)
            del calls
            stats = [stats_from_times(s, warmup) for s in samples]
        else:
            for n, b, c in pts:
                call, compile_s = make_forward_call(model, n, b, c, seed=seed, device=device)
                compile_times.append(compile_s)
                stats.append(time_calls(call, repeats=repeats, warmup=warmup))
                if bar is not None:
                    bar.update(1)
    if bar is not None:
        bar.close()
    rows = []
    for (n, b, c), st, compile_s in zip(pts, stats, compile_times):
        cost = forward_cost(model.cfg, b, n, c)
        rows.append({schema.MODEL: model.cfg.name, "dtype": model.cfg.dtype, schema.N_TOKENS: n,
                     schema.BATCH: b, schema.CONTEXT: c, schema.TIME_S: st.median,
                     **st.as_dict("time_"), "compile_s": compile_s, schema.FLOPS: cost.flops,
                     schema.BYTES: cost.bytes, "interleaved": bool(interleave)})
    return pd.DataFrame(rows).drop(columns=["time_median"])


# ---- files ---------------------------------------------------------------------------
def _atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never a
    part: write a temporary file in the same folder, flush and fsync it, then os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def measurement_paths(name: str, directory: Path | str = MEASUREMENTS_DIR) -> tuple[Path, Path]:
    if not name or any(ch in name for ch in "/\\") or name.startswith("."):
        raise InvalidArgument(f"name must be a plain file stem (no slashes), got {name!r}")
    d = Path(directory)
    return d / f"{name}.csv", d / f"{name}.json"


def save_measurements(df, name: str, metadata: dict, directory: Path | str = MEASUREMENTS_DIR
                      ) -> tuple[Path, Path]:
    """Append ``df`` (tagged with ``metadata['run_id']``) to ``<directory>/<name>.csv`` and
    the metadata record to ``<name>.json`` (a list of runs). Existing rows are kept; each
    file is replaced atomically."""
    import pandas as pd

    if "run_id" not in metadata:
        raise InvalidArgument("metadata must carry a run_id (see environment())")
    csv_path, json_path = measurement_paths(name, directory)
    new = df.copy()
    new.insert(0, "run_id", metadata["run_id"])
    if csv_path.exists():
        new = pd.concat([pd.read_csv(csv_path), new], ignore_index=True)
    runs = json.loads(json_path.read_text()) if json_path.exists() else []
    runs = [r for r in runs if r.get("run_id") != metadata["run_id"]] + [metadata]
    _atomic_write_text(csv_path, new.to_csv(index=False))
    _atomic_write_text(json_path, json.dumps(runs, indent=1, default=str) + "\n")
    return csv_path, json_path


def load_measurements(name_or_path, directory: Path | str = MEASUREMENTS_DIR, run_id=None):
    """A measurement CSV as a DataFrame; the runs' metadata in ``df.attrs['runs']``.
    ``run_id`` ("last" or an id) keeps one run."""
    import pandas as pd

    p = Path(name_or_path)
    csv_path = p if p.suffix == ".csv" else measurement_paths(str(name_or_path), directory)[0]
    if p.suffix != ".csv" and not csv_path.exists():     # a stem of the reference sweep
        csv_path = measurement_paths(str(name_or_path), REFERENCE_DIR)[0]
    if not csv_path.exists():
        raise InvalidArgument(f"no measurement file {csv_path}")
    df = pd.read_csv(csv_path)
    json_path = csv_path.with_suffix(".json")
    runs = json.loads(json_path.read_text()) if json_path.exists() else []
    if run_id is not None:
        rid = df["run_id"].iloc[-1] if run_id == "last" else run_id
        if rid not in set(df["run_id"]):
            raise InvalidArgument(f"run_id {run_id!r} not in {csv_path}")
        df = df[df["run_id"] == rid].reset_index(drop=True)
        runs = [r for r in runs if r.get("run_id") == rid]
    df.attrs["runs"] = runs
    return df


# ---- choosing data on purpose ------------------------------------------------------------
REFERENCE_SWEEP = "cpu-smollm2-135m"      # the reference sweep's stem in REFERENCE_DIR
SWEEP_COLUMNS = ("n_tokens", "batch", "context", "time_s")


@dataclass(frozen=True, eq=False)
class ChosenSweep:
    """One run of one model's forward sweep, where it came from, and the ceilings
    measured with it (None when the sweep has no ceilings file beside it)."""
    df: object              # pandas DataFrame: that run's points
    path: Path
    source: str             # "results" (the user's own), "reference", or "named"
    model: str
    run_id: str | None
    ceilings: object = None  # pandas DataFrame of the same run's ceilings, or None

    def describe(self) -> str:
        where = {"results": "your own results", "reference": "the reference sweep",
                 "named": "the sweep you named"}[self.source]
        run = f", run {self.run_id}" if self.run_id else ""
        return f"{where}: {self.path} ({len(self.df)} points of {self.model}{run})"


def _is_sweep(path: Path) -> bool:
    import pandas as pd

    if path.name.endswith("ceilings.csv"):
        return False
    try:
        return set(SWEEP_COLUMNS) <= set(pd.read_csv(path, nrows=0).columns)
    except (OSError, ValueError):
        return False


def sweep_candidates(*, results_dir: Path | str | None = None) -> list[tuple[str, Path]]:
    """Sweep files in the order `choose_sweep` tries them: the user's own under
    ``results_dir`` (default ``results/`` under the working directory; newest file
    first), then the reference sweep shipped with the package
    (``specsim/data/measurements/<REFERENCE_SWEEP>.csv``)."""
    root = Path(RESULTS_DIR if results_dir is None else results_dir)
    own = sorted((p for p in root.rglob("*.csv") if _is_sweep(p)) if root.is_dir() else (),
                 key=lambda p: p.stat().st_mtime, reverse=True)
    out = [("results", p) for p in own]
    reference = measurement_paths(REFERENCE_SWEEP, REFERENCE_DIR)[0]
    if reference.is_file():
        out.append(("reference", reference))
    return out


def _one_run(df, model: str | None):
    """The rows of ``model`` (default: the file's first model) from the file's newest run."""
    if "model" in df:
        model = model or str(df["model"].iloc[0])
        df = df[df["model"] == model]
    run_id = None
    if "run_id" in df and len(df):
        run_id = str(df["run_id"].iloc[-1])
        df = df[df["run_id"].astype(str) == run_id]
    return df.reset_index(drop=True), model, run_id


def _ceilings_for(path: Path, run_id: str | None):
    import pandas as pd

    for cand in (path.with_name(f"{path.stem}-ceilings.csv"), path.with_name("ceilings.csv")):
        if cand.is_file():
            ceil = pd.read_csv(cand)
            if "run_id" in ceil and len(ceil):
                rid = run_id if run_id in set(ceil["run_id"].astype(str)) else \
                    str(ceil["run_id"].iloc[-1])
                ceil = ceil[ceil["run_id"].astype(str) == rid].reset_index(drop=True)
            return ceil
    return None


def _named_sweep(name: str, results_dir: Path | str | None) -> Path:
    root = Path(RESULTS_DIR if results_dir is None else results_dir)
    stem = Path(name).stem
    for cand in (Path(name), root / "measurements" / f"{stem}.csv",
                 REFERENCE_DIR / f"{stem}.csv"):
        if cand.is_file():
            return cand
    raise ValueError(f"name {name!r}: no such sweep file (looked for the path, and for "
                     f"{stem}.csv in {root / 'measurements'} and {REFERENCE_DIR})")


def choose_sweep(model: str | None = None, *, name: str | None = None,
                 results_dir: Path | str | None = None) -> ChosenSweep:
    """The forward sweep to fit, chosen on purpose: ``name`` (a path or a file stem)
    when given; else the user's own newest sweep under ``results/`` holding ``model``;
    else the reference sweep. One model and the file's newest run; the ceilings
    measured beside it come along for `specsim.fit.ceiling_bounds`."""
    import pandas as pd

    if name is not None:
        path = _named_sweep(name, results_dir)
        tried = [("named", path)]
    else:
        tried = sweep_candidates(results_dir=results_dir)
    for source, path in tried:
        df, chosen_model, run_id = _one_run(pd.read_csv(path), model)
        if len(df) and (model is None or chosen_model == model):
            df.attrs["runs"] = [r for r in _runs(path) if run_id is None
                                or str(r.get("run_id")) == run_id]
            return ChosenSweep(df=df, path=path, source=source, model=chosen_model,
                               run_id=run_id, ceilings=_ceilings_for(path, run_id))
    looked = ", ".join(str(p) for _, p in tried) or "nothing"
    raise ValueError(f"no sweep of model {model or 'any'!r} (looked at: {looked}); measure "
                     f"one with `specsim bench --model {model or 'smollm2-135m'} "
                     f"--out results/measurements`")


def _runs(path: Path) -> list:
    meta = path.with_suffix(".json")
    try:
        return json.loads(meta.read_text()) if meta.is_file() else []
    except json.JSONDecodeError:
        return []
