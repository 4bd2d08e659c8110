"""Properties of coalesce / decoalesce / interpolate that docs/design.md pins."""

from __future__ import annotations

import pytest
import torch
from transformers import BertForSequenceClassification, GPT2LMHeadModel

from mlsys.operators import coalesce, decoalesce, derive_config, interpolate
from tests.tiny_models import (
    assert_same_params,
    bert_config,
    gpt2_config,
    inputs,
    make,
    outputs,
    perturb,
)

KINDS = ["bert-mlm", "bert-pretraining", "gpt2"]
SCHEMES = ["stride", "adjacent"]
FACTORS = [(2, 1), (1, 2), (2, 2)]


def params(model) -> dict[str, torch.Tensor]:
    return dict(model.named_parameters())



def assert_same_function(a, b, tol: float = 1e-4) -> None:
    ids = inputs()
    for x, y in zip(outputs(a, ids), outputs(b, ids), strict=True):
        assert (x - y).abs().max().item() <= tol


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("width,depth", FACTORS)
def test_shapes_and_configs(kind, width, depth):
    model = make(kind)
    small = coalesce(model, width=width, depth=depth)
    c, s = model.config, small.config
    assert type(small) is type(model)
    assert s.hidden_size == c.hidden_size // width
    assert s.num_attention_heads == c.num_attention_heads // width
    assert s.hidden_size // s.num_attention_heads == c.hidden_size // c.num_attention_heads
    assert s.num_hidden_layers == c.num_hidden_layers // depth
    assert s.vocab_size == c.vocab_size
    if kind.startswith("bert"):
        assert s.intermediate_size == c.intermediate_size // width
    assert all(p.dtype == torch.float32 for p in small.parameters())
    # every other field kept
    kept = {k: v for k, v in c.to_dict().items()
            if k not in ("hidden_size", "n_embd", "num_attention_heads", "n_head",
                         "intermediate_size", "num_hidden_layers", "n_layer")}
    assert {k: s.to_dict().get(k) for k in kept} == kept
    large = decoalesce(small, model.config)
    assert type(large) is type(model)
    assert {n: p.shape for n, p in large.named_parameters()} == \
        {n: p.shape for n, p in model.named_parameters()}
    assert large.config.to_dict() == model.config.to_dict()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("width,depth", FACTORS)
@pytest.mark.parametrize("depth_mapping", ["copy", "identity"])
def test_round_trip_is_exact(kind, scheme, width, depth, depth_mapping):
    small = coalesce(make(kind), width=width, depth=depth, scheme=scheme)
    perturb(small, seed=7)  # a small model that is not itself a coalesced one
    large = decoalesce(small, make(kind).config, scheme=scheme, depth_mapping=depth_mapping)
    back = coalesce(large, width=width, depth=depth, scheme=scheme, depth_mapping=depth_mapping)
    assert_same_params(back, small)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_round_trip_three_levels(kind, scheme):
    level1 = make(kind, hidden=64, heads=8, ffn=128, layers=8) if kind != "gpt2" \
        else make(kind, hidden=64, heads=8, layers=8)
    level3 = perturb(coalesce(coalesce(level1, scheme=scheme), scheme=scheme), seed=3)
    level2_config = derive_config(level1.config)
    up = decoalesce(decoalesce(level3, level2_config, scheme=scheme), level1.config, scheme=scheme)
    down = coalesce(coalesce(up, scheme=scheme), scheme=scheme)
    assert_same_params(down, level3)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_width_decoalesce_preserves_logits(kind, scheme):
    small = perturb(coalesce(make(kind), width=2, depth=1, scheme=scheme), seed=5)
    large = decoalesce(small, make(kind).config, scheme=scheme).eval()
    assert_same_function(small, large)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_width_decoalesce_preserves_logits_untied_head(scheme):
    model = perturb(GPT2LMHeadModel(gpt2_config(tie_word_embeddings=False)))
    assert model.lm_head.weight is not model.transformer.wte.weight
    small = perturb(coalesce(model, width=2, depth=1, scheme=scheme), seed=2)
    assert_same_function(small, decoalesce(small, model.config, scheme=scheme).eval())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_coalescing_duplicated_units_gives_back_the_function(kind, scheme):
    """The reverse view: a large model whose units are duplicated coalesces to the same function."""
    small = perturb(coalesce(make(kind), width=2, depth=1, scheme=scheme), seed=9)
    duplicated = decoalesce(small, make(kind).config, scheme=scheme).eval()
    assert_same_function(duplicated, coalesce(duplicated, width=2, depth=1, scheme=scheme))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_identity_depth_mapping_preserves_gpt2_logits(scheme):
    small = perturb(coalesce(make("gpt2")), seed=4)
    large = decoalesce(small, make("gpt2").config, scheme=scheme, depth_mapping="identity")
    assert_same_function(small, large.eval())


@pytest.mark.parametrize("kind", ["bert-mlm", "bert-pretraining"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_identity_depth_mapping_post_ln_exact_when_output_norms_are_uniform(kind, scheme):
    """Post-LN BERT: the identity copy's LayerNorms take the previous layer's output norm, so
    LN(LN(x)) = x whenever that norm's γ, β are uniform; trained norms make it approximate."""
    small = perturb(coalesce(make(kind)), seed=4)
    with torch.no_grad():
        for i, layer in enumerate(small.bert.encoder.layer):
            layer.output.LayerNorm.weight.fill_(0.5 + i)
            layer.output.LayerNorm.bias.fill_(0.1 * i - 0.05)
    large = decoalesce(small, make(kind).config, scheme=scheme, depth_mapping="identity")
    assert_same_function(small, large.eval())


def test_copy_depth_mapping_changes_the_function():
    """Layer copying is the method, not function-preserving: the test above could fail."""
    small = perturb(coalesce(make("gpt2")), seed=4)
    large = decoalesce(small, make("gpt2").config, depth_mapping="copy").eval()
    ids = inputs()
    assert (outputs(small, ids)[0] - outputs(large, ids)[0]).abs().max() > 1e-2


def test_interpolate_ends_exact_and_linear():
    a, b = make("gpt2", seed=1), make("gpt2", seed=2)
    pa = {n: p.clone() for n, p in params(a).items()}
    pb = {n: p.clone() for n, p in params(b).items()}
    for alpha, expect in ((0.0, pa), (1.0, pb)):
        t = make("gpt2", seed=1)
        interpolate(t, b, alpha)
        for name, p in params(t).items():
            assert torch.equal(p, expect[name]), (alpha, name)
    t = make("gpt2", seed=1)
    interpolate(t, b, 0.25)
    for name, p in params(t).items():
        assert torch.allclose(p, 0.75 * pa[name] + 0.25 * pb[name], atol=1e-6, rtol=0)
    half = make("gpt2", seed=1)
    interpolate(half, b, 0.5)
    for name, p in params(half).items():
        assert torch.allclose(p, (pa[name] + pb[name]) / 2, atol=1e-6, rtol=0)
    assert torch.equal(params(b)["transformer.wte.weight"], pb["transformer.wte.weight"])


def test_interpolate_errors():
    with pytest.raises(ValueError, match="alpha"):
        interpolate(make("gpt2"), make("gpt2"), 1.5)
    with pytest.raises(ValueError, match="shapes differ"):
        interpolate(make("gpt2"), make("gpt2", hidden=64, heads=8), 0.5)
    with pytest.raises(ValueError, match="source"):
        interpolate(make("gpt2"), make("bert-mlm"), 0.5)


@pytest.mark.parametrize("kind,field,kw", [
    ("bert-mlm", "num_attention_heads", dict(hidden=36, heads=3)),
    ("gpt2", "n_head", dict(hidden=36, heads=3)),
    ("bert-mlm", "num_hidden_layers", dict(layers=3)),
    ("gpt2", "n_layer", dict(layers=3)),
    ("bert-mlm", "intermediate_size", dict(ffn=63)),
])
def test_impossible_coalesce_names_the_field(kind, field, kw):
    with pytest.raises(ValueError, match=field):
        coalesce(make(kind, **kw), width=2, depth=2)


def test_hidden_not_divisible_by_heads():
    with pytest.raises(ValueError, match="num_attention_heads"):
        coalesce(_with(make("bert-mlm"), hidden_size=30))


def _with(model, **fields):
    for k, v in fields.items():
        setattr(model.config, k, v)
    return model


@pytest.mark.parametrize("arg,value,field", [
    ("width", 3, "width"), ("depth", 0, "depth"), ("scheme", "random", "scheme"),
    ("depth_mapping", "zeros", "depth_mapping"),
])
def test_bad_arguments_name_the_field(arg, value, field):
    with pytest.raises(ValueError, match=field):
        coalesce(make("gpt2"), **{arg: value})


def test_unknown_family():
    with pytest.raises(ValueError, match="unknown family.*BertForSequenceClassification"):
        coalesce(BertForSequenceClassification(bert_config()))


def test_unknown_parameter_is_an_error():
    model = make("gpt2")
    model.transformer.extra = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="transformer.extra.weight"):
        coalesce(model)


@pytest.mark.parametrize("kind,change,field", [
    ("bert-mlm", dict(hidden_size=48, num_attention_heads=6), "hidden_size"),
    ("bert-mlm", dict(num_hidden_layers=6), "num_hidden_layers"),
    ("bert-mlm", dict(intermediate_size=96), "intermediate_size"),
    ("bert-mlm", dict(num_attention_heads=8), "num_attention_heads"),
    ("bert-mlm", dict(vocab_size=70), "vocab_size"),
    ("gpt2", dict(n_embd=96, n_head=12), "n_embd"),
])
def test_mismatched_target_names_the_field(kind, change, field):
    model = make(kind)
    small = coalesce(model)
    target = _with(make(kind), **change).config
    with pytest.raises(ValueError, match=field):
        decoalesce(small, target)


def test_target_of_another_family():
    with pytest.raises(ValueError, match="model_type"):
        decoalesce(coalesce(make("gpt2")), make("bert-mlm").config)
