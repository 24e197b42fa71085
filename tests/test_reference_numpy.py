"""specsim's forward pass (full and cached, both layer loops) against the independent
NumPy reference in tests/reference_numpy.py, on tiny Hugging Face checkpoints written
here with random weights (so the loader's name mapping and transposes are checked too),
and on specsim's own tiny presets written out with `save_hf`. Needs no torch; where
torch and transformers are present, the reference itself is held against them."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from specsim import models
from specsim.models import hf
from reference_numpy import reference_logits

# All dimensions different within a config, so a transposed axis cannot pass.
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 101,
         "hidden_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 12, "intermediate_size": 56,
         "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 500.0,
         "hidden_act": "silu", "tie_word_embeddings": False}
QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 83,
         "hidden_size": 36, "num_hidden_layers": 3, "num_attention_heads": 6,
         "num_key_value_heads": 2, "intermediate_size": 52, "max_position_embeddings": 64,
         "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
         "tie_word_embeddings": True, "use_sliding_window": False}
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 89,
        "n_embd": 40, "n_layer": 2, "n_head": 5, "n_inner": 56, "n_positions": 48,
        "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
        "tie_word_embeddings": True}
CONFIGS = {"llama": LLAMA, "qwen2": QWEN2, "gpt2": GPT2}


def _llama_shapes(c: dict) -> dict[str, tuple[int, ...]]:
    D, V, F = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    H, G = c["num_attention_heads"], c["num_key_value_heads"]
    E = c.get("head_dim") or D // H
    bias = c["architectures"][0] == "Qwen2ForCausalLM"
    shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    if not c["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, D)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (D,),
                       p + "post_attention_layernorm.weight": (D,),
                       p + "self_attn.q_proj.weight": (H * E, D),
                       p + "self_attn.k_proj.weight": (G * E, D),
                       p + "self_attn.v_proj.weight": (G * E, D),
                       p + "self_attn.o_proj.weight": (D, H * E),
                       p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D),
                       p + "mlp.down_proj.weight": (D, F)})
        if bias:
            shapes.update({p + "self_attn.q_proj.bias": (H * E,),
                           p + "self_attn.k_proj.bias": (G * E,),
                           p + "self_attn.v_proj.bias": (G * E,)})
    return shapes


def _gpt2_shapes(c: dict) -> dict[str, tuple[int, ...]]:
    D, V, F, P = c["n_embd"], c["vocab_size"], c["n_inner"], c["n_positions"]
    shapes = {"transformer.wte.weight": (V, D), "transformer.wpe.weight": (P, D),
              "transformer.ln_f.weight": (D,), "transformer.ln_f.bias": (D,)}
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        shapes.update({p + "ln_1.weight": (D,), p + "ln_1.bias": (D,),
                       p + "ln_2.weight": (D,), p + "ln_2.bias": (D,),
                       p + "attn.c_attn.weight": (D, 3 * D), p + "attn.c_attn.bias": (3 * D,),
                       p + "attn.c_proj.weight": (D, D), p + "attn.c_proj.bias": (D,),
                       p + "mlp.c_fc.weight": (D, F), p + "mlp.c_fc.bias": (F,),
                       p + "mlp.c_proj.weight": (F, D), p + "mlp.c_proj.bias": (D,)})
    return shapes


def random_checkpoint(config: dict, folder, seed: int = 0) -> dict[str, np.ndarray]:
    """Write config.json + model.safetensors with random weights; return the weights."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    shapes = (_gpt2_shapes if config["model_type"] == "gpt2" else _llama_shapes)(config)
    weights = {}
    for name, shape in shapes.items():
        if len(shape) == 1:   # norm scales near 1, biases near 0
            base = 1.0 if ("norm" in name or name.endswith(("ln_1.weight", "ln_2.weight",
                                                            "ln_f.weight"))) else 0.0
            arr = base + 0.1 * rng.standard_normal(shape)
        else:
            arr = rng.standard_normal(shape) / np.sqrt(min(shape))
        weights[name] = arr.astype(np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(weights, str(folder / "model.safetensors"))
    return weights


_forward = jax.jit(models.forward, static_argnums=1)


def specsim_logits(model, tokens, split: int | None = None) -> np.ndarray:
    """Logits [B, T, V] from one full forward (split None) or a prefill of ``split``
    tokens followed by one cached decode step per remaining token."""
    B, T = tokens.shape
    cache = models.init_cache(model.cfg, B, T + 3)
    if split is None:
        logits, _ = _forward(model.params, model.cfg, tokens, cache)
        return np.asarray(logits)
    parts = []
    logits, cache = _forward(model.params, model.cfg, tokens[:, :split], cache)
    parts.append(np.asarray(logits))
    for t in range(split, T):
        logits, cache = _forward(model.params, model.cfg, tokens[:, t:t + 1], cache)
        parts.append(np.asarray(logits))
    return np.concatenate(parts, axis=1)


def assert_logits_match(got, want):
    """fp32 against float64: within 1e-4 of the logits' scale, and the same argmax."""
    scale = float(np.max(np.abs(want)))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * scale)
    assert np.array_equal(got.argmax(-1), want.argmax(-1))


def _tokens(vocab: int, seed: int = 1, shape=(2, 9)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, size=shape).astype(np.int32)


@pytest.mark.parametrize("family, layer_loop", [("llama", "unroll"), ("llama", "scan"),
                                                ("qwen2", "unroll"), ("gpt2", "scan")])
def test_loaded_checkpoint_matches_reference_full_and_cached(family, layer_loop, tmp_path):
    config = CONFIGS[family]
    weights = random_checkpoint(config, tmp_path / family)
    model = models.load(tmp_path / family).with_layer_loop(layer_loop)
    tokens = _tokens(config["vocab_size"])
    want = reference_logits(config, weights, tokens)
    assert_logits_match(specsim_logits(model, tokens), want)
    assert_logits_match(specsim_logits(model, tokens, split=4), want)


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-gpt2"])
def test_preset_params_saved_as_hf_match_reference(preset, tmp_path):
    """specsim's own random parameters, written out by save_hf and read back by the
    reference under Hugging Face semantics, give specsim's logits."""
    from safetensors.numpy import load_file

    model = models.load(preset, seed=3)
    folder = hf.save_hf(model, tmp_path / preset)
    config = json.loads((folder / "config.json").read_text())
    weights = load_file(str(folder / "model.safetensors"))
    tokens = _tokens(model.cfg.vocab_size, seed=2, shape=(3, 7))
    want = reference_logits(config, weights, tokens)
    assert_logits_match(specsim_logits(model, tokens), want)
    assert_logits_match(specsim_logits(model, tokens, split=3), want)


def test_reference_is_causal_and_sees_every_token():
    """The oracle's own sanity: a later token never moves earlier logits, and changing
    an earlier token moves every later position's logits."""
    rng = np.random.default_rng(5)
    weights = {name: (rng.standard_normal(shape) / np.sqrt(min(shape)) if len(shape) > 1
                      else 1.0 + 0.1 * rng.standard_normal(shape))
               for name, shape in _llama_shapes(LLAMA).items()}
    a = _tokens(LLAMA["vocab_size"], seed=6, shape=(1, 6))
    b = a.copy()
    b[0, 4] = (a[0, 4] + 1) % LLAMA["vocab_size"]
    la, lb = reference_logits(LLAMA, weights, a), reference_logits(LLAMA, weights, b)
    np.testing.assert_array_equal(la[:, :4], lb[:, :4])
    assert np.all(np.abs(la[:, 4:] - lb[:, 4:]).max(-1) > 1e-6)


@pytest.mark.hf
@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_reference_matches_transformers_where_torch_is_present(family, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = CONFIGS[family]
    weights = random_checkpoint(config, tmp_path / family, seed=4)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / family,
                                                           torch_dtype=torch.float64)
    tokens = _tokens(config["vocab_size"], seed=7)
    with torch.no_grad():
        got = hf(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()
    # transformers keeps RoPE's inverse frequencies in float32 even in a float64 model.
    np.testing.assert_allclose(reference_logits(config, weights, tokens), got,
                               rtol=0, atol=1e-5 * float(np.abs(got).max()))
