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

Held-out split: a seeded random ``holdout`` fraction of the points (default 25%, seed 0,
at least one point) is left out of the fit; MAPE is reported on it (``mape_heldout``) and
on the fitted points. R² is computed on the fitted points in linear time (``r2``) and in
log time (``r2_log``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from specsim import analytic

KINDS = ("max", "smooth")


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

    def summary(self) -> str:
        lines = [f"roofline fit ({self.kind}) on {self.n_train} points, {self.n_heldout} held out",
                 f"  t0        = {self.t0 * 1e3:10.4g} ms     ± {self.t0_se * 1e3:.2g}",
                 f"  peak      = {self.peak_flops / 1e9:10.4g} GFLOP/s ± {self.peak_flops_se / 1e9:.2g}",
                 f"  bandwidth = {self.bandwidth / 1e9:10.4g} GB/s    ± {self.bandwidth_se / 1e9:.2g}"]
        if self.kind == "smooth":
            lines.append(f"  p         = {self.p:10.4g}          ± {self.p_se:.2g}")
        lines += [f"  R² = {self.r2:.4f} (log time: {self.r2_log:.4f})",
                  f"  MAPE: fitted {self.mape_train:.2f}%, held out {self.mape_heldout:.2f}%"]
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


def fit_roofline(flops, bytes_, times, *, kind: str = "max", holdout: float = 0.25,
                 seed: int = 0) -> RooflineFit:
    """Fit t = t0 + max(F/P, B/W) (or the smooth blend) to measured ``times`` (seconds)
    of passes with ``flops`` FLOPs and ``bytes_`` bytes. See the module docstring for the
    loss, the standard errors and the held-out split."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    t = _positive_array(times, "times")
    fl = _positive_array(flops, "flops")
    by = _positive_array(bytes_, "bytes")
    if not (fl.size == by.size == t.size):
        raise ValueError(f"flops, bytes and times must have the same length, got "
                         f"{fl.size}, {by.size}, {t.size}")
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
    P0 = float(np.max(ft / tt))
    W0 = float(np.max(bt / tt))
    best = None
    for fp in (1.0, 2.0):
        for fw in (1.0, 2.0):
            for ft0 in (0.01, 0.3):
                x0 = [math.log(ft0 * tt.min()), math.log(fp * P0), math.log(fw * W0)]
                if kind == "smooth":
                    x0.append(math.log(4.0))
                r = least_squares(resid, np.array(x0), method="trf", x_scale=1.0,
                                  max_nfev=2000 * n_params)
                if best is None or r.cost < best.cost:
                    best = r
    t0, P, W, p = unpack(best.x)
    se = _stderr(best.jac, best.fun)
    nat = np.array([t0, P, W] + ([p - 1.0] if kind == "smooth" else []))
    with np.errstate(invalid="ignore"):              # delta method for exp(theta);
        se_nat = np.where(np.isinf(se), math.inf, nat * se)   # unseen stays inf, not nan
    pred_train = roofline_time(ft, bt, t0, P, W, p)
    pred_test = roofline_time(fl[test], by[test], t0, P, W, p)
    return RooflineFit(
        kind=kind, t0=t0, peak_flops=P, bandwidth=W, p=p,
        t0_se=float(se_nat[0]), peak_flops_se=float(se_nat[1]), bandwidth_se=float(se_nat[2]),
        p_se=float(se_nat[3]) if kind == "smooth" else math.nan,
        r2=_r2(tt, pred_train), r2_log=_r2(logt, np.log(pred_train)),
        mape_train=_mape(tt, pred_train), mape_heldout=_mape(t[test], pred_test),
        n_train=int(train.size), n_heldout=int(test.size),
        heldout_index=tuple(int(i) for i in test), seed=int(seed), holdout=float(holdout))


def fit_sweep(df, cfg=None, *, kind: str = "max", holdout: float = 0.25, seed: int = 0,
              time_column: str = "time_s") -> RooflineFit:
    """Fit a sweep DataFrame from `specsim.bench.sweep_forward` (or its CSV). FLOPs and
    bytes are taken from its ``flops``/``bytes`` columns, or recomputed from
    (n_tokens, batch, context) with `forward_cost` when ``cfg`` is given."""
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
                        seed=seed)


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
        return (f"speedup fit on {self.n_points} points: alpha = {self.alpha:.4f} ± "
                f"{self.alpha_se:.2g}, c = {self.c:.4f} ± {self.c_se:.2g}, "
                f"R² = {self.r2:.4f}, MAPE = {self.mape:.2f}%")


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
