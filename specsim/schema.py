"""Column names of the measurement tables, in one place (NumPy/pandas only, no JAX).

The demo writes four tables (``results/demo/*.csv``) that the report, the figures and
the notebooks read; every reader and writer names their columns through this module.

- **runs**: one row per generation run (autoregressive baseline or speculative), the
  run's shape (`RUN_KEY`), its timings, its acceptance statistics and, for speculative
  runs, its predictions. Per-position acceptance is stored as real columns
  ``alpha_pos_1 … alpha_pos_K`` with their sample counts ``alpha_pos_n_1 … alpha_pos_n_K``
  (NaN past a run's own K), never as text in a cell.
- **sweeps**: one row per measured forward pass (`specsim.bench.sweep_forward`).
- **ceilings**: one row per device (`specsim.bench.measure_ceilings`).
- **hardware**: one row per (drafter, temperature, K, hardware row) of datasheet
  predictions.

α here is always ``alpha_per_slot`` (accepted drafts over the K draft slots of every
iteration; an empty slot counts as a rejection) unless a column says otherwise
(``alpha_proposed``: accepted over proposed).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from specsim.errors import InvalidArgument

# ---- table names (files under results/demo/) ------------------------------------------------
RUNS = "runs"
SWEEPS = "sweeps"
CEILINGS = "ceilings"
HARDWARE = "hardware"

# ---- runs: what was run ---------------------------------------------------------------------
TEMPERATURE = "temperature"
DRAFTER = "drafter"
K = "k"
KIND = "kind"
BATCH = "batch"
RUN_KEY = (TEMPERATURE, DRAFTER, K, KIND, BATCH)
AUTOREGRESSIVE = "autoregressive"          # the drafter value of a baseline run

# ---- runs: what it produced and how long it took ---------------------------------------------
NEW_TOKENS = "new_tokens"
ITERATIONS = "iterations"
TARGET_PASSES = "target_passes"
DRAFT_PASSES = "draft_passes"
TIME_S = "time_s"                          # median over the timing rounds
TIME_SPREAD_S = "time_spread_s"            # max − min over the rounds
PREFILL_S = "prefill_s"
DECODE_S = "decode_s"                      # time_s − prefill_s
PADDED_PROMPT = "padded_prompt"
CACHE_LEN = "cache_len"
PASS_CONTEXT = "pass_context"              # cached tokens the run's pass programs attend
TEXT = "text"

# ---- runs: acceptance -------------------------------------------------------------------------
ALPHA = "alpha"                            # alpha_per_slot
ALPHA_PROPOSED = "alpha_proposed"          # alpha_per_proposal
TOKENS_PER_ITERATION = "tokens_per_iteration"
MEAN_OVERLAP = "mean_overlap"
_POS = "alpha_pos_"
_POS_N = "alpha_pos_n_"

# ---- runs: predictions -----------------------------------------------------------------------
E_IID = "E_iid"
E_POSITIONAL = "E_positional"
COST_RATIO = "cost_ratio"                 # t_draft / t_target(1), the pass programs timed in-run
T_TARGET_1 = "t_target_1"
T_VERIFY = "t_verify"
T_DRAFT = "t_draft"
T_TARGET_1_SWEPT = "t_target_1_swept"
T_VERIFY_SWEPT = "t_verify_swept"
T_DRAFT_SWEPT = "t_draft_swept"
PRED_IID = "pred_speedup_iid"
PRED_POSITIONAL = "pred_speedup_positional"
# the in-run costs with E_model, the expected acceptance at the run's own rates: the cost
# model and the acceptance model together (its error: err_total + err_acceptance)
PRED_EXPECTED_ACCEPTANCE = "pred_speedup_expected_acceptance"
PRED_SWEPT = "pred_speedup_swept_costs"
PRED_CONSTANT_COST = "pred_speedup_constant_cost"
MEASURED_SPEEDUP = "measured_speedup"
LOOP_OVERHEAD = "loop_overhead_ratio"
PREDICTIONS = (PRED_IID, PRED_POSITIONAL, PRED_SWEPT)

# ---- runs: the in-run cost model and the error decomposition -----------------------------------
# Every speculative run predicted from pass times measured in the same interleaved rounds
# as the run (`specsim.pass_costs`, `specsim.experiment.inrun`): t_target_1, t_verify,
# t_draft above are then those in-run pass-program times. Inputs taken from measurement
# are listed per row in MEASURED_INPUTS (";"-separated column names).
DRAFTER_KIND = "drafter_kind"              # instrument, ngram, layer-skip, model
ALPHA_SET = "alpha_set"                    # the instrument's set α (NaN for real drafters)
DRAFT_LAYERS = "draft_layers"              # target layers one instrument draft step runs
PREDICTED_SPEEDUP = "predicted_speedup"    # the in-run prediction: E_effective · t1 / (K t_d + t_v)
E_MODEL = "E_model"                        # expected E at the run's α_j, finite run, batch max
E_EFFECTIVE = "E_effective"                # n decode tokens / batched iterations (measured)
T_TARGET_1_RUN = "t_target_1_run"          # (T_AR − prefill) / n: the step inside the AR run
T_ITERATION_RUN = "t_iteration_run"        # (T_spec − prefill) / I: the iteration inside the run
ERR_TOTAL = "err_total_pct"                # 100 ln(predicted / measured)
ERR_ACCEPTANCE = "err_acceptance_pct"      # 100 ln(E_model / E_effective): the acceptance model
ERR_COST = "err_cost_pct"                  # 100 ln(t_target_1 / t_target_1_run)
ERR_OVERHEAD = "err_overhead_pct"          # 100 ln(t_iteration_run / (K t_draft + t_verify))
ERR_ACCEPT_IID = "err_accept_iid_pct"      # 100 ln(E_iid / E_effective)
ERR_ACCEPT_POSITIONAL = "err_accept_positional_pct"
ERR_ACCEPT_TPI = "err_accept_tpi_pct"      # 100 ln(mean tokens per iteration / E_effective)
PRED_SET_ALPHA = "pred_speedup_set_alpha"  # instrument: E from the set α alone (finite run)
ERR_ACCEPT_SET = "err_accept_set_pct"      # 100 ln(E from the set α / E_effective)
PRED_FIT = "pred_speedup_fit"              # E_effective with the fitted roofline's pass times
ERR_COST_FIT = "err_cost_fit_pct"          # 100 ln(pred_speedup_fit / predicted_speedup)
# the 95% range of err_acceptance over runs simulated at the run's rates, length and batch
# (`finite_run.acceptance_term_draws`): the run's own draw, which no timing interval holds
ERR_ACCEPTANCE_DRAW_LO = "err_acceptance_draw_lo_pct"
ERR_ACCEPTANCE_DRAW_HI = "err_acceptance_draw_hi_pct"
MEASURED_LO = "measured_speedup_lo"        # min over rounds of the per-round speedup
MEASURED_HI = "measured_speedup_hi"        # max over rounds
# paired, adaptive timing (`specsim.experiment.paired`, `specsim.experiment.intervals`):
# [lo, hi] columns are 95% bootstrap intervals over the run's paired rounds
MEASURED_CI_LO = "measured_speedup_ci_lo"
MEASURED_CI_HI = "measured_speedup_ci_hi"
MEASURED_HALF_WIDTH = "measured_half_width"  # (hi − lo) / 2 / measured: 0.03 is ±3%
PREDICTED_CI_LO = "predicted_speedup_ci_lo"
PREDICTED_CI_HI = "predicted_speedup_ci_hi"
ERR_TOTAL_CI_LO = "err_total_ci_lo_pct"
ERR_TOTAL_CI_HI = "err_total_ci_hi_pct"
PASS_CI = {"t_target_1": ("t_target_1_ci_lo", "t_target_1_ci_hi"),
           "t_verify": ("t_verify_ci_lo", "t_verify_ci_hi"),
           "t_draft": ("t_draft_ci_lo", "t_draft_ci_hi")}
ROUNDS = "rounds"                          # paired rounds the run was timed in
STOPPED = "stopped"                        # why its rounds ended: converged, time budget, ...
BASELINE_SPREAD = "baseline_spread_pct"    # 100 (max − min) / median of its own baseline
CPU_OVER_WALL = "cpu_over_wall"            # CPU seconds over wall seconds of its timed calls
# the prediction made before the run: the fitted roofline's pass times and the drafter's
# per-position α known beforehand (set, or from an untimed run on the run's prompt)
PRED_PRIOR = "pred_speedup_prior"
ERR_PRIOR = "err_prior_pct"                # 100 ln(pred_speedup_prior / measured)
ERR_PRIOR_CI_LO = "err_prior_ci_lo_pct"    # from the measured speedup's interval (the
ERR_PRIOR_CI_HI = "err_prior_ci_hi_pct"    # prediction itself holds no timing of the run)
ERR_PRIOR_ALPHA = "err_prior_alpha_pct"    # 100 ln(E from the α known before / E_effective)
ERR_PRIOR_FIT = "err_prior_fit_pct"        # the fitted pass times against the in-run ones
# err_prior = err_prior_alpha + err_prior_fit + err_total (the in-run prediction's miss)
ALPHA_PRIOR = "alpha_prior"                # the per-position α it used, ";"-joined
ALPHA_PRIOR_SOURCE = "alpha_prior_source"  # "set" or "this prompt"
# the same prediction with a real drafter's α from untimed runs on other prompts of the kind
PRED_PRIOR_OTHER = "pred_speedup_prior_other_prompts"
ERR_PRIOR_OTHER = "err_prior_other_prompts_pct"   # 100 ln(pred_speedup_prior_other / measured)
ACCEPTANCE_PRIOR = "acceptance_prior"      # results/demo/acceptance_prior.csv: calibration α_j
ALPHA_SOURCE = "source"                    # its column: "this prompt" or "other prompts"
PASS_SWEEP = "pass_sweep"                  # results/demo/pass_sweep.csv: the loop's passes swept
TIMED_CALLS = "timed_calls"                # results/demo/timed_calls.csv: every timed call's seconds
CLOCK = "clock"                            # wall or cpu (process CPU time): drives the row
MEASURED_BY_CLOCK = {"wall": "measured_speedup_wall", "cpu": "measured_speedup_cpu"}
PREDICTED_BY_CLOCK = {"wall": "predicted_speedup_wall", "cpu": "predicted_speedup_cpu"}
"""The measured and predicted speedup by each clock (every call is timed by both at once;
CLOCK says which one the row's other columns use)."""
MEASURED_INPUTS = "measured_inputs"
DECOMPOSITION = (ERR_COST, ERR_OVERHEAD)
"""The two log-percent terms of the in-run prediction's miss; they add up to ERR_TOTAL
exactly (ERR_ACCEPTANCE, the acceptance model's term, is scored apart)."""
CONTRACT = (DRAFTER, K, BATCH, TEMPERATURE, ALPHA, TOKENS_PER_ITERATION, COST_RATIO,
            MEASURED_SPEEDUP, PREDICTED_SPEEDUP, ERR_TOTAL, *DECOMPOSITION, ERR_ACCEPTANCE)
"""The columns other tools may rely on in results/demo/runs.csv (one row per speculative
run; ``alpha`` is alpha_per_slot, measured)."""
FIDELITY = "fidelity"                      # results/demo/fidelity.json
BREAK_EVEN = "break_even"                  # results/demo/break_even.csv

# ---- sweeps and ceilings ----------------------------------------------------------------------
MODEL = "model"
N_TOKENS = "n_tokens"
CONTEXT = "context"
FLOPS = "flops"
BYTES = "bytes"
DEVICE = "device"
MATMUL_FLOPS_PER_S = "matmul_flops_per_s"
COPY_BYTES_PER_S = "copy_bytes_per_s"

# ---- hardware predictions ---------------------------------------------------------------------
HARDWARE_NAME = "hardware"
PRED_SPEEDUP = "pred_speedup"
THIS_MACHINE = "this machine (fit)"


# ---- the drafters part (`specsim.experiment.parts.drafters`) ----------------------------------
ALPHA_BY_KIND = "alpha_by_kind"            # α per (target, drafter, temperature, K, kind)
DRAFTER_COSTS = "drafter_costs"            # per drafter: pass times, c measured and from bytes
DRAFTER_SPEEDUP = "drafter_speedup"        # per timed run: measured and predicted speedup
DRAFTER_LIMITS = "drafter_limits"          # per drafter: best, α/c for drafter_study.TARGET_SPEEDUP
TARGET = "target"                          # the target model's name
C_MEASURED = "c_measured"                  # t_draft / t_target_1 from the loop's own programs
C_BYTES = "c_bytes"                        # draft pass bytes / target pass bytes (roofline)
C_BYTES_MATERIALISED = "c_bytes_materialised"   # + fp32 copies of dequantised matrices
WEIGHT_BITS = "weight_bits"                # quantised weight width (None: dense)


def alpha_pos(j: int) -> str:
    """Column of the acceptance rate at draft position ``j`` (1-based)."""
    return f"{_POS}{int(j)}"


def alpha_pos_count(j: int) -> str:
    """Column of the number of iterations that reached draft position ``j`` (1-based)."""
    return f"{_POS_N}{int(j)}"


def position_columns(df: pd.DataFrame) -> list[int]:
    """The draft positions j (1-based, sorted) that ``df`` has an ``alpha_pos_j`` column for."""
    pat = re.compile(rf"^{_POS}(\d+)$")
    return sorted(int(m.group(1)) for c in df.columns if (m := pat.match(str(c))))


def position_fields(rates, counts) -> dict[str, float]:
    """The per-position columns of one run: ``{alpha_pos_j: rate, alpha_pos_n_j: count}``."""
    out: dict[str, float] = {}
    for j, (r, n) in enumerate(zip(rates, counts), start=1):
        out[alpha_pos(j)] = float(r)
        out[alpha_pos_count(j)] = float(n)
    return out


def position_rates(row, k: int | None = None) -> np.ndarray:
    """[K] per-position rates of one run (a row of the runs table); ``k`` defaults to the
    row's own K."""
    k = int(row[K]) if k is None else int(k)
    return np.array([row.get(alpha_pos(j), np.nan) for j in range(1, k + 1)], float)


def position_counts(row, k: int | None = None) -> np.ndarray:
    """[K] sample counts of the per-position rates of one run."""
    k = int(row[K]) if k is None else int(k)
    return np.array([row.get(alpha_pos_count(j), np.nan) for j in range(1, k + 1)], float)


def speculative(runs: pd.DataFrame) -> pd.DataFrame:
    """The speculative rows of a runs table."""
    return runs[runs[DRAFTER] != AUTOREGRESSIVE]


def require(df: pd.DataFrame, columns, what: str = "runs") -> None:
    """Raise a ValueError naming the columns ``df`` lacks."""
    missing = sorted(set(columns) - set(df.columns))
    if missing:
        raise InvalidArgument(f"{what} lacks columns {missing} (expected the demo's {what} table)")


def upgrade_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """A runs table written before the schema held per-position rates as columns (a JSON
    list in ``per_position``, no ``batch``) in today's form; newer tables pass through."""
    out = runs.copy()
    if BATCH not in out:
        out[BATCH] = 1
    if "per_position" in out and not position_columns(out):
        lists = [json.loads(s) if isinstance(s, str) else [] for s in out.pop("per_position")]
        width = max((len(x) for x in lists), default=0)
        for j in range(1, width + 1):
            out[alpha_pos(j)] = [x[j - 1] if len(x) >= j else np.nan for x in lists]
            out[alpha_pos_count(j)] = np.nan          # the old table did not keep counts
    return out


def read_runs(path) -> pd.DataFrame:
    """Read a runs CSV (any version) as today's runs table."""
    return upgrade_runs(pd.read_csv(path))


# ---- policies (the ``policies`` part: draft-length policies, measured and replayed) -----------
POLICIES = "policies"                      # table name
POLICY = "policy"                          # autoregressive | fixed | a policy name
BEST_FIXED_K = "best_fixed_k"              # the swept fixed K with the highest measured speedup
SPEEDUP_VS_AR = "speedup_vs_autoregressive"            # measured, decode time (prefill removed)
SPEEDUP_VS_BEST_FIXED = "speedup_vs_best_fixed"        # measured, against the best fixed K
SIM_SPEEDUP_VS_AR = "sim_speedup_vs_autoregressive"    # replayed on the recorded trace
SIM_SPEEDUP_VS_BEST_FIXED = "sim_speedup_vs_best_fixed"
OWN_COST_SPEEDUP = "cost_model_speedup"    # the pass costs on the run's own passes
#   (max_new - 1)·t_target_1 over Σ the run's target passes by width and draft steps at
#   the pass times of the same rounds: the replay's cost model without its decisions
VS_BEST_LOW = "speedup_vs_best_fixed_low"    # lowest per-round ratio (paired rounds)
VS_BEST_HIGH = "speedup_vs_best_fixed_high"  # highest per-round ratio
WITHIN_3PCT_OF_BEST = "within_3pct_of_best"  # yes (every round) | no (none) | noise
VS_AR_LOW = "speedup_vs_autoregressive_low"    # lowest per-round speedup (paired rounds)
VS_AR_HIGH = "speedup_vs_autoregressive_high"  # highest per-round speedup
WITHIN_2PCT_OF_AR = "within_2pct_of_autoregressive"  # >= 0.98x: yes | no | noise, as above
MEAN_K = "mean_k"                          # mean planned K over active row-iterations
K0_FRACTION = "k0_fraction"                # row-iterations the policy planned K = 0
SIM_K0_FRACTION = "sim_k0_fraction"
COST_RATIO_PASSES = "c_pass"               # t_draft / t_target_1 from pass_costs, same rounds
