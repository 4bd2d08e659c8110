"""What the memory switches save on a run config's layer shapes, a few layers on a CPU (the
command is ``python -m launch.switches``; ``measure`` is one variant, in this process).

Per variant (attention ``sdpa`` / ``eager``, activation checkpointing off / on), in a fresh
process (so the peak resident memory is that variant's): the level-1 model of the config cut
to ``--layers`` layers (every other shape kept), fp32, one forward and backward of
``--micro`` sequences of the config's length (``--seq`` to change it), dropout off. Reported:
resident memory held after the forward (the activations kept for backward), the peak over the
memory before the forward (activations, recomputation, gradients), and the seconds of the
forward and backward. Memory is resident memory with glibc's mmap threshold at 64 KiB, so
freed tensors leave it at once; the ratios carry over to a GPU, the absolute bytes do not
(other kernels, bf16 halves them).
"""

from __future__ import annotations

import time

VARIANTS = (("sdpa", False), ("sdpa", True), ("eager", False), ("eager", True))
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}  # freed tensors leave resident memory at once


def measure(config: str, layers: int, seq: int | None, micro: int, vocab: int,
            attention: str, checkpointing: bool) -> dict:
    """One variant, in this process."""
    import resource

    import torch

    from mlsys.config import load_run_config
    from mlsys.models import build_model, hf_config
    from mlsys.train.engine import enable_activation_checkpointing
    from mlsys.train.memory import resident_memory_bytes

    cfg = load_run_config(config)
    m = cfg.model.model_copy(update={
        "num_layers": layers, "dropout": 0.0,
        "extra": {**cfg.model.extra, "attn_implementation": attention}})
    model = build_model(hf_config(m, vocab), seed=0)
    model.train()
    if checkpointing:
        enable_activation_checkpointing(model)
    seq = seq or cfg.data.seq_length
    ids = torch.randint(0, vocab, (micro, seq), generator=torch.Generator().manual_seed(0))
    before = resident_memory_bytes()
    t0 = time.perf_counter()
    loss = model(input_ids=ids, labels=ids).loss
    held = resident_memory_bytes() - before
    loss.backward()
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    params = sum(p.numel() for p in model.parameters())
    return {"attention": attention, "activation_checkpointing": checkpointing,
            "layers": layers, "seq_length": seq, "micro_batch": micro, "vocab": vocab,
            "params": params, "held_after_forward_bytes": held, "peak_over_weights_bytes": peak,
            "forward_backward_seconds": seconds, "loss": loss.item()}
