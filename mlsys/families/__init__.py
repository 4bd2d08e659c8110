"""Model families: one declarative table each. ``family_of`` finds the table for a model."""

from __future__ import annotations

from mlsys.families.base import WIDTH_SPACES, Axis, ConfigFields, Family
from mlsys.families.bert import BERT
from mlsys.families.gpt2 import GPT2
from mlsys.families.vit import DEIT, VIT

FAMILIES: tuple[Family, ...] = (BERT, GPT2, VIT, DEIT)


def family_of(model) -> Family:
    """The family table for a Hugging Face model instance; ValueError naming the class if none."""
    name = type(model).__name__
    for family in FAMILIES:
        if name in family.classes:
            return family
    known = sorted(c for f in FAMILIES for c in f.classes)
    raise ValueError(f"model: unknown family for class {name!r}; supported: {', '.join(known)}")


__all__ = ["FAMILIES", "WIDTH_SPACES", "Axis", "ConfigFields", "Family", "family_of"]
