"""Model construction from a run config, through the family registry; no downloads.

``hf_config(model_cfg, vocab_size)`` is the level-1 config; ``level_config`` applies the
coalescing arithmetic (``mlsys.operators.derive_config``) per level; ``build_model`` makes a
randomly initialised model, partitioned under ZeRO-3 when an ``HfDeepSpeedConfig`` for a
stage-3 config is alive (the caller keeps it alive), a plain module otherwise.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import PretrainedConfig

from mlsys.config import ModelConfig, VCycleConfig
from mlsys.families import family_of_config, get_family
from mlsys.operators import derive_config


def hf_config(m: ModelConfig, vocab_size: int) -> PretrainedConfig:
    """The Hugging Face config of the level-1 model (``m.vocab_size`` overrides the tokenizer's,
    or for a vision family the dataset's number of classes)."""
    family = get_family(m.family)
    f = family.fields
    kwargs: dict[str, Any] = {
        f.hidden: m.hidden_size, f.layers: m.num_layers, f.heads: m.num_heads, f.ffn: m.ffn,
        f.vocab: m.vocab_size if m.vocab_size is not None else vocab_size}
    if f.positions is not None:
        kwargs[f.positions] = m.max_position
    kwargs.update({name: m.dropout for name in family.dropout_fields})
    kwargs.update(family.config_defaults)
    kwargs.update(m.extra)
    return family.hf_class(family.config_class)(**kwargs)


def level_config(level1: PretrainedConfig, level: int, v: VCycleConfig) -> PretrainedConfig:
    """The config at ``level`` (1 = ``level1``): coalesced ``level - 1`` times."""
    config = level1
    for _ in range(level - 1):
        config = derive_config(config, v.width, v.depth)
    return config


def model_class(config: PretrainedConfig) -> type:
    """The Hugging Face class a run trains for ``config``'s family."""
    family = family_of_config(config)
    return family.hf_class(family.train_class_name)


def build_model(config: PretrainedConfig, seed: int) -> torch.nn.Module:
    """A freshly initialised model of ``config`` (seeded). Under a live stage-3
    ``HfDeepSpeedConfig`` it is built partitioned (``_from_config`` enters ``zero.Init``)."""
    torch.manual_seed(seed)
    return model_class(config)._from_config(config)
