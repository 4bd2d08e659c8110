"""Operator properties (docs/design.md) for the vision families: ViT, DeiT, DeiT + teacher."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    DeiTConfig,
    DeiTForImageClassification,
    DeiTForImageClassificationWithTeacher,
    ViTConfig,
    ViTForImageClassification,
)

from mlsys.operators import coalesce, decoalesce, derive_config
from tests.test_operator_math import T, close, f_matrix
from tests.tiny_models import assert_same_params, perturb

HIDDEN, HEADS, FFN, LAYERS, IMAGE, PATCH, LABELS = 32, 4, 64, 4, 16, 4, 10
KINDS = ["vit", "deit", "deit-teacher"]
SCHEMES = ["stride", "adjacent"]
FACTORS = [(2, 1), (1, 2), (2, 2)]
_CLASSES = {
    "vit": (ViTForImageClassification, ViTConfig),
    "deit": (DeiTForImageClassification, DeiTConfig),
    "deit-teacher": (DeiTForImageClassificationWithTeacher, DeiTConfig),
}


def config(kind: str, hidden=HIDDEN, heads=HEADS, ffn=FFN, layers=LAYERS, **kw):
    return _CLASSES[kind][1](hidden_size=hidden, num_attention_heads=heads,
                             intermediate_size=ffn, num_hidden_layers=layers, image_size=IMAGE,
                             patch_size=PATCH, num_labels=LABELS, **kw)


def make(kind: str, seed: int = 0, **kw) -> torch.nn.Module:
    torch.manual_seed(seed)
    return perturb(_CLASSES[kind][0](config(kind, **kw)), seed)


def pixels(seed: int = 1, batch: int = 3) -> torch.Tensor:
    return torch.randn(batch, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(seed))


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        out = model.eval()(pixel_values=pixels())
    if hasattr(out, "cls_logits"):  # with teacher: both heads, not just their mean
        return torch.cat([out.cls_logits, out.distillation_logits], dim=-1)
    return out.logits


def max_diff(a, b) -> float:
    return (logits(a) - logits(b)).abs().max().item()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("width,depth", FACTORS)
def test_shapes_and_configs(kind, width, depth):
    model = make(kind)
    small = coalesce(model, width=width, depth=depth)
    c, s = model.config, small.config
    assert type(small) is type(model)
    assert (s.hidden_size, s.num_attention_heads, s.intermediate_size, s.num_hidden_layers) == \
        (c.hidden_size // width, c.num_attention_heads // width, c.intermediate_size // width,
         c.num_hidden_layers // depth)
    assert (s.image_size, s.patch_size, s.num_channels, s.num_labels) == \
        (IMAGE, PATCH, 3, LABELS)
    large = decoalesce(small, c)
    assert {n: p.shape for n, p in large.named_parameters()} == \
        {n: p.shape for n, p in model.named_parameters()}
    assert large.config.to_dict() == c.to_dict()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("width,depth", FACTORS)
@pytest.mark.parametrize("depth_mapping", ["copy", "identity"])
def test_round_trip_is_exact(kind, scheme, width, depth, depth_mapping):
    small = perturb(coalesce(make(kind), width=width, depth=depth, scheme=scheme), seed=7)
    large = decoalesce(small, config(kind), scheme=scheme, depth_mapping=depth_mapping)
    back = coalesce(large, width=width, depth=depth, scheme=scheme, depth_mapping=depth_mapping)
    assert_same_params(back, small)


@pytest.mark.parametrize("kind", ["vit", "deit"])
def test_round_trip_three_levels(kind):
    level1 = make(kind, hidden=64, heads=8, ffn=128, layers=8)
    level3 = perturb(coalesce(coalesce(level1)), seed=3)
    up = decoalesce(decoalesce(level3, derive_config(level1.config)), level1.config)
    assert_same_params(coalesce(coalesce(up)), level3)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_width_decoalesce_preserves_logits(kind, scheme):
    small = perturb(coalesce(make(kind), width=2, depth=1, scheme=scheme), seed=5)
    large = decoalesce(small, config(kind), scheme=scheme)
    assert logits(small).abs().max() > 0.1  # the comparison below is not between zeros
    assert max_diff(small, large) <= 1e-4


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("width", [1, 2])
def test_identity_depth_mapping_preserves_logits(kind, scheme, width):
    """Pre-LN: a block whose residual-branch outputs are zero is the identity."""
    small = perturb(coalesce(make(kind), width=width, depth=2, scheme=scheme), seed=4)
    large = decoalesce(small, config(kind), scheme=scheme, depth_mapping="identity")
    assert max_diff(small, large) <= 1e-4


@pytest.mark.parametrize("kind", ["vit", "deit"])
def test_copy_depth_mapping_changes_the_function(kind):
    """Layer copying is not function-preserving: the identity test above could fail."""
    small = perturb(coalesce(make(kind), width=1, depth=2), seed=4)
    assert max_diff(small, decoalesce(small, config(kind), depth_mapping="copy")) > 1e-2


@pytest.mark.parametrize("scheme", SCHEMES)
def test_explicit_matrices_patch_tokens_classifier(scheme):
    m = make("deit")
    s = coalesce(m, width=2, depth=1, scheme=scheme)
    fh, fq = f_matrix(HIDDEN, 1, scheme), f_matrix(HIDDEN, HIDDEN // HEADS, scheme)
    P, S = dict(m.named_parameters()), dict(s.named_parameters())
    conv = "deit.embeddings.patch_embeddings.projection."
    w = P[conv + "weight"]  # (hidden, channels, p, p): only the output axis is averaged
    close(S[conv + "weight"], (fh @ w.reshape(HIDDEN, -1)).reshape(HIDDEN // 2, *w.shape[1:]))
    close(S[conv + "bias"], fh @ P[conv + "bias"])
    for token in ("cls_token", "distillation_token", "position_embeddings"):
        key = f"deit.embeddings.{token}"
        close(S[key], P[key] @ fh.T)  # hidden columns averaged, no rescaling
    close(S["deit.layernorm.weight"], fh @ P["deit.layernorm.weight"])  # untied: no ×2
    close(S["classifier.weight"], P["classifier.weight"] @ T(fh))  # input side summed
    close(S["classifier.bias"], P["classifier.bias"])
    q = "deit.layers.1.attention.q_proj.weight"
    close(S[q], fq @ P[q] @ T(fh))

    s = perturb(s, seed=11)
    S = dict(s.named_parameters())
    L = dict(decoalesce(s, m.config, scheme=scheme).named_parameters())
    w = S[conv + "weight"]
    close(L[conv + "weight"], (T(fh) @ w.reshape(HIDDEN // 2, -1)).reshape(HIDDEN, *w.shape[1:]))
    close(L["deit.embeddings.cls_token"], S["deit.embeddings.cls_token"] @ T(fh).T)
    close(L["classifier.weight"], S["classifier.weight"] @ fh)  # input side averaged
    close(L["deit.layernorm.bias"], T(fh) @ S["deit.layernorm.bias"])


@pytest.mark.parametrize("change,field", [
    (dict(image_size=32), "image_size"),
    (dict(patch_size=8), "patch_size"),
    (dict(num_labels=5), "num_labels"),
    (dict(hidden=64, heads=8), "hidden_size"),
])
def test_mismatched_target_names_the_field(change, field):
    small = coalesce(make("vit"))
    target = config("vit", **{k: v for k, v in change.items() if k in ("hidden", "heads")})
    for k, v in change.items():
        if k not in ("hidden", "heads"):
            setattr(target, k, v)
    with pytest.raises(ValueError, match=field):
        decoalesce(small, target)


def test_target_of_the_other_vision_family():
    with pytest.raises(ValueError, match="model_type"):
        decoalesce(coalesce(make("vit")), config("deit"))
