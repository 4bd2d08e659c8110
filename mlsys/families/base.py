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

Every field of these dataclasses states its contract in the docstring under it (read by
``mlsys.config_reference`` for ``docs/config.md``).
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
    """The spaces this axis concatenates, in order: one for most axes, several for a fused
    axis (GPT-2's ``c_attn`` output: qk, qk, v). Spaces in ``WIDTH_SPACES`` are resized by
    width coalescing, the others are fixed."""
    summed: bool = False
    """False: an averaged axis (linear outputs, biases, norms, embedding columns: a pair is
    averaged on coalesce, duplicated on de-coalesce); True: a summed axis (linear inputs: a
    pair is summed on coalesce, each copy halved on de-coalesce)."""

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
    """Names of the Hugging Face config fields the run config sets and the operators read
    and resize; None where the family's config has no such field."""

    hidden: str
    """The hidden size field (the run config's ``model.hidden_size``; resized by width)."""
    heads: str
    """The attention (query) head count field (``model.num_heads``; halved by width)."""
    ffn: str
    """The feed-forward inner size field (``model.ffn_size``; halved by width)."""
    layers: str
    """The layer count field (``model.num_layers``; halved by depth)."""
    vocab: str
    """Where ``model.vocab_size`` goes: the vocabulary size, or for a classifier its label
    set (``num_labels``)."""
    positions: str | None = None
    """Where ``model.max_position`` goes (the position table size, checked against
    ``data.seq_length``); None: the family has no position limit."""
    ffn_default_multiple: int | None = None
    """When the config's ffn field may be None, the multiple of the hidden size it then
    means (GPT-2's ``n_inner``: 4)."""
    kv_heads: str | None = None
    """Grouped-query attention: the key/value head count field (None in a config: as many as
    the query heads). Halved with the query heads, so an odd count is a ``ValueError`` naming
    it."""
    head_dim: str | None = None
    """An explicit head size field (None in a config: hidden / heads); kept as it is, since
    head_dim never changes."""

@dataclass(frozen=True)
class Length:
    """How a level with length factor k > 1 calls a model (``mlsys.length.pooled_forward``):
    the same tensors, on S/k pooled positions. Every field is an attribute path in the
    trained class."""

    word_embedding: str
    """The token lookup table; its rows are mean-pooled over each window of k tokens."""
    backbone: str
    """The transformer under the head (Hugging Face's base model). It is called with
    ``inputs_embeds`` (the pooled embeddings) and ``position_ids`` 0..S/k-1, so it adds its
    own positions (learned tables) or rotates by them (RoPE) at the pooled index."""
    head: str
    """The module mapping the backbone's hidden states to logits (the LM head; BERT's whole
    MLM head, transform included)."""
    pooled_ids: dict[str, str] = field(default_factory=dict)
    """Other per-token inputs the backbone embeds by lookup inside it (BERT's
    ``token_type_ids``) → that table's path: their embeddings are mean-pooled like the
    words'."""

# The transition every measured recipe uses (docs/results/cpu-small-ablation.md): identity
# blocks, all of the saved model's width detail, a fresh optimizer, noise 1e-3, no length
# level. A recipe adds its width and depth factors.
MEASURED_TRANSITION: dict[str, Any] = {
    "scheme": "stride", "alpha": 0.0, "length": 1, "depth_mapping": "identity",
    "optimizer": "reset", "noise": 0.001, "interpolation": "width"}


@dataclass(frozen=True)
class RecipePoint:
    """One measured best V-cycle, at one budget: what ``vcycle.recipe: auto`` chooses there
    (``mlsys.recipe``). Phase lengths are fractions of the budget B (the level-1 steps of the
    baseline the cycle replaces): level 1 for ``first`` × B steps, level 2 for ``small`` × B,
    level 1 again for ``last`` × B."""

    tokens_per_param: float
    """The budget it was measured at: B × tokens per step / parameters (``mlsys.recipe``
    counts the parameters)."""
    first: float
    """Steps of the first level-1 phase, as a fraction of B."""
    small: float
    """Steps of the level-2 phase, as a fraction of B."""
    last: float
    """Steps of the last level-1 phase, as a fraction of B."""
    lr: float
    """The cycle's level-1 lr as a multiple of the baseline's (the best lr of each, measured
    side by side)."""
    small_lr: float
    """Level 2's lr as a multiple of the cycle's level-1 lr."""
    source: str
    """Where it was measured (a results page)."""
    rewarm: float = 0.01
    """The level-2 and last phases' warmup, as a fraction of B."""
    shape: dict[str, Any] = field(default_factory=dict)
    """The ``vcycle`` fields this point sets beyond (or instead of) the recipe's own: its
    cycle's shape where it differs (``{"length": 2}``). Numbers are interpolated only between
    two points of the same shape."""


@dataclass(frozen=True)
class NoSaving:
    """A budget, above every ``RecipePoint``, where the family's cycle was measured to cost
    more than the baseline: from the geometric mean of it and the last point's budget up,
    ``vcycle.recipe: auto`` keeps the baseline (``mlsys.recipe``)."""

    tokens_per_param: float
    """The budget it was measured at."""
    measured: str
    """What was measured there (the run and its saving)."""
    source: str
    """Where (a results page)."""


@dataclass(frozen=True)
class Recipe:
    """The family's measured best V-cycle as a rule of the budget (``vcycle.recipe: auto``):
    the cycle's shape, and its phase lengths and lrs at each measured budget; between two
    measured budgets every number is interpolated linearly in log(tokens per parameter)
    (between two points of different shapes the nearer in log budget is taken whole),
    outside them the nearest is taken; towards a ``no_saving`` budget, no cycle at all."""

    vcycle: dict[str, Any]
    """The ``vcycle`` fields the recipe sets (its shape and transition; a point's ``shape``
    adds to them)."""
    points: tuple[RecipePoint, ...]
    """The measured points, by increasing ``tokens_per_param`` (at least one)."""
    layer_weights: int
    """The size of the model its points were measured on: the weights of its layers' linear
    maps (``mlsys.recipe.layer_weights``, embeddings left out). A family with recipes at
    several sizes gives a model the one measured nearest to its own size in log."""
    no_saving: NoSaving | None = None
    """Where the cycle was measured not to save (above every point), if anywhere."""

    def __post_init__(self) -> None:
        budgets = [p.tokens_per_param for p in self.points]
        if not budgets or budgets != sorted(set(budgets)):
            raise ValueError("points: give at least one, by strictly increasing tokens_per_param")
        if self.no_saving is not None and self.no_saving.tokens_per_param <= budgets[-1]:
            raise ValueError("no_saving: its budget must be above every point's")
        if self.layer_weights <= 0:
            raise ValueError("layer_weights: the measured model's size, a positive count")


@dataclass(frozen=True)
class Family:
    """A model family as a declaration: what the operators, model construction, the data,
    FLOPs, length levels and export read instead of naming a family. A family is one
    ``Family`` in ``mlsys/families/<name>.py`` and one entry in ``FAMILIES``; construction
    checks that ``kind`` is known and ``tasks`` names the class its kind trains."""

    name: str
    """What a run config's ``model.family`` says (unique among the families)."""
    model_type: str
    """The Hugging Face config's ``model_type``: how a config is mapped back to its family
    (``family_of_config``), and checked when one config is derived from another."""
    config_class: str
    """The Hugging Face config class name (looked up in ``transformers`` when used)."""
    tasks: dict[str, str]
    """Task → Hugging Face model class name. The class a run trains and exports is
    ``tasks[TRAIN_TASK[kind]]``; every class listed is covered by the operator table (and
    maps a model instance back to this family, ``family_of``)."""
    kind: Literal["causal", "masked", "vision"]
    """The data the family trains on: ``causal`` (causal LM on text), ``masked`` (masked LM
    on sentence-split text) or ``vision`` (image classification)."""
    fields: ConfigFields
    """Names of the Hugging Face config fields the run config sets and the operators read
    (``ConfigFields``)."""
    layer_prefix: str
    """Parameter-name prefix of the repeated layers: layer i's parameters are named
    ``layer_prefix + "{i}." + name``, with name a key of ``layer``."""
    globals: dict[str, tuple[Axis, ...]]
    """Parameter name → its axes (one ``Axis`` per tensor dimension), for the parameters
    outside the repeated layers (a parameter only some configs have, such as an untied LM
    head, may be listed)."""
    layer: dict[str, tuple[Axis, ...]]
    """Layer-relative parameter name → its axes, for every parameter of a repeated layer."""
    residual_out: tuple[str, ...] = ()
    """Layer-relative names of the residual branches' output projections: zero in the
    identity copy of ``vcycle.depth_mapping: identity``, summed over the pair on coalesce."""
    head_norm: tuple[str, ...] = ()
    """Names of the norm right before a tied LM head: with tied embeddings and width 2 it is
    scaled ×½ on de-coalesce (×2 on coalesce), so the tied head's logits are preserved."""
    pre_ln: bool = False
    """Whether the layers normalise before their branches (pre-LN) rather than after
    (post-LN). Declarative only: no code reads it; post-LN handling of the identity depth
    mapping is ``identity_norms``."""
    identity_norms: dict[str, str] = field(default_factory=dict)
    """Post-LN only: layer norm parameter → the output-norm parameter an identity copy of the
    layer (``vcycle.depth_mapping: identity``) takes from the real layer before it. Empty:
    identity copies keep their norms (pre-LN)."""
    dropout_fields: tuple[str, ...] = ()
    """Hugging Face config fields set to the run config's ``model.dropout``."""
    config_defaults: dict[str, Any] = field(default_factory=dict)
    """Hugging Face config fields always passed, after the run config's fields and before
    ``model.extra`` (which overrides them)."""
    extra_tokens: int = 0
    """Vision only: tokens per image besides the patches (ViT's CLS: 1; DeiT's CLS and
    distillation tokens: 2). ``data.seq_length`` must be (image_size / patch_size)² plus
    these."""
    lm_head: bool = True
    """FLOPs (``mlsys.flops``): whether a hidden × vocab output projection is counted (false
    for a classifier)."""
    head_transform: bool = False
    """FLOPs: one more hidden × hidden map before the LM head (BERT's MLM transform)."""
    patch_embedding: bool = False
    """FLOPs: a channels·patch² × hidden input projection per token (vision)."""
    ffn_maps: int = 2
    """FLOPs: linear maps per layer that read or write the ffn space: 2, or 3 when gated
    (SwiGLU)."""
    layer_fields: tuple[str, ...] = ()
    """Hugging Face config fields holding one entry per layer (Qwen2's ``layer_types``): depth
    coalescing keeps the first half when every entry is equal, else ``ValueError``."""
    image_processor: str | None = None
    """Vision only: the Hugging Face image processor class an export ships (resize, rescale,
    normalise with the data's mean and std)."""
    length: Length | None = None
    """The submodules a length-coalesced level calls (``Length``); None: the family has no
    length levels (``vcycle.length`` must be 1)."""
    recipes: tuple[Recipe, ...] = ()
    """The measured best V-cycle as a rule of the budget (``Recipe``), one per model size it
    was measured at (by increasing ``layer_weights``): what ``vcycle.recipe: auto`` chooses;
    empty: not measured for this family (auto is refused)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: {self.kind!r} is not one of {KINDS}")
        if TRAIN_TASK[self.kind] not in self.tasks:
            raise ValueError(f"tasks: {self.name} lists no {TRAIN_TASK[self.kind]!r} class")
        sizes = [r.layer_weights for r in self.recipes]
        if sizes != sorted(set(sizes)):
            raise ValueError(f"recipes: {self.name}'s, by strictly increasing layer_weights")

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
