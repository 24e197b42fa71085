"""GGUF files (llama.cpp's format): metadata -> `ModelConfig`, the GGUF tensor-name
table, dequantisation, the Q/K un-permute, and the tokenizer from the metadata.

    read_gguf(path)   -> (config, host params, tokenizer)
    load_gguf(path)   a `Model`, optionally through the disk cache (`specsim.models.cache`)

Named ``gguf_file`` so that it never shadows the third-party ``gguf`` package, which it
imports absolutely. GGUF (ggml) tensors read as ``[out, in]`` NumPy arrays like
`nn.Linear` ("T" in the table), and llama.cpp's converter permutes the rows of Q and K
within each head from the rotate-half layout to interleaved pairs; `unpermute` undoes it
on the GGUF-named arrays before they are assembled. Names go straight from GGUF to
specsim through `gguf_names`; no third naming in between.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specsim.errors import CheckpointError
from specsim.models.config import ModelConfig
from specsim.models.tensors import NameTable, assemble, to_device
from specsim.models.tokenizer import Tokenizer

__all__ = ["gguf_names", "read_gguf", "load_gguf", "unpermute"]

# per-layer tensors: GGUF suffix of "blk.<i>." -> (specsim leaf, transform)
_LAYER_NAMES = {
    "attn_norm.weight": ("attn_norm_scale", ""), "attn_q.weight": ("wq", "T"),
    "attn_k.weight": ("wk", "T"), "attn_v.weight": ("wv", "T"),
    "attn_output.weight": ("wo", "T"), "ffn_norm.weight": ("mlp_norm_scale", ""),
    "ffn_gate.weight": ("w_gate", "T"), "ffn_up.weight": ("w_up", "T"),
    "ffn_down.weight": ("w_down", "T")}
_BIAS_NAMES = {"attn_q.bias": ("bq", ""), "attn_k.bias": ("bk", ""), "attn_v.bias": ("bv", "")}
_IGNORED = ("rope_freqs.weight",)


def gguf_names(cfg: ModelConfig) -> NameTable:
    """The GGUF name table: tensor name -> (specsim leaf, layer or None, "T" / "")."""
    names: NameTable = {"token_embd.weight": ("embed", None, ""),
                        "output_norm.weight": ("final_norm_scale", None, "")}
    if not cfg.tie_embeddings:
        names["output.weight"] = ("lm_head", None, "T")
    per_layer = {**_LAYER_NAMES, **(_BIAS_NAMES if cfg.qkv_bias else {})}
    for i in range(cfg.n_layers):
        for suffix, (leaf, how) in per_layer.items():
            names[f"blk.{i}.{suffix}"] = (leaf, i, how)
    return names


def _metadata(reader) -> dict:
    return {key: field.contents() for key, field in reader.fields.items()
            if not key.startswith("GGUF.")}


def _f32(value) -> float:
    """A float32 metadata value as the shortest decimal that rounds to it (1e-05, not
    9.999999747378752e-06), which is what the config it came from said."""
    return float(str(np.float32(value)))


def unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation. ``w`` is ``[n_heads*E, ...]`` in llama.cpp's
    order (the two rotary halves interleaved within each head); the result is the HF
    rotate-half order."""
    E = w.shape[0] // n_heads
    rest = w.shape[1:]
    return w.reshape(n_heads, E // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def _rope_scaling(get, source: str):
    kind = get("rope.scaling.type", None, required=False)
    if kind in (None, "none"):
        return None
    if kind != "linear":
        raise CheckpointError(f"{source}: rope scaling {kind!r} is not supported (linear only)")
    return (("factor", float(get("rope.scaling.factor"))), ("rope_type", "linear"))


def _config(meta: dict, n_tokens: int, tied: bool, source: str) -> ModelConfig:
    arch = meta.get("general.architecture")
    if arch not in ("llama", "qwen2"):
        raise CheckpointError(f"{source}: GGUF architecture {arch!r} is not supported; "
                              f"supported: llama, qwen2")

    def get(key, default=None, required=True):
        value = meta.get(f"{arch}.{key}", default)
        if value is None and required:
            raise CheckpointError(f"{source}: GGUF metadata lacks {arch}.{key}")
        return value

    D, H = int(get("embedding_length")), int(get("attention.head_count"))
    E = int(get("attention.key_length", get("rope.dimension_count", D // H)))
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
            rope_theta=_f32(get("rope.freq_base", 10000.0)),
            rope_scaling=_rope_scaling(get, source), qkv_bias=arch == "qwen2",
            tie_embeddings=tied, bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
            eos_token_id=meta.get("tokenizer.ggml.eos_token_id"))
    except ValueError as exc:
        raise CheckpointError(f"{source}: {exc}") from exc


def _dequantised(tensors: dict, source: str) -> dict[str, np.ndarray]:
    """GGUF-named float32 host arrays in NumPy (row-major) order."""
    import gguf
    from gguf.quants import dequantize

    out = {}
    for name, t in tensors.items():
        try:
            arr = dequantize(t.data, t.tensor_type)
        except NotImplementedError as exc:
            raise CheckpointError(f"{source}: tensor {name} has type {t.tensor_type.name}, "
                                  f"which gguf {gguf.__version__} cannot dequantise ({exc})"
                                  ) from exc
        out[name] = np.asarray(arr, np.float32).reshape(tuple(int(n) for n in reversed(t.shape)))
    return out


def _unpermute_qk(arrays: dict[str, np.ndarray], cfg: ModelConfig) -> None:
    """Undo llama.cpp's Q/K permutation in place (llama architecture only)."""
    for name, arr in arrays.items():
        if name.startswith("blk.") and name.endswith((".attn_q.weight", ".attn_q.bias")):
            arrays[name] = unpermute(arr, cfg.n_heads)
        elif name.startswith("blk.") and name.endswith((".attn_k.weight", ".attn_k.bias")):
            arrays[name] = unpermute(arr, cfg.n_kv_heads)


def read_gguf(path: str | Path) -> tuple[ModelConfig, dict, Tokenizer | None]:
    """Parse and dequantise a GGUF file into (config, host params, tokenizer)."""
    import gguf

    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise CheckpointError(f"{source}: no such GGUF file")
    try:
        reader = gguf.GGUFReader(str(path))
        meta = _metadata(reader)
        tensors = {t.name: t for t in reader.tensors}
    except Exception as exc:  # truncated or not a GGUF: ValueError, IndexError, struct errors
        raise CheckpointError(f"{source}: not a readable GGUF file "
                              f"({type(exc).__name__}: {exc})") from exc
    n_tokens = len(meta.get("tokenizer.ggml.tokens") or ())
    cfg = _config(meta, n_tokens, "output.weight" not in tensors, source)
    arrays = _dequantised(tensors, source)
    if meta.get("general.architecture") == "llama":
        _unpermute_qk(arrays, cfg)
    params = assemble(arrays, gguf_names(cfg), cfg, source, ignore=lambda k: k in _IGNORED)
    tok = Tokenizer.from_gguf_fields(meta, source) if n_tokens else None
    if tok is not None and tok.vocab_size != cfg.vocab_size:
        raise CheckpointError(f"{source}: tokenizer has {tok.vocab_size} tokens, the model "
                              f"{cfg.vocab_size}")
    return cfg, params, tok


def load_gguf(path: str | Path, *, dtype: str | None = None, cache: bool | str | Path = False):
    """Load a GGUF file. With ``cache`` (True for `specsim.environment.cache_root()`, or a folder), the
    dequantised model is written once as a Hugging Face folder keyed by the file's
    content (every install of the same file shares it), and later loads read that folder
    instead of dequantising again (see `specsim.models.cache`)."""
    from specsim.models.model import Model
    from specsim.models import cache as disk

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such GGUF file")
    folder = disk.cached_folder(path, cache) if cache else None
    if folder is not None:
        hit = disk.read(folder, dtype)
        if hit is not None:
            return hit.replace(source=str(path))
    cfg, params, tok = read_gguf(path)
    cfg = cfg.replace(dtype=dtype or "float32")
    model = Model(cfg, to_device(params, cfg), tok, str(path))
    if folder is not None:
        disk.write(Model(cfg.replace(dtype="float32"), params, tok, str(path)), folder)
    return model
