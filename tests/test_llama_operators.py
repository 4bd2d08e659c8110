"""The operator contract on Llama-style decoders (mlsys/families/llama.py): RMSNorm, rotary,
SwiGLU, grouped-query attention, tied and untied heads; Qwen2, Qwen3 and Mistral through the
same table. Weights are float64; Hugging Face computes RMSNorm and rotary in float32, so
"exact" function preservation means ≤ 5e-5 here (a wrong operator is off by > 1e-2)."""

from __future__ import annotations

import pytest
import torch

from mlsys.families import get_family
from mlsys.operators import coalesce, decoalesce, derive_config
from mlsys.operators.configs import Sizes
from mlsys.operators.pairing import small_index
from tests.tiny_models import DECODER_NOISE, assert_same_params, inputs, make_decoder, outputs
from tests.tiny_models import perturb as _perturb

SCHEMES = ["stride", "adjacent"]
FACTORS = [(2, 1), (1, 2), (2, 2)]
TOL = 5e-5
KINDS = ["llama", "qwen2", "qwen3", "mistral"]
KIND_KW = {"llama": {}, "qwen2": {}, "qwen3": {"head_dim": 16}, "mistral": {}}


def perturb(model, seed: int):
    return _perturb(model, seed, scale=DECODER_NOISE)


def max_diff(a, b) -> float:
    ids = inputs()
    return max((x - y).abs().max().item()
               for x, y in zip(outputs(a, ids), outputs(b, ids), strict=True))


def widened(kind="llama", scheme="stride", seed=5, **kw):
    """(small, large): a perturbed width-coalesced model and its width de-coalescing."""
    base = make_decoder(kind, **kw)
    small = perturb(coalesce(base, width=2, depth=1, scheme=scheme), seed=seed)
    return small, decoalesce(small, base.config, scheme=scheme).eval()


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_width_decoalesce_preserves_logits_gqa(tied, scheme):
    small, large = widened(scheme=scheme, tie_word_embeddings=tied)
    assert (large.config.num_attention_heads, large.config.num_key_value_heads) == (4, 2)
    assert (small.config.num_attention_heads, small.config.num_key_value_heads) == (2, 1)
    assert (large.lm_head.weight is large.model.embed_tokens.weight) == tied
    assert max_diff(small, large) <= TOL


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (8, 4), (8, 2), (4, 2)])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_width_decoalesce_preserves_logits_any_group_size(heads, kv_heads, scheme):
    small, large = widened(scheme=scheme, hidden=64, heads=heads, kv_heads=kv_heads,
                           tie_word_embeddings=True)
    assert small.config.num_attention_heads == heads // 2
    assert small.config.num_key_value_heads == kv_heads // 2
    assert max_diff(small, large) <= TOL


@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (8, 2), (8, 4), (16, 4), (4, 4)])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_query_head_stays_with_its_kv_group(heads, kv_heads, scheme):
    """Hugging Face's repeat_kv: query head h reads key/value head h // r (r = heads/kv_heads),
    in the large model and in the small one (r unchanged). Pair k of a space becomes unit k of
    the small one. (1) Query head h lands on a small query head that reads the small key/value
    head h's own key/value head lands on. (2) Each large group holds exactly one copy of every
    query head of its small group, so the two copies of a key/value head serve the same query
    heads and get the same gradient (what Adam-state mapping relies on)."""
    r, head_dim = heads // kv_heads, 3
    sizes = Sizes(hidden=heads * head_dim, heads=heads, head_dim=head_dim, ffn=2, layers=2,
                  kv_heads=kv_heads)

    def small_heads(space: str) -> list[int]:
        index = small_index(sizes.size(space), sizes.unit(space), scheme)
        return (index[::head_dim] // head_dim).tolist()

    small_q, small_kv = small_heads("qk"), small_heads("kv")
    assert small_heads("v") == small_q
    for h in range(heads):
        assert small_q[h] // r == small_kv[h // r], (h, scheme)
    for g in range(kv_heads):
        group = sorted(small_q[g * r:(g + 1) * r])
        assert group == list(range(small_kv[g] * r, (small_kv[g] + 1) * r)), (g, scheme)


def _groups(value: float) -> set[int]:
    """The key/value groups a coalesced constant came from: group g's constant is 10^g, and a
    coalesced one is the mean of two, so the digits of 2·value name the groups."""
    digits = str(round(2 * value))[::-1]
    return {g for g, d in enumerate(digits) if d != "0"}


@pytest.mark.parametrize("heads,kv_heads", [(8, 4), (8, 2), (16, 4), (4, 4)])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_gqa_grouping_checked_on_the_weights(heads, kv_heads, scheme):
    """The same property through ``coalesce`` on real weights: key head g and every query head
    of group g carry the constant 10^g. Halving the key/value heads merges two groups into one
    small key head; every small query head must come from exactly the groups its own small key
    head merged (one from a third group, or from one group of the two, would fail)."""
    head_dim, r = 8, heads // kv_heads
    model = make_decoder(hidden=heads * head_dim, heads=heads, kv_heads=kv_heads, layers=2)
    with torch.no_grad():
        for layer in model.model.layers:
            attn = layer.self_attn
            for g in range(kv_heads):
                attn.k_proj.weight[g * head_dim:(g + 1) * head_dim] = float(10 ** g)
            for h in range(heads):
                attn.q_proj.weight[h * head_dim:(h + 1) * head_dim] = float(10 ** (h // r))
    small = coalesce(model, width=2, depth=1, scheme=scheme)
    for layer in small.model.layers:
        hidden_in = layer.self_attn.q_proj.weight.shape[1]  # summed input axis: 2 × the value
        q = layer.self_attn.q_proj.weight.reshape(heads // 2, head_dim, -1)[:, 0, 0] / 2
        k = layer.self_attn.k_proj.weight.reshape(kv_heads // 2, head_dim, -1)[:, 0, 0] / 2
        assert hidden_in == heads * head_dim // 2
        for h in range(heads // 2):  # small r unchanged: query head h reads key head h // r
            assert _groups(q[h].item()) == _groups(k[h // r].item()), (scheme, h)
        assert set().union(*(_groups(v.item()) for v in k)) == set(range(kv_heads))


def test_a_wrong_grouping_or_head_norm_would_be_caught():
    """The tolerance above is meaningful: mis-grouping key/value heads, or leaving out the
    tied-head norm rule, moves the logits by far more than 1e-2."""
    small, large = widened(hidden=64, heads=8, kv_heads=4, tie_word_embeddings=True)
    assert max_diff(small, large) <= TOL
    swapped = decoalesce(small, large.config).eval()  # kv heads: copies of small a, b, a, b
    with torch.no_grad():
        for layer in swapped.model.layers:
            for proj in (layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.weight.copy_(proj.weight.roll(8, dims=0))  # b, a, b, a: groups swapped
    assert max_diff(small, swapped) > 1e-2
    unscaled = decoalesce(small, large.config).eval()
    with torch.no_grad():
        unscaled.model.norm.weight.mul_(2.0)
    assert max_diff(small, unscaled) > 1e-2


@pytest.mark.parametrize("scheme", SCHEMES)
def test_coalescing_duplicated_units_gives_back_the_function(scheme):
    small, large = widened(scheme=scheme, tie_word_embeddings=True)
    assert max_diff(large, coalesce(large, width=2, depth=1, scheme=scheme)) <= TOL


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("width,depth", FACTORS)
@pytest.mark.parametrize("depth_mapping", ["copy", "identity"])
def test_round_trip_is_exact(tied, scheme, width, depth, depth_mapping):
    base = make_decoder(tie_word_embeddings=tied)
    small = perturb(coalesce(base, width=width, depth=depth, scheme=scheme), seed=7)
    large = decoalesce(small, base.config, scheme=scheme, depth_mapping=depth_mapping)
    back = coalesce(large, width=width, depth=depth, scheme=scheme, depth_mapping=depth_mapping)
    assert_same_params(back, small)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_round_trip_three_levels(scheme):
    level1 = make_decoder(hidden=64, heads=8, kv_heads=4, ffn=128, layers=8,
                          tie_word_embeddings=True)
    level3 = perturb(coalesce(coalesce(level1, scheme=scheme), scheme=scheme), seed=3)
    assert level3.config.num_key_value_heads == 1 and level3.config.num_hidden_layers == 2
    up = decoalesce(decoalesce(level3, derive_config(level1.config), scheme=scheme),
                    level1.config, scheme=scheme)
    assert_same_params(coalesce(coalesce(up, scheme=scheme), scheme=scheme), level3)


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_identity_depth_mapping_preserves_logits(tied, scheme):
    base = make_decoder(tie_word_embeddings=tied)
    small = perturb(coalesce(base, scheme=scheme), seed=4)
    large = decoalesce(small, base.config, scheme=scheme, depth_mapping="identity").eval()
    assert max_diff(small, large) <= TOL
    copied = decoalesce(small, base.config, scheme=scheme, depth_mapping="copy").eval()
    assert max_diff(small, copied) > 1e-2  # the test above could fail


def test_identity_copies_zero_residual_outputs_never_a_norm():
    """The identity copy is made by zeroing o_proj and down_proj; its RMSNorm weights stay
    non-zero (a zero RMSNorm weight would get zero gradient and never train)."""
    base = make_decoder(tie_word_embeddings=True)
    large = decoalesce(perturb(coalesce(base), seed=4), base.config, depth_mapping="identity")
    zero = {n for n, p in large.named_parameters() if not p.any()}
    assert zero == {f"model.layers.{i}.{rel}" for i in (2, 3)  # stride: copies are 2, 3
                    for rel in ("self_attn.o_proj.weight", "mlp.down_proj.weight")}


@pytest.mark.parametrize("width,depth", FACTORS)
def test_shapes_and_configs_keep_head_dim_and_rope(width, depth):
    base = make_decoder(hidden=64, heads=8, kv_heads=4, tie_word_embeddings=True,
                        rope_parameters={"rope_type": "default", "rope_theta": 5e5})
    small = coalesce(base, width=width, depth=depth)
    c, s = base.config, small.config
    assert (s.hidden_size, s.num_attention_heads, s.num_key_value_heads, s.intermediate_size,
            s.num_hidden_layers) == (64 // width, 8 // width, 4 // width, 64 // width,
                                     4 // depth)
    assert s.head_dim == c.head_dim == 8
    changed = {"hidden_size", "num_attention_heads", "num_key_value_heads",
               "intermediate_size", "num_hidden_layers"}
    kept = {k: v for k, v in c.to_dict().items() if k not in changed}
    assert {k: s.to_dict().get(k) for k in kept} == kept
    assert s.rope_parameters["rope_theta"] == 5e5
    large = decoalesce(small, c)
    assert large.config.to_dict() == c.to_dict()
    assert {n: p.shape for n, p in large.named_parameters()} == \
        {n: p.shape for n, p in base.named_parameters()}


@pytest.mark.parametrize("kv_heads", [1, 3])
def test_kv_heads_that_cannot_halve_name_the_field(kv_heads):
    model = make_decoder(hidden=48, heads=6 if kv_heads == 3 else 4, kv_heads=kv_heads)
    with pytest.raises(ValueError, match="num_key_value_heads"):
        coalesce(model, width=2, depth=1)
    assert coalesce(model, width=1, depth=2).config.num_key_value_heads == kv_heads


def test_kv_heads_must_divide_heads():
    model = make_decoder()
    model.config.num_key_value_heads = 3
    with pytest.raises(ValueError, match="num_key_value_heads"):
        coalesce(model)


def test_mismatched_kv_heads_target_names_the_field():
    base = make_decoder(hidden=64, heads=8, kv_heads=4)
    target = make_decoder(hidden=64, heads=8, kv_heads=8).config
    with pytest.raises(ValueError, match="num_key_value_heads"):
        decoalesce(coalesce(base), target)


def test_biases_options_are_in_the_table():
    """Llama's attention_bias and mlp_bias: every bias maps, and the function is kept."""
    small, large = widened(attention_bias=True, mlp_bias=True, tie_word_embeddings=True)
    assert large.model.layers[0].self_attn.o_proj.bias is not None
    assert max_diff(small, large) <= TOL


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_other_decoders_width_function_preserving(kind, scheme):
    """Qwen2 (q/k/v biases), Qwen3 (per-head q/k norms, explicit head_dim), Mistral."""
    small, large = widened(kind, scheme=scheme, tie_word_embeddings=kind != "mistral",
                           **KIND_KW[kind])
    names = {n for n, _ in large.named_parameters()}
    if kind == "qwen2":
        assert "model.layers.0.self_attn.k_proj.bias" in names
    if kind == "qwen3":
        assert "model.layers.0.self_attn.q_norm.weight" in names
        assert small.config.head_dim == large.config.head_dim == 16
    assert type(large).__name__ == get_family(kind).train_class_name
    assert max_diff(small, large) <= TOL


@pytest.mark.parametrize("kind", KINDS)
def test_other_decoders_round_trip_and_identity_depth(kind):
    base = make_decoder(kind, tie_word_embeddings=True, **KIND_KW[kind])
    small = perturb(coalesce(base), seed=2)
    assert len(getattr(small.config, "layer_types", None) or [0, 0]) == 2
    large = decoalesce(small, base.config, depth_mapping="identity").eval()
    assert max_diff(small, large) <= TOL
    assert_same_params(coalesce(large, depth_mapping="identity"), small)


def test_non_uniform_layer_types_cannot_be_depth_coalesced():
    model = make_decoder("qwen2", use_sliding_window=True, sliding_window=8,
                         max_window_layers=2)
    assert len(set(model.config.layer_types)) == 2
    with pytest.raises(ValueError, match="layer_types"):
        coalesce(model, width=1, depth=2)
    assert coalesce(model, width=2, depth=1).config.layer_types == model.config.layer_types
