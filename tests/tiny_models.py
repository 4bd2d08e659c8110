"""Tiny Hugging Face models with weights far from initialisation, for operator tests."""

from __future__ import annotations

import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

VOCAB, POSITIONS = 61, 16


def bert_config(hidden=32, heads=4, ffn=64, layers=4, **kw) -> BertConfig:
    return BertConfig(hidden_size=hidden, num_attention_heads=heads, intermediate_size=ffn,
                      num_hidden_layers=layers, vocab_size=VOCAB,
                      max_position_embeddings=POSITIONS, **kw)


def gpt2_config(hidden=32, heads=4, layers=4, **kw) -> GPT2Config:
    return GPT2Config(n_embd=hidden, n_head=heads, n_layer=layers, vocab_size=VOCAB,
                      n_positions=POSITIONS, bos_token_id=0, eos_token_id=0, **kw)


DECODERS = {  # kind → (config class, model class)
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "mistral": (MistralConfig, MistralForCausalLM),
}


def decoder_config(kind: str = "llama", hidden=32, heads=4, kv_heads=2, ffn=64, layers=4,
                   **kw):
    """A tiny Llama-style config (grouped-query attention ``heads``:``kv_heads``), no bos/eos."""
    return DECODERS[kind][0](
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
        intermediate_size=ffn, num_hidden_layers=layers, vocab_size=VOCAB,
        max_position_embeddings=POSITIONS, bos_token_id=None, eos_token_id=None, **kw)


# Noise for decoders: Hugging Face rounds RMSNorm's output to float32 whatever the weights, and
# the noise of ``perturb``'s default (0.3) makes the tiny nets sharp enough to amplify that
# rounding to ~1e-4 in the logits; at 0.2 (logits of order 10) it stays ~1e-5.
DECODER_NOISE = 0.2


def make_decoder(kind: str = "llama", seed: int = 0, dtype=torch.float64, **kw):
    """A perturbed tiny Llama-style model (float64 by default: its RMSNorm and rotary run in
    float32 whatever the weights, so float64 weights leave only that rounding, ~1e-5)."""
    torch.manual_seed(seed)
    model = DECODERS[kind][1](decoder_config(kind, **kw)).to(dtype)
    return perturb(model, seed, scale=DECODER_NOISE)


def perturb(model: torch.nn.Module, seed: int = 0, scale: float = 0.3) -> torch.nn.Module:
    """Add noise to every parameter (LayerNorm γ/β and biases included), so no test passes
    just because weights sit at their initial values (zeros, ones)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_((torch.randn(p.shape, generator=gen) * scale).to(p.dtype))
    return model.eval()


def make(kind: str, seed: int = 0, **kw) -> torch.nn.Module:
    """``kind``: bert-mlm, bert-pretraining, gpt2, llama (GQA 4:2, tied), llama-untied
    (float32, as the other kinds)."""
    torch.manual_seed(seed)
    if kind == "bert-mlm":
        return perturb(BertForMaskedLM(bert_config(**kw)), seed)
    if kind == "bert-pretraining":
        return perturb(BertForPreTraining(bert_config(**kw)), seed)
    if kind == "gpt2":
        return perturb(GPT2LMHeadModel(gpt2_config(**kw)), seed)
    if kind in ("llama", "llama-untied"):
        return make_decoder("llama", seed, torch.float32, tie_word_embeddings=kind == "llama",
                            **kw)
    raise KeyError(kind)


def inputs(seed: int = 1, batch: int = 3, length: int = POSITIONS) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def outputs(model: torch.nn.Module, ids: torch.Tensor) -> list[torch.Tensor]:
    """Every output head's logits (MLM / LM, and NSP for BertForPreTraining)."""
    with torch.no_grad():
        out = model(input_ids=ids)
    if hasattr(out, "prediction_logits"):
        return [out.prediction_logits, out.seq_relationship_logits]
    return [out.logits]


def assert_same_params(a: torch.nn.Module, b: torch.nn.Module) -> None:
    """Same parameter names and bit-identical values."""
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert pa.keys() == pb.keys()
    for name in pa:
        assert torch.equal(pa[name], pb[name]), name
