"""Model construction from a run config: ``model.family`` -> Hugging Face class, no downloads.

``hf_config(model_cfg, vocab_size)`` is the level-1 config; ``level_config`` applies the
coalescing arithmetic (``mlsys.operators.derive_config``) per level; ``build_model`` makes a
randomly initialised model, partitioned under ZeRO-3 when an ``HfDeepSpeedConfig`` for a
stage-3 config is alive (the caller keeps it alive), a plain module otherwise.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    DeiTConfig,
    DeiTForImageClassification,
    GPT2Config,
    GPT2LMHeadModel,
    PretrainedConfig,
    ViTConfig,
    ViTForImageClassification,
)

from mlsys.config import ModelConfig, VCycleConfig

# family -> (config class, model class, run-config field -> HF config field). A run-config
# field a family lacks is not passed (ViT has no position limit: image_size/patch_size come
# from model.extra); an image classifier's "vocabulary" is its label set.
_VISION_FIELDS = {"hidden_size": "hidden_size", "num_layers": "num_hidden_layers",
                  "num_heads": "num_attention_heads", "ffn_size": "intermediate_size",
                  "vocab_size": "num_labels"}
FAMILIES: dict[str, tuple[type, type, dict[str, str]]] = {
    "bert": (BertConfig, BertForMaskedLM, {
        "hidden_size": "hidden_size", "num_layers": "num_hidden_layers",
        "num_heads": "num_attention_heads", "ffn_size": "intermediate_size",
        "max_position": "max_position_embeddings", "vocab_size": "vocab_size"}),
    "gpt": (GPT2Config, GPT2LMHeadModel, {
        "hidden_size": "n_embd", "num_layers": "n_layer", "num_heads": "n_head",
        "ffn_size": "n_inner", "max_position": "n_positions", "vocab_size": "vocab_size"}),
    "vit": (ViTConfig, ViTForImageClassification, _VISION_FIELDS),
    "deit": (DeiTConfig, DeiTForImageClassification, _VISION_FIELDS),
}
_DROPOUT = {"bert": ("hidden_dropout_prob", "attention_probs_dropout_prob"),
            "gpt": ("resid_pdrop", "embd_pdrop", "attn_pdrop"),
            "vit": ("hidden_dropout_prob", "attention_probs_dropout_prob"),
            "deit": ("hidden_dropout_prob", "attention_probs_dropout_prob")}


def hf_config(m: ModelConfig, vocab_size: int) -> PretrainedConfig:
    """The Hugging Face config of the level-1 model (``m.vocab_size`` overrides the tokenizer's,
    or for an image family the dataset's number of classes)."""
    config_cls, _, fields = FAMILIES[m.family]
    values: dict[str, Any] = {
        "hidden_size": m.hidden_size, "num_layers": m.num_layers, "num_heads": m.num_heads,
        "ffn_size": m.ffn, "max_position": m.max_position,
        "vocab_size": m.vocab_size if m.vocab_size is not None else vocab_size}
    kwargs = {fields[k]: v for k, v in values.items() if k in fields}
    kwargs.update({name: m.dropout for name in _DROPOUT[m.family]})
    if m.family == "gpt":
        kwargs.update(bos_token_id=None, eos_token_id=None)
    kwargs.update(m.extra)
    return config_cls(**kwargs)


def level_config(level1: PretrainedConfig, level: int, v: VCycleConfig) -> PretrainedConfig:
    """The config at ``level`` (1 = ``level1``): coalesced ``level - 1`` times."""
    from mlsys.operators import derive_config

    config = level1
    for _ in range(level - 1):
        config = derive_config(config, v.width, v.depth)
    return config


def model_class(family: str) -> type:
    return FAMILIES[family][1]


def build_model(config: PretrainedConfig, family: str, seed: int) -> torch.nn.Module:
    """A freshly initialised model of ``config`` (seeded). Under a live stage-3
    ``HfDeepSpeedConfig`` it is built partitioned (``_from_config`` enters ``zero.Init``)."""
    torch.manual_seed(seed)
    return model_class(family)._from_config(config)
