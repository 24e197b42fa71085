"""The drafters the ``drafters`` part compares, and what limits each one: the quantised
self-draft (the target's own weights, int8 / int4), the distilled draft when one is
trained, the feature head (EAGLE-style, trained or shipped in specsim/data/drafts), beside
n-gram lookup and the layer-skip self-draft.

Numbers (NumPy/pandas and `specsim.analytic` only, beside the model code that builds the
drafters):

* c from bytes: `roofline.forward_cost` of the draft's one-token pass over the target's,
  the draft's weights at their stored width (``weight_bits``) and its head at its own
  width (a distilled draft's head has Vh columns). ``c_bytes_materialised`` adds what
  XLA:CPU moves for a quantised draft: the fp32 copy of every dequantised matrix,
  written and read back before its dot (see `specsim.models.quantize`).
* Limits (`limits_table`): the closed form's best K and speedup at the measured α and c
  (Leviathan et al. Thm 3.8, `analytic.optimal_k`), the α that would give a speedup
  of `TARGET_SPEEDUP` at that c and the c that would give it at that α, each minimised over
  K <= `K_MAX`, and which of the two is further from its need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from specsim import analytic
from specsim import schema as S
from specsim.resources import data_path

TARGET_SPEEDUP = 1.5
"""The speedup the limits table measures each drafter against: the α it would need at
its c, and the c at its α, to reach it."""
K_MAX = 16          # draft lengths searched by the closed forms here


@dataclass(frozen=True)
class StudyDrafter:
    """A drafter under its run name, how it is built (``kind``: "ngram", "layer-skip",
    "quantized", "distilled", "feature-head") and what its bytes are: the config its pass runs
    (None: no model), ``weight_bits``/``group_size`` of its quantised matrices, its head
    width (columns of its output head), the logical parameters of its quantised matrices
    and the steps it was trained for (distilled)."""
    name: str
    drafter: object
    kind: str
    cfg: object = None
    weight_bits: int | None = None
    group_size: int | None = None
    head_vocab: int | None = None
    quantized_params: int = 0
    train_steps: int | None = None


# ---- finding a trained draft -----------------------------------------------------------------
def find_distilled(target_name: str) -> Path | None:
    """The distilled draft of ``target_name`` the demo uses: the default one
    (`train.default_draft_path` with the default `DistillConfig`) when it is trained,
    else the finished draft of that target with the most steps under the same cache
    folder; None when there is none."""
    from specsim import train

    default = train.default_draft_path(target_name, train.DistillConfig())
    if (default / "config.json").is_file():
        return default
    found = [p for p in default.parent.glob(f"{target_name}-distilled-*")
             if (p / "config.json").is_file() and (p / train.METADATA_FILE).is_file()]
    return max(found, key=lambda p: (_steps(p), p.name)) if found else None


def _steps(folder: Path) -> int:
    import json
    from specsim import train
    return int(json.loads((folder / train.METADATA_FILE).read_text()).get("steps", 0))


def find_feature_head(target_name: str) -> Path | None:
    """The feature head of ``target_name`` the demo uses: the default one under the
    cache (`train.feature_head.default_head_path`) when trained, else the one committed
    with the package (``specsim/data/drafts/<target>-feature-head.npz``); None when there
    is neither."""
    from specsim.train.feature_head import FeatureHeadConfig, default_head_path
    default = default_head_path(target_name, FeatureHeadConfig())
    if default.is_file():
        return default
    committed = COMMITTED_DRAFTS / f"{target_name}-feature-head.npz"
    return committed if committed.is_file() else None


COMMITTED_DRAFTS = data_path("drafts")       # shipped with the package


def train_hint(target_name: str) -> str:
    """What the part logs when no distilled draft is trained."""
    from specsim import train
    path = train.default_draft_path(target_name, train.DistillConfig())
    return (f"no distilled draft of {target_name} is trained: train one with `specsim "
            f"train-draft --target {target_name}` (about 20 minutes on 2 cores, resumable; "
            f"written to {path}), then rerun this part")


# ---- building the drafters ----------------------------------------------------------------------
def quantized(target, bits: int, group_size: int | None = None) -> StudyDrafter:
    """The quantised self-draft of ``target`` (every layer, dense head)."""
    from specsim import drafters as dr
    from specsim.models.quantize import is_quantized
    import jax

    d = dr.quantized_self_drafter(target, bits, group_size)
    n_q = sum(int(np.prod(x.shape)) for x in
              jax.tree_util.tree_leaves(d.params, is_leaf=is_quantized) if is_quantized(x))
    g = group_size if group_size is not None else (32 if bits == 4 else None)
    return StudyDrafter(d.name, d, "quantized", d.cfg, bits, g, None, n_q)


def distilled(folder: Path, target) -> StudyDrafter:
    from specsim import drafters as dr
    d = dr.distilled_drafter(folder, target)
    return StudyDrafter(d.name, d, "distilled", d.cfg, head_vocab=d.head_vocab,
                        train_steps=_steps(Path(folder)))


def feature_head(path: Path, target) -> StudyDrafter:
    """The feature-head drafter (`specsim.drafters.feature_head`) read from ``path``."""
    import json
    from specsim import drafters as dr
    d = dr.feature_head_drafter(target, path)
    meta_path = Path(path).with_suffix(".json")
    steps = json.loads(meta_path.read_text()).get("steps") if meta_path.is_file() else None
    return StudyDrafter(d.name, d, "feature-head", head_vocab=int(d.head.shape[0]),
                        train_steps=steps)


def from_setup(setup) -> StudyDrafter:
    """A `DraftSetup` of the demo (n-gram, layer-skip, the feature head, a small model)
    as a StudyDrafter."""
    from specsim.drafters import FeatureHeadDrafter, NGramDrafter
    if isinstance(setup.drafter, FeatureHeadDrafter):
        return StudyDrafter(setup.name, setup.drafter, "feature-head",
                            head_vocab=int(setup.drafter.head.shape[0]))
    kind = "ngram" if isinstance(setup.drafter, NGramDrafter) else (
        "layer-skip" if setup.name.startswith("layer-skip") else "model")
    return StudyDrafter(setup.name, setup.drafter, kind,
                        None if setup.cost_model is None else setup.cost_model.cfg)


# ---- cost ratio from bytes ------------------------------------------------------------------------
def _pass_bytes(cfg, context: int, *, weight_bits=None, group_size=None, head_vocab=None) -> float:
    from specsim import roofline
    if head_vocab is not None:                 # a restricted head: Vh columns, untied
        cfg = cfg.replace(vocab_size=int(head_vocab), tie_embeddings=False)
    kw = {} if weight_bits is None else dict(weight_bits=weight_bits, group_size=group_size)
    return float(roofline.forward_cost(cfg, 1, 1, context, **kw).bytes)


def feature_head_step_bytes(drafter) -> float:
    """Weight bytes one feature-head draft step reads: its cell and its head rows (fp32)."""
    import jax
    n = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(drafter.cell))
    return 4.0 * (n + drafter.head.size)


def target_step_bytes(target_cfg, context: int) -> float:
    """Bytes one target pass over one token reads at ``context`` (the roofline's count)."""
    return _pass_bytes(target_cfg, context)


def bytes_ratios(d: StudyDrafter, target_cfg, context: int) -> dict[str, float]:
    """{c_bytes, c_bytes_materialised}: the draft's one-token pass bytes over the
    target's (NaN for a drafter without a model; the second adds the fp32 copies of the
    dequantised matrices, written then read, that XLA:CPU makes)."""
    if d.kind == "feature-head":
        c = feature_head_step_bytes(d.drafter) / _pass_bytes(target_cfg, context)
        return {S.C_BYTES: c, S.C_BYTES_MATERIALISED: c}
    if d.cfg is None:
        return {S.C_BYTES: math.nan, S.C_BYTES_MATERIALISED: math.nan}
    t = _pass_bytes(target_cfg, context)
    b = _pass_bytes(d.cfg, context, weight_bits=d.weight_bits, group_size=d.group_size,
                    head_vocab=d.head_vocab)
    return {S.C_BYTES: b / t, S.C_BYTES_MATERIALISED: (b + 8.0 * d.quantized_params) / t}


# ---- what limits a drafter ---------------------------------------------------------------------
def alpha_for_speedup(speedup: float, c: float, k_max: int = K_MAX) -> float:
    """The smallest i.i.d. α whose closed-form speedup E(α, K)/(Kc + 1) reaches
    ``speedup`` at some K <= k_max (NaN when even α = 1 does not)."""
    ks = np.arange(1, k_max + 1)
    need = speedup * (ks * c + 1.0)                       # E(α, K) needed at each K
    ok = need <= ks + 1
    if not ok.any():
        return math.nan
    return float(np.min(analytic.alpha_from_expected_tokens(np.maximum(need[ok], 1.0), ks[ok])))


def c_for_speedup(speedup: float, alpha: float, k_max: int = K_MAX) -> float:
    """The largest c at which the closed form reaches ``speedup`` with ``alpha`` at some
    K <= k_max (NaN when even c = 0 does not)."""
    ks = np.arange(1, k_max + 1)
    c = (analytic.expected_tokens(alpha, ks) / speedup - 1.0) / ks
    return float(c.max()) if c.max() >= 0 else math.nan


def limit_of(alpha: float, c: float, alpha_need: float, c_need: float, best: float) -> str:
    if best >= TARGET_SPEEDUP:
        return "none"
    if math.isnan(c_need):
        return "α (too low at any c)"
    if math.isnan(alpha_need):
        return "c (too high at any α)"
    return "α" if alpha_need / max(alpha, 1e-9) > c / max(c_need, 1e-9) else "c"


def limits_table(costs: pd.DataFrame, alphas: pd.DataFrame) -> pd.DataFrame:
    """One row per drafter (temperature 0): mean α over the kinds of work, c measured
    and from bytes, the closed form's K* and speedup at (α, c) and at (α, c from
    bytes), the α needed for `TARGET_SPEEDUP` at c and the c needed at α, and the limit."""
    a0 = alphas[alphas[S.TEMPERATURE] == 0].groupby(S.DRAFTER)[S.ALPHA].mean()
    rows = []
    for _, r in costs.iterrows():
        if r[S.DRAFTER] not in a0:
            continue
        alpha, c = float(a0[r[S.DRAFTER]]), float(r[S.C_MEASURED])
        k_star, best = (float(x) for x in analytic.optimal_k(alpha, c, K_MAX))
        c_b = r[S.C_BYTES] if np.isfinite(r[S.C_BYTES]) else 0.0
        _, best_bytes = analytic.optimal_k(alpha, c_b, K_MAX)
        a_need, c_need = alpha_for_speedup(TARGET_SPEEDUP, c), c_for_speedup(TARGET_SPEEDUP, alpha)
        rows.append({S.DRAFTER: r[S.DRAFTER], S.ALPHA: alpha, S.C_MEASURED: c,
                     S.C_BYTES: r[S.C_BYTES], "k_star": int(k_star), "speedup_at_k_star": best,
                     "speedup_at_k_star_c_bytes": float(best_bytes),
                     f"alpha_for_{TARGET_SPEEDUP:g}x": a_need, f"c_for_{TARGET_SPEEDUP:g}x": c_need,
                     "limit": limit_of(alpha, c, a_need, c_need, best)})
    return pd.DataFrame(rows)
