"""This process's place in the (optional) torch.distributed process group."""

from __future__ import annotations

import torch.distributed as dist


def initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if initialized() else 1


def is_main() -> bool:
    """True on rank 0 (and in a single process): the rank that writes shared files."""
    return rank() == 0


def barrier() -> None:
    if initialized():
        dist.barrier()
