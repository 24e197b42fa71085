"""Shapes of the models that published speculative-decoding results use.

A `ModelShape` holds what the hardware cost of a forward pass needs (layers, widths,
heads, vocabulary, experts) and nothing an engine needs to run the model, so the cost
model (`specsim.iteration_cost`) stays NumPy-only and works for models specsim cannot
run (Vicuna-33B, Mixtral, Qwen3-30B-A3B, T5). `as_roofline_config` turns a shape into the
duck-typed config `specsim.roofline.forward_cost` reads.

    shape = get_shape("mixtral-8x7b")
    shape.n_params(), shape.active_params()        # 46.7e9, 12.9e9
    get_shape("vicuna-68m").n_params()             # 68.0e6

Every preset names its source (the checkpoint's config.json); tests/test_presets.py
checks the parameter counts against the published figures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from specsim.errors import InvalidArgument
from specsim.validation import positive_int

__all__ = ["ModelShape", "PRESETS", "get_shape", "shape_names", "as_roofline_config",
           "eagle_head_shape"]


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """One transformer's shape. Decoder-only unless ``encoder_layers`` > 0 (T5: the
    encoder runs once per prompt; each decoding pass runs the ``n_layers`` decoder layers,
    each with self- and cross-attention). A mixture-of-experts model has ``n_experts`` > 0
    MLPs of width ``d_expert`` per layer, ``experts_per_token`` of them routed per token;
    ``d_ff`` is then unused. ``gated_mlp``: three MLP matrices (SwiGLU, gated GELU), else two."""
    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab_size: int
    tie_embeddings: bool = False
    qkv_bias: bool = False
    gated_mlp: bool = True
    n_experts: int = 0
    experts_per_token: int = 0
    d_expert: int = 0
    encoder_layers: int = 0
    dtype: str = "bfloat16"
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff",
                  "vocab_size"):
            positive_int(f, getattr(self, f))
        if self.n_heads % self.n_kv_heads:
            raise InvalidArgument(f"n_heads ({self.n_heads}) must be a multiple of "
                                  f"n_kv_heads ({self.n_kv_heads})")
        if self.n_experts:
            if not (0 < self.experts_per_token <= self.n_experts) or self.d_expert <= 0:
                raise InvalidArgument("a mixture of experts needs 0 < experts_per_token <= "
                                      "n_experts and d_expert > 0")

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def cross_attention(self) -> bool:
        return self.encoder_layers > 0

    def attention_params(self) -> int:
        """Q, K, V and output projections of one attention block (biases included)."""
        q, kv = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        bias = (q + 2 * kv) if self.qkv_bias else 0
        return self.d_model * q + 2 * self.d_model * kv + q * self.d_model + bias

    def expert_params(self) -> int:
        """One MLP: of width ``d_expert`` (an expert) or ``d_ff`` (dense)."""
        width = self.d_expert if self.is_moe else self.d_ff
        return (3 if self.gated_mlp else 2) * self.d_model * width

    def decoder_layer_params(self, experts: float | None = None) -> float:
        """One decoder layer with ``experts`` MLPs (default: all of them); norms counted."""
        n_mlp = (self.n_experts if experts is None else experts) if self.is_moe else 1
        router = self.d_model * self.n_experts if self.is_moe else 0
        attn = self.attention_params() * (2 if self.cross_attention else 1)
        return attn + n_mlp * self.expert_params() + router + 2 * self.d_model

    def embedding_params(self) -> int:
        return self.vocab_size * self.d_model * (1 if self.tie_embeddings else 2)

    def n_params(self) -> float:
        """All parameters (every expert; the encoder of an encoder-decoder)."""
        enc = self.encoder_layers * (self.attention_params() + self.expert_params()
                                     + 2 * self.d_model)
        return float(self.n_layers * self.decoder_layer_params() + enc
                     + self.embedding_params() + self.d_model)

    def active_params(self) -> float:
        """Parameters one token passes through (``experts_per_token`` experts a layer)."""
        enc = self.encoder_layers * (self.attention_params() + self.expert_params()
                                     + 2 * self.d_model)
        k = self.experts_per_token if self.is_moe else None
        return float(self.n_layers * self.decoder_layer_params(k) + enc
                     + self.embedding_params() + self.d_model)

    def replace(self, **changes) -> "ModelShape":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class _RooflineConfig:
    """The fields `specsim.roofline.forward_cost` reads, for a `ModelShape`."""
    n_layers: int
    d_model: int
    d_ff: int
    vocab_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    qkv_bias: bool
    dtype: str
    arch: str = "llama"


def as_roofline_config(shape: ModelShape, *, d_ff: int | None = None) -> _RooflineConfig:
    """A config `forward_cost` accepts: llama layout (three MLP matrices) with the shape's
    widths; ``d_ff`` overrides the MLP width (the caller accounts for experts)."""
    return _RooflineConfig(n_layers=shape.n_layers, d_model=shape.d_model,
                           d_ff=int(d_ff if d_ff is not None else shape.d_ff),
                           vocab_size=shape.vocab_size, n_heads=shape.n_heads,
                           n_kv_heads=shape.n_kv_heads, head_dim=shape.head_dim,
                           qkv_bias=shape.qkv_bias, dtype=shape.dtype)


def eagle_head_shape(target: ModelShape, *, fused_inputs: int = 2,
                     draft_vocab: int | None = None) -> ModelShape:
    """The EAGLE draft head of ``target``: one decoder layer of the target's width (dense
    MLP of the target's d_ff, or of the routed experts' total width for a mixture), a
    ``fused_inputs`` x d_model -> d_model input projection (2 for EAGLE-1/2: feature and
    token embedding; 3 for EAGLE-3's fused features) and an output head over
    ``draft_vocab`` tokens (None: the target's vocabulary; EAGLE-3 heads and FR-Spec keep
    a reduced one)."""
    d_ff = target.d_ff if not target.is_moe else target.d_expert * target.experts_per_token
    vocab = target.vocab_size if draft_vocab is None else positive_int("draft_vocab", draft_vocab)
    return ModelShape(name=f"eagle-head({target.name})", n_layers=1, d_model=target.d_model,
                      n_heads=target.n_heads, n_kv_heads=target.n_kv_heads,
                      head_dim=target.head_dim, d_ff=max(d_ff, 1),
                      vocab_size=vocab, dtype=target.dtype,
                      source=f"EAGLE head of {target.name}: fc {fused_inputs}D->D + one layer")


_HF = "https://huggingface.co/{}/blob/main/config.json"
_LLAMA1 = dict(vocab_size=32000, dtype="float16")      # Llama 1 and 2, Vicuna
_LLAMA1_7B = dict(n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32, head_dim=128,
                  d_ff=11008, **_LLAMA1)
_LLAMA1_13B = dict(n_layers=40, d_model=5120, n_heads=40, n_kv_heads=40, head_dim=128,
                   d_ff=13824, **_LLAMA1)
_LLAMA_70B = dict(n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, head_dim=128,
                  d_ff=28672)                         # Llama 2 and 3 70B (grouped-query)
_T5 = dict(vocab_size=32128, dtype="bfloat16", gated_mlp=True)

_SHAPES = [
    ModelShape(name="vicuna-7b", **_LLAMA1_7B, source=_HF.format("lmsys/vicuna-7b-v1.3")),
    ModelShape(name="vicuna-13b", **_LLAMA1_13B, source=_HF.format("lmsys/vicuna-13b-v1.3")),
    ModelShape(name="vicuna-33b", n_layers=60, d_model=6656, n_heads=52, n_kv_heads=52,
               head_dim=128, d_ff=17920, **_LLAMA1,
               source=_HF.format("lmsys/vicuna-33b-v1.3")),
    ModelShape(name="vicuna-68m", n_layers=2, d_model=768, n_heads=12, n_kv_heads=12,
               head_dim=64, d_ff=3072, **_LLAMA1,
               source=_HF.format("double7/vicuna-68m") + " (the JackFram/llama-68m shape)"),
    ModelShape(name="llama-2-7b", **_LLAMA1_7B, source=_HF.format("meta-llama/Llama-2-7b-hf")),
    ModelShape(name="llama-2-13b", **_LLAMA1_13B, source=_HF.format("meta-llama/Llama-2-13b-hf")),
    ModelShape(name="llama-2-70b", **_LLAMA_70B, **_LLAMA1,
               source=_HF.format("meta-llama/Llama-2-70b-hf")),
    ModelShape(name="llama-3.1-8b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
               head_dim=128, d_ff=14336, vocab_size=128256,
               source=_HF.format("meta-llama/Llama-3.1-8B-Instruct")),
    ModelShape(name="llama-3.3-70b", **_LLAMA_70B, vocab_size=128256,
               source=_HF.format("meta-llama/Llama-3.3-70B-Instruct")),
    ModelShape(name="llama-3.2-1b", n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8,
               head_dim=64, d_ff=8192, vocab_size=128256, tie_embeddings=True,
               source=_HF.format("meta-llama/Llama-3.2-1B")),
    ModelShape(name="llama-3.2-3b", n_layers=28, d_model=3072, n_heads=24, n_kv_heads=8,
               head_dim=128, d_ff=8192, vocab_size=128256, tie_embeddings=True,
               source=_HF.format("meta-llama/Llama-3.2-3B")),
    ModelShape(name="mixtral-8x7b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
               head_dim=128, d_ff=14336, vocab_size=32000, n_experts=8, experts_per_token=2,
               d_expert=14336, source=_HF.format("mistralai/Mixtral-8x7B-v0.1")),
    ModelShape(name="qwen3-30b-a3b", n_layers=48, d_model=2048, n_heads=32, n_kv_heads=4,
               head_dim=128, d_ff=6144, vocab_size=151936, n_experts=128,
               experts_per_token=8, d_expert=768, source=_HF.format("Qwen/Qwen3-30B-A3B")),
    ModelShape(name="qwen2.5-7b", n_layers=28, d_model=3584, n_heads=28, n_kv_heads=4,
               head_dim=128, d_ff=18944, vocab_size=152064, qkv_bias=True,
               source=_HF.format("Qwen/Qwen2.5-7B-Instruct")),
    ModelShape(name="qwen2.5-0.5b", n_layers=24, d_model=896, n_heads=14, n_kv_heads=2,
               head_dim=64, d_ff=4864, vocab_size=151936, qkv_bias=True,
               tie_embeddings=True, source=_HF.format("Qwen/Qwen2.5-0.5B-Instruct")),
    # specsim's own demo target (specsim.models.config.SMOLLM2_135M), float32 on the CPU.
    ModelShape(name="smollm2-135m", n_layers=30, d_model=576, n_heads=9, n_kv_heads=3,
               head_dim=64, d_ff=1536, vocab_size=49152, tie_embeddings=True,
               dtype="float32", source=_HF.format("HuggingFaceTB/SmolLM2-135M-Instruct")),
    # T5 version 1.1 (Leviathan et al. 2023): gated GELU, untied head, no biases.
    ModelShape(name="t5-v1.1-xxl", n_layers=24, encoder_layers=24, d_model=4096, n_heads=64,
               n_kv_heads=64, head_dim=64, d_ff=10240, **_T5,
               source=_HF.format("google/t5-v1_1-xxl")),
    ModelShape(name="t5-v1.1-large", n_layers=24, encoder_layers=24, d_model=1024,
               n_heads=16, n_kv_heads=16, head_dim=64, d_ff=2816, **_T5,
               source=_HF.format("google/t5-v1_1-large")),
    ModelShape(name="t5-v1.1-base", n_layers=12, encoder_layers=12, d_model=768, n_heads=12,
               n_kv_heads=12, head_dim=64, d_ff=2048, **_T5,
               source=_HF.format("google/t5-v1_1-base")),
    ModelShape(name="t5-v1.1-small", n_layers=8, encoder_layers=8, d_model=512, n_heads=6,
               n_kv_heads=6, head_dim=64, d_ff=1024, **_T5,
               source=_HF.format("google/t5-v1_1-small")),
]
PRESETS: dict[str, ModelShape] = {s.name: s for s in _SHAPES}


def shape_names() -> tuple[str, ...]:
    return tuple(sorted(PRESETS))


def get_shape(name_or_shape) -> ModelShape:
    """A preset by name (case-insensitive), or a `ModelShape` as given; InvalidArgument
    naming the presets otherwise."""
    if isinstance(name_or_shape, ModelShape):
        return name_or_shape
    key = str(name_or_shape).lower()
    if key in PRESETS:
        return PRESETS[key]
    raise InvalidArgument(f"unknown model {name_or_shape!r}; known models: "
                          f"{', '.join(shape_names())} (or pass a specsim.presets.ModelShape)")
