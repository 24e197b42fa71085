"""`Model`: a config, its parameter pytree and (optionally) a tokenizer, as every loader
returns it (`specsim.models.load`, `specsim.models.hf`, `specsim.models.gguf_file`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from specsim.models.config import ModelConfig
from specsim.models.transformer import arrange_layers

__all__ = ["Model"]


@dataclass(frozen=True)
class Model:
    """A config, its parameter pytree and (optionally) a tokenizer. Immutable: variants
    come from `dataclasses.replace`."""
    cfg: ModelConfig
    params: Any
    tokenizer: Any = None
    source: str = ""

    @property
    def name(self) -> str:
        return self.cfg.name

    def replace(self, **changes) -> "Model":
        return dataclasses.replace(self, **changes)

    def with_layer_loop(self, layer_loop: str) -> "Model":
        """The same model run with ``layer_loop`` ("scan" or "unroll"), its layers laid
        out for that loop (stacked for scan, per-layer arrays for unroll). Replacing
        ``cfg.layer_loop`` alone leaves a layout that `forward` refuses."""
        cfg = self.cfg.replace(layer_loop=layer_loop)
        return self.replace(cfg=cfg, params=arrange_layers(self.params, cfg))
