"""An independent NumPy forward pass for Llama-family (Llama, Qwen2) and GPT-2 models,
written from the published formulas and the Hugging Face checkpoint conventions, not
from specsim's code. It is the always-on oracle of the model tests: it needs neither
torch nor transformers, computes in float64, has no KV cache (every call recomputes the
whole sequence under a causal mask) and reads weights by their Hugging Face names.

    reference_logits(config, weights, tokens) -> logits [B, T, V]

``config`` is the dict of a ``config.json``; ``weights`` maps Hugging Face tensor names
to arrays in the layout PyTorch stores them (``nn.Linear``: [out, in]; GPT-2's
``Conv1D``: [in, out]); ``tokens`` is [B, T] integers.

Formulas:
  RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w              (Zhang & Sennrich 2019)
  LayerNorm(x) = (x - mean) / sqrt(var + eps) * w + b      (Ba et al. 2016)
  RoPE, rotate-half layout: for pair (i, i + E/2) with frequency theta^(-2i/E),
    (x_i, x_{i+E/2}) -> (x_i cos - x_{i+E/2} sin, x_{i+E/2} cos + x_i sin)
                                                           (Su et al. 2021; HF layout)
  attention = softmax(q k^T / sqrt(E) + causal mask) v, query head h reading
    key/value head h // (H / G)                           (GQA, Ainslie et al. 2023)
  SwiGLU MLP = W_down (silu(W_gate x) * W_up x)           (Shazeer 2020)
  GPT-2 MLP = W_proj gelu_tanh(W_fc x + b) + b, gelu_tanh(x) =
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))       (Radford et al. 2019)
"""

from __future__ import annotations

import math

import numpy as np

LLAMA_ARCHS = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM")


def _f64(weights: dict, name: str) -> np.ndarray:
    return np.asarray(weights[name], dtype=np.float64)


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layer_norm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def rotate(x, theta):
    """RoPE on x [B, T, N, E] at positions 0..T-1 (rotate-half layout)."""
    T, E = x.shape[1], x.shape[-1]
    freq = theta ** (-np.arange(0, E // 2, dtype=np.float64) * 2.0 / E)   # [E/2]
    ang = np.arange(T, dtype=np.float64)[:, None] * freq[None, :]      # [T, E/2]
    cos, sin = np.cos(ang)[None, :, None, :], np.sin(ang)[None, :, None, :]
    lo, hi = x[..., : E // 2], x[..., E // 2:]
    return np.concatenate([lo * cos - hi * sin, hi * cos + lo * sin], axis=-1)


def causal_attention(q, k, v):
    """q [B, T, H, E], k and v [B, T, G, E] -> [B, T, H * E]; head h reads kv head
    h // (H // G)."""
    B, T, H, E = q.shape
    G = k.shape[2]
    kv_of_head = np.arange(H) // (H // G)
    k, v = k[:, :, kv_of_head], v[:, :, kv_of_head]                    # [B, T, H, E]
    out = np.empty_like(q)
    future = np.triu(np.ones((T, T), dtype=bool), 1)                    # [query, key]
    for b in range(B):
        for h in range(H):
            s = q[b, :, h] @ k[b, :, h].T / math.sqrt(E)                # [T, T]
            s = np.where(future, -np.inf, s)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            out[b, :, h] = (s / s.sum(axis=-1, keepdims=True)) @ v[b, :, h]
    return out.reshape(B, T, H * E)


def llama_logits(config: dict, weights: dict, tokens) -> np.ndarray:
    tokens = np.asarray(tokens)
    B, T = tokens.shape
    D, H = config["hidden_size"], config["num_attention_heads"]
    G = config.get("num_key_value_heads") or H
    E = config.get("head_dim") or D // H
    eps, theta = config["rms_norm_eps"], config.get("rope_theta", 10000.0)
    if config.get("rope_scaling"):
        raise ValueError("reference_numpy: rope_scaling is not implemented here")

    def linear(x, name, bias=False):
        y = x @ _f64(weights, name + ".weight").T
        return y + _f64(weights, name + ".bias") if bias else y

    qkv_bias = config["architectures"][0] == "Qwen2ForCausalLM"
    x = _f64(weights, "model.embed_tokens.weight")[tokens]             # [B, T, D]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, _f64(weights, p + "input_layernorm.weight"), eps)
        q = linear(h, p + "self_attn.q_proj", qkv_bias).reshape(B, T, H, E)
        k = linear(h, p + "self_attn.k_proj", qkv_bias).reshape(B, T, G, E)
        v = linear(h, p + "self_attn.v_proj", qkv_bias).reshape(B, T, G, E)
        att = causal_attention(rotate(q, theta), rotate(k, theta), v)
        x = x + linear(att, p + "self_attn.o_proj")
        h = rms_norm(x, _f64(weights, p + "post_attention_layernorm.weight"), eps)
        x = x + linear(silu(linear(h, p + "mlp.gate_proj")) * linear(h, p + "mlp.up_proj"),
                       p + "mlp.down_proj")
    x = rms_norm(x, _f64(weights, "model.norm.weight"), eps)
    head = weights.get("lm_head.weight")
    if head is None or config.get("tie_word_embeddings", False):
        head = weights["model.embed_tokens.weight"]
    return x @ np.asarray(head, np.float64).T                          # [B, T, V]


def gpt2_logits(config: dict, weights: dict, tokens) -> np.ndarray:
    tokens = np.asarray(tokens)
    B, T = tokens.shape
    D, H = config["n_embd"], config["n_head"]
    eps = config.get("layer_norm_epsilon", 1e-5)

    def w(name):
        return _f64(weights, "transformer." + name)

    def conv1d(x, name):                                               # x @ W[in, out] + b
        return x @ w(name + ".weight") + w(name + ".bias")

    x = w("wte.weight")[tokens] + w("wpe.weight")[np.arange(T)][None]   # [B, T, D]
    for i in range(config["n_layer"]):
        p = f"h.{i}."
        h = layer_norm(x, w(p + "ln_1.weight"), w(p + "ln_1.bias"), eps)
        q, k, v = np.split(conv1d(h, p + "attn.c_attn"), 3, axis=-1)    # [B, T, D] each
        shape = (B, T, H, D // H)
        att = causal_attention(q.reshape(shape), k.reshape(shape), v.reshape(shape))
        x = x + conv1d(att, p + "attn.c_proj")
        h = layer_norm(x, w(p + "ln_2.weight"), w(p + "ln_2.bias"), eps)
        x = x + conv1d(gelu_tanh(conv1d(h, p + "mlp.c_fc")), p + "mlp.c_proj")
    x = layer_norm(x, w("ln_f.weight"), w("ln_f.bias"), eps)
    return x @ w("wte.weight").T


def reference_logits(config: dict, weights: dict, tokens) -> np.ndarray:
    """Logits [B, T, V] (float64) of the checkpoint described by ``config`` and
    ``weights`` (Hugging Face names) for ``tokens`` [B, T]."""
    arch = (config.get("architectures") or [None])[0]
    if arch == "GPT2LMHeadModel":
        return gpt2_logits(config, weights, tokens)
    if arch in LLAMA_ARCHS:
        return llama_logits(config, weights, tokens)
    raise ValueError(f"reference_numpy: unsupported architecture {arch!r}")
