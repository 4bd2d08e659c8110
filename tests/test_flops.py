"""FLOPs accounting (mlsys/flops.py) against torch's own FLOP counter on the real models."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mlsys.config import ModelConfig, VCycleConfig
from mlsys.flops import dims_of, flops_per_step, flops_per_token, matmul_params
from mlsys.length import pooled_forward
from mlsys.models import build_model, hf_config, level_config

# Llama-style decoders: SwiGLU (three ffn maps) and grouped-query attention (8 query heads over
# 2 key/value heads); Qwen3 with a head_dim apart from hidden / heads (8 × 16 = 128 ≠ 64).
EXTRA = {"bert": {}, "gpt": {}, "llama": {"num_key_value_heads": 2},
         "qwen2": {"num_key_value_heads": 4},
         "qwen3": {"num_key_value_heads": 2, "head_dim": 16},
         "mistral": {"num_key_value_heads": 2, "tie_word_embeddings": True}}


@pytest.mark.parametrize("family", list(EXTRA))
@pytest.mark.parametrize("level", [1, 2])
def test_formula_equals_counted_training_flops(family: str, level: int) -> None:
    """One forward + backward of a real model: torch counts exactly 6N + 12LSd per token."""
    heads = 8 if EXTRA[family] else 4
    m = ModelConfig(family=family, hidden_size=64, num_layers=4, num_heads=heads, ffn_size=192,
                    max_position=48, dropout=0.0, extra=EXTRA[family])
    config = level_config(hf_config(m, 300), level, VCycleConfig())
    config._attn_implementation = "eager"  # torch's counter skips the CPU SDPA kernel
    model = build_model(config, seed=0)
    batch, seq = 3, 48
    x = torch.randint(0, 300, (batch, seq))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=x, labels=x).loss.backward()
    assert counter.get_total_flops() == flops_per_step(dims_of(config), seq, batch)


@pytest.mark.parametrize("family", list(EXTRA))
@pytest.mark.parametrize("length", [2, 4])
def test_formula_equals_counted_flops_at_a_length_level(family: str, length: int) -> None:
    """The pooled forward + backward at length factor k: layers and attention on S/k
    positions, the head on S/k (causal) or S (masked, after upsampling), as counted by torch;
    and strictly cheaper than k = 1."""
    heads = 8 if EXTRA[family] else 4
    m = ModelConfig(family=family, hidden_size=64, num_layers=2, num_heads=heads, ffn_size=192,
                    max_position=48, dropout=0.0, extra=EXTRA[family])
    config = hf_config(m, 300)
    config._attn_implementation = "eager"
    model = build_model(config, seed=0)
    batch, seq = 3, 48
    x = torch.randint(0, 300, (batch, seq))
    with FlopCounterMode(display=False) as counter:
        pooled_forward(model, length, input_ids=x, labels=x).loss.backward()
    predicted = flops_per_step(dims_of(config), seq, batch, length=length)
    assert counter.get_total_flops() == predicted
    assert predicted < flops_per_step(dims_of(config), seq, batch)


@pytest.mark.parametrize("family", list(EXTRA))
def test_matmul_params_are_the_linear_weights_plus_head(family: str) -> None:
    heads = 8 if EXTRA[family] else 2
    config = hf_config(ModelConfig(family=family, hidden_size=32, num_layers=3, num_heads=heads,
                                   max_position=16, extra=EXTRA[family]), 100)
    model = build_model(config, seed=0)
    linear = sum(mod.weight.numel() for mod in model.modules()
                 if isinstance(mod, torch.nn.Linear) or type(mod).__name__ == "Conv1D")
    # the LM head is a Linear in every family, tied or not; embeddings are not counted
    assert matmul_params(dims_of(config)) == linear


def test_coalesced_level_is_cheaper_by_about_eight() -> None:
    """Width and depth halved: the layer stack costs 1/8, the LM head 1/2."""
    config = hf_config(ModelConfig(family="gpt", hidden_size=512, num_layers=8, num_heads=8,
                                   max_position=128), 512)
    small = level_config(config, 2, VCycleConfig())
    ratio = flops_per_token(dims_of(config), 128) / flops_per_token(dims_of(small), 128)
    assert 6.0 < ratio < 8.0


def test_unknown_model_type_is_refused() -> None:
    from transformers import T5Config

    with pytest.raises(ValueError, match="model_type"):
        dims_of(T5Config())
