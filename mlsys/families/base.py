"""The data a model family is: everything the system knows about it, in one declaration.

The operator table: which axis of which parameter lives in which space.

A *space* is a width dimension shared across parameters. The operators change the size of
``hidden``, ``qk``, ``v``, ``kv`` and ``ffn`` (``qk``/``v``/``kv`` in whole heads, so head_dim
never changes); every other space (``vocab``, ``pos``, ``type``, ``labels``, ``head``) is fixed.
``qk`` and ``v`` are query-head spaces (``heads × head_dim``: queries, keys and values of
multi-head attention, and the attention output an output projection reads); ``kv`` is the
key/value-head space of grouped-query attention (``kv_heads × head_dim``). Query heads and
key/value heads both halve, so every query head keeps its key/value group (see
``mlsys/operators/pairing.py``).

An axis is *averaged* (outputs of a linear map, biases, LayerNorm, embedding columns: ``F`` on
coalesce, duplicated on de-coalesce) or *summed* (inputs of a linear map: ``T`` on coalesce,
averaged on de-coalesce). A fused axis (GPT-2's ``c_attn`` output) concatenates several spaces.
LayerNorm and RMSNorm weights are averaged axes; a gated FFN (SwiGLU) has two maps with an
``ffn`` output axis (gate and up, paired alike) and one with an ``ffn`` input axis (down).

Around it, what the rest of the system looks up instead of naming a family: the Hugging Face
config and model classes (by name, resolved lazily), the data kind it trains on (``causal``,
``masked`` or ``vision``), how run-config fields map to config fields, its dropout fields, the
extra tokens a vision model sees per image, the dimensions its FLOPs formula reads, and the
submodules a length-coalesced level calls (``Length``, for ``mlsys.length``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

WIDTH_SPACES = ("hidden", "qk", "v", "kv", "ffn")
KINDS = ("causal", "masked", "vision")
# The task a run of each data kind trains (a key of ``Family.tasks``).
TRAIN_TASK = {"causal": "causal-lm", "masked": "masked-lm", "vision": "image-classification"}


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
    """Names of the Hugging Face config fields: the four the operators resize, and where the
    run config's ``max_position`` and ``vocab_size`` go (``positions`` None: the family has no
    position limit; a classifier's "vocabulary" is its label set, ``num_labels``). Optional:
    ``kv_heads`` (grouped-query attention; halved with the query heads, so an odd count is a
    ``ValueError`` naming it) and ``head_dim`` (kept: head_dim never changes)."""

    hidden: str
    heads: str
    ffn: str
    layers: str
    vocab: str
    positions: str | None = None
    ffn_default_multiple: int | None = None  # ffn field may be None, meaning multiple × hidden
    kv_heads: str | None = None  # grouped-query attention: the key/value head count (None in
    #                              the config: as many as query heads)
    head_dim: str | None = None  # an explicit head size (None in the config: hidden / heads)


@dataclass(frozen=True)
class Length:
    """How a level with length factor k > 1 calls a model (``mlsys.length.pooled_forward``):
    the same tensors, on S/k pooled positions. All are attribute paths of the trained class.

    ``word_embedding``: the token lookup table (its rows are mean-pooled over k tokens).
    ``backbone``: the transformer under the head (Hugging Face's base model); it is called
    with ``inputs_embeds`` (the pooled embeddings) and ``position_ids`` 0..S/k-1, so it adds
    its own positions (learned tables) or rotates by them (RoPE) at the pooled index.
    ``head``: the module mapping the backbone's hidden states to logits (the LM head; BERT's
    whole MLM head, transform included). ``pooled_ids``: other per-token inputs the backbone
    embeds by lookup inside it (BERT's ``token_type_ids``) → that table's path: their
    embeddings are mean-pooled like the words'."""

    word_embedding: str
    backbone: str
    head: str
    pooled_ids: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Family:
    """A model family as a declaration.

    ``name``: what a run config's ``model.family`` says. ``tasks``: task → Hugging Face model
    class name; the class a run trains is ``tasks[TRAIN_TASK[kind]]``; every class listed is
    covered by the operator table. ``config_class``: the Hugging Face config class name.
    ``kind``: the data it trains on. ``dropout_fields``: config fields set to
    ``model.dropout``. ``config_defaults``: config fields always passed (before
    ``model.extra``). ``extra_tokens``: vision only, tokens per image besides the patches.
    FLOPs (``mlsys.flops``): ``lm_head`` (a ``hidden × vocab`` output projection is counted),
    ``head_transform`` (one more ``hidden × hidden`` map before it, BERT's MLM transform),
    ``patch_embedding`` (a ``channels·patch² × hidden`` input projection per token),
    ``ffn_maps`` (linear maps per layer that read or write the ffn space: 2, or 3 when gated).
    ``layer_fields``: config fields holding one entry per layer (Qwen2's ``layer_types``):
    depth coalescing keeps the first half when every entry is equal, else ``ValueError``.
    ``image_processor``: vision only, the Hugging Face image processor class an export ships.
    ``length``: the submodules a length-coalesced level calls (``Length``); None: the family
    has no length levels (``vcycle.length`` must be 1).

    ``globals``: parameter name → axes, for parameters outside the repeated layers.
    ``layer``: name relative to ``layer_prefix + "{i}."`` → axes.
    ``residual_out``: layer-relative names of the residual-branch output projections
    (used by the ``identity`` depth mapping).
    ``head_norm``: names of the norm right before a tied LM head (scaled ×½ / ×2).
    ``identity_norms`` (post-LN only): layer norm parameter → the output-norm parameter an
    identity copy of the layer takes from the real layer before it.
    """

    name: str
    model_type: str
    config_class: str
    tasks: dict[str, str]
    kind: Literal["causal", "masked", "vision"]
    fields: ConfigFields
    layer_prefix: str
    globals: dict[str, tuple[Axis, ...]]
    layer: dict[str, tuple[Axis, ...]]
    residual_out: tuple[str, ...] = ()
    head_norm: tuple[str, ...] = ()
    pre_ln: bool = False
    identity_norms: dict[str, str] = field(default_factory=dict)
    dropout_fields: tuple[str, ...] = ()
    config_defaults: dict[str, Any] = field(default_factory=dict)
    extra_tokens: int = 0
    lm_head: bool = True
    head_transform: bool = False
    patch_embedding: bool = False
    ffn_maps: int = 2
    layer_fields: tuple[str, ...] = ()
    image_processor: str | None = None
    length: Length | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: {self.kind!r} is not one of {KINDS}")
        if TRAIN_TASK[self.kind] not in self.tasks:
            raise ValueError(f"tasks: {self.name} lists no {TRAIN_TASK[self.kind]!r} class")

    @property
    def classes(self) -> tuple[str, ...]:
        """Every Hugging Face model class the operator table covers."""
        return tuple(self.tasks.values())

    @property
    def train_class_name(self) -> str:
        """The Hugging Face model class a run of this family trains and exports."""
        return self.tasks[TRAIN_TASK[self.kind]]

    def hf_class(self, name: str) -> type:
        import transformers

        return getattr(transformers, name)

    def axes_of(self, name: str) -> tuple[tuple[Axis, ...], int | None, str]:
        """(axes, layer index or None, layer-relative name); ValueError if not in the table."""
        if name.startswith(self.layer_prefix):
            index, _, rel = name[len(self.layer_prefix):].partition(".")
            if index.isdigit() and rel in self.layer:
                return self.layer[rel], int(index), rel
        elif name in self.globals:
            return self.globals[name], None, name
        raise ValueError(f"parameter {name!r} is not in the {self.name} family table")
