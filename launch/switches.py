"""What the memory switches save on a run config's layer shapes (``mlsys.bench.switches``):

    python -m launch.switches --config configs/llama-1b.yaml --layers 2 --out s.json

Each variant (attention ``sdpa`` / ``eager``, activation checkpointing off / on) runs in a fresh
process (this command with ``--one``), so the peak resident memory is that variant's. Prints a
line per variant; ``--out`` writes the records as a JSON list.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # where ``-m launch.switches`` imports


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
    from mlsys.bench.switches import MALLOC_ENV, VARIANTS, measure

    if args.one is not None:
        attention, ckpt = args.one.split(",")
        print(json.dumps(measure(args.config, args.layers, args.seq, args.micro, args.vocab,
                                 attention, ckpt == "1")))
        return 0
    env = dict(os.environ, **MALLOC_ENV)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    rows = []
    for attention, ckpt in VARIANTS:
        cmd = [sys.executable, "-m", "launch.switches", "--config", args.config,
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
        from mlsys.atomic import write_json

        write_json(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
