"""Tiny Hugging Face models with weights far from initialisation, for operator tests."""

from __future__ import annotations

import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    GPT2Config,
    GPT2LMHeadModel,
)

VOCAB, POSITIONS = 61, 16


def bert_config(hidden=32, heads=4, ffn=64, layers=4, **kw) -> BertConfig:
    return BertConfig(hidden_size=hidden, num_attention_heads=heads, intermediate_size=ffn,
                      num_hidden_layers=layers, vocab_size=VOCAB,
                      max_position_embeddings=POSITIONS, **kw)


def gpt2_config(hidden=32, heads=4, layers=4, **kw) -> GPT2Config:
    return GPT2Config(n_embd=hidden, n_head=heads, n_layer=layers, vocab_size=VOCAB,
                      n_positions=POSITIONS, bos_token_id=0, eos_token_id=0, **kw)


def perturb(model: torch.nn.Module, seed: int = 0, scale: float = 0.3) -> torch.nn.Module:
    """Add noise to every parameter (LayerNorm γ/β and biases included), so no test passes
    just because weights sit at their initial values (zeros, ones)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return model.eval()


def make(kind: str, seed: int = 0, **kw) -> torch.nn.Module:
    """``kind``: bert-mlm, bert-pretraining, gpt2."""
    torch.manual_seed(seed)
    if kind == "bert-mlm":
        return perturb(BertForMaskedLM(bert_config(**kw)), seed)
    if kind == "bert-pretraining":
        return perturb(BertForPreTraining(bert_config(**kw)), seed)
    if kind == "gpt2":
        return perturb(GPT2LMHeadModel(gpt2_config(**kw)), seed)
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
