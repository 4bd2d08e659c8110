"""What the memory switches save on a run config's layer shapes, a few layers on a CPU:

    python -m mlsys.bench.switches --config configs/llama-1b.yaml --layers 2 --out s.json

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

import argparse
import json
import os
import subprocess
import sys
import time

VARIANTS = (("sdpa", False), ("sdpa", True), ("eager", False), ("eager", True))


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=None, help="default: the config's seq_length")
    p.add_argument("--micro", type=int, default=1)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--out", default=None)
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # ATTENTION,0|1: in-process
    args = p.parse_args(argv)
    if args.one is not None:
        attention, ckpt = args.one.split(",")
        print(json.dumps(measure(args.config, args.layers, args.seq, args.micro, args.vocab,
                                 attention, ckpt == "1")))
        return 0
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    rows = []
    for attention, ckpt in VARIANTS:
        cmd = [sys.executable, "-m", "mlsys.bench.switches", "--config", args.config,
               "--layers", str(args.layers), "--micro", str(args.micro), "--vocab",
               str(args.vocab), "--one", f"{attention},{int(ckpt)}"]
        if args.seq:
            cmd += ["--seq", str(args.seq)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"{attention:5s} checkpointing {'on ' if ckpt else 'off'}: held after forward "
              f"{r['held_after_forward_bytes'] / 2**30:.2f} GiB, peak over weights "
              f"{r['peak_over_weights_bytes'] / 2**30:.2f} GiB, "
              f"{r['forward_backward_seconds']:.1f} s", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
