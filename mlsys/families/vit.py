"""ViT and DeiT (pre-LN vision transformers): ViTForImageClassification, DeiTForImageClassification,
DeiTForImageClassificationWithTeacher (transformers 5.x names: ``{vit,deit}.layers.{i}``).

Hidden-space columns of the CLS token, the DeiT distillation token and the position embeddings
are averaged / duplicated like word-embedding columns. The patch embedding is a Conv2d
``(hidden, channels, p, p)``: only its output axis is resized. The classifier is untied, so its
input (hidden) axis is summed on coalesce and averaged on de-coalesce; with the final LayerNorm
averaged / duplicated, width de-coalescing is exactly function-preserving with no head scaling.
"""

from mlsys.families.base import (
    MEASURED_TRANSITION,
    ConfigFields,
    Family,
    Recipe,
    RecipePoint,
    inp,
    out,
)

_H = out("hidden")
_ONE = out("one")  # the leading size-1 axes of the token / position parameters

_FIELDS = ConfigFields(
    hidden="hidden_size", heads="num_attention_heads", ffn="intermediate_size",
    layers="num_hidden_layers", vocab="num_labels",  # no position limit: image/patch sizes
)
_VISION = dict(
    kind="vision", fields=_FIELDS, lm_head=False, patch_embedding=True,
    image_processor="ViTImageProcessor",  # resize, rescale, normalise: what the data does
    dropout_fields=("hidden_dropout_prob", "attention_probs_dropout_prob"),
)

_LAYER = {
    "attention.q_proj.weight": (out("qk"), inp("hidden")),
    "attention.q_proj.bias": (out("qk"),),
    "attention.k_proj.weight": (out("qk"), inp("hidden")),
    "attention.k_proj.bias": (out("qk"),),
    "attention.v_proj.weight": (out("v"), inp("hidden")),
    "attention.v_proj.bias": (out("v"),),
    "attention.o_proj.weight": (_H, inp("v")),
    "attention.o_proj.bias": (_H,),
    "layernorm_before.weight": (_H,),
    "layernorm_before.bias": (_H,),
    "layernorm_after.weight": (_H,),
    "layernorm_after.bias": (_H,),
    "mlp.fc1.weight": (out("ffn"), inp("hidden")),
    "mlp.fc1.bias": (out("ffn"),),
    "mlp.fc2.weight": (_H, inp("ffn")),
    "mlp.fc2.bias": (_H,),
}

_RESIDUAL_OUT = (
    "attention.o_proj.weight", "attention.o_proj.bias", "mlp.fc2.weight", "mlp.fc2.bias",
)


def _classifier(name: str) -> dict:
    return {f"{name}.weight": (out("labels"), inp("hidden")), f"{name}.bias": (out("labels"),)}


def _embeddings(base: str, distillation: bool) -> dict:
    table = {
        f"{base}.embeddings.cls_token": (_ONE, _ONE, _H),
        f"{base}.embeddings.position_embeddings": (_ONE, out("pos"), _H),
        f"{base}.embeddings.patch_embeddings.projection.weight":
            (_H, out("channels"), out("patch"), out("patch")),
        f"{base}.embeddings.patch_embeddings.projection.bias": (_H,),
        f"{base}.layernorm.weight": (_H,),
        f"{base}.layernorm.bias": (_H,),
    }
    if distillation:
        table[f"{base}.embeddings.distillation_token"] = (_ONE, _ONE, _H)
    return table


# Depth only (stacking; cpu-small at 2000 steps, one seed: its last phase cut to 1125 steps,
# +18.0 % (a), +24.6 % (b)), at half the baseline's lr (2.5e-4 against 5e-4, bracketed).
RECIPE = Recipe(
    vcycle={**MEASURED_TRANSITION, "width": 1, "depth": 2},
    layer_weights=786_432,  # cpu-small's 4 layers x 128 (ffn 512)
    points=(RecipePoint(0.669, first=0.05, small=0.50, last=0.5625, lr=0.5, small_lr=1.0,
                        source="docs/results/cpu-small-vit.md, depth-wsd-budget-s1125"),),
)

VIT = Family(
    name="vit",
    model_type="vit",
    config_class="ViTConfig",
    tasks={"image-classification": "ViTForImageClassification"},
    extra_tokens=1,  # CLS
    **_VISION,
    layer_prefix="vit.layers.",
    globals={**_embeddings("vit", distillation=False), **_classifier("classifier")},
    layer=_LAYER,
    residual_out=_RESIDUAL_OUT,
    pre_ln=True,
    recipes=(RECIPE,),
)

DEIT = Family(
    name="deit",
    model_type="deit",
    config_class="DeiTConfig",
    tasks={"image-classification": "DeiTForImageClassification",
           "image-classification-with-teacher": "DeiTForImageClassificationWithTeacher"},
    extra_tokens=2,  # CLS and distillation
    **_VISION,
    layer_prefix="deit.layers.",
    globals={
        **_embeddings("deit", distillation=True),
        **_classifier("classifier"),  # DeiTForImageClassification
        **_classifier("cls_classifier"),  # ...WithTeacher: two untied heads, logits averaged
        **_classifier("distillation_classifier"),
    },
    layer=_LAYER,
    residual_out=_RESIDUAL_OUT,
    pre_ln=True,
)
