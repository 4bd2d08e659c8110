"""Validation loss: summed token cross-entropy over a fixed set of samples, divided by the
number of predicted tokens (vision kind: one label per image, and top-1 accuracy beside it).
Independent of world size and batching, so a single process (tests, an exported model)
reproduces what the distributed run logged. At a length level (``length`` k > 1) it is the
level's own objective (``mlsys.length``): causal, each pooled position against the k tokens
of the next patch; masked, the masked tokens after upsampling."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist
import torch.nn.functional as F

from mlsys.distributed.process import initialized
from mlsys.length import causal_targets, length_forward


def batch_sums(model: torch.nn.Module, batch: dict[str, torch.Tensor], kind: str,
               length: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sum of losses, number of predictions, number whose arg-max is the label)."""
    labels = batch["labels"]
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with length_forward(getattr(model, "module", model), length):
        logits = model(**inputs).logits.float()
    if kind == "causal" and length > 1:
        b, p, v = logits.shape
        logits = logits.unsqueeze(2).expand(b, p, length, v).reshape(b, p * length, v)
        labels = causal_targets(labels, length)
    elif kind == "causal":
        logits, labels = logits[:, :-1], labels[:, 1:]
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                            ignore_index=-100, reduction="sum")
    keep = labels != -100
    correct = (logits.argmax(-1)[keep] == labels[keep]).sum()
    return total.detach(), keep.sum(), correct


@torch.no_grad()
def validation_loss(model: torch.nn.Module, batches: Iterable[dict[str, torch.Tensor]],
                    kind: str, device: torch.device | str = "cpu", length: int = 1) -> float:
    """Mean token loss over ``batches`` (this rank's share), reduced over all ranks."""
    return validation_metrics(model, batches, kind, device, length)["val_loss"]


@torch.no_grad()
def validation_metrics(model: torch.nn.Module, batches: Iterable[dict[str, torch.Tensor]],
                       kind: str, device: torch.device | str = "cpu",
                       length: int = 1) -> dict[str, float]:
    """``{"val_loss"}`` (mean over predictions), plus ``"val_top1"`` (fraction of images whose
    arg-max class is the label) for kind 'vision'; reduced over all ranks."""
    was_training = model.training
    model.eval()
    acc = torch.zeros(3, dtype=torch.float64, device=device)
    for batch in batches:
        sums = batch_sums(model, {k: v.to(device) for k, v in batch.items()}, kind, length)
        acc += torch.stack([x.double() for x in sums])
    if initialized():
        dist.all_reduce(acc)
    model.train(was_training)
    count = acc[1].clamp(min=1)
    metrics = {"val_loss": float(acc[0] / count)}
    if kind == "vision":
        metrics["val_top1"] = float(acc[2] / count)
    return metrics
