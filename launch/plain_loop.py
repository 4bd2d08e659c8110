"""The plain DeepSpeed loop the overhead benchmark compares the controller with
(``mlsys.bench.plain_loop``; run by ``mlsys.bench.overhead``):

    python -m launch.plain_loop --config RUN.yaml --ds_config DS.json --steps N --out T.json

One process per rank, as ``launch.train``. Rank 0 writes ``{"seconds": [...]}``, the seconds of
every step, to ``--out``.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--ds_config", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed is imported
    from mlsys.atomic import write_json
    from mlsys.bench.plain_loop import plain_loop_seconds
    from mlsys.distributed.process import end_process_group, rank

    seconds = plain_loop_seconds(args.config, args.ds_config, args.steps)
    if rank() == 0:
        write_json(args.out, {"seconds": seconds})
    end_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
