"""Fit roofline parameters to measured forward latencies, and (alpha, c) to a measured
speedup-vs-K curve.

Roofline (``kind="max"``), for a pass with F FLOPs and B bytes (from
`specsim.roofline.forward_cost`, so t is a function of tokens per pass, batch and
context)::

    t = t0 + max(F / P, B / W)

Smooth variant (``kind="smooth"``): the max replaced by a p-norm blend, which tends to
the max as p grows and to the sum (no overlap) at p = 1::

    t = t0 + ((F / P)**p + (B / W)**p) ** (1 / p),   p = 1 + exp(theta)

Fitting: scipy.optimize.least_squares on the log of time (so every point weighs by its
relative error; latencies span orders of magnitude), over log-parameters (so t0, P, W stay
positive), from several starts. Standard errors come from the Jacobian at the optimum,
cov = s² (JᵀJ)⁺ with s² = residual sum of squares / (points - parameters), and are mapped to
the natural parameters by the delta method (se(P) = P · se(log P)); a parameter the data
cannot see (e.g. P when every point is memory-bound) gets a huge or infinite error.

What a fit will not print as a result (`RooflineFit.unidentified`, `.at_bound`,
`.degenerate`):

* bounds: the ceilings may be capped by what was measured on the machine
  (``max_peak_flops``: the matmul ceiling, ``max_bandwidth``: the copy ceiling; see
  `ceiling_bounds`): a fitted bandwidth above the measured copy ceiling is a bug, not a
  result. A parameter that ends on its cap is listed in ``at_bound``.
* identification: a parameter whose standard error is infinite, undefined, or larger
  than ``MAX_RELATIVE_SE`` times its value is *unidentified*: its error is NaN (never
  inf) and `summary` says "unidentified" instead of "± inf".
* degenerate forms: t0 below ``T0_NEGLIGIBLE`` of the fastest pass (no fixed cost
  resolved), the smooth form's p on a bound of ``P_RANGE`` (p -> 1: compute and memory
  time add; p large: the max form), a ceiling on its cap.
* quality: R² (linear time, fitted points) below ``MIN_R2`` warns with `PoorFitWarning`.

Held-out split: a seeded random ``holdout`` fraction of the points (default 25%, seed 0,
at least one point) is left out of the fit; MAPE is reported on it (``mape_heldout``) and
on the fitted points. R² is computed on the fitted points in linear time (``r2``) and in
log time (``r2_log``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from specsim import analytic

KINDS = ("max", "smooth")
MIN_R2 = 0.95            # a fit below this R² (linear time, fitted points) warns
MAX_RELATIVE_SE = 1.0    # standard error above this fraction of the value: unidentified
T0_NEGLIGIBLE = 1e-3     # t0 below this fraction of the fastest pass: degenerate (t0 ≈ 0)
P_RANGE = (1.0 + 1e-3, 65.0)   # the smooth form's blend exponent is fitted inside this
PARAMS = ("t0", "peak_flops", "bandwidth", "p")


class PoorFitWarning(UserWarning):
    """A fit whose R² is below `MIN_R2`: its parameters do not describe the data."""


def _warn_if_poor(r2: float, what: str) -> None:
    if math.isfinite(r2) and r2 < MIN_R2:
        warnings.warn(PoorFitWarning(
            f"{what}: R² {r2:.3f} is below {MIN_R2} (specsim.fit.MIN_R2); the fitted "
            f"parameters do not describe these measurements; do not predict from them"),
            stacklevel=3)


# ---- checks --------------------------------------------------------------------------
def _positive_array(values, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite: found NaN or inf at positions "
                         f"{np.flatnonzero(~np.isfinite(arr))[:10].tolist()}")
    if np.any(arr <= 0):
        raise ValueError(f"{name} must be positive: found values <= 0 at positions "
                         f"{np.flatnonzero(arr <= 0)[:10].tolist()}")
    return arr


def _r2(y, yhat) -> float:
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - float(np.sum((y - yhat) ** 2)) / ss_tot if ss_tot > 0 else math.nan


def _mape(y, yhat) -> float:
    return float(np.mean(np.abs(yhat - y) / y) * 100) if y.size else math.nan


def _stderr(jac: np.ndarray, resid: np.ndarray) -> np.ndarray:
    """Standard errors of the fitted (transformed) parameters; inf where the data carry
    no information (callers turn that into "unidentified", never print it)."""
    m, n = jac.shape
    if m <= n:
        return np.full(n, math.inf)
    s2 = float(resid @ resid) / (m - n)
    cov = np.linalg.pinv(jac.T @ jac) * s2
    se = np.sqrt(np.clip(np.diag(cov), 0, None))
    # A column of zeros (a parameter no point depends on) has no information.
    se[np.all(jac == 0, axis=0)] = math.inf
    return se


# ---- roofline --------------------------------------------------------------------------
def roofline_time(flops, bytes_, t0, peak_flops, bandwidth, p=math.inf):
    """t0 + max(F/P, B/W) (p = inf) or t0 + ((F/P)^p + (B/W)^p)^(1/p)."""
    a = np.asarray(flops, float) / peak_flops
    b = np.asarray(bytes_, float) / bandwidth
    if math.isinf(p):
        return t0 + np.maximum(a, b)
    hi = np.maximum(a, b)
    return t0 + hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)


@dataclass(frozen=True)
class RooflineFit:
    """A fitted roofline: parameters, their standard errors, and the fit's quality."""
    kind: str
    t0: float                  # seconds: fixed cost of one pass
    peak_flops: float          # FLOP/s: effective compute ceiling
    bandwidth: float           # bytes/s: effective memory ceiling (relative to forward_cost bytes)
    p: float                   # blend exponent (inf for kind="max")
    t0_se: float
    peak_flops_se: float
    bandwidth_se: float
    p_se: float
    r2: float                  # fitted points, linear time
    r2_log: float              # fitted points, log time
    mape_train: float          # per cent
    mape_heldout: float        # per cent (nan when holdout=0)
    n_train: int
    n_heldout: int
    heldout_index: tuple[int, ...]
    seed: int
    holdout: float
    # What the data could not determine (names from PARAMS; their *_se are NaN), which
    # parameters ended on a measured cap, and plain-language notes on degenerate forms.
    unidentified: tuple[str, ...] = ()
    at_bound: tuple[str, ...] = ()
    degenerate: tuple[str, ...] = ()
    max_peak_flops: float | None = None     # the caps the fit was held under (FLOP/s)
    max_bandwidth: float | None = None      # (bytes/s)

    @property
    def identified(self) -> bool:
        """Every parameter determined, none on a cap, R² at least MIN_R2."""
        return not (self.unidentified or self.at_bound) and self.r2 >= MIN_R2

    @property
    def n_params(self) -> int:
        return 3 if self.kind == "max" else 4

    def predict(self, flops, bytes_):
        """Predicted seconds for passes of ``flops`` FLOPs and ``bytes_`` bytes."""
        t = roofline_time(flops, bytes_, self.t0, self.peak_flops, self.bandwidth, self.p)
        return float(t) if np.ndim(t) == 0 else t

    def predict_forward(self, cfg, n_tokens, batch=1, context=None, dtype=None):
        """Predicted seconds of a forward pass of ``cfg`` (broadcast over the arguments)."""
        from specsim.roofline import forward_costs

        ctx = n_tokens if context is None else context
        fl, by = forward_costs(cfg, n_tokens, batch, ctx, dtype)
        return self.predict(fl if fl.ndim else float(fl), by if by.ndim else float(by))

    def to_hardware(self, name: str = "fitted", dtype: str = "float32", source: str = "fit"):
        """The fitted ceilings as a `specsim.roofline.Hardware` (t0 is kept here, not
        there: pass ``overhead=fit.t0`` to `predict_time`)."""
        from specsim.roofline import Hardware

        return Hardware(name=name, peak_flops=((dtype, self.peak_flops),),
                        bandwidth=self.bandwidth, source=source, kind="fitted",
                        flops_basis="measured",
                        notes=f"t0={self.t0:.3g}s, R2={self.r2:.3f}, "
                              f"held-out MAPE={self.mape_heldout:.1f}%")

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def _param_line(self, name: str, label: str, scale: float, unit: str) -> str:
        value = getattr(self, name) / scale
        head = f"  {label:<9} = "
        if name in self.at_bound:
            cap = {"peak_flops": self.max_peak_flops, "bandwidth": self.max_bandwidth}.get(name)
            where = "the measured ceiling" if cap is not None else "a bound of its range"
            return head + f"{value:10.4g} {unit:<8} at {where} (the data push past it)"
        if name in self.unidentified:
            if name == "t0" and any(n.startswith("t0") for n in self.degenerate):
                return head + f"{'≈ 0':>10} {unit:<8} unidentified (no fixed cost resolved)"
            return head + f"{'unidentified':>10}          (best value {value:.3g} {unit}; " \
                          f"the points do not determine it)"
        return head + f"{value:10.4g} {unit:<8} ± {getattr(self, name + '_se') / scale:.2g}"

    def summary(self) -> str:
        lines = [f"roofline fit ({self.kind}) on {self.n_train} points, {self.n_heldout} held out",
                 self._param_line("t0", "t0", 1e-3, "ms"),
                 self._param_line("peak_flops", "peak", 1e9, "GFLOP/s"),
                 self._param_line("bandwidth", "bandwidth", 1e9, "GB/s")]
        if self.kind == "smooth":
            lines.append(self._param_line("p", "p", 1.0, ""))
        lines += [f"  R² = {self.r2:.4f} (log time: {self.r2_log:.4f})",
                  f"  MAPE: fitted {self.mape_train:.2f}%, held out {self.mape_heldout:.2f}%"]
        lines += [f"  degenerate: {note}" for note in self.degenerate]
        if self.r2 < MIN_R2:
            lines.append(f"  WARNING: R² {self.r2:.3f} below {MIN_R2}: this fit does not "
                         f"describe the measurements; do not predict from it")
        return "\n".join(lines)


def _split(m: int, holdout: float, seed: int, n_params: int) -> tuple[np.ndarray, np.ndarray]:
    if not (0 <= holdout < 1):
        raise ValueError(f"holdout must be a fraction in [0, 1), got {holdout!r}")
    n_test = 0 if holdout == 0 else max(1, int(round(holdout * m)))
    if m - n_test < n_params:
        raise ValueError(
            f"times: {m} points, {n_test} held out, leave {m - n_test} to fit {n_params} "
            f"parameters; measure more points or lower holdout")
    perm = np.random.default_rng(seed).permutation(m)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def _cap(value, name: str) -> float | None:
    if value is None:
        return None
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a positive finite number or None, got {value!r}")
    return v


def _solve(resid, x0s, upper: np.ndarray, n_params: int):
    """Multi-start least squares in log-parameters under the upper bounds ``upper``."""
    lower = np.full(upper.shape, -np.inf)
    if n_params == 4:
        lower[3] = math.log(P_RANGE[0] - 1.0)
    best = None
    for x0 in x0s:
        x0 = np.clip(np.asarray(x0, float), lower + 1e-9, upper - 1e-9)
        r = least_squares(resid, x0, method="trf", x_scale=1.0, bounds=(lower, upper),
                          max_nfev=2000 * n_params)
        if best is None or r.cost < best.cost:
            best = r
    return best, lower


def _assess(values: dict, se_nat: np.ndarray, theta, lower, upper, t_min: float,
            kind: str) -> tuple[dict, tuple, tuple, tuple]:
    """Standard errors (NaN where unidentified), and the unidentified, at-bound and
    degenerate parameters of a fit (see the module docstring)."""
    names = PARAMS[: len(theta)]
    se, unidentified, at_bound, degenerate = {}, [], [], []
    for i, name in enumerate(names):
        on_upper = math.isfinite(upper[i]) and theta[i] >= upper[i] - 1e-6
        on_lower = math.isfinite(lower[i]) and theta[i] <= lower[i] + 1e-6
        value = values[name] - (1.0 if name == "p" else 0.0)   # se of p is that of p - 1
        ok = math.isfinite(se_nat[i]) and se_nat[i] <= MAX_RELATIVE_SE * abs(value)
        if on_upper or on_lower:
            at_bound.append(name)
        elif not ok:
            unidentified.append(name)
        se[name] = float(se_nat[i]) if ok and not (on_upper or on_lower) else math.nan
    if values["t0"] < T0_NEGLIGIBLE * t_min:
        degenerate.append(f"t0 ≈ 0 ({values['t0'] * 1e3:.2g} ms, below {T0_NEGLIGIBLE:g} of the "
                          f"fastest pass): the form resolves no fixed cost")
        if "t0" not in unidentified:
            unidentified.append("t0")
            se["t0"] = math.nan
    for name, what in (("peak_flops", "compute"), ("bandwidth", "memory")):
        if name in at_bound:
            degenerate.append(f"{name} on its measured cap: the {what} term wants a higher "
                              f"ceiling than this machine reached")
    if kind == "smooth" and "p" in at_bound:
        low = values["p"] < 2
        degenerate.append(f"p at {values['p']:.4g}, the {'lower' if low else 'upper'} end of "
                          f"{P_RANGE}: " + ("compute and memory time add (no overlap)" if low
                                            else "the blend is the max form"))
    return se, tuple(unidentified), tuple(at_bound), tuple(degenerate)


def fit_roofline(flops, bytes_, times, *, kind: str = "max", holdout: float = 0.25,
                 seed: int = 0, max_peak_flops: float | None = None,
                 max_bandwidth: float | None = None) -> RooflineFit:
    """Fit t = t0 + max(F/P, B/W) (or the smooth blend) to measured ``times`` (seconds)
    of passes with ``flops`` FLOPs and ``bytes_`` bytes, with P <= ``max_peak_flops`` and
    W <= ``max_bandwidth`` when given (the machine's measured ceilings; `ceiling_bounds`).
    See the module docstring for the loss, the standard errors, the held-out split, and
    what is reported as unidentified, at a bound or degenerate. Warns with
    `PoorFitWarning` when R² < MIN_R2."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    t = _positive_array(times, "times")
    fl = _positive_array(flops, "flops")
    by = _positive_array(bytes_, "bytes")
    if not (fl.size == by.size == t.size):
        raise ValueError(f"flops, bytes and times must have the same length, got "
                         f"{fl.size}, {by.size}, {t.size}")
    caps = (_cap(max_peak_flops, "max_peak_flops"), _cap(max_bandwidth, "max_bandwidth"))
    n_params = 3 if kind == "max" else 4
    if t.size < n_params:
        raise ValueError(f"times: {t.size} points cannot determine {n_params} parameters")
    train, test = _split(t.size, holdout, seed, n_params)
    ft, bt, tt = fl[train], by[train], t[train]
    logt = np.log(tt)

    def unpack(theta):
        t0, P, W = np.exp(theta[:3])
        p = 1.0 + math.exp(theta[3]) if kind == "smooth" else math.inf
        return t0, P, W, p

    def resid(theta):
        t0, P, W, p = unpack(theta)
        return np.log(roofline_time(ft, bt, t0, P, W, p)) - logt

    # Starts: ceilings from the most compute- and memory-heavy points, t0 a fraction of
    # the fastest pass; a few scalings of each so a start on the wrong side of the ridge
    # does not trap the fit.
    P0, W0 = float(np.max(ft / tt)), float(np.max(bt / tt))
    x0s = [[math.log(ft0 * tt.min()), math.log(fp * P0), math.log(fw * W0)]
           + ([math.log(4.0)] if kind == "smooth" else [])
           for fp in (1.0, 2.0) for fw in (1.0, 2.0) for ft0 in (0.01, 0.3)]
    upper = np.array([np.inf] + [math.log(c) if c else np.inf for c in caps]
                     + ([math.log(P_RANGE[1] - 1.0)] if kind == "smooth" else []))
    best, lower = _solve(resid, x0s, upper, n_params)
    t0, P, W, p = unpack(best.x)
    se = _stderr(best.jac, best.fun)
    nat = np.array([t0, P, W] + ([p - 1.0] if kind == "smooth" else []))
    with np.errstate(invalid="ignore"):              # delta method for exp(theta)
        se_nat = np.where(np.isinf(se), math.inf, nat * se)
    values = {"t0": t0, "peak_flops": P, "bandwidth": W, "p": p}
    se_d, unidentified, at_bound, degenerate = _assess(values, se_nat, best.x, lower, upper,
                                                       float(tt.min()), kind)
    pred_train = roofline_time(ft, bt, t0, P, W, p)
    pred_test = roofline_time(fl[test], by[test], t0, P, W, p)
    r2 = _r2(tt, pred_train)
    _warn_if_poor(r2, f"roofline fit ({kind}) on {train.size} points")
    return RooflineFit(
        kind=kind, t0=t0, peak_flops=P, bandwidth=W, p=p, t0_se=se_d["t0"],
        peak_flops_se=se_d["peak_flops"], bandwidth_se=se_d["bandwidth"],
        p_se=se_d.get("p", math.nan), r2=r2, r2_log=_r2(logt, np.log(pred_train)),
        mape_train=_mape(tt, pred_train), mape_heldout=_mape(t[test], pred_test),
        n_train=int(train.size), n_heldout=int(test.size),
        heldout_index=tuple(int(i) for i in test), seed=int(seed), holdout=float(holdout),
        unidentified=unidentified, at_bound=at_bound, degenerate=degenerate,
        max_peak_flops=caps[0], max_bandwidth=caps[1])


def ceiling_bounds(ceilings) -> dict[str, float]:
    """``{"max_peak_flops", "max_bandwidth"}`` for `fit_roofline`/`fit_sweep` from a
    ceilings table (`specsim.bench.measure_ceilings`, or a ``*-ceilings.csv`` read with
    pandas): the highest matmul FLOP/s and copy bytes/s measured (copy counts read +
    write, so it bounds what a forward pass can stream)."""
    out = {}
    for key, column in (("max_peak_flops", "matmul_flops_per_s"),
                        ("max_bandwidth", "copy_bytes_per_s")):
        if column not in ceilings:
            raise ValueError(f"ceilings lacks column {column!r}; columns: {list(ceilings)}")
        out[key] = float(np.nanmax(np.asarray(ceilings[column], float)))
    return out


def fit_sweep(df, cfg=None, *, kind: str = "max", holdout: float = 0.25, seed: int = 0,
              time_column: str = "time_s", max_peak_flops: float | None = None,
              max_bandwidth: float | None = None) -> RooflineFit:
    """Fit a sweep DataFrame from `specsim.bench.sweep_forward` (or its CSV). FLOPs and
    bytes are taken from its ``flops``/``bytes`` columns, or recomputed from
    (n_tokens, batch, context) with `forward_cost` when ``cfg`` is given. Pass the
    machine's measured ceilings as caps (``**fit.ceiling_bounds(ceilings_df)``)."""
    if time_column not in df:
        raise ValueError(f"df has no column {time_column!r}; columns: {list(df.columns)}")
    if cfg is not None:
        from specsim.roofline import forward_costs

        fl, by = forward_costs(cfg, df["n_tokens"].to_numpy(), df["batch"].to_numpy(),
                               df["context"].to_numpy())
    else:
        missing = [c for c in ("flops", "bytes") if c not in df]
        if missing:
            raise ValueError(f"df lacks columns {missing}: pass cfg to compute them")
        fl, by = df["flops"].to_numpy(), df["bytes"].to_numpy()
    return fit_roofline(fl, by, df[time_column].to_numpy(), kind=kind, holdout=holdout,
                        seed=seed, max_peak_flops=max_peak_flops, max_bandwidth=max_bandwidth)


def fit_sweep_best(df, cfg=None, *, holdout: float = 0.25, seed: int = 0, **kw
                   ) -> tuple[RooflineFit | None, dict[str, RooflineFit | ValueError]]:
    """Each roofline form of `KINDS` fitted with ``holdout`` of the points held out; the
    form with the lowest held-out MAPE is then refitted on every point, since a form
    chosen on held-out points should not also lose them (its ``mape_heldout``,
    ``n_heldout`` and ``heldout_index`` stay those of the selection). → (that fit, or
    None when no form could be fitted; kind -> the held-out fit or the ValueError that
    stopped it)."""
    from dataclasses import replace

    tried: dict[str, RooflineFit | ValueError] = {}
    with warnings.catch_warnings():     # a poor candidate warns only if it is chosen
        warnings.simplefilter("ignore", PoorFitWarning)
        for kind in KINDS:
            try:
                tried[kind] = fit_sweep(df, cfg, kind=kind, holdout=holdout, seed=seed, **kw)
            except ValueError as e:     # too few points for a held-out set
                tried[kind] = e
    fitted = [f for f in tried.values() if isinstance(f, RooflineFit)]
    if not fitted:
        return None, tried
    best = min(fitted, key=lambda f: f.mape_heldout)
    full = fit_sweep(df, cfg, kind=best.kind, holdout=0.0, seed=seed, **kw)
    return replace(full, mape_heldout=best.mape_heldout, n_heldout=best.n_heldout,
                   heldout_index=best.heldout_index, holdout=best.holdout), tried


# ---- (alpha, c) from a speedup curve ---------------------------------------------------
def speedup_model(alpha, k, c):
    """The closed form `fit_speedup` inverts: `specsim.analytic.speedup` (Leviathan et al.
    2023, Thm 3.8), S = (1 - alpha^(K+1)) / ((1 - alpha)(K c + 1))."""
    return analytic.speedup(alpha, np.asarray(k), c)


@dataclass(frozen=True)
class SpeedupFit:
    alpha: float
    c: float
    alpha_se: float
    c_se: float
    r2: float
    mape: float
    n_points: int

    def predict(self, k):
        s = speedup_model(self.alpha, np.asarray(k, float), self.c)
        return float(s) if np.ndim(s) == 0 else s

    def summary(self) -> str:
        return (f"speedup fit on {self.n_points} points: alpha = "
                f"{_with_error(self.alpha, self.alpha_se, '.4f')}, c = "
                f"{_with_error(self.c, self.c_se, '.4f')}, "
                f"R² = {self.r2:.4f}, MAPE = {self.mape:.2f}%")


def _with_error(value: float, se: float, fmt: str) -> str:
    """'value ± se', or 'value (unidentified)' when se is not finite or exceeds
    MAX_RELATIVE_SE of the value: never '± inf'."""
    if math.isfinite(se) and se <= MAX_RELATIVE_SE * abs(value):
        return f"{value:{fmt}} ± {se:.2g}"
    return f"{value:{fmt}} (unidentified)"


def fit_speedup(k, speedup, *, alpha: float | None = None) -> SpeedupFit:
    """Fit (alpha, c) of S(alpha, K, c) to measured speedups at draft lengths ``k``
    (least squares in log speedup; alpha in (0, 1) through a logistic, c > 0 through a
    log). Needs at least 2 distinct K; standard errors need 3 or more points.

    The joint inverse is ill-conditioned: over K = 1..6 a smaller alpha with a smaller c
    draws nearly the same curve (alpha 0.72, c 0.05 against 0.8, 0.1 differ by < 0.5%), so
    0.2% noise moves alpha by several hundredths. Pass the measured acceptance rate as
    ``alpha`` to fit c alone (alpha_se is then 0).
    """
    ks = _positive_array(k, "k")
    s = _positive_array(speedup, "speedup")
    if ks.size != s.size:
        raise ValueError(f"k and speedup must have the same length, got {ks.size}, {s.size}")
    n_free = 2 if alpha is None else 1
    if alpha is not None and not (0 <= alpha <= 1):
        raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")
    if ks.size < n_free or np.unique(ks).size < n_free:
        raise ValueError(f"speedup: {ks.size} points at {np.unique(ks).size} distinct k cannot "
                         f"determine {n_free} parameters; measure more values of k")
    logs = np.log(s)

    def unpack(theta):
        if alpha is not None:
            return float(alpha), math.exp(theta[0])
        return 1.0 / (1.0 + math.exp(-theta[0])), math.exp(theta[1])

    def resid(theta):
        a, c = unpack(theta)
        return np.log(speedup_model(a, ks, c)) - logs

    best = None
    for a0 in ((0.3, 0.6, 0.9) if alpha is None else (None,)):
        for c0 in (0.02, 0.2, 1.0):
            x0 = [math.log(c0)] if a0 is None else [math.log(a0 / (1 - a0)), math.log(c0)]
            r = least_squares(resid, np.array(x0), method="trf", xtol=1e-14, ftol=1e-14,
                              gtol=1e-14)
            if best is None or r.cost < best.cost:
                best = r
    a, c = unpack(best.x)
    se = _stderr(best.jac, best.fun)
    if alpha is not None:
        se = np.concatenate([[0.0], se])
    pred = speedup_model(a, ks, c)
    return SpeedupFit(alpha=a, c=c, alpha_se=float(a * (1 - a) * se[0]), c_se=float(c * se[1]),
                      r2=_r2(s, pred), mape=_mape(s, pred), n_points=int(ks.size))
