"""Reproductions of published speculative-decoding numbers from their reported values.

Each paper's ``reported.csv`` (shipped with the package as
``specsim/data/papers/<paper-id>/reported.csv``; the repository's ``papers/<paper-id>/``
holds its README and figures) holds numbers as printed (with table, row, section and
page columns). The functions here load them and recompute every number
that follows from the others with :mod:`specsim.analytic`, returning DataFrames with
the reported and the recomputed values side by side, so notebooks stay thin and the
tests assert on the same tables.

Printed numbers are rounded. Where a recomputation depends on rounded inputs (α to two
decimals, c to two), :func:`rounding_interval` propagates the rounding: Thm 3.8's
speedup rises with α and falls with c, so its extremes over the rounding box sit at
two corners. A printed value is *consistent* when it lies within half a printed unit of
that interval.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize

from specsim import analytic, environment
from specsim.errors import InvalidArgument
from specsim.resources import data_path
from specsim.validation import choice, probability

__all__ = [
    "PAPER_IDS",
    "papers_dir",
    "load_reported",
    "half_unit",
    "figures_dir",
    "save_figure",
    "rounding_interval",
    "leviathan_table1",
    "leviathan_table4",
    "leviathan_alpha_consistency",
    "leviathan_lenience",
    "leviathan_text_claims",
    "argmax_lenient_accepts",
    "chen_setting",
    "chen_table1",
    "chen_verify_sensitivity",
    "chen_roofline",
    "domain_table",
    "domain_fit_c",
    "domain_break_even",
]

PAPER_IDS = ("leviathan2023", "chen2023", "domain-table")
_CHECKOUT = Path(__file__).resolve().parents[1]     # the repository, when run from one


# --------------------------------------------------------------------------- loading

def papers_dir(root: str | os.PathLike | None = None) -> Path:
    """The ``papers/`` folder of READMEs and committed figures: ``root`` if given, else
    ``$SPECSIM_PAPERS_DIR``, else the checkout's (an installed package has none)."""
    if root is not None:
        return Path(root)
    return environment.path("SPECSIM_PAPERS_DIR") or _CHECKOUT / "papers"


def _check_paper(paper_id: str) -> None:
    choice("paper_id", paper_id, PAPER_IDS)


def _raw(paper_id: str, root=None) -> pd.DataFrame:
    _check_paper(paper_id)
    path = (data_path("papers") if root is None else Path(root)) / paper_id / "reported.csv"
    return pd.read_csv(path, dtype=str, keep_default_na=False)


_TEXT_COLUMNS = {"table", "row", "section", "page", "task", "target", "draft", "benchmark",
                 "method", "sampling", "workload"}


def load_reported(paper_id: str, root=None) -> pd.DataFrame:
    """The paper's printed numbers, numeric columns as floats (empty cells NaN): the
    shipped ``reported.csv``, or ``<root>/<paper_id>/reported.csv`` when ``root`` is given."""
    raw = _raw(paper_id, root)
    df = raw.copy()
    for col in df.columns:
        if col not in _TEXT_COLUMNS:
            df[col] = pd.to_numeric(df[col].replace("", np.nan))
    return df


def half_unit(printed: str) -> float:
    """Half a unit in the last printed digit: '0.62' -> 0.005, '2.5' -> 0.05, '7' -> 0.5.

    Empty strings give NaN. Integers are treated as rounded to units; callers that know
    a value is exact (γ, a stated c = 0) use 0 instead.
    """
    printed = printed.strip()
    if not printed:
        return float("nan")
    exponent = Decimal(printed).as_tuple().exponent
    return 0.5 * 10.0 ** int(exponent)


RESULTS_FIGURES_DIR = Path("results") / "figures"
"""Where notebooks write paper figures (under the working directory) unless asked to
regenerate the committed ones."""


def figures_dir(paper_id: str, *, regenerate: bool = False) -> Path:
    """Where a notebook writes a paper's figures. ``regenerate=True``: the committed
    figures' folder, ``papers/<paper_id>`` (`papers_dir`), overwriting them on purpose.
    Otherwise ``$SPECSIM_FIGURES_DIR/<paper_id>`` if set (tests point it at a scratch
    folder), else ``results/figures/<paper_id>``: running a notebook never overwrites a
    committed figure by accident."""
    _check_paper(paper_id)
    if regenerate:
        base = papers_dir()
        if environment.path("SPECSIM_PAPERS_DIR") is None and not base.is_dir():
            raise InvalidArgument(f"regenerate=True rewrites the committed figures of a "
                                  f"specsim checkout's papers/ folder; there is none at "
                                  f"{base} (set SPECSIM_PAPERS_DIR to it)")
    else:
        base = environment.path("SPECSIM_FIGURES_DIR") or RESULTS_FIGURES_DIR
    out = base / paper_id
    out.mkdir(parents=True, exist_ok=True)
    return out


def save_figure(fig, paper_id: str, name: str, dpi: int = 110, *,
                regenerate: bool = False) -> Path:
    """Save ``fig`` as ``<figures_dir(paper_id, regenerate=regenerate)>/<name>`` (PNG)
    and return the path."""
    path = figures_dir(paper_id, regenerate=regenerate) / name
    fig.savefig(path, dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    return path


def rounding_interval(alpha, k, c, alpha_half=0.005, c_half=0.0):
    """Range of Thm 3.8's speedup over α ± alpha_half and c ± c_half (clipped to the domain).

    The speedup increases with α and decreases with c, so the extremes are the corners
    (α − h, c + h) and (α + h, c − h).
    """
    alpha = np.asarray(alpha, dtype=float)
    c = np.asarray(c, dtype=float)
    a_lo = np.clip(alpha - alpha_half, 0.0, 1.0)
    a_hi = np.clip(alpha + alpha_half, 0.0, 1.0)
    c_lo = np.clip(c - c_half, 0.0, None)
    c_hi = c + c_half
    return analytic.speedup(a_lo, k, c_hi), analytic.speedup(a_hi, k, c_lo)


def _consistent(reported, lo, hi, reported_half):
    """True where [lo, hi] comes within half a printed unit of the reported value."""
    return (hi >= reported - reported_half - 1e-12) & (lo <= reported + reported_half + 1e-12)


def _implied_c(alpha, k, speedup):
    """c from :func:`analytic.implied_cost_ratio`, NaN where the speedup exceeds E(α, K).

    A speedup above E(α, K) cannot come from Thm 3.8 with any c >= 0 (drafting would have
    to take negative time), so no cost ratio is implied there.
    """
    alpha, k, speedup = np.broadcast_arrays(np.asarray(alpha, float), np.asarray(k), np.asarray(speedup, float))
    ceiling = analytic.expected_tokens(alpha, k)
    ok = speedup <= ceiling
    out = np.full(alpha.shape, np.nan)
    if ok.any():
        out[ok] = analytic.implied_cost_ratio(alpha[ok], k[ok], speedup[ok])
    return out


def _matches_printed(recomputed, reported, decimals: int):
    """True where the recomputed value rounds (half up) to the printed one."""
    scaled = np.floor(np.asarray(recomputed, dtype=float) * 10**decimals + 0.5 + 1e-9)
    return np.isclose(scaled / 10**decimals, reported)


# ---------------------------------------------------------------- Leviathan et al. 2023

def _leviathan(table: str, root=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    df = load_reported("leviathan2023", root)
    raw = _raw("leviathan2023", root)
    mask = (df["table"] == table).to_numpy()
    return df[mask].reset_index(drop=True), raw[mask].reset_index(drop=True)


def leviathan_table1(root=None) -> pd.DataFrame:
    """Table 1 (c = ĉ = 0): operations factor (Thm 3.11) and speed (Thm 3.8), to two decimals."""
    df, _ = _leviathan("Table 1", root)
    alpha, k = df["alpha"].to_numpy(), df["gamma"].to_numpy().astype(int)
    out = df[["row", "alpha", "gamma"]].copy()
    out["ops_reported"] = df["ops"]
    out["ops_recomputed"] = analytic.ops_factor(alpha, k, df["c_hat"].to_numpy())
    out["speedup_reported"] = df["speedup_expected"]
    out["speedup_recomputed"] = analytic.speedup(alpha, k, df["c"].to_numpy())
    out["ops_match"] = _matches_printed(out["ops_recomputed"], out["ops_reported"], 2)
    out["speedup_match"] = _matches_printed(out["speedup_recomputed"], out["speedup_reported"], 2)
    return out


def leviathan_table4(root=None) -> pd.DataFrame:
    """Tables 2/4: the predicted ("Exp") speedup recomputed from α, γ, c; measured beside it.

    ``match`` compares the recomputed value rounded to one decimal with the printed one;
    ``consistent`` allows for α and c being printed to two decimals (see module docs).
    """
    df, raw = _leviathan("Table 4", root)
    alpha, k, c = df["alpha"].to_numpy(), df["gamma"].to_numpy().astype(int), df["c"].to_numpy()
    out = df[["row", "task", "draft", "temperature", "gamma", "alpha", "c"]].copy()
    out["expected_reported"] = df["speedup_expected"]
    out["expected_recomputed"] = analytic.speedup(alpha, k, c)
    a_half = raw["alpha"].map(half_unit).to_numpy()
    c_half = raw["c"].map(half_unit).to_numpy()
    lo, hi = rounding_interval(alpha, k, c, a_half, c_half)
    out["expected_lo"], out["expected_hi"] = lo, hi
    out["match"] = _matches_printed(out["expected_recomputed"], out["expected_reported"], 1)
    s_half = raw["speedup_expected"].map(half_unit).to_numpy()
    out["consistent"] = _consistent(out["expected_reported"].to_numpy(), lo, hi, s_half)
    out["measured"] = df["speedup_measured"]
    out["measured_over_expected"] = out["measured"] / out["expected_recomputed"]
    # the most Thm 3.8 allows at this α, γ: free drafts (c = 0)
    out["ceiling_c0"] = analytic.expected_tokens(alpha, k)
    out["measured_exceeds_c0_ceiling"] = out["measured"] > out["ceiling_c0"]
    # correlated acceptance (a stationary two-state Markov chain with the same mean α, lag-1
    # correlation ρ over its whole admissible range): the most it can give at the stated c
    out["speedup_best_markov"] = [_best_markov_speedup(a, int(g), cc) for a, g, cc in zip(alpha, k, c)]
    # the draft cost ratio the measured speedup implies at the printed α and γ (NaN above the ceiling)
    out["c_implied_by_measured"] = _implied_c(alpha, k, out["measured"].to_numpy())
    return out


def _best_markov_speedup(alpha: float, k: int, c: float, n: int = 400) -> float:
    """max over ρ of E_markov(α, ρ, K) / (K c + 1) (:func:`analytic.expected_tokens_markov`)."""
    lower = float(analytic.rho_bounds(alpha)[0])
    rhos = np.linspace(lower, 0.999, n)[1:]          # the lower bound itself freezes a state
    return float(np.max(analytic.expected_tokens_markov(alpha, rhos, k)) / (k * c + 1.0))


def leviathan_alpha_consistency(root=None) -> pd.DataFrame:
    """The same (task, draft, temperature) α printed in Tables 2, 3, 4 and 5 (l = 1).

    One row per setting that appears in more than one table, with a column per table
    and ``agree`` when all printed values coincide; Table 2's measured speedup is also
    checked against Table 4's "Emp" column.
    """
    df = load_reported("leviathan2023", root)
    key = ["task", "draft", "temperature"]
    t3 = df[df["table"] == "Table 3"].set_index(key)["alpha"].rename("alpha_table3")
    t2 = df[df["table"] == "Table 2"].set_index(key)
    t4 = df[df["table"] == "Table 4"].set_index(key)
    t5 = df[(df["table"] == "Table 5") & (df["lenience"] == 1)].set_index(key)["alpha"]
    out = pd.concat(
        [t2["alpha"].rename("alpha_table2"), t3, t4["alpha"].rename("alpha_table4"),
         t5.rename("alpha_table5_l1"), t2["speedup_measured"].rename("measured_table2"),
         t4["speedup_measured"].rename("measured_table4")],
        axis=1,
    )
    alpha_cols = ["alpha_table2", "alpha_table3", "alpha_table4", "alpha_table5_l1"]
    out = out[out[alpha_cols].notna().sum(axis=1) >= 2]
    spread = out[alpha_cols].max(axis=1) - out[alpha_cols].min(axis=1)
    same_measured = (out["measured_table2"] == out["measured_table4"]) | out["measured_table2"].isna()
    out["agree"] = (spread < 1e-12) & same_measured
    return out.reset_index()


def leviathan_lenience(root=None, k_max: int = 64) -> pd.DataFrame:
    """Appendix A.5: speedups at c = 0.015 from the lenient α values.

    Standard sampling (T = 1): the paper prints speedups without γ, so the recomputation
    takes the best γ ≤ ``k_max`` (:func:`analytic.optimal_k`) — an upper bound on what
    Thm 3.8 can give — and also reports the c that γ = 8 would need to reach the printed
    value. Argmax (T = 0): γ = 8 is stated, so Thm 3.8 is evaluated there directly.
    """
    df = load_reported("leviathan2023", root)
    raw = _raw("leviathan2023", root)
    mask = ((df["table"] == "Table 5") & df["speedup_expected"].notna()) | (df["table"] == "A.5 argmax text")
    df, raw = df[mask].reset_index(drop=True), raw[mask.to_numpy()].reset_index(drop=True)
    out = df[["table", "row", "temperature", "lenience", "alpha", "c", "gamma"]].copy()
    out["kind"] = np.where(df["temperature"] == 0, "argmax", "sampling")
    out["speedup_reported"] = df["speedup_expected"]
    alpha, c = df["alpha"].to_numpy(), df["c"].to_numpy()
    best_k, best_s = analytic.optimal_k(alpha, c, k_max=k_max)
    stated = df["gamma"].notna().to_numpy()
    gamma_used = np.where(stated, df["gamma"].fillna(0).to_numpy(), best_k).astype(int)
    out["gamma_used"] = gamma_used
    out["gamma_stated"] = stated
    out["speedup_recomputed"] = np.where(stated, analytic.speedup(alpha, gamma_used, c), best_s)
    a_half = raw["alpha"].map(half_unit).to_numpy()
    c_half = raw["c"].map(half_unit).to_numpy()
    lo, hi = rounding_interval(alpha, gamma_used, c, a_half, c_half)
    # for the unstated γ the best γ may move inside the rounding box; re-optimise at the corners
    _, s_lo = analytic.optimal_k(np.clip(alpha - a_half, 0, 1), c + c_half, k_max=k_max)
    _, s_hi = analytic.optimal_k(np.clip(alpha + a_half, 0, 1), np.clip(c - c_half, 0, None), k_max=k_max)
    out["speedup_lo"] = np.where(stated, lo, s_lo)
    out["speedup_hi"] = np.where(stated, hi, s_hi)
    decimals = raw["speedup_expected"].map(lambda s: max(0, -Decimal(s).as_tuple().exponent)).to_numpy()
    out["match"] = [bool(_matches_printed(r, p, int(d))) for r, p, d in
                    zip(out["speedup_recomputed"], out["speedup_reported"], decimals)]
    s_half = raw["speedup_expected"].map(half_unit).to_numpy()
    out["consistent"] = _consistent(out["speedup_reported"].to_numpy(), out["speedup_lo"].to_numpy(),
                                    out["speedup_hi"].to_numpy(), s_half)
    out["ceiling_gamma8_c0"] = analytic.expected_tokens(alpha, 8)
    out["c_needed_at_gamma8"] = _implied_c(alpha, 8, out["speedup_reported"].to_numpy())
    return out


def leviathan_text_claims(root=None) -> pd.DataFrame:
    """Numbers stated in the prose (Section 3.6: a bigram draft, α ≈ 0.2, c = 0, γ = 3 → 1.25X)."""
    df, _ = _leviathan("Section 3.6 text", root)
    out = df[["table", "row", "draft", "alpha", "gamma", "c"]].copy()
    out["speedup_reported"] = df["speedup_expected"]
    out["speedup_recomputed"] = analytic.speedup(df["alpha"].to_numpy(), df["gamma"].to_numpy().astype(int),
                                                 df["c"].to_numpy())
    out["match"] = _matches_printed(out["speedup_recomputed"], out["speedup_reported"], 2)
    return out


def argmax_lenient_accepts(target_probs, draft_probs, lenience: float) -> np.ndarray:
    """Appendix A.5's lenience for argmax sampling (T = 0), per row of [..., V] distributions.

    The draft proposes x = argmax(draft); it is accepted when target(x) >= l · max(target).
    (The paper prints "p(x) <= l · max(p)", which at l = 1 would accept every token and
    contradict l = 1 being the strict rule; the inequality must point the other way.)
    l = 1 is exact greedy verification (x must be the target's argmax, up to ties).
    Returns a float array of 0/1 of shape [...]; its mean is α for that lenience.
    """
    lenience = probability("lenience", lenience)
    if lenience == 0.0:
        raise InvalidArgument(f"lenience must be in (0, 1], got {lenience!r}")
    target = np.asarray(target_probs, dtype=float)
    draft = np.asarray(draft_probs, dtype=float)
    x = np.argmax(draft, axis=-1)[..., None]
    picked = np.take_along_axis(np.broadcast_to(target, np.broadcast_shapes(target.shape, draft.shape)),
                                x, axis=-1)[..., 0]
    return (picked >= lenience * target.max(axis=-1)).astype(float)


# ------------------------------------------------------------------- Chen et al. 2023

def chen_setting(root=None) -> dict:
    """The stated setting: target and draft ms/token, c = draft/target, K, batch size."""
    df = load_reported("chen2023", root)
    ars = df[df["method"] == "ArS"]["ms_per_token"].unique()
    if len(ars) != 1:
        raise ValueError(f"expected one autoregressive ms/token in chen2023, got {ars}")
    t_target = float(ars[0])
    t_draft = float(df[df["row"] == "draft"]["ms_per_token"].iloc[0])
    k = int(df[df["method"] == "SpS"]["k"].iloc[0])
    return {"t_target_ms": t_target, "t_draft_ms": t_draft, "c": t_draft / t_target, "k": k,
            "batch": int(df["batch"].dropna().iloc[0])}


def chen_table1(root=None, verify_overhead: float = 0.0, k_max: int = 16) -> pd.DataFrame:
    """Table 1's speculative rows: speedup recomputed from ms/token, then E and α inferred.

    One iteration costs K draft steps plus one target pass over K + 1 tokens; with
    ``verify_overhead`` δ that pass costs (1 + δ) target steps (Chen et al. observe that
    scoring K + 1 tokens is close to, not exactly, one step). Then
    speedup = E · t_target / (K t_draft + (1 + δ) t_target), so E = speedup · (K c + 1 + δ)
    and α = :func:`analytic.alpha_from_expected_tokens` (E, K). From that α the table
    predicts the best K and its speedup (:func:`analytic.optimal_k`, δ = 0).
    """
    s = chen_setting(root)
    df = load_reported("chen2023", root)
    sps = df[df["method"] == "SpS"].reset_index(drop=True)
    k, c = s["k"], s["c"]
    out = sps[["row", "benchmark", "sampling", "k", "ms_per_token"]].copy()
    out["speedup_reported"] = sps["speedup"]
    out["speedup_recomputed"] = s["t_target_ms"] / sps["ms_per_token"]
    out["match"] = _matches_printed(out["speedup_recomputed"], out["speedup_reported"], 2)
    out["baseline_ms_implied_by_printed_speedup"] = sps["ms_per_token"] * sps["speedup"]
    iteration = k * c + 1.0 + verify_overhead      # iteration time in target steps
    out["expected_tokens"] = out["speedup_recomputed"] * iteration
    out["alpha"] = analytic.alpha_from_expected_tokens(out["expected_tokens"].to_numpy(), k)
    # α if the printed speedup (not the ms/token ratio) were taken at face value
    out["alpha_from_printed_speedup"] = analytic.alpha_from_expected_tokens(
        (out["speedup_reported"] * iteration).to_numpy(), k)
    # α a reader would infer by ignoring the draft's cost (c = 0): an underestimate
    out["alpha_if_c_ignored"] = analytic.alpha_from_expected_tokens(out["speedup_recomputed"].to_numpy(), k)
    out["speedup_ceiling_k"] = (k + 1) / iteration   # every draft accepted
    best_k, best_s = analytic.optimal_k(out["alpha"].to_numpy(), c, k_max=k_max)
    out["k_opt"] = best_k
    out["speedup_at_k_opt"] = best_s
    out["ms_per_token_at_k_opt"] = s["t_target_ms"] / best_s
    out["break_even_alpha"] = float(analytic.break_even_alpha(k, c))
    return out


def chen_verify_sensitivity(overheads=(0.0, 0.1, 0.2, 0.3), root=None) -> pd.DataFrame:
    """α inferred for each benchmark as the verify pass's extra cost δ grows."""
    frames = []
    for d in overheads:
        t = chen_table1(root, verify_overhead=d)
        frames.append(t[["benchmark", "sampling", "alpha"]].assign(verify_overhead=d))
    return (pd.concat(frames).pivot_table(index=["benchmark", "sampling"], columns="verify_overhead",
                                          values="alpha").reset_index())


def chen_roofline(hardware: str = "tpu-v4", chips: int = 16, target_params: float = 70e9,
                  draft_params: float = 4e9, bytes_per_param: int = 2, root=None) -> pd.DataFrame:
    """Batch-1 bounds on 16 TPU v4: why c is 0.13 and not the parameter ratio 0.057.

    At batch 1 every decode step reads all weights once; spread over ``chips`` chips that
    takes params · bytes / (chips · bandwidth). Arithmetic for K + 1 tokens takes
    2 · params · (K + 1) / (chips · peak). The table sets both beside the measured step.
    """
    from specsim import roofline  # local: the hardware table lives with the roofline model

    hw = roofline.load_hardware(hardware)
    s = chen_setting(root)
    bandwidth = hw.bandwidth * chips
    peak = hw.peak("bfloat16") * chips
    rows = []
    for name, params, measured in (("target (Chinchilla 70B)", target_params, s["t_target_ms"]),
                                   ("draft (4B)", draft_params, s["t_draft_ms"])):
        read_ms = params * bytes_per_param / bandwidth * 1e3
        rows.append({
            "model": name, "params": params, "measured_ms": measured,
            "weight_read_ms": read_ms,
            "compute_ms_1_token": 2 * params / peak * 1e3,
            "compute_ms_k_plus_1_tokens": 2 * params * (s["k"] + 1) / peak * 1e3,
            "bandwidth_utilisation": read_ms / measured,
            "overhead_ms_beyond_weight_read": measured - read_ms,
        })
    out = pd.DataFrame(rows)
    out.attrs.update(hardware=hardware, chips=chips, c_measured=s["c"],
                     c_param_ratio=draft_params / target_params)
    return out


# ------------------------------------------------------------- the practitioner table

def domain_table(root=None) -> pd.DataFrame:
    """Each row's two ends (low α ↔ low speedup, high ↔ high) with the c each implies at K = 5."""
    df = load_reported("domain-table", root)
    rows = df[df["table"] == "Domain table"]
    recs = []
    for _, r in rows.iterrows():
        for end in ("low", "high"):
            recs.append({"row": r["row"], "workload": r["workload"], "k": int(r["k"]), "end": end,
                         "alpha": r[f"alpha_{end}"], "speedup": r[f"speedup_{end}"]})
    out = pd.DataFrame(recs)
    k = out["k"].to_numpy()
    out["expected_tokens"] = analytic.expected_tokens(out["alpha"].to_numpy(), k)
    out["c_implied"] = _implied_c(out["alpha"].to_numpy(), k, out["speedup"].to_numpy())
    # the c that keep this end within half a printed unit (0.05) of its speedup; speedup
    # falls with c, so the bounds come from speedup + 0.05 and speedup - 0.05
    out["c_min"] = np.nan_to_num(_implied_c(out["alpha"].to_numpy(), k, out["speedup"].to_numpy() + 0.05), nan=0.0)
    out["c_max"] = _implied_c(out["alpha"].to_numpy(), k, out["speedup"].to_numpy() - 0.05)
    return out


def domain_fit_c(root=None, tolerance: float = 0.05) -> dict:
    """Least-squares c over every printed (α, speedup) end of every row at K = 5.

    Returns c, the residuals table, RMSE, the largest |residual|, and ``one_c_explains``:
    every end reproduced within ``tolerance`` (half a printed unit of a one-decimal
    speedup is 0.05); ``c_common_interval``: the c (if any) that keeps every end within
    ``tolerance``; ``box_c_interval``: the c for which Thm 3.8 at K = 5 passes through every
    row's (α range × speedup range) box — the loosest reading of the table.
    """
    ends = domain_table(root)
    alpha, k, sp = ends["alpha"].to_numpy(), ends["k"].to_numpy(), ends["speedup"].to_numpy()

    def residuals(c):
        return analytic.speedup(alpha, k, np.full_like(alpha, c[0])) - sp

    fit = optimize.least_squares(residuals, x0=[0.05], bounds=([0.0], [1.0]))
    c = float(fit.x[0])
    # standard error from the Jacobian (one parameter, n - 1 degrees of freedom)
    res = residuals(fit.x)
    dof = max(len(res) - 1, 1)
    jtj = float(fit.jac[:, 0] @ fit.jac[:, 0])
    stderr = float(np.sqrt(res @ res / dof / jtj)) if jtj > 0 else float("nan")
    table = ends.assign(speedup_fit=analytic.speedup(alpha, k, np.full_like(alpha, c)))
    table["residual"] = table["speedup_fit"] - table["speedup"]
    max_abs = float(np.max(np.abs(table["residual"])))
    # per row: the speedup range the fitted c predicts over the row's α range, beside the printed one
    rows = (table.pivot_table(index=["row", "workload"], columns="end", values=["alpha", "speedup", "speedup_fit"])
            .sort_index(axis=1))
    rows.columns = [f"{a}_{b}" for a, b in rows.columns]
    rows = rows.reset_index().sort_values("alpha_low", ascending=False, ignore_index=True)
    # a c common to all ends within ±0.05 exists iff the per-end c intervals intersect
    c_common = (float(ends["c_min"].max()), float(ends["c_max"].min()))
    # looser "box" reading: the row only says α lies in its range and the speedup in its
    # range. Speedup rises with α and falls with c, so Thm 3.8 at c passes through a row's
    # box (widened by ±tolerance) iff S(α_low, c) <= S_high + tol and S(α_high, c) >= S_low - tol.
    lo_a, hi_a = rows["alpha_low"].to_numpy(), rows["alpha_high"].to_numpy()
    lo_s, hi_s = rows["speedup_low"].to_numpy(), rows["speedup_high"].to_numpy()
    kk = np.full(lo_a.shape, int(ends["k"].iloc[0]))
    rows["box_c_min"] = np.nan_to_num(_implied_c(lo_a, kk, hi_s + tolerance), nan=0.0)
    rows["box_c_max"] = _implied_c(hi_a, kk, lo_s - tolerance)
    box = (float(rows["box_c_min"].max()), float(rows["box_c_max"].min()))
    return {"c": c, "c_stderr": stderr, "table": table, "rows": rows,
            "c_common_interval": c_common, "c_common_exists": c_common[0] <= c_common[1],
            "box_c_interval": box, "box_c_exists": box[0] <= box[1],
            "rmse": float(np.sqrt(np.mean(table["residual"] ** 2))),
            "max_abs_residual": max_abs, "one_c_explains": max_abs <= tolerance + 1e-12,
            "c_range_implied": (float(ends["c_implied"].min()), float(ends["c_implied"].max()))}


def domain_break_even(c: float | None = None, root=None, k: int = 5) -> pd.DataFrame:
    """The companion claim ("below α ≈ 35–40 % speculation is slower") against Thm 3.8.

    For the fitted c (or the given one) and the extremes of the per-end implied c, the
    α at which K = 5 breaks even (:func:`analytic.break_even_alpha`) and the α at which
    the best K breaks even (K = 1, α = c: Leviathan et al. Cor. 3.9). Also the c the
    claim would need at K = 5: c = (E(α, 5) − 1) / 5 at α = 0.35 and 0.40.
    """
    df = load_reported("domain-table", root)
    claim = df[df["table"] == "Companion claim"].iloc[0]
    fit = domain_fit_c(root)
    cs = {"fitted": fit["c"] if c is None else c,
          "lowest implied": fit["c_range_implied"][0],
          "highest implied": fit["c_range_implied"][1]}
    rows = []
    for label, cv in cs.items():
        rows.append({"c_source": label, "c": cv, "k": k,
                     "break_even_alpha_k": float(analytic.break_even_alpha(k, cv)),
                     "break_even_alpha_k1": float(analytic.break_even_alpha(1, cv)),
                     "claim_alpha_low": claim["alpha_low"], "claim_alpha_high": claim["alpha_high"]})
    out = pd.DataFrame(rows)
    e = analytic.expected_tokens(np.array([claim["alpha_low"], claim["alpha_high"]]), k)
    out.attrs["c_needed_for_claim"] = tuple(float(x) for x in (e - 1.0) / k)
    return out
