"""The data a model family is: which axis of which parameter lives in which space.

A *space* is a width dimension shared across parameters. The operators change the size of
``hidden``, ``qk``, ``v`` and ``ffn`` (``qk``/``v`` in whole heads, so head_dim never changes);
every other space (``vocab``, ``pos``, ``type``, ``labels``) is fixed.

An axis is *averaged* (outputs of a linear map, biases, LayerNorm, embedding columns: ``F`` on
coalesce, duplicated on de-coalesce) or *summed* (inputs of a linear map: ``T`` on coalesce,
averaged on de-coalesce). A fused axis (GPT-2's ``c_attn`` output) concatenates several spaces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WIDTH_SPACES = ("hidden", "qk", "v", "ffn")


@dataclass(frozen=True)
class Axis:
    """One tensor axis: the spaces it concatenates, and whether it is a summed (input) axis."""

    spaces: tuple[str, ...]
    summed: bool = False

    @property
    def resized(self) -> bool:
        return any(s in WIDTH_SPACES for s in self.spaces)


def out(*spaces: str) -> Axis:
    """An averaged axis (linear outputs, biases, norms, embedding columns)."""
    return Axis(tuple(spaces), summed=False)


def inp(*spaces: str) -> Axis:
    """A summed axis (linear inputs)."""
    return Axis(tuple(spaces), summed=True)


@dataclass(frozen=True)
class ConfigFields:
    """Names of the Hugging Face config fields the operators resize."""

    hidden: str
    heads: str
    ffn: str
    layers: str
    ffn_default_multiple: int | None = None  # ffn field may be None, meaning multiple × hidden


@dataclass(frozen=True)
class Family:
    """A model family as a table.

    ``globals``: parameter name → axes, for parameters outside the repeated layers.
    ``layer``: name relative to ``layer_prefix + "{i}."`` → axes.
    ``residual_out``: layer-relative names of the residual-branch output projections
    (used by the ``identity`` depth mapping).
    ``head_norm``: names of the norm right before a tied LM head (scaled ×½ / ×2).
    ``identity_norms`` (post-LN only): layer norm parameter → the output-norm parameter an
    identity copy of the layer takes from the real layer before it.
    """

    name: str
    classes: tuple[str, ...]
    model_type: str
    fields: ConfigFields
    layer_prefix: str
    globals: dict[str, tuple[Axis, ...]]
    layer: dict[str, tuple[Axis, ...]]
    residual_out: tuple[str, ...] = ()
    head_norm: tuple[str, ...] = ()
    pre_ln: bool = False
    identity_norms: dict[str, str] = field(default_factory=dict)

    def axes_of(self, name: str) -> tuple[tuple[Axis, ...], int | None, str]:
        """(axes, layer index or None, layer-relative name); ValueError if not in the table."""
        if name.startswith(self.layer_prefix):
            index, _, rel = name[len(self.layer_prefix):].partition(".")
            if index.isdigit() and rel in self.layer:
                return self.layer[rel], int(index), rel
        elif name in self.globals:
            return self.globals[name], None, name
        raise ValueError(f"parameter {name!r} is not in the {self.name} family table")
