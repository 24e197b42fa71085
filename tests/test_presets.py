"""Model presets against the parameter counts their publishers print."""

from __future__ import annotations

import pytest

from specsim.errors import InvalidArgument
from specsim.presets import ModelShape, eagle_head_shape, get_shape, shape_names

# (preset, published total, published active or None, relative tolerance, where printed)
PUBLISHED = [
    ("llama-2-7b", 6.74e9, None, 0.002, "Llama 2 paper / model card: 6.74B (the 7B)"),
    ("vicuna-7b", 6.74e9, None, 0.002, "LLaMA-7B shape, 6.74B"),
    ("vicuna-13b", 13.0e9, None, 0.005, "LLaMA-13B shape, 13.0B"),
    ("vicuna-33b", 32.5e9, None, 0.005, "LLaMA paper: 32.5B for the 33B model"),
    ("vicuna-68m", 68e6, None, 0.01, "vicuna-68m / llama-68m: 68M"),
    ("llama-2-70b", 69.0e9, None, 0.005, "Llama 2 70B: 68.98B parameters in its checkpoint"),
    ("llama-3.1-8b", 8.03e9, None, 0.002, "Llama 3.1 8B model card: 8.03B"),
    ("llama-3.3-70b", 70.6e9, None, 0.002, "Llama 3.3 70B: 70.6B"),
    ("llama-3.2-1b", 1.24e9, None, 0.005, "Llama 3.2 1B model card: 1.24B"),
    ("llama-3.2-3b", 3.21e9, None, 0.005, "Llama 3.2 3B model card: 3.21B"),
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.005, "Mixtral of Experts: 46.7B total, 12.9B active"),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02, "Qwen3-30B-A3B model card: 30.5B total, 3.3B activated"),
    ("qwen2.5-7b", 7.61e9, None, 0.005, "Qwen2.5-7B model card: 7.61B"),
    ("qwen2.5-0.5b", 0.49e9, None, 0.01, "Qwen2.5-0.5B model card: 0.49B"),
    ("t5-v1.1-xxl", 11e9, None, 0.02, "T5 v1.1 XXL: 11B"),
    ("t5-v1.1-small", 77e6, None, 0.01, "T5 v1.1 small: 77M"),
    ("smollm2-135m", 134.5e6, None, 0.005, "SmolLM2-135M: 134.5M (specsim's own ModelConfig count)"),
]


@pytest.mark.parametrize("name,total,active,rtol,where", PUBLISHED)
def test_parameter_counts_match_the_published_figures(name, total, active, rtol, where):
    shape = get_shape(name)
    assert shape.n_params() == pytest.approx(total, rel=rtol), where
    if active is not None:
        assert shape.active_params() == pytest.approx(active, rel=rtol), where
    else:
        assert shape.active_params() == shape.n_params()


@pytest.mark.parametrize("target,published", [("vicuna-7b", 0.24e9), ("vicuna-13b", 0.37e9),
                                              ("llama-3.1-8b", 0.25e9)])
def test_eagle_head_parameters_match_the_eagle_readme(target, published):
    """The EAGLE README's '# EAGLE Parameters': one decoder layer plus the 2D -> D input
    projection (the output head and embeddings are the target's)."""
    t = get_shape(target)
    head = eagle_head_shape(t)
    assert head.decoder_layer_params() + 2 * t.d_model ** 2 == pytest.approx(published, rel=0.03)


def test_smollm2_shape_agrees_with_the_engine_config():
    from specsim.models.config import SMOLLM2_135M

    assert get_shape("smollm2-135m").n_params() == SMOLLM2_135M.n_params()


def test_unknown_models_are_named_with_the_known_ones():
    with pytest.raises(InvalidArgument, match="unknown model 'gpt-9'.*llama-3.1-8b"):
        get_shape("gpt-9")
    assert get_shape("LLaMA-3.1-8B") is get_shape("llama-3.1-8b")
    assert "mixtral-8x7b" in shape_names()


def test_bad_shapes_are_refused():
    with pytest.raises(InvalidArgument, match="n_kv_heads"):
        ModelShape(name="x", n_layers=1, d_model=8, n_heads=3, n_kv_heads=2, head_dim=2,
                   d_ff=8, vocab_size=10)
    with pytest.raises(InvalidArgument, match="experts_per_token"):
        ModelShape(name="x", n_layers=1, d_model=8, n_heads=2, n_kv_heads=2, head_dim=4,
                   d_ff=8, vocab_size=10, n_experts=4, experts_per_token=5, d_expert=8)
