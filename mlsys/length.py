"""Length as a level: the forward pass of a model on S/k pooled positions (token pooling).

A level is (width, depth, length factor k). At k > 1 the model is *the same module with the
same tensors* as at k = 1 (coalescing length is the identity on weights: nothing is added,
renamed or reshaped); only its forward pass changes, here, for every family whose declaration
has a ``Length`` (``mlsys/families``):

- **Inputs.** The S token embeddings are mean-pooled over windows of k consecutive tokens
  (the word table's rows; BERT's token-type rows likewise, ``Length.pooled_ids``): pooled
  position j is the mean of the embeddings of tokens jk .. jk+k-1, so every token is an input
  of exactly one pooled position and nothing is truncated.
- **Positions.** The backbone gets ``position_ids`` 0 .. S/k-1: learned absolute positions
  (GPT-2, BERT) look up the pooled index's row, rotary (Llama-class) rotates by it. The first
  S/k rows of a position table are the ones a level with k > 1 trains.
- **Causal families** (Shao et al. 2024, patch-level training): the logits of pooled position
  j are scored against each of the k tokens of the next patch, tokens (j+1)k .. (j+1)k+k-1;
  the loss is the mean cross-entropy over every scored (position, token) pair whose label is
  not -100 (with no -100 that is the mean over the k offsets of their mean losses). Every
  token but the first patch's k is a target of exactly one position (at k = 1: every token
  but the first, as a plain causal LM); the last pooled position predicts nothing.
- **Masked families** (CompoundGrow): the encoder runs on the S/k pooled positions, its output
  is upsampled back to S (each pooled vector repeated k times) before the MLM head, and the
  loss is the masked tokens' cross-entropy at full resolution, as at k = 1. An attention mask
  is pooled by max: a pooled position is attended to if any of its tokens is.

The loss is computed as the Hugging Face classes compute it (causal: logits cast to float32
first; masked: in the logits' dtype), so at k = 1 ``pooled_forward`` is the plain model's
forward exactly. ``length_forward(model, k)`` makes ``model(**batch)`` (and so a DeepSpeed
engine's forward) run ``pooled_forward`` for the duration of a ``with`` block.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.utils import ModelOutput

from mlsys.families import Family, family_of


@dataclass
class LengthOutput(ModelOutput):
    """``loss`` (None without labels) and ``logits``: per pooled position (B, S/k, V) for
    causal families, per token (B, S, V) for masked ones (after upsampling). A Hugging Face
    ``ModelOutput`` (a dict), as the plain forward returns: a DeepSpeed engine hooks its
    backward prologue (ZeRO's accumulation boundary, among others) on the tensors of a dict
    or tuple output, and would not find them in a plain object."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None


def length_family(model: nn.Module) -> Family:
    """The family of ``model`` if it has length levels; ValueError naming ``length`` if not."""
    family = family_of(model)
    if family.length is None:
        raise ValueError(f"length: the {family.name} family has no length levels "
                         "(vcycle.length must be 1)")
    if type(model).__name__ != family.train_class_name:
        raise ValueError(f"length: pooled forward covers {family.train_class_name}, "
                         f"not {type(model).__name__}")
    return family


def pool(x: torch.Tensor, k: int) -> torch.Tensor:
    """Mean over windows of ``k`` consecutive positions: (B, S, ...) -> (B, S/k, ...)."""
    b, s = x.shape[:2]
    return x.reshape(b, s // k, k, *x.shape[2:]).mean(2)


def causal_targets(labels: torch.Tensor, k: int) -> torch.Tensor:
    """(B, S) labels -> (B, S) targets, slot j·k + i being the target of pooled position j's
    i-th prediction: token (j+1)·k + i; the last k slots (the last position) are -100."""
    return F.pad(labels[:, k:], (0, k), value=-100)


def length_loss(logits: torch.Tensor, labels: torch.Tensor, k: int, kind: str) -> torch.Tensor:
    """The loss of a length-k level (see the module docstring); at k = 1 Hugging Face's own."""
    vocab = logits.shape[-1]
    if kind == "masked":
        return F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1), ignore_index=-100)
    b, p, _ = logits.shape
    scores = logits.float().unsqueeze(2).expand(b, p, k, vocab).reshape(-1, vocab)
    return F.cross_entropy(scores, causal_targets(labels, k).reshape(-1), ignore_index=-100)


def pooled_forward(model: nn.Module, k: int, input_ids: torch.Tensor,
                   labels: torch.Tensor | None = None,
                   attention_mask: torch.Tensor | None = None,
                   **inputs: torch.Tensor) -> LengthOutput:
    """``model`` (a family's trained class) at length factor ``k`` on (B, S) ``input_ids``;
    other inputs (``token_type_ids``) as the model takes them at k = 1."""
    family = length_family(model)
    spec = family.length
    b, s = input_ids.shape
    if k < 1 or s % k:
        raise ValueError(f"length: sequence length {s} is not divisible by the length factor {k}")
    p = s // k
    embeds = pool(model.get_submodule(spec.word_embedding)(input_ids), k)
    backbone_inputs = {}
    for name, path in spec.pooled_ids.items():
        ids = inputs.pop(name, None)
        if ids is None:
            continue
        # The backbone adds table(first id of each window) itself; the difference makes the
        # sum the mean of the window's rows (exactly zero at k = 1 and on uniform windows).
        table, first = model.get_submodule(path), ids[:, ::k]
        embeds = embeds + (pool(table(ids), k) - table(first))
        backbone_inputs[name] = first
    if attention_mask is not None:
        backbone_inputs["attention_mask"] = attention_mask.reshape(b, p, k).amax(-1)
    positions = torch.arange(p, device=input_ids.device).unsqueeze(0)
    hidden = model.get_submodule(spec.backbone)(inputs_embeds=embeds, position_ids=positions,
                                                **backbone_inputs, **inputs)[0]
    if family.kind == "masked":
        hidden = hidden.repeat_interleave(k, dim=1)
    logits = model.get_submodule(spec.head)(hidden)
    loss = None if labels is None else length_loss(logits, labels, k, family.kind)
    return LengthOutput(loss=loss, logits=logits)


@contextlib.contextmanager
def length_forward(model: nn.Module, k: int) -> Iterator[nn.Module]:
    """Within the block, ``model(**batch)`` is ``pooled_forward(model, k, **batch)`` (k = 1:
    the model unchanged). The instance's ``forward`` is set and removed again; module hooks
    (DeepSpeed's) still run around it, and no parameter or buffer changes."""
    if k == 1:
        yield model
        return
    length_family(model)
    model.forward = functools.partial(pooled_forward, model, k)
    try:
        yield model
    finally:
        del model.forward
