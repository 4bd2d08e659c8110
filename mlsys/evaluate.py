"""Validation loss: summed token cross-entropy over a fixed set of samples, divided by the
number of predicted tokens. Independent of world size and batching, so a single process
(tests, an exported model) reproduces what the distributed run logged."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist
import torch.nn.functional as F


def loss_sum(model: torch.nn.Module, batch: dict[str, torch.Tensor], kind: str
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of token losses, number of predicted tokens) of one batch; labels -100 are skipped.
    ``kind`` 'gpt' predicts token t+1 from position t; 'bert' predicts the masked labels."""
    labels = batch["labels"]
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    logits = model(**inputs).logits.float()
    if kind == "gpt":
        logits, labels = logits[:, :-1], labels[:, 1:]
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                            ignore_index=-100, reduction="sum")
    return total.detach(), (labels != -100).sum()


@torch.no_grad()
def validation_loss(model: torch.nn.Module, batches: Iterable[dict[str, torch.Tensor]],
                    kind: str, device: torch.device | str = "cpu") -> float:
    """Mean token loss over ``batches`` (this rank's share), reduced over all ranks."""
    was_training = model.training
    model.eval()
    acc = torch.zeros(2, dtype=torch.float64, device=device)
    for batch in batches:
        total, count = loss_sum(model, {k: v.to(device) for k, v in batch.items()}, kind)
        acc += torch.stack([total.double(), count.double()])
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(acc)
    model.train(was_training)
    return float(acc[0] / acc[1].clamp(min=1))
