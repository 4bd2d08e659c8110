"""Llama-style decoders (pre-RMSNorm, rotary, SwiGLU, grouped-query attention):
LlamaForCausalLM, and through the same table Qwen2ForCausalLM, Qwen3ForCausalLM and
MistralForCausalLM. nn.Linear weights are out × in.

- RMSNorm: weight only, an averaged hidden axis (the rms of a duplicated vector is its own).
- Rotary: acts within a head; head_dim never changes, so the rotary tables (``rope_theta``,
  ``rope_parameters``, ...) are kept as they are.
- SwiGLU: ``gate_proj`` and ``up_proj`` outputs live in ``ffn`` (paired alike, so
  ``silu(gate) * up`` of a duplicated unit is duplicated), ``down_proj`` reads it.
- Grouped-query attention: ``q_proj`` writes the query heads (``qk``), ``k_proj`` / ``v_proj``
  the key/value heads (``kv``), ``o_proj`` reads the query heads' outputs (``v``). Query and
  key/value heads both halve (an odd ``num_key_value_heads``, one included, is a ValueError),
  and under both pairing schemes every query head stays with its key/value group.
- Biases: none by default; Llama's ``attention_bias`` / ``mlp_bias`` and Qwen2's q/k/v biases
  in their spaces. Qwen3's per-head ``q_norm`` / ``k_norm`` act over head_dim (a fixed space).
- Embeddings tied (``tie_word_embeddings``) or not: when tied, ``model.norm`` is the tied-head
  norm (×½ on de-coalesce); untied, ``lm_head``'s input axis is summed.
"""

from mlsys.families.base import ConfigFields, Family, Length, inp, out

_H = out("hidden")

_FIELDS = ConfigFields(
    hidden="hidden_size", heads="num_attention_heads", ffn="intermediate_size",
    layers="num_hidden_layers", vocab="vocab_size", positions="max_position_embeddings",
    kv_heads="num_key_value_heads", head_dim="head_dim",
)

_GLOBALS = {
    "model.embed_tokens.weight": (out("vocab"), _H),
    "model.norm.weight": (_H,),
    "lm_head.weight": (out("vocab"), inp("hidden")),  # only when untied
}

_ATTENTION = {
    "self_attn.q_proj.weight": (out("qk"), inp("hidden")),
    "self_attn.k_proj.weight": (out("kv"), inp("hidden")),
    "self_attn.v_proj.weight": (out("kv"), inp("hidden")),
    "self_attn.o_proj.weight": (_H, inp("v")),
}
_QKV_BIASES = {
    "self_attn.q_proj.bias": (out("qk"),),
    "self_attn.k_proj.bias": (out("kv"),),
    "self_attn.v_proj.bias": (out("kv"),),
}
_O_BIAS = {"self_attn.o_proj.bias": (_H,)}
_MLP = {
    "mlp.gate_proj.weight": (out("ffn"), inp("hidden")),
    "mlp.up_proj.weight": (out("ffn"), inp("hidden")),
    "mlp.down_proj.weight": (_H, inp("ffn")),
}
_MLP_BIASES = {
    "mlp.gate_proj.bias": (out("ffn"),),
    "mlp.up_proj.bias": (out("ffn"),),
    "mlp.down_proj.bias": (_H,),
}
_NORMS = {
    "input_layernorm.weight": (_H,),
    "post_attention_layernorm.weight": (_H,),
}
_QK_NORMS = {  # Qwen3: RMSNorm over each head's head_dim, shared by the heads
    "self_attn.q_norm.weight": (out("head"),),
    "self_attn.k_norm.weight": (out("head"),),
}

_RESIDUAL_OUT = ("self_attn.o_proj.weight", "self_attn.o_proj.bias",
                 "mlp.down_proj.weight", "mlp.down_proj.bias")


def _decoder(name: str, config_class: str, model_class: str, layer: dict,
             layer_fields: tuple[str, ...] = ()) -> Family:
    return Family(
        name=name,
        model_type=name,
        config_class=config_class,
        tasks={"causal-lm": model_class},
        kind="causal",
        fields=_FIELDS,
        dropout_fields=("attention_dropout",),
        config_defaults={"bos_token_id": None, "eos_token_id": None},  # no bos/eos in our vocab
        layer_prefix="model.layers.",
        globals=_GLOBALS,
        layer={**_NORMS, **layer},
        residual_out=tuple(r for r in _RESIDUAL_OUT if r in layer),
        head_norm=("model.norm.weight",),
        pre_ln=True,
        ffn_maps=3,
        layer_fields=layer_fields,
        length=Length(word_embedding="model.embed_tokens", backbone="model", head="lm_head"),
    )


LLAMA = _decoder("llama", "LlamaConfig", "LlamaForCausalLM",
                 {**_ATTENTION, **_QKV_BIASES, **_O_BIAS, **_MLP, **_MLP_BIASES})
QWEN2 = _decoder("qwen2", "Qwen2Config", "Qwen2ForCausalLM",
                 {**_ATTENTION, **_QKV_BIASES, **_MLP}, layer_fields=("layer_types",))
QWEN3 = _decoder("qwen3", "Qwen3Config", "Qwen3ForCausalLM",
                 {**_ATTENTION, **_QKV_BIASES, **_O_BIAS, **_QK_NORMS, **_MLP},
                 layer_fields=("layer_types",))
MISTRAL = _decoder("mistral", "MistralConfig", "MistralForCausalLM", {**_ATTENTION, **_MLP})
