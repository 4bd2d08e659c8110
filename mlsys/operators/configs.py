"""Config arithmetic: the sizes of the width spaces, the coalesced config, and target checks."""

from __future__ import annotations

import copy
from dataclasses import dataclass

from mlsys.families import Family

# Fields that fix parameter shapes outside the resized spaces: source and target must agree.
_SHAPE_FIELDS = ("vocab_size", "max_position_embeddings", "n_positions", "type_vocab_size",
                 "image_size", "patch_size", "num_channels", "num_labels")


@dataclass(frozen=True)
class Sizes:
    """Sizes of the resizable spaces of one model, and the unit (element count) of each.
    ``kv_heads``: key/value heads (grouped-query attention; equal to ``heads`` otherwise)."""

    hidden: int
    heads: int
    head_dim: int
    ffn: int
    layers: int
    kv_heads: int = 0  # 0: as many as heads (sizes_of always sets it)

    def size(self, space: str) -> int:
        return {"hidden": self.hidden, "qk": self.heads * self.head_dim,
                "v": self.heads * self.head_dim,
                "kv": (self.kv_heads or self.heads) * self.head_dim,
                "ffn": self.ffn}[space]

    def unit(self, space: str) -> int:
        """Elements paired as one: a head in ``kv``; in the query-head spaces ``qk`` and ``v`` a
        whole group of ``heads / kv_heads`` query heads (one head without grouped-query
        attention), so query heads pair as their key/value heads pair, member for member."""
        if space == "kv":
            return self.head_dim
        if space in ("qk", "v"):
            return self.head_dim * (self.heads // (self.kv_heads or self.heads))
        return 1


def _optional(config, name: str | None):
    return getattr(config, name, None) if name is not None else None


def sizes_of(config, family: Family) -> Sizes:
    f = family.fields
    hidden = getattr(config, f.hidden)
    heads = getattr(config, f.heads)
    head_dim = _optional(config, f.head_dim)
    if heads <= 0 or (head_dim is None and hidden % heads):
        raise ValueError(f"{f.heads}: hidden size {hidden} is not divisible by {heads} heads")
    if head_dim is None:
        head_dim = hidden // heads
    kv_heads = _optional(config, f.kv_heads)
    if kv_heads is None:
        kv_heads = heads
    if kv_heads <= 0 or heads % kv_heads:
        raise ValueError(f"{f.kv_heads}: {kv_heads} key/value heads do not divide {heads} "
                         f"query heads")
    ffn = getattr(config, f.ffn)
    if ffn is None:
        ffn = f.ffn_default_multiple * hidden
    return Sizes(hidden, heads, head_dim, ffn, getattr(config, f.layers), kv_heads)


def check_factors(width: int, depth: int) -> None:
    for name, value in (("width", width), ("depth", depth)):
        if value not in (1, 2):
            raise ValueError(f"{name}: must be 1 or 2, got {value!r}")


def derive_config(config, family: Family, width: int, depth: int):
    """The config of ``coalesce(model, width, depth)``: hidden, heads (and key/value heads), ffn,
    layers divided (and the family's per-layer lists halved), every other field kept
    (head_dim, rotary settings). ValueError names the field that cannot be halved."""
    check_factors(width, depth)
    f = family.fields
    s = sizes_of(config, family)
    if width == 2:
        if s.heads % 2:
            raise ValueError(f"{f.heads}: {s.heads} heads cannot be halved (odd)")
        if s.kv_heads % 2:  # query heads halve, so their key/value groups must halve too
            raise ValueError(f"{f.kv_heads}: {s.kv_heads} key/value heads cannot be halved "
                             f"(odd); grouped-query attention halves query and key/value heads")
        if s.ffn % 2:
            raise ValueError(f"{f.ffn}: {s.ffn} cannot be halved (odd)")
    if depth == 2 and s.layers % 2:
        raise ValueError(f"{f.layers}: {s.layers} layers cannot be halved (odd)")
    per_layer = {name: _halved_layers(config, name, s.layers) for name in family.layer_fields
                 if depth == 2 and getattr(config, name, None) is not None}
    small = copy.deepcopy(config)
    setattr(small, f.hidden, s.hidden // width)
    setattr(small, f.heads, s.heads // width)
    if _optional(config, f.kv_heads) is not None:
        setattr(small, f.kv_heads, s.kv_heads // width)
    for name, value in per_layer.items():
        setattr(small, name, value)
    if getattr(config, f.ffn) is not None:
        setattr(small, f.ffn, s.ffn // width)
    setattr(small, f.layers, s.layers // depth)
    return small


def _halved_layers(config, name: str, layers: int) -> list:
    """A per-layer config list for half the layers: its first half, when all entries agree
    (which layer of a pair an entry belongs to then does not matter)."""
    values = list(getattr(config, name))
    if len(values) != layers or len(set(map(repr, values))) > 1:
        raise ValueError(f"{name}: depth coalescing needs {layers} equal entries, got {values!r}")
    return values[: layers // 2]


def factors_between(small_config, target_config, family: Family) -> tuple[int, int]:
    """(width, depth) such that coalescing ``target_config`` gives ``small_config``;
    ValueError naming the first field that does not match."""
    f = family.fields
    target_type = getattr(target_config, "model_type", None)
    if target_type != family.model_type:
        raise ValueError(f"model_type: target is {target_type!r}, expected {family.model_type!r}")
    s, t = sizes_of(small_config, family), sizes_of(target_config, family)
    width = t.hidden // s.hidden if s.hidden else 0
    if width not in (1, 2) or t.hidden != width * s.hidden:
        raise ValueError(f"{f.hidden}: target {t.hidden} is not 1× or 2× the source {s.hidden}")
    depth = t.layers // s.layers if s.layers else 0
    if depth not in (1, 2) or t.layers != depth * s.layers:
        raise ValueError(f"{f.layers}: target {t.layers} is not 1× or 2× the source {s.layers}")
    derived = derive_config(target_config, family, width, depth)
    optional = tuple(k for k in (f.kv_heads, f.head_dim) if k is not None)
    for key in (f.hidden, f.heads, *optional, f.ffn, f.layers, *_SHAPE_FIELDS):
        want, have = getattr(derived, key, None), getattr(small_config, key, None)
        if want != have:
            raise ValueError(f"{key}: target config gives {want!r} when coalesced "
                             f"({width=}, {depth=}), the source has {have!r}")
    return width, depth
