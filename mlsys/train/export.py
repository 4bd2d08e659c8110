"""Export: a Hugging Face ``save_pretrained`` directory (safetensors) with what a pipeline needs
besides the model (tokenizer or image processor) and a ``README.md`` model card, written to a
temp directory and renamed; loads with ``AutoModelFor{MaskedLM,CausalLM,ImageClassification}``
and ``AutoTokenizer`` / ``AutoImageProcessor``."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from transformers import PretrainedConfig
from transformers.integrations import deepspeed as hf_deepspeed

from mlsys.atomic import atomic_path
from mlsys.data.tokenizer_meta import read_meta
from mlsys.families import get_family
from mlsys.models import model_class


@contextmanager
def plain_construction() -> Iterator[None]:
    """Build models unpartitioned inside, even while a run's ``HfDeepSpeedConfig`` (ZeRO-3)
    is alive; restored on exit."""
    ref = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = ref


def model_card(facts: dict[str, Any]) -> str:
    """A ``README.md`` stating what the model is and how it was trained (``facts``: name,
    family, the HF class, sizes, phases, tokens, FLOPs, val loss)."""
    rows = "\n".join(f"| {k} | {v} |" for k, v in facts.items() if k != "phases")
    phases = "\n".join(f"| {i} | {p['level']} | {p['steps']} | {p['lr']:g} |"
                       for i, p in enumerate(facts.get("phases", [])))
    return (f"# {facts.get('name', 'model')}\n\nTrained with mlsys (multi-level V-cycle "
            f"pre-training on DeepSpeed).\n\n| | |\n|---|---|\n{rows}\n\n## Phases\n\n"
            f"| phase | level | steps | peak lr |\n|---|---|---|---|\n{phases}\n")


def export_pretrained(weights: dict[str, torch.Tensor], config: PretrainedConfig,
                      out_dir: str | Path,
                      save_processor: Callable[[Path], None] | None = None,
                      card: dict[str, Any] | None = None,
                      generation: dict[str, int] | None = None) -> Path:
    """Write ``weights`` (names as in ``named_parameters``) as a model of ``config`` to
    ``out_dir``, replacing it, with the processor files ``save_processor`` writes, the model
    card of ``card`` and the ``generation`` token ids (eos/pad). Call on one process."""
    out_dir = Path(out_dir)
    with plain_construction():
        model = model_class(config)(config)
    params = dict(model.named_parameters())
    if set(params) != set(weights):
        diff = sorted(set(params) ^ set(weights))[:4]
        raise ValueError(f"export: parameter names differ from the model's: {diff}")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(weights[name])
    for key, value in (generation or {}).items():
        setattr(model.generation_config, key, value)
    with atomic_path(out_dir) as tmp:
        model.save_pretrained(tmp)
        if save_processor is not None:
            save_processor(tmp)
        if card is not None:
            (tmp / "README.md").write_text(model_card(card))
    return out_dir


def export_run_model(weights: dict[str, torch.Tensor], config: PretrainedConfig,
                     out_dir: str | Path, cfg: Any, data: Any, state: Any,
                     val_loss: float | None, length: int = 1) -> Path:
    """Export a run's model (``cfg``: the ``RunConfig``; ``data``: its ``RunData``;
    ``state``: the ``ControllerState`` at this point) with its processor and model card.
    ``length``: the length factor the model was trained and validated at (``mlsys.length``;
    the weights are a plain model's whatever it is; the card says it when it is not 1)."""
    config = copy.deepcopy(config)
    labels = getattr(data, "labels", None)
    if labels:
        config.id2label = dict(enumerate(labels))
        config.label2id = {name: i for i, name in enumerate(labels)}
    fields = get_family(cfg.model.family).fields
    card = {"name": cfg.name, "family": cfg.model.family, "class": model_class(config).__name__,
            "hidden size": getattr(config, fields.hidden),
            "layers": getattr(config, fields.layers), "heads": getattr(config, fields.heads),
            "parameters": sum(w.numel() for w in weights.values()),
            "trained steps": state.global_step, "tokens": state.tokens,
            "training FLOPs": f"{state.flops:.4g}",
            "validation loss": None if val_loss is None else f"{val_loss:.4f}",
            "phases": [p.model_dump() for p in cfg.phases]}
    if cfg.model.init_from is not None:
        card["initialised from"] = cfg.model.init_from
    if length > 1:
        card["length factor (validation loss at it; mlsys.length)"] = length
    generation = None
    if cfg.kind == "causal":
        meta = read_meta(data.tokenizer_dir)
        generation = {"eos_token_id": meta["ids"]["eod"], "pad_token_id": meta["ids"]["pad"],
                      "bos_token_id": meta["ids"]["bos"]}
    return export_pretrained(weights, config, out_dir, data.save_processor, card, generation)
