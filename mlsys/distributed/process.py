"""This process's place in the (optional) torch.distributed process group."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch.distributed as dist

T = TypeVar("T")


def initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if initialized() else 1


def is_main() -> bool:
    """True on rank 0 (and in a single process): the rank that writes shared files."""
    return rank() == 0


def from_main(value_on_main: Callable[[], T]) -> T:
    """``value_on_main()`` computed on rank 0 only and sent to every rank (collective)."""
    if not initialized():
        return value_on_main()
    box = [value_on_main() if rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    if initialized():
        dist.barrier()


def any_rank(flag: bool) -> bool:
    """True if ``flag`` is true on any rank (one all-reduce; also a barrier)."""
    if not initialized():
        return flag
    import torch

    value = torch.tensor([1.0 if flag else 0.0])
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def end_process_group() -> None:
    """Destroy this process's group, if it has one (every rank calls it once its collectives
    are done, before the process exits). A gloo group left to interpreter teardown can abort the
    process ("terminate called without an active exception", pytorch/pytorch#190489): an
    exit code of -6 after a run that finished. Through ``deepspeed.comm`` when DeepSpeed has
    used it, which also drops the groups it cached."""
    if not initialized():
        return
    import sys

    ds_comm = sys.modules.get("deepspeed.comm.comm")
    if ds_comm is not None and ds_comm.cdb is not None and ds_comm.cdb.is_initialized():
        ds_comm.destroy_process_group()
    if initialized():
        dist.destroy_process_group()
