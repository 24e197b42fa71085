"""Model configuration: one frozen, hashable record per architecture shape.

A `ModelConfig` is passed to `jax.jit` as a static argument, so it must be hashable
(every field is a plain scalar, string or tuple). Variants come from
`dataclasses.replace`; derived sizes are properties.

Two families share one config:

* ``arch="llama"``: RMSNorm, rotary positions (RoPE, optional scaling), grouped-query
  attention, SwiGLU MLP, optional QKV bias (Qwen2), tied or separate output head.
* ``arch="gpt2"``: learned positions, LayerNorm with bias, multi-head attention with
  biases, GELU (tanh approximation) MLP, tied output head.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from specsim.errors import ConfigError, InvalidArgument
from specsim.validation import choice, positive_int

ARCHS = ("llama", "gpt2")
LAYER_LOOPS = ("scan", "unroll")
DTYPES = ("float32", "bfloat16", "float16")
MATMULS = ("auto", "kernel", "xla")   # as specsim.models.kernels.MATMULS (no JAX import here)


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    name: str = "custom"
    arch: str = "llama"
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    max_seq_len: int = 2048
    norm_eps: float = 1e-5
    # RoPE (llama family only). rope_scaling is a tuple of (key, value) pairs so that
    # the config stays hashable, e.g. (("rope_type", "llama3"), ("factor", 8.0), ...).
    rope_theta: float = 10000.0
    rope_scaling: tuple[tuple[str, float | str], ...] | None = None
    qkv_bias: bool = False
    tie_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    dtype: str = "float32"
    # How the layer stack runs: lax.scan over stacked layers, or a Python loop that XLA
    # unrolls. See models/transformer.py for the measurement behind the default.
    layer_loop: str = "scan"
    # Each layer's q/k/v projections as one [D, Q+2K] matrix ("w_qkv") and llama's
    # gate/up as one [D, 2F] ("w_gate_up"): fewer, larger matmuls (see
    # `specsim.models.transformer.fuse_projections` for the measurement). A layout, like
    # layer_loop: loaders and `arrange_layers` apply it, `forward` runs either.
    fused_projections: bool = True
    # Who runs the few-row matmuls of a decode step or verify pass: "auto" specsim's CPU
    # kernel where it applies (one CPU device, float32, few rows; else XLA), "kernel"
    # insist on it, "xla" XLA's dots always. See `specsim.models.kernels`.
    matmul: str = "auto"

    def __post_init__(self) -> None:
        choice("arch", self.arch, ARCHS)
        choice("matmul", self.matmul, MATMULS)
        choice("layer_loop", self.layer_loop, LAYER_LOOPS)
        choice("dtype", self.dtype, DTYPES)
        if not isinstance(self.fused_projections, bool):
            raise ConfigError(f"fused_projections must be True or False, got "
                              f"{self.fused_projections!r}")
        for field in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads",
                      "head_dim", "d_ff", "max_seq_len"):
            object.__setattr__(self, field, positive_int(field, getattr(self, field)))
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.arch == "gpt2" and self.n_kv_heads != self.n_heads:
            raise ConfigError("gpt2 uses full multi-head attention: n_kv_heads must equal n_heads")
        if self.arch == "llama" and self.head_dim % 2:
            raise ConfigError(f"head_dim must be even for rotary positions, got {self.head_dim}")

    # ---- derived sizes -------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def group_size(self) -> int:
        """Query heads per KV head."""
        return self.n_heads // self.n_kv_heads

    @property
    def rope_scaling_dict(self) -> dict:
        return dict(self.rope_scaling or ())

    def n_params(self) -> int:
        """Number of parameters (the tied head counted once)."""
        D, F, V, L = self.d_model, self.d_ff, self.vocab_size, self.n_layers
        attn = D * self.q_dim + 2 * D * self.kv_dim + self.q_dim * D
        if self.arch == "llama":
            mlp = 3 * D * F
            norms = 2 * D
            bias = (self.q_dim + 2 * self.kv_dim) if self.qkv_bias else 0
        else:
            mlp = 2 * D * F + F + D
            norms = 4 * D
            bias = self.q_dim + 2 * self.kv_dim + D
        per_layer = attn + mlp + norms + bias
        total = L * per_layer + V * D + (2 * D if self.arch == "gpt2" else D)
        if self.arch == "gpt2":
            total += self.max_seq_len * D
        if not self.tie_embeddings:
            total += D * V
        return total

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)


# ---- presets: the shapes of real checkpoints ---------------------------------------
SMOLLM2_135M = ModelConfig(
    name="smollm2-135m", arch="llama", vocab_size=49152, d_model=576, n_layers=30,
    n_heads=9, n_kv_heads=3, head_dim=64, d_ff=1536, max_seq_len=8192, norm_eps=1e-5,
    rope_theta=100000.0, tie_embeddings=True, bos_token_id=1, eos_token_id=2)
SMOLLM2_360M = ModelConfig(
    name="smollm2-360m", arch="llama", vocab_size=49152, d_model=960, n_layers=32,
    n_heads=15, n_kv_heads=5, head_dim=64, d_ff=2560, max_seq_len=8192, norm_eps=1e-5,
    rope_theta=100000.0, tie_embeddings=True, bos_token_id=1, eos_token_id=2)
QWEN25_05B = ModelConfig(
    name="qwen2.5-0.5b", arch="llama", vocab_size=151936, d_model=896, n_layers=24,
    n_heads=14, n_kv_heads=2, head_dim=64, d_ff=4864, max_seq_len=32768, norm_eps=1e-6,
    rope_theta=1000000.0, qkv_bias=True, tie_embeddings=True, bos_token_id=None,
    eos_token_id=151643)
GPT2 = ModelConfig(
    name="gpt2", arch="gpt2", vocab_size=50257, d_model=768, n_layers=12, n_heads=12,
    n_kv_heads=12, head_dim=64, d_ff=3072, max_seq_len=1024, norm_eps=1e-5,
    tie_embeddings=True, bos_token_id=50256, eos_token_id=50256)
DISTILGPT2 = GPT2.replace(name="distilgpt2", n_layers=6)
# Llama 3 shapes (Meta's model cards and the checkpoints' config.json): the 8B model has
# an output head of its own (untied: 8.03 B parameters, 7.50 B if it were tied), the
# 3.2-1B shares it with the embedding (1.24 B).
_LLAMA3_ROPE = (("rope_type", "llama3"), ("factor", 8.0), ("low_freq_factor", 1.0),
                ("high_freq_factor", 4.0), ("original_max_position_embeddings", 8192))
LLAMA31_8B = ModelConfig(
    name="llama-3.1-8b", arch="llama", vocab_size=128256, d_model=4096, n_layers=32,
    n_heads=32, n_kv_heads=8, head_dim=128, d_ff=14336, max_seq_len=131072, norm_eps=1e-5,
    rope_theta=500000.0, rope_scaling=_LLAMA3_ROPE, tie_embeddings=False,
    bos_token_id=128000, eos_token_id=128001)
LLAMA32_1B = LLAMA31_8B.replace(
    name="llama-3.2-1b", d_model=2048, n_layers=16, head_dim=64, d_ff=8192,
    rope_scaling=(("rope_type", "llama3"), ("factor", 32.0), ("low_freq_factor", 1.0),
                  ("high_freq_factor", 4.0), ("original_max_position_embeddings", 8192)),
    tie_embeddings=True)

# Tiny configs for tests: every dimension different, so a transposed axis cannot pass.
# They run the scan (stacked layers): compile time flat in depth, and tests index the
# stacked [L, ...] arrays.
TINY_LLAMA = ModelConfig(
    name="tiny-llama", arch="llama", vocab_size=97, d_model=48, n_layers=3, n_heads=6,
    n_kv_heads=2, head_dim=10, d_ff=72, max_seq_len=128, norm_eps=1e-5,
    rope_theta=10000.0, tie_embeddings=False, bos_token_id=1, eos_token_id=2,
    layer_loop="scan")
TINY_QWEN2 = TINY_LLAMA.replace(name="tiny-qwen2", qkv_bias=True, tie_embeddings=True,
                                rope_theta=1000000.0, norm_eps=1e-6)
TINY_GPT2 = ModelConfig(
    name="tiny-gpt2", arch="gpt2", vocab_size=89, d_model=40, n_layers=2, n_heads=5,
    n_kv_heads=5, head_dim=8, d_ff=56, max_seq_len=96, norm_eps=1e-5,
    tie_embeddings=True, bos_token_id=0, eos_token_id=0, layer_loop="scan")

PRESETS: dict[str, ModelConfig] = {
    c.name: c for c in (SMOLLM2_135M, SMOLLM2_360M, QWEN25_05B, GPT2, DISTILGPT2,
                        LLAMA31_8B, LLAMA32_1B, TINY_LLAMA, TINY_QWEN2, TINY_GPT2)
}


def get_preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise InvalidArgument(f"unknown preset {name!r}; known presets: "
                              f"{sorted(PRESETS)}") from None
