"""The quantised self-draft: the target's own weights, quantised weight-only (int8 per
output channel or int4 in groups, symmetric or with offsets, `specsim.models.quantize`),
as a `ModelDrafter`; optionally with only some of the target's layers (quantised and
layer-skipped).

A target read from a quantised file is the draft's best case: asymmetric int4 in groups
of 32 recovers a Q4_1 GGUF's layers exactly, and int8 in groups of 32 its Q8_0 head, so
the draft differs from the target only by fp32 rounding (α near 1); symmetric int4
re-rounds the weights (α lower; docs/studies/int4.md).

Exactness does not depend on the draft: the verify step accepts a drafted token with
probability min(1, p/q) (at temperature 0, iff it is the target's argmax), so the output
follows the target whatever the quantisation error; the error only lowers α.

Where it runs: under matmul "auto" on one CPU device, specsim's kernel reads the
quantised bytes as stored and dequantises in registers (int8 and int4,
`specsim.models.kernels.small_matmul_quantized`), so a draft pass reads what
`specsim.roofline.forward_cost(weight_bits=...)` counts.

Layer loop: the draft runs ``layer_loop="scan"`` by default, whatever the target's. On
XLA's dots (``matmul="xla"``) the dequantised matrices are materialised before each dot
(the convert is not fused into the matmul); in a scan the one layer body's buffers are
reused, unrolled they are a fresh fp32 copy per layer and pass, several times slower (see
docs/studies/int8.md). Unrolled inside a decode loop the dequantisation is also hoisted
out of the loop, so the draft would read fp32 copies (`specsim.models.quantize_model`).
"""

from __future__ import annotations

from specsim.drafters.model import ModelDrafter
from specsim.errors import InvalidArgument
from specsim.models.quantize import ACTIVATIONS, quantize_params
from specsim.models.transformer import arrange_layers, select_layers

__all__ = ["quantized_self_drafter"]


def quantized_self_drafter(target, bits: int = 8, group_size: int | None = None,
                           layers=None, *, head: bool | tuple = False, asymmetric: bool = False,
                           activations: str = "fp32", layer_loop: str = "scan",
                           name: str | None = None) -> ModelDrafter:
    """``target`` (a `specsim.models.Model`) with its layer matrices quantised to
    ``bits`` (8 or 4) in groups of ``group_size`` input rows (None: per output channel,
    int8 only; int4 defaults to 32), with offsets where ``asymmetric``, and with only
    ``layers`` (ids; None: all) of its layers. ``head``: False (dense), True (quantised
    as the layers) or its own format (bits, group_size, asymmetric). Weights the target
    holds already quantised are re-quantised from their dequantised values.
    ``activations`` (one of `quantize.ACTIVATIONS`): "int8" rounds x to int8 per group
    in every quantised product (a cheaper step; α may fall, docs/studies/int4.md).
    ``layer_loop``: the draft's loop (default "scan", see the module docstring)."""
    if activations not in ACTIVATIONS:
        raise InvalidArgument(f"activations must be one of {ACTIVATIONS}, got {activations!r}")
    if bits == 4 and group_size is None:
        group_size = 32
    params, cfg = target.params, target.cfg
    n_layers = cfg.n_layers
    if layers is not None:
        params, cfg = select_layers(params, cfg, layers)
    params = quantize_params(params, cfg, bits, group_size, head=head, asymmetric=asymmetric,
                             activations=activations)
    tag = _format_tag(bits, group_size, asymmetric) + ("x8" if activations == "int8" else "")
    if isinstance(head, tuple):
        tag += "+head:" + _format_tag(*head)
    elif head:
        tag += "+head"
    if layers is not None:
        tag += f":{cfg.n_layers}/{n_layers}"
    cfg = cfg.replace(name=f"{cfg.name}-{tag}", layer_loop=layer_loop)
    return ModelDrafter(arrange_layers(params, cfg), cfg, name or f"quantized-self:{tag}")


def _format_tag(bits, group_size, asymmetric) -> str:
    """"int4g32", "int4g32a" (asymmetric), "int8" (per output channel)."""
    return f"int{bits}" + (f"g{group_size}" if group_size else "") + ("a" if asymmetric else "")
