"""The quantised self-draft: the target's own weights, quantised weight-only (int8 per
output channel or int4 in groups, `specsim.models.quantize`), as a `ModelDrafter`;
optionally with only some of the target's layers (quantised and layer-skipped).

Exactness does not depend on the draft: the verify step accepts a drafted token with
probability min(1, p/q) (at temperature 0, iff it is the target's argmax), so the output
follows the target whatever the quantisation error; the error only lowers α.
"""

from __future__ import annotations

from specsim.drafters.model import ModelDrafter
from specsim.models.quantize import quantize_params
from specsim.models.transformer import select_layers

__all__ = ["quantized_self_drafter"]


def quantized_self_drafter(target, bits: int = 8, group_size: int | None = None,
                           layers=None, *, head: bool = False,
                           name: str | None = None) -> ModelDrafter:
    """``target`` (a `specsim.models.Model`) with its layer matrices quantised to
    ``bits`` (8 or 4) in groups of ``group_size`` input rows (None: per output channel,
    int8 only; int4 defaults to 32), and with only ``layers`` (ids; None: all) of its
    layers. ``head``: quantise the output head too. Weights the target holds already
    quantised are re-quantised from their dequantised values."""
    if bits == 4 and group_size is None:
        group_size = 32
    params, cfg = target.params, target.cfg
    n_layers = cfg.n_layers
    if layers is not None:
        params, cfg = select_layers(params, cfg, layers)
    params = quantize_params(params, cfg, bits, group_size, head=head)
    tag = f"int{bits}" + (f"g{group_size}" if group_size else "") + ("+head" if head else "")
    if layers is not None:
        tag += f":{cfg.n_layers}/{n_layers}"
    cfg = cfg.replace(name=f"{cfg.name}-{tag}")
    return ModelDrafter(params, cfg, name or f"quantized-self:{tag}")
