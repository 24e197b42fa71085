"""Will speculation pay on my GPU? A what-if from datasheets, presets and published fits.

    p = predict("llama-3.1-8b", "h100-sxm", drafter="eagle", engine="vllm", alpha=0.7)
    p.speedup, p.interval, p.best_k, p.break_even_batch, p.bound

The speedup is `specsim.iteration_cost` with the engine overheads fitted on every
published row (`specsim.published.fitted_overheads`); the interval is that estimate
scaled by the 10th and 90th percentiles of observed/predicted over the leave-one-source-
out predictions of the same engine class (all rows where a class has fewer than 5), each
over their median: how widely published results of a source the fit did not see spread
around this model. (The median itself is the held-out fits' bias, which a fit on every
source does not share, so the interval is centred on the estimate.) Acceptance: ``alpha`` (per
token, chains), ``tau`` (mean tokens an iteration at the given K or tree), or, with
neither, typical of the drafter kind's published rows (optionally of one task): the
median α of its chain rows for a chain, the median τ of its tree rows for a tree.

`predict_from_ceilings` points the same iteration model at measured ceilings (a roofline
fit of this machine) instead of a datasheet row.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from specsim import analytic
from specsim.errors import InvalidArgument
from specsim.iteration_cost import (DRAFTER_KINDS, FREE_DRAFTERS, DrafterSpec,
                                    EngineOverheads, breakdown, engine_class,
                                    iteration_terms, speedup_from_terms)
from specsim.presets import ModelShape, get_shape
from specsim.roofline import Hardware, hardware_names, load_hardware
from specsim.validation import positive_int, probability

__all__ = ["Prediction", "predict", "predict_from_ceilings", "BREAK_EVEN_BATCHES",
           "DEFAULT_K_MAX"]

DEFAULT_K_MAX = 12
BREAK_EVEN_BATCHES = tuple(2 ** i for i in range(0, 11))     # 1 .. 1024
_MIN_CLASS_ROWS = 5


@dataclass(frozen=True)
class Prediction:
    """A what-if's answer. ``speedup`` at the setting asked (the best K when no K or tree
    was given), ``interval`` (low, high) from the published residuals, ``best_k`` and
    ``best_speedup`` over chains K = 1..k_max (None for a tree), ``break_even_batch``
    (the smallest power-of-two batch up to 1024 at which speculation at this setting no
    longer pays; None if it pays throughout), ``bound`` (the largest term of the
    iteration), ``terms`` (seconds per term), and the acceptance used and its source."""
    speedup: float
    interval: tuple[float, float]
    k: int | None
    tree_tokens: int | None
    best_k: int | None
    best_speedup: float | None
    break_even_batch: int | None
    bound: str
    terms: dict = field(default_factory=dict)
    tau: float = float("nan")
    alpha: float | None = None
    acceptance_source: str = ""
    engine_class: str = ""

    def summary(self) -> str:
        lo, hi = self.interval
        setting = f"K={self.k}" if self.k is not None else f"tree of {self.tree_tokens}"
        be = ("pays at every batch up to 1024" if self.break_even_batch is None
              else f"stops paying from batch {self.break_even_batch}")
        best = "" if self.best_k is None else (f"; best K = {self.best_k} "
                                               f"({self.best_speedup:.2f}x)")
        return (f"speedup {self.speedup:.2f}x ({lo:.2f}-{hi:.2f}) at {setting}{best}; "
                f"tau {self.tau:.2f} ({self.acceptance_source}); bound by {self.bound}; {be}")


def _hardware(hw) -> Hardware:
    if isinstance(hw, Hardware):
        return hw
    try:
        return load_hardware(hw)
    except ValueError:
        raise InvalidArgument(f"unknown hardware {hw!r}; known: {', '.join(hardware_names())}"
                              f" (or pass a specsim.roofline.Hardware)") from None


def _drafter(kind: str, draft, calls: int, width: int) -> DrafterSpec:
    if kind not in DRAFTER_KINDS:
        raise InvalidArgument(f"drafter must be one of {list(DRAFTER_KINDS)}, got {kind!r}")
    if kind == "draft_model":
        if draft is None:
            raise InvalidArgument("drafter 'draft_model' needs draft= (a model name or "
                                  "ModelShape)")
        return DrafterSpec(kind=kind, calls=calls, width=width, draft_model=get_shape(draft))
    if kind in FREE_DRAFTERS:
        return DrafterSpec(kind=kind, calls=0)
    if kind == "medusa":
        return DrafterSpec(kind=kind, calls=1, width=1)
    return DrafterSpec(kind=kind, calls=calls, width=width)


@functools.lru_cache(maxsize=1)
def _residual_ratios() -> dict:
    """observed/predicted of the leave-one-source-out predictions, per engine class."""
    from specsim.published import leave_one_source_out

    pred, _ = leave_one_source_out()
    ratio = pred["observed"] / pred["predicted"]
    out = {"all": ratio.to_numpy()}
    for cls, g in pred.groupby("engine_class"):
        out[cls] = ratio[g.index].to_numpy()
    return out


def _interval(speedup: float, cls: str) -> tuple[float, float]:
    ratios = _residual_ratios()
    r = ratios.get(cls)
    if r is None or len(r) < _MIN_CLASS_ROWS:
        r = ratios["all"]
    med = float(np.median(r))
    return (float(speedup * np.quantile(r, 0.1) / med), float(speedup * np.quantile(r, 0.9) / med))


def _acceptance(kind, alpha, tau, k, tree_tokens, temperature, task):
    """(alpha or None, tau or None, source) from what the caller gave."""
    if alpha is not None and tau is not None:
        raise InvalidArgument("give alpha or tau, not both")
    if alpha is not None:
        if tree_tokens is not None:
            raise InvalidArgument("alpha describes a chain; for a tree give tau (mean tokens "
                                  "an iteration at that tree)")
        return probability("alpha", alpha), None, "alpha as given"
    if tau is not None:
        t = float(tau)
        if not (math.isfinite(t) and t >= 1):
            raise InvalidArgument(f"tau must be a finite number >= 1, got {tau!r}")
        if tree_tokens is None:
            kk = k if k is not None else 4
            if t > kk + 1:
                raise InvalidArgument(f"tau ({t}) cannot exceed K + 1 = {kk + 1}")
            a = float(analytic.alpha_from_expected_tokens(t, kk))
            return a, None, f"tau {t:g} at K={kk} as given (alpha {a:.3f})"
        if t > tree_tokens:
            raise InvalidArgument(f"tau ({t}) cannot exceed tree_tokens ({tree_tokens})")
        return None, t, "tau as given"
    from specsim.published import typical_acceptance

    want_tree = tree_tokens is not None
    typ = typical_acceptance(kind, temperature=temperature, tree=want_tree, task=task)
    on = f" on {task}" if task is not None else ""
    if typ["shape"] == "all":
        have, give = (("chains", "tau for the tree, or k (a chain)") if want_tree else
                      ("trees", "alpha, or tree_tokens (a tree)"))
        raise InvalidArgument(f"no published {kind} {'tree' if want_tree else 'chain'} rows"
                              f"{on} to take a typical acceptance from (its rows are {have}): "
                              f"give {give}")
    if want_tree:
        return None, min(typ["tau"], float(tree_tokens)), (
            f"median tau of {typ['rows']} published {kind} tree rows{on}")
    return typ["alpha"], None, (f"median alpha of {typ['rows']} published {kind} chain "
                                f"rows{on}, each read from its tau at its K")


def _published_shape(kind, temperature, task) -> tuple[int, int | None] | None:
    """(tree_tokens, draft_steps) of the kind's median published tree when its published
    rows are trees only (a what-if with no shape and no acceptance takes that tree), else
    None."""
    from specsim.published import typical_acceptance

    if typical_acceptance(kind, temperature=temperature, tree=False, task=task)["shape"] == "chain":
        return None
    typ = typical_acceptance(kind, temperature=temperature, tree=True, task=task)
    return typ["tree_tokens"], typ["draft_steps"]


def predict(target, hardware, *, drafter: str = "eagle", draft=None, engine: str = "vllm",
            batch: int = 1, tp: int = 1, alpha=None, tau=None, k: int | None = None,
            tree_tokens: int | None = None, draft_steps: int | None = None,
            context: int = 512, dtype: str | None = None, temperature: float = 0.0,
            task: str | None = None, k_max: int = DEFAULT_K_MAX,
            overheads: EngineOverheads | None = None) -> Prediction:
    """Speculative speedup of ``target`` (a preset name or `ModelShape`) on ``hardware``
    (a datasheet row name or `Hardware`) with ``drafter`` (DRAFTER_KINDS; ``draft`` names
    the model of a ``draft_model``) served by ``engine`` at ``batch`` over ``tp`` chips.

    A chain by default (``k``, or the best K up to ``k_max`` when None); a tree when
    ``tree_tokens`` (the nodes the target verifies, root included) is given, drafted in
    ``draft_steps`` sequential calls (default 5). Without ``alpha`` or ``tau`` the
    acceptance is typical of the drafter kind's published rows at ``temperature`` (on
    ``task``, a `specsim.published.TASK_FAMILIES` key, when given). ``overheads``
    replaces the fitted engine overheads. Errors name the argument and what is allowed."""
    shape = get_shape(target)
    hw = _hardware(hardware)
    cls = engine_class(engine)
    B = positive_int("batch", batch)
    p = positive_int("tp", tp)
    S = positive_int("context", context)
    k_max = positive_int("k_max", k_max)
    if k is not None:
        k = positive_int("k", k)
    if tree_tokens is not None:
        tree_tokens = positive_int("tree_tokens", tree_tokens, minimum=2)
        if k is not None:
            raise InvalidArgument("give k (a chain) or tree_tokens (a tree), not both")
    if drafter not in DRAFTER_KINDS:
        raise InvalidArgument(f"drafter must be one of {list(DRAFTER_KINDS)}, got {drafter!r}")
    shape_of = None
    if alpha is None and tau is None and k is None and tree_tokens is None:
        shape_of = _published_shape(drafter, temperature, task)
        if shape_of is not None:
            tree_tokens, steps = shape_of
            draft_steps = draft_steps if draft_steps is not None else steps
    a, t_tree, source = _acceptance(drafter, alpha, tau, k, tree_tokens, temperature, task)
    if shape_of is not None:
        source += f"; its published rows are trees: the median one, {tree_tokens} nodes"
    if overheads is None:
        from specsim.published import fitted_overheads

        overheads = fitted_overheads()[cls]

    def chain(kk, batch_):
        terms = iteration_terms(shape, hw, _drafter(drafter, draft, kk, 1), verify_tokens=kk + 1,
                                batch=batch_, context=S, tp=p, dtype=dtype)
        tau_k = float(analytic.expected_tokens(a, kk))
        return terms, tau_k

    def tree(batch_):
        steps = positive_int("draft_steps", draft_steps if draft_steps is not None else 5)
        width = max(1, math.ceil((tree_tokens - 1) / steps))
        terms = iteration_terms(shape, hw, _drafter(drafter, draft, steps, width),
                                verify_tokens=tree_tokens, batch=batch_, context=S, tp=p,
                                dtype=dtype)
        return terms, t_tree

    best_k = best_s = None
    if tree_tokens is None:
        curve = {}
        for kk in range(1, k_max + 1):
            terms_k, tau_k = chain(kk, B)
            curve[kk] = speedup_from_terms(terms_k, overheads, tau_k)
        best_k = max(curve, key=curve.get)
        best_s = curve[best_k]
        k_used = k if k is not None else best_k
        setting = functools.partial(chain, k_used)
    else:
        k_used = None
        setting = tree
    terms, tau_used = setting(B)
    s = speedup_from_terms(terms, overheads, tau_used)
    bd = breakdown(terms, overheads)
    be = None
    for b in BREAK_EVEN_BATCHES:
        if b >= B:
            tb, taub = setting(b)
            if speedup_from_terms(tb, overheads, taub) < 1.0:
                be = b
                break
    return Prediction(speedup=s, interval=_interval(s, cls), k=k_used,
                      tree_tokens=tree_tokens, best_k=best_k, best_speedup=best_s,
                      break_even_batch=be, bound=bd.bound, terms=bd.terms, tau=tau_used,
                      alpha=a, acceptance_source=source, engine_class=cls)


def _pass_seconds(fit_or_ceilings, shape: ModelShape, n: int, batch: int, context: int,
                  dtype: str) -> float:
    """One pass's seconds on measured ceilings, counted as the fit counted its sweep
    (`specsim.roofline.forward_cost` with its defaults: activations and the engine's
    attention form)."""
    from specsim.presets import as_roofline_config
    from specsim.roofline import forward_cost

    cost = forward_cost(as_roofline_config(shape), batch, n, max(context, n), dtype)
    if hasattr(fit_or_ceilings, "predict") and hasattr(fit_or_ceilings, "t0"):
        return float(fit_or_ceilings.predict(cost.flops, cost.bytes))
    try:
        peak, bw, t0 = (float(v) for v in fit_or_ceilings)
    except (TypeError, ValueError):
        raise InvalidArgument("fit_or_ceilings must be a specsim.fit.RooflineFit or a "
                              "(peak FLOP/s, bytes/s, t0 seconds) triple") from None
    if not (peak > 0 and bw > 0 and t0 >= 0 and math.isfinite(peak + bw + t0)):
        raise InvalidArgument(f"fit_or_ceilings needs peak > 0, bandwidth > 0 and t0 >= 0, "
                              f"got {(peak, bw, t0)!r}")
    return t0 + max(cost.flops / peak, cost.bytes / bw)


def predict_from_ceilings(fit_or_ceilings, *, target, alpha, k: int, draft=None,
                          draft_cost_ratio: float | None = None, batch: int = 1,
                          context: int = 512, iteration_overhead: float = 0.0,
                          dtype: str = "float32") -> float:
    """The iteration model on this machine's measured ceilings instead of a datasheet.

    ``fit_or_ceilings``: a `specsim.fit.RooflineFit` of this machine (its t0, ceilings
    and blend, applied to the FLOPs and bytes its sweep was fitted on) or a (peak FLOP/s,
    bytes/s, t0) triple. Each pass costs the fit's time: the target's plain step (1
    token), its verify (K + 1), and K draft steps, each of ``draft`` (a model shape) or
    ``draft_cost_ratio`` times the plain step (an instrument drafter), or nothing (a free
    draft) when neither is given; ``iteration_overhead`` seconds of bookkeeping an
    iteration. Returns E(alpha, K) * t_plain / t_iter."""
    a = probability("alpha", alpha)
    k = positive_int("k", k)
    B = positive_int("batch", batch)
    S = positive_int("context", context)
    if draft is not None and draft_cost_ratio is not None:
        raise InvalidArgument("give draft or draft_cost_ratio, not both")
    if not (math.isfinite(iteration_overhead) and iteration_overhead >= 0):
        raise InvalidArgument(f"iteration_overhead must be >= 0 seconds, got {iteration_overhead!r}")
    shape = get_shape(target)
    t1 = _pass_seconds(fit_or_ceilings, shape, 1, B, S, dtype)
    tv = _pass_seconds(fit_or_ceilings, shape, k + 1, B, S, dtype)
    if draft is not None:
        td = _pass_seconds(fit_or_ceilings, get_shape(draft), 1, B, S, dtype)
    elif draft_cost_ratio is not None:
        c = float(draft_cost_ratio)
        if not (math.isfinite(c) and c >= 0):
            raise InvalidArgument(f"draft_cost_ratio must be >= 0, got {draft_cost_ratio!r}")
        td = c * t1
    else:
        td = 0.0
    e = float(analytic.expected_tokens(a, k))
    return e * t1 / (tv + k * td + iteration_overhead)
