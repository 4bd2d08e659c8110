"""Model families: one declaration each (``mlsys/families/<name>.py``), looked up here.

Adding a family is one new file with its ``Family`` and one line in ``FAMILIES``; nothing
outside this package names a family.
"""

from __future__ import annotations

from mlsys.families.base import KINDS, TRAIN_TASK, WIDTH_SPACES, Axis, ConfigFields, Family, Length
from mlsys.families.bert import BERT
from mlsys.families.gpt2 import GPT2
from mlsys.families.llama import LLAMA, MISTRAL, QWEN2, QWEN3
from mlsys.families.vit import DEIT, VIT

FAMILIES: tuple[Family, ...] = (BERT, GPT2, VIT, DEIT, LLAMA, QWEN2, QWEN3, MISTRAL)
NAMES: tuple[str, ...] = tuple(f.name for f in FAMILIES)


def get_family(name: str) -> Family:
    """The family a run config's ``model.family`` names; ValueError listing the known ones."""
    for family in FAMILIES:
        if family.name == name:
            return family
    raise ValueError(f"family: unknown family {name!r}; known: {', '.join(NAMES)}")


def family_of(model) -> Family:
    """The family table for a Hugging Face model instance; ValueError naming the class if none."""
    name = type(model).__name__
    for family in FAMILIES:
        if name in family.classes:
            return family
    known = sorted(c for f in FAMILIES for c in f.classes)
    raise ValueError(f"model: unknown family for class {name!r}; supported: {', '.join(known)}")


def family_of_config(config) -> Family:
    """The family of a Hugging Face config, by its ``model_type``."""
    model_type = getattr(config, "model_type", None)
    for family in FAMILIES:
        if family.model_type == model_type:
            return family
    raise ValueError(f"model_type: unknown family {model_type!r}")


__all__ = ["FAMILIES", "KINDS", "NAMES", "TRAIN_TASK", "WIDTH_SPACES", "Axis", "ConfigFields",
           "Family", "Length", "family_of", "family_of_config", "get_family"]
