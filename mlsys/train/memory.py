"""Process memory figures for the metrics log, and handing freed heap back to the OS."""

from __future__ import annotations

import ctypes
import gc
import os
import resource

import torch


def peak_memory_bytes() -> int:
    """Peak accelerator memory if there is one, else this process's peak resident memory."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def device_memory_bytes() -> int | None:
    """Accelerator memory allocated now (what the live engine and models hold); None without
    one. Across engine rebuilds it shows whether a destroyed engine's memory came back."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.memory_allocated())
    return None


def resident_memory_bytes() -> int:
    """This process's resident memory now (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def release_free_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc ``malloc_trim``), so
    resident memory reflects what the new engine holds, not the old one's freed arenas."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
