"""Throughput of a step record: tokens/s, TFLOP/s per device and MFU (model FLOPs utilisation).

    tokens_per_s      = tokens of the record's steps / their seconds
    tflops_per_device = FLOPs of the record's steps / their seconds / world size / 1e12
    mfu               = tflops_per_device / peak TFLOP/s of one device

The FLOPs are the model's (``mlsys.flops``: 6N + attention, forward and backward), not what
the hardware executed, so activation recomputation does not raise MFU. The peak is
``train.peak_tflops`` when set, else the accelerator's dense bf16 tensor-core peak from
``PEAK_BF16_TFLOPS`` (matched on ``torch.cuda.get_device_name()``); on a CPU, or an
accelerator not in the table, there is none and ``mfu`` is null.

Sources (vendor datasheets; NVIDIA lists bf16 "with sparsity", the dense figure is half):
H100 SXM / H200 SXM 989.4 (H100 and H200 datasheets, 1,979 sparse), H100 PCIe 756.5
(1,513 sparse), H100 NVL 835.5 (1,671 sparse), A100 (SXM and PCIe) 312 (A100 datasheet,
624 sparse), L40S 362.05 (733 sparse), L4 121 (242 sparse), A10 125 (250 sparse),
AMD Instinct MI300X 1,307.4 and MI250X 383 (AMD product pages, dense bf16). H200 NVL
(the PCIe card) is 835.5 like H100 NVL. Anything else: set ``train.peak_tflops``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# (pattern on the device name, case-insensitive; first match wins) -> dense bf16 TFLOP/s
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    (r"H200 NVL", 835.5),
    (r"H200", 989.4),
    (r"H100 NVL", 835.5),
    (r"H100.*PCIe", 756.5),
    (r"H100", 989.4),  # SXM5 ("NVIDIA H100 80GB HBM3")
    (r"A100", 312.0),
    (r"L40S", 362.05),
    (r"\bL4\b", 121.0),
    (r"\bA10\b", 125.0),  # not the A10G (a different, lower peak): set train.peak_tflops
    (r"MI300X", 1307.4),
    (r"MI250X", 383.0),
)


def table_peak(device_name: str | None) -> float | None:
    """The dense bf16 peak (TFLOP/s) of the device called ``device_name``; None if unknown."""
    if not device_name:
        return None
    return next((peak for pattern, peak in PEAK_BF16_TFLOPS
                 if re.search(pattern, device_name, re.IGNORECASE)), None)


def accelerator_name() -> str | None:
    """This process's CUDA (or ROCm) device name; None on a CPU."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return None


def peak_tflops(override: float | None = None, device_name: str | None = None) -> float | None:
    """``override`` (``train.peak_tflops``) if given, else the table's peak for
    ``device_name`` (None: none, as on a CPU)."""
    return override if override is not None else table_peak(device_name)


@dataclass(frozen=True)
class Throughput:
    tokens_per_s: float
    tflops_per_device: float
    mfu: float | None  # a fraction (0.42 = 42 %); None without a peak

    def fields(self) -> dict[str, float | None]:
        return {"tokens_per_s": self.tokens_per_s, "tflops_per_device": self.tflops_per_device,
                "mfu": self.mfu}


def throughput(tokens: int, flops: int, seconds: float, world: int,
               peak: float | None) -> Throughput:
    """Throughput of ``tokens`` and ``flops`` (all ranks together) done in ``seconds`` of wall
    time on ``world`` devices, against a per-device ``peak`` in TFLOP/s."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    per_device = flops / seconds / world / 1e12
    return Throughput(tokens_per_s=tokens / seconds, tflops_per_device=per_device,
                      mfu=None if peak is None else per_device / peak)


def log_line(record: dict, total_steps: int) -> str:
    """The line printed for a step record (rank 0, stdout, flushed), e.g.::

        step 12/40 phase 1 L2 loss 3.4210 lr 1.00e-03 | 12,345 tok/s | 0.452 TFLOP/s/dev
        | MFU 12.3% | peak mem 1.21 GiB | 0.052 s/step

    (one line; MFU "-" without a peak)."""
    mfu = record.get("mfu")
    return (f"step {record['step']}/{total_steps} phase {record['phase']} L{record['level']} "
            f"loss {record['loss']:.4f} lr {record['lr']:.2e} | "
            f"{record['tokens_per_s']:,.0f} tok/s | "
            f"{record['tflops_per_device']:.3g} TFLOP/s/dev | "
            f"MFU {'-' if mfu is None else f'{100 * mfu:.1f}%'} | "
            f"peak mem {record['peak_memory_bytes'] / 2**30:.2f} GiB | "
            f"{record['seconds']:.3g} s/step")
