"""Hugging Face checkpoint folders: config.json <-> `ModelConfig`, the HF tensor-name
table, safetensors reading and writing.

    load_hf(folder)      config.json + model.safetensors (or a sharded index) + tokenizer.json
    save_hf(model, dir)  the same layout, readable by `transformers` and by `load_hf`

Weight layouts. Hugging Face `nn.Linear` stores ``[out, in]``; specsim multiplies
``x @ W`` with ``W [in, out]``, so Llama/Qwen2 projections are transposed ("T" in the
table). GPT-2's `Conv1D` already stores ``[in, out]``; its fused ``c_attn [D, 3D]`` is
split into q, k, v ("qkv"). Everything is read into host arrays and checked (see
`specsim.models.tensors`) before the first device array is made; a bad folder raises
`CheckpointError` naming the file, with the underlying error chained.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from specsim.errors import CheckpointError
from specsim.models.config import ModelConfig
from specsim.models.tensors import NameTable, assemble, disassemble, to_device
from specsim.models.tokenizer import Tokenizer
from specsim.models.transformer import rope_inv_freq

__all__ = ["config_from_hf", "config_to_hf", "hf_names", "read_hf_tensors", "load_hf",
           "save_hf", "params_from_hf", "params_to_hf"]

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
            raise CheckpointError(f"{source}: rope_scaling {kind!r} with field {key!r} is not "
                                  f"supported (supported: linear, llama3)")
        if value is not None:
            items.append((key, value if isinstance(value, str) else float(value)))
    return theta, tuple(dict(items).items())


def _gpt2_config(raw: dict, source: str, name: str) -> ModelConfig:
    D, H = int(raw["n_embd"]), int(raw["n_head"])
    act = raw.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise CheckpointError(f"{source}: activation_function {act!r} is not supported "
                              f"(gelu_new only)")
    if D % H:
        raise CheckpointError(f"{source}: n_embd {D} is not a multiple of n_head {H}")
    return ModelConfig(
        name=str(name), arch="gpt2", vocab_size=int(raw["vocab_size"]), d_model=D,
        n_layers=int(raw["n_layer"]), n_heads=H, n_kv_heads=H, head_dim=D // H,
        d_ff=int(raw.get("n_inner") or 4 * D), max_seq_len=int(raw["n_positions"]),
        norm_eps=float(raw.get("layer_norm_epsilon", 1e-5)),
        tie_embeddings=bool(raw.get("tie_word_embeddings", True)),
        bos_token_id=_first(raw.get("bos_token_id")),
        eos_token_id=_first(raw.get("eos_token_id")))


def _llama_config(raw: dict, source: str, name: str, family: str) -> ModelConfig:
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"{source}: hidden_act {act!r} is not supported (silu only)")
    if family != "qwen2" and (raw.get("attention_bias") or raw.get("mlp_bias")):
        raise CheckpointError(f"{source}: attention_bias/mlp_bias on a Llama model is not "
                              f"supported (only Qwen2-style q/k/v biases are)")
    if raw.get("use_sliding_window") or (family == "llama" and raw.get("sliding_window")):
        raise CheckpointError(f"{source}: sliding-window attention is not supported")
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
            raise CheckpointError(
                f"{source}: unsupported architecture {arch_name or model_type!r}; supported: "
                f"{sorted(_LLAMA_ARCHS) + sorted(_GPT2_ARCHS)}")
    name = name or raw.get("_name_or_path") or arch_name
    try:
        if arch_name in _GPT2_ARCHS:
            return _gpt2_config(raw, source, name)
        return _llama_config(raw, source, name, _LLAMA_ARCHS[arch_name])
    except KeyError as exc:
        raise CheckpointError(f"{source}: missing field {exc.args[0]!r}") from exc
    except (TypeError, ValueError) as exc:
        if str(exc).startswith(str(source)):
            raise
        raise CheckpointError(f"{source}: {exc}") from exc


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
        raise CheckpointError(f"Qwen2 checkpoints cannot express head_dim {cfg.head_dim} != "
                              f"d_model/n_heads ({cfg.d_model // cfg.n_heads})")
    if not qwen:
        out.update(attention_bias=False, mlp_bias=False)
    else:
        out.update(use_sliding_window=False)
    return out


# ---- the name table ----------------------------------------------------------------------
def hf_names(cfg: ModelConfig) -> NameTable:
    """The HF name table: tensor name -> (specsim leaf, layer or None, "T" / "" / "qkv")."""
    names: NameTable = {}
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


def _is_ignorable(name: str) -> bool:
    """Buffers some checkpoints carry that are not parameters."""
    return name.endswith((".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq"))


def params_from_hf(tensors: dict[str, np.ndarray], cfg: ModelConfig, source: str) -> dict:
    """HF-named host arrays -> the specsim pytree (host arrays), names and shapes checked."""
    if cfg.arch == "gpt2":
        tensors = {_normalise_gpt2_name(k): v for k, v in tensors.items()}
    tied_head = cfg.tie_embeddings    # a tied checkpoint may still store lm_head.weight
    return assemble(tensors, hf_names(cfg), cfg, source,
                    ignore=lambda k: _is_ignorable(k) or (tied_head and k == "lm_head.weight"))


def params_to_hf(params: dict, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """The specsim pytree -> HF-named host arrays (the inverse of `params_from_hf`)."""
    return disassemble(params, hf_names(cfg), cfg)


# ---- safetensors -------------------------------------------------------------------------
def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file
    try:
        return load_file(str(path))
    except Exception as exc:  # SafetensorError, OSError, ...
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from exc


def read_hf_tensors(folder: Path) -> dict[str, np.ndarray]:
    single = folder / "model.safetensors"
    index = folder / "model.safetensors.index.json"
    if single.is_file():
        return _read_safetensors(single)
    if not index.is_file():
        raise CheckpointError(f"{folder}: no model.safetensors or model.safetensors.index.json")
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{index}: not a valid safetensors index ({exc})") from exc
    tensors: dict[str, np.ndarray] = {}
    for shard in sorted(set(weight_map.values())):
        shard_path = folder / shard
        if not shard_path.is_file():
            raise CheckpointError(f"{index}: shard {shard!r} is missing")
        part = _read_safetensors(shard_path)
        for name, arr in part.items():
            if weight_map.get(name) != shard:
                raise CheckpointError(f"{shard_path}: tensor {name!r} is not listed for this shard "
                                      f"in {index.name}")
            tensors[name] = arr
    absent = sorted(set(weight_map) - set(tensors))
    if absent:
        raise CheckpointError(f"{index}: tensors listed but not found in their shards: "
                              f"{absent[:5]}")
    return tensors


def load_hf(folder: str | Path, *, dtype: str | None = None, tokenizer: bool = True):
    """Load a Hugging Face checkpoint folder (Llama, Qwen2, GPT-2)."""
    from specsim.models.model import Model

    folder = Path(folder)
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{folder}: no config.json (not a Hugging Face checkpoint folder)")
    try:
        raw = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{cfg_path}: invalid JSON ({exc})") from exc
    cfg = config_from_hf(raw, str(cfg_path), name=raw.get("_name_or_path") or folder.name)
    cfg = cfg.replace(dtype=dtype or "float32")
    params = params_from_hf(read_hf_tensors(folder), cfg, str(folder))
    tok = None
    tok_path = folder / "tokenizer.json"
    if tokenizer and tok_path.is_file():
        tok = Tokenizer.from_file(tok_path)
    return Model(cfg, to_device(params, cfg), tok, str(folder))


def save_hf(model, folder: str | Path, *, max_shard_bytes: int | None = None) -> Path:
    """Write ``model`` as a Hugging Face folder: config.json, model.safetensors (or shards
    of at most ``max_shard_bytes`` plus model.safetensors.index.json), and the tokenizer
    files when the model has a tokenizer. Returns the folder."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = model.cfg
    tensors = params_to_hf(model.params, cfg)
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
