"""Cost accounting: training FLOPs per token of a BERT / GPT-2 model, from its config alone.

    flops per token = 6 * N  +  12 * L * S * d

``N`` counts the weights that multiply activations (every linear map: attention Q, K, V and
output, the two MLP maps, BERT's MLM transform, and the LM head ``d x V``; the LM head counts
even when tied to the word embedding, because it is a real matmul). Embedding lookups, biases,
LayerNorms, softmax and GELU are left out (they are O(d) per token, not O(d^2)). ``6 N`` is
2 FLOPs per multiply-add for the forward pass plus twice that for the backward pass.
Attention: per layer and token the forward pass computes ``Q K^T`` and ``A V`` over all ``S``
positions, ``2 * 2 * S * d`` FLOPs; forward plus backward gives ``12 L S d`` (no discount for
the causal mask, as in the Chinchilla accounting). Both logits for all positions are counted,
also for BERT (Hugging Face's ``BertForMaskedLM`` projects every position).
ViT / DeiT: a token is a patch (or the CLS / distillation token); the patch embedding
(``channels·p² × d`` per token) takes the LM head's place and the classifier (on one token per
image) is left out. tests/test_flops.py (text) and tests/test_vit_vcycle.py (vision) check this
against ``torch.utils.flop_counter`` on the real models.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PretrainedConfig


@dataclass(frozen=True)
class Dims:
    family: str  # "bert", "gpt" or "vit" (ViT and DeiT)
    hidden: int
    layers: int
    ffn: int
    vocab: int  # vit: 0 (no LM head)
    patch_inputs: int = 0  # vit: channels * patch_size ** 2


def dims_of(config: PretrainedConfig) -> Dims:
    """The dimensions that set the cost of a BERT, GPT-2, ViT or DeiT Hugging Face config."""
    if config.model_type == "bert":
        return Dims("bert", config.hidden_size, config.num_hidden_layers,
                    config.intermediate_size, config.vocab_size)
    if config.model_type == "gpt2":
        ffn = config.n_inner if config.n_inner is not None else 4 * config.n_embd
        return Dims("gpt", config.n_embd, config.n_layer, ffn, config.vocab_size)
    if config.model_type in ("vit", "deit"):
        return Dims("vit", config.hidden_size, config.num_hidden_layers,
                    config.intermediate_size, 0, config.num_channels * config.patch_size ** 2)
    raise ValueError(f"model_type: no FLOPs formula for {config.model_type!r}")


def matmul_params(d: Dims) -> int:
    """N: weights of every linear map, including the LM head (and BERT's MLM transform)."""
    per_layer = 4 * d.hidden * d.hidden + 2 * d.hidden * d.ffn
    head = d.hidden * d.vocab + (d.hidden * d.hidden if d.family == "bert" else 0) \
        + d.patch_inputs * d.hidden
    return d.layers * per_layer + head


def flops_per_token(d: Dims, seq_length: int) -> int:
    """Training FLOPs (forward + backward) per token at sequence length ``seq_length``."""
    return 6 * matmul_params(d) + 12 * d.layers * seq_length * d.hidden


def flops_per_step(d: Dims, seq_length: int, global_batch: int) -> int:
    """Training FLOPs of one optimizer step over ``global_batch`` sequences."""
    return flops_per_token(d, seq_length) * seq_length * global_batch
