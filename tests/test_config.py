"""Model presets: every preset's parameter count against the figure its model card
publishes, and against the sizes of the parameter tree it describes."""

from __future__ import annotations

import math

import pytest

from specsim.models import config
from specsim.models.transformer import param_shapes

# name -> (published parameter count, relative tolerance from the figure's precision, source)
PUBLISHED = {
    "smollm2-135m": (135e6, 0.005, "HuggingFaceTB/SmolLM2-135M model card: 135M"),
    "smollm2-360m": (360e6, 0.01, "HuggingFaceTB/SmolLM2-360M model card: 360M"),
    "qwen2.5-0.5b": (0.49e9, 0.01, "Qwen/Qwen2.5-0.5B model card: 0.49B (0.36B non-embedding)"),
    "gpt2": (124e6, 0.005, "openai-community/gpt2 on the HF hub: 124M"),
    "distilgpt2": (82e6, 0.005, "distilbert/distilgpt2 model card: 82M"),
    "llama-3.1-8b": (8.03e9, 0.001, "meta-llama/Llama-3.1-8B on the HF hub: 8.03B"),
    "llama-3.2-1b": (1.24e9, 0.005, "meta-llama/Llama-3.2-1B on the HF hub: 1.24B"),
}
TINY = {"tiny-llama", "tiny-qwen2", "tiny-gpt2"}


def _tree_size(shapes) -> int:
    if isinstance(shapes, dict):
        return sum(_tree_size(v) for v in shapes.values())
    return math.prod(shapes)


def test_every_real_preset_has_a_published_count():
    assert set(config.PRESETS) - TINY == set(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_the_published_figure(name):
    figure, rel, source = PUBLISHED[name]
    n = config.get_preset(name).n_params()
    assert abs(n / figure - 1) <= rel, f"{name}: {n / 1e9:.4f} B against {source}"


@pytest.mark.parametrize("name", sorted(config.PRESETS))
def test_parameter_count_is_the_size_of_the_parameter_tree(name):
    cfg = config.get_preset(name)
    assert cfg.n_params() == _tree_size(param_shapes(cfg))


def test_qwen_non_embedding_count_and_llama_8b_head():
    qwen = config.QWEN25_05B
    assert qwen.n_params() - qwen.vocab_size * qwen.d_model == pytest.approx(0.36e9, rel=0.01)
    # the 8B model's separate head is what takes it from 7.50 B to 8.03 B
    tied = config.LLAMA31_8B.replace(tie_embeddings=True).n_params()
    assert tied == pytest.approx(7.50e9, rel=0.001)
    assert config.LLAMA31_8B.n_params() - tied == 128256 * 4096
