"""A plain DeepSpeed training loop, the reference the controller's step time is measured
against: the same model, data, batch, ZeRO stage, optimizer and LR schedule as a run config's
first phase, with nothing else (no records, no evaluation, no checkpoints, no stop flag).

``plain_loop_seconds`` runs it in this process (one rank; every rank of a process group calls
it). The command is ``launch/plain_loop.py`` (one process per rank, as ``launch.train``).
"""

from __future__ import annotations

import time


def plain_loop_seconds(config_path: str, ds_config_path: str, steps: int) -> list[float]:
    """Train ``steps`` steps of the run config's first phase; the seconds of every step
    (collective: the process group is initialised here, as ``deepspeed.init_distributed``)."""
    import deepspeed
    import torch
    from deepspeed.accelerator import get_accelerator
    from transformers.integrations import HfDeepSpeedConfig

    from mlsys.config import load_run_config
    from mlsys.data.run_data import build_run_data
    from mlsys.data.stream import batches, micro_indices
    from mlsys.distributed.process import rank, world_size
    from mlsys.ds_config import load_ds_config, resolve_ds_config
    from mlsys.models import build_model, hf_config, level_config
    from mlsys.train.engine import build_engine
    from mlsys.train.monitor import without_monitors
    from mlsys.train.schedule import phase_schedule

    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
    cfg = load_run_config(config_path)
    ds = resolve_ds_config(load_ds_config(ds_config_path), cfg, world_size(), ds_config_path)
    keep_alive = HfDeepSpeedConfig(ds)  # ZeRO-3: build partitioned
    g, micro = cfg.train.global_batch_size, cfg.train.micro_batch_size
    accum = g // (micro * world_size())
    data = build_run_data(cfg, cfg.train_samples, cfg.train.eval_batches * g)
    config = level_config(hf_config(cfg.model, data.vocab_size), cfg.phases[0].level, cfg.vcycle)
    engine = build_engine(build_model(config, cfg.train.seed), without_monitors(ds), cfg.train,
                          cfg.phases[0].lr, phase_schedule(cfg, 0))
    device = torch.device(get_accelerator().current_device_name())
    seconds = []
    for step in range(steps):
        t0 = time.perf_counter()
        idx = micro_indices(step * g, micro, world_size(), rank(), accum)
        for batch in batches(data.train, idx, data.collate):
            loss = engine(**{k: v.to(device) for k, v in batch.items()}).loss
            engine.backward(loss)
            engine.step()
        get_accelerator().synchronize()
        seconds.append(time.perf_counter() - t0)
    del keep_alive
    return seconds
