"""Worker: ZeRO-3 engines built, stepped, evaluated and destroyed leave nothing alive.

Writes ``{"alive_plain": n, "alive_ours": n}`` (rank 0) to the JSON path given last: how many
of three engines survive ``engine.destroy()`` alone, and ``mlsys.train.engine.destroy_engine``.
"""

from __future__ import annotations

import gc
import json
import sys
import weakref

import deepspeed
import torch
from transformers.integrations import HfDeepSpeedConfig

from mlsys.distributed.process import end_process_group
from mlsys.train.engine import destroy_engine
from tests.tiny_models import inputs, make

CONFIG = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}


def cycle(destroy) -> weakref.ref:
    reference = make("bert-mlm")
    model = type(reference)._from_config(reference.config)
    engine, *_ = deepspeed.initialize(model=model, config=CONFIG,
                                      optimizer=torch.optim.AdamW(model.parameters()))
    ids = inputs(batch=1)
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    engine.step()
    with torch.no_grad():
        engine.eval()
        engine(input_ids=ids, labels=ids)
    destroy(engine)
    return weakref.ref(engine)


def main(out: str) -> None:
    deepspeed.init_distributed(dist_backend="gloo")
    keep = HfDeepSpeedConfig(CONFIG)  # noqa: F841 - partitioned construction
    plain = [cycle(lambda e: e.destroy()) for _ in range(3)]
    gc.collect()
    alive_plain = sum(r() is not None for r in plain)
    del plain
    for stale in [o for o in gc.get_objects() if type(o).__name__ == "DeepSpeedEngine"]:
        destroy_engine(stale)  # what the plain destroys left behind
    ours = [cycle(destroy_engine) for _ in range(3)]
    gc.collect()
    if torch.distributed.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"alive_plain": alive_plain,
                       "alive_ours": sum(r() is not None for r in ours)}, f)
    end_process_group()


if __name__ == "__main__":
    main(sys.argv[-1])
