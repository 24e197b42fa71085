"""The suite compiles at LLVM's optimisation level 0 (`tests/conftest.py`); this checks
the claim that makes that safe: XLA's HLO passes do not depend on it, so the optimised
program a test inspects (fusions, copies, donated buffers) is the one the CLI runs at
the default level. Two subprocesses compile the same speculative program, one with the
suite's XLA_FLAGS and one without, and print its optimised HLO less the metadata."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import re
from specsim import decode, models
from specsim.drafters import NGramDrafter

target = models.load("tiny-llama")
loop = decode.speculative_loop(target, NGramDrafter(target.cfg.vocab_size, n=2),
                               [[1, 2, 3, 1, 2]], 8, k=3, eos_token_id=None)
hlo = loop.lower().compile().as_text()
lines = [ln for ln in hlo.splitlines() if not ln.lstrip().startswith("HloModule")]
print("HLO" + re.sub(r", metadata=\{[^}]*\}", "", "\n".join(lines)))
"""


def _hlo(xla_flags: str) -> str:
    env = dict(os.environ, XLA_FLAGS=xla_flags, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout[proc.stdout.index("HLO") + 3:]


def test_the_suites_llvm_level_leaves_the_optimised_hlo_unchanged():
    assert "--xla_backend_optimization_level=0" in os.environ.get("XLA_FLAGS", "") or \
        os.environ.get("SPECSIM_TEST_XLA_OPT", "").strip().lower() == "default"
    suite = _hlo("--xla_backend_optimization_level=0")
    default = _hlo("")
    assert "fusion" in default and "while" in default
    assert suite == default
