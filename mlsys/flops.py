"""Cost accounting: training FLOPs per token of a model, from its config and family alone.

    flops per token = 6 * N  +  12 * L * S * d

``N`` counts the weights that multiply activations (every linear map: attention Q, K, V and
output, the two MLP maps (three when gated, SwiGLU's gate, up and down), a family's
``head_transform`` (BERT's MLM transform), and the LM head ``d x V``; the LM head counts
even when tied to the word embedding, because it is a real matmul). Embedding lookups, biases,
LayerNorms, softmax and GELU are left out (they are O(d) per token, not O(d^2)). ``6 N`` is
2 FLOPs per multiply-add for the forward pass plus twice that for the backward pass.
Attention: per layer and token the forward pass computes ``Q K^T`` and ``A V`` over all ``S``
positions, ``2 * 2 * S * d`` FLOPs; forward plus backward gives ``12 L S d`` (no discount for
the causal mask, as in the Chinchilla accounting). Under grouped-query attention K and V map
``d`` to ``d_kv = kv_heads · head_dim`` (so Q, K, V, output weigh ``2·d·d_q + 2·d·d_kv``), and
scores and values run per query head: ``d`` in the attention term is ``d_q = heads · head_dim``
(equal to ``d`` unless a family sets head_dim apart). RMSNorm, rotary and the SwiGLU product
are elementwise and left out. Both logits for all positions are counted,
also for masked LMs (Hugging Face's ``BertForMaskedLM`` projects every position).
Vision families (``patch_embedding``, no ``lm_head``): a token is a patch (or the CLS /
distillation token); the patch embedding (``channels·p² × d`` per token) takes the LM head's
place and the classifier (on one token per image) is left out. tests/test_flops.py (text) and
tests/test_vit_vcycle.py (vision) check this against ``torch.utils.flop_counter`` on the real
models.

A level with length factor ``k`` (``mlsys.length``) runs the layers on ``P = S / k`` pooled
positions: per sequence ``6·N_layers·P + 12·L·P²·d`` (attention over P positions). The LM head
(and a head transform) runs on ``P`` positions for causal families (each pooled position's
logits are scored against k tokens: no more matmuls) and on all ``S`` for masked ones (the
encoder's output is upsampled to S before the MLM head); a patch embedding (vision, which has
no length levels) on all ``S``. Pooling the embeddings is O(d) per token and left out. At
``k = 1`` this is the formula above.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PretrainedConfig

from mlsys.families import family_of_config
from mlsys.operators.configs import sizes_of


@dataclass(frozen=True)
class Dims:
    hidden: int
    layers: int
    ffn: int
    vocab: int  # 0: no LM head (vision)
    head_transform: bool = False  # a hidden x hidden map before the LM head (BERT)
    patch_inputs: int = 0  # vision: channels * patch_size ** 2
    query: int = 0  # heads * head_dim (0: hidden)
    kv: int = 0  # key/value heads * head_dim (0: query)
    ffn_maps: int = 2  # linear maps reading or writing the ffn space (3 when gated)
    head_full_length: bool = False  # at length factor k > 1 the head still sees all S tokens

    @property
    def q(self) -> int:
        return self.query or self.hidden

    @property
    def k(self) -> int:
        return self.kv or self.q


def dims_of(config: PretrainedConfig) -> Dims:
    """The dimensions that set the cost of a Hugging Face config of a registered family."""
    family = family_of_config(config)
    s = sizes_of(config, family)
    vocab = getattr(config, family.fields.vocab) if family.lm_head else 0
    patch = config.num_channels * config.patch_size ** 2 if family.patch_embedding else 0
    return Dims(s.hidden, s.layers, s.ffn, vocab, family.head_transform, patch,
                query=s.size("qk"), kv=s.size("kv"), ffn_maps=family.ffn_maps,
                head_full_length=family.kind == "masked")


def layer_params(d: Dims) -> int:
    """Weights of the linear maps of the repeated layers."""
    return d.layers * (2 * d.hidden * d.q + 2 * d.hidden * d.k + d.ffn_maps * d.hidden * d.ffn)


def head_params(d: Dims) -> int:
    """Weights of the LM head and a head transform."""
    return d.hidden * d.vocab + (d.hidden * d.hidden if d.head_transform else 0)


def matmul_params(d: Dims) -> int:
    """N: weights of every linear map, including the LM head (and a head transform)."""
    return layer_params(d) + head_params(d) + d.patch_inputs * d.hidden


def flops_per_token(d: Dims, seq_length: int) -> int:
    """Training FLOPs (forward + backward) per token at sequence length ``seq_length``."""
    return 6 * matmul_params(d) + 12 * d.layers * seq_length * d.q


def flops_per_sequence(d: Dims, seq_length: int, length: int = 1) -> int:
    """Training FLOPs of one sequence of ``seq_length`` tokens at length factor ``length``."""
    if seq_length % length:
        raise ValueError(f"length: {seq_length} tokens are not divisible by {length}")
    p = seq_length // length
    head = seq_length if d.head_full_length else p
    return (6 * layer_params(d) * p + 12 * d.layers * p * p * d.q
            + 6 * head_params(d) * head + 6 * d.patch_inputs * d.hidden * seq_length)


def flops_per_step(d: Dims, seq_length: int, global_batch: int, length: int = 1) -> int:
    """Training FLOPs of one optimizer step over ``global_batch`` sequences (at length
    factor ``length``)."""
    return flops_per_sequence(d, seq_length, length) * global_batch
