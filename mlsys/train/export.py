"""Export: a Hugging Face ``save_pretrained`` directory (safetensors) plus the tokenizer files,
written to a temp directory and renamed, loadable with ``AutoModelFor{MaskedLM,CausalLM}``."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from transformers import PretrainedConfig

from mlsys.atomic import atomic_path
from mlsys.models import model_class


def export_pretrained(weights: dict[str, torch.Tensor], config: PretrainedConfig,
                      tokenizer_dir: str | Path | None, out_dir: str | Path) -> Path:
    """Write ``weights`` (names as in ``named_parameters``) as a model of ``config`` to
    ``out_dir``, replacing it. Call on one process, outside any ZeRO-3 construction context."""
    out_dir = Path(out_dir)
    model = model_class(config)(config)
    params = dict(model.named_parameters())
    if set(params) != set(weights):
        diff = sorted(set(params) ^ set(weights))[:4]
        raise ValueError(f"export: parameter names differ from the model's: {diff}")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(weights[name])
    with atomic_path(out_dir) as tmp:
        model.save_pretrained(tmp)
        if tokenizer_dir is not None:
            for f in Path(tokenizer_dir).iterdir():
                if f.is_file():
                    shutil.copy2(f, tmp / f.name)
    return out_dir
