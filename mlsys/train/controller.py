"""The stage controller: walks a run config's phases, one DeepSpeed engine per phase.

``run_training(cfg, ds_config)`` is the whole run (every rank calls it after
``deepspeed.init_distributed``). Per phase it builds a fresh engine (AdamW + the phase's LR
schedule) and trains the phase's steps on the shared data stream; between phases the V-cycle's
policy (``mlsys.vcycle.transition``) turns the model into the next level's. Under ZeRO-3 every
model is built partitioned (an ``HfDeepSpeedConfig`` stays alive for the run). Checkpoints are
written every ``train.checkpoint_every`` steps, after every transition and on a stop signal;
a run resumes at the newest one. At the end rank 0 exports ``final/`` and plots validation loss
against FLOPs (layout: ``mlsys.train.rundir``).

Before anything in the run directory is created, changed or removed, the data is checked
against the config (``mlsys.data.run_data.check_run_data``), and so is ``model.init_from``
on a start that may be fresh (``mlsys.train.init_from``); then rank 0 claims and locks the
directory and decides how the run starts (``mlsys.train.resume.open_run``), holding the lock
until the run ends. Signals: before the first step a stop signal ends the run at once (nothing
to save, ``Interrupted``); from then on it is honoured at the next step record, and after a
transition once its checkpoint is written.
"""

from __future__ import annotations

import gc
import json
import time
from typing import Any

import torch
from deepspeed.accelerator import get_accelerator
from transformers.integrations import HfDeepSpeedConfig

from mlsys.atomic import write_json
from mlsys.config import RunConfig
from mlsys.data.loader import StepBatches
from mlsys.data.run_data import build_run_data, check_run_data
from mlsys.data.stream import batches, eval_indices
from mlsys.distributed.preempt import StopFlag
from mlsys.distributed.process import any_rank, barrier, rank, world_size
from mlsys.distributed.weights_io import gather_weights
from mlsys.flops import dims_of, flops_per_step
from mlsys.models import build_model, hf_config, level_config
from mlsys.operators import coalesce
from mlsys.train import checkpoint as ckpt
from mlsys.train.engine import build_engine, destroy_engine
from mlsys.train.evaluate import validation_metrics
from mlsys.train.export import export_run_model
from mlsys.train.init_from import check_before_start, load_init_weights
from mlsys.train.memory import (
    device_memory_bytes,
    peak_memory_bytes,
    release_free_memory,
    resident_memory_bytes,
)
from mlsys.train.metrics import MetricsLog, plot_val_loss, read_metrics
from mlsys.train.monitor import RunMonitor, without_monitors
from mlsys.train.progress import Progress
from mlsys.train.resume import open_run
from mlsys.train.rundir import RunDir
from mlsys.train.schedule import phase_schedule
from mlsys.train.state import ControllerState
from mlsys.train.step import LossWindow, WindowMeans, check_finite, grad_norm, train_step
from mlsys.train.throughput import accelerator_name, log_line, peak_tflops, throughput
from mlsys.vcycle import transition
from mlsys.vcycle.symmetry import DropoutWindow


class Controller:
    """One training run. Construct on every rank, then ``run()``."""

    def __init__(self, cfg: RunConfig, ds_config: dict[str, Any], resume: bool | str = "auto",
                 stop: StopFlag | None = None, progress: bool = True,
                 accept_changes: tuple[str, ...] = ()) -> None:
        self.cfg, self.ds_config, self.resume = cfg, ds_config, resume
        self.accept_changes = accept_changes
        self.stop = stop or StopFlag()
        self.show_progress = progress
        self.run_dir = RunDir(cfg.out_dir)
        self.device = torch.device(get_accelerator().current_device_name())
        self.world, self.rank = world_size(), rank()
        self.micro = cfg.train.micro_batch_size
        self.accum = cfg.train.global_batch_size // (self.micro * self.world)
        self.hf_ds: HfDeepSpeedConfig | None = HfDeepSpeedConfig(ds_config)  # keep alive
        self.log = MetricsLog(self.run_dir.metrics, enabled=False)  # opened by run()
        self.data: Any = None  # set by _prepare (collective: may build the corpus)
        self.level1: Any = None  # the level-1 Hugging Face config
        self.configs: dict[int, Any] = {}  # level -> Hugging Face config
        self.step_flops: dict[int, int] = {}  # level -> FLOPs of one optimizer step
        self.engine: Any = None
        self.state = ControllerState(world_size=self.world)
        self.last_val: float | None = None
        self.peak_tflops = peak_tflops(cfg.train.peak_tflops, accelerator_name())
        self._t0 = time.perf_counter()

    def _prepare(self, logged_through: tuple[int, int] | None) -> None:
        """Data, the config and step FLOPs of every level, the metrics log (with the DeepSpeed
        monitors; ``logged_through``: what they have from before a resume), the configs."""
        cfg, g = self.cfg, self.cfg.train.global_batch_size
        self.data = build_run_data(cfg, cfg.train_samples, cfg.train.eval_batches * g)
        level1 = self.level1 = hf_config(cfg.model, self.data.vocab_size)
        self.configs = {lv: level_config(level1, lv, cfg.vcycle)
                        for lv in sorted({p.level for p in cfg.phases})}
        self.step_flops = {lv: flops_per_step(dims_of(c), cfg.data.seq_length, g,
                                              cfg.vcycle.length_factor(lv))
                           for lv, c in self.configs.items()}
        monitor = RunMonitor(self.ds_config, self.run_dir.monitors, logged_through) \
            if self.rank == 0 else None
        self.log = MetricsLog(self.run_dir.metrics, enabled=self.rank == 0, monitor=monitor)
        if self.rank == 0:
            write_json(self.run_dir.run_config, cfg.model_dump())
            write_json(self.run_dir.ds_config, self.ds_config)

    def _start(self, tag: str | None) -> None:
        """The first engine: a fresh model of the first phase's level (``model.init_from``:
        the loaded level-1 model, coalesced to it; then evaluated at step 0), or the
        checkpoint ``tag``'s phase."""
        phase = 0 if tag is None else ckpt.read_state(self.run_dir.checkpoints, tag).phase
        level = self.cfg.phases[phase].level
        if tag is None and self.cfg.model.init_from is not None:
            model = self._loaded_model(level)
        else:
            model = build_model(self.configs[level], self.cfg.train.seed)
        if tag is None:
            torch.manual_seed(self.cfg.train.seed + 1 + self.rank)  # dropout stream per rank
            self._new_engine(model, 0)
            if self.cfg.model.init_from is not None:
                self._evaluate()  # the loaded model's validation loss, before any step
            return
        self._new_engine(model, phase)
        self.state = ckpt.load_checkpoint(self.engine, self.run_dir.checkpoints, tag,
                                          self.world, self.cfg.train.seed)
        if self.rank == 0:
            evals = [r for r in read_metrics(self.run_dir.metrics) if r["event"] == "eval"]
            self.last_val = evals[-1]["val_loss"] if evals else None
        self._record("resume", tag=tag)

    def _loaded_model(self, level: int) -> torch.nn.Module:
        """The level-1 model with ``model.init_from``'s weights, coalesced to ``level``
        (collective under ZeRO-3)."""
        v = self.cfg.vcycle
        model = build_model(self.level1, self.cfg.train.seed)
        load_init_weights(model, self.cfg.model.init_from)
        for _ in range(level - 1):
            model = coalesce(model, width=v.width, depth=v.depth, scheme=v.scheme,
                             depth_mapping=v.depth_mapping)
        return model

    def _new_engine(self, model: torch.nn.Module, phase: int) -> None:
        self.engine = build_engine(model, without_monitors(self.ds_config), self.cfg.train,
                                   self.cfg.phases[phase].lr, phase_schedule(self.cfg, phase))

    def _destroy_engine(self) -> None:
        if self.engine is not None:
            destroy_engine(self.engine)
            self.engine = None

    def _wall(self) -> float:
        return self.state.wall_seconds + time.perf_counter() - self._t0

    def _record(self, event: str, **fields: Any) -> dict[str, Any]:
        """A metrics record (returned); at a length level (k > 1) it carries ``length``: k."""
        s = self.state
        level = self.cfg.phases[s.phase].level
        k = self.cfg.vcycle.length_factor(level)
        record = {"event": event, "step": s.global_step, "phase": s.phase, "level": level,
                  **({"length": k} if k > 1 else {}), "phase_step": s.step_in_phase,
                  "tokens": s.tokens, "flops": s.flops, **fields}
        self.log.write(record)
        return record

    def _evaluate(self) -> None:
        n = self.cfg.train.eval_batches * self.cfg.train.global_batch_size
        idx = eval_indices(n, self.micro, self.world, self.rank)
        s = self.state
        length = self.cfg.vcycle.length_factor(self.cfg.phases[s.phase].level)
        metrics = validation_metrics(self.engine, batches(self.data.valid, idx, self.data.collate),
                                     self.cfg.kind, self.device, length)
        check_finite("the validation loss", metrics["val_loss"], s.global_step, s.phase,
                     self.cfg.phases[s.phase].level)
        self.last_val = metrics["val_loss"]
        self._record("eval", **metrics, wall=self._wall())

    def _checkpoint(self) -> None:
        self.log.flush()  # every record up to this step is on disk before the checkpoint
        self.state.wall_seconds = self._wall()
        self._t0 = time.perf_counter()
        tag = ckpt.save_checkpoint(self.engine, self.run_dir.checkpoints, self.state,
                                   self.cfg.train.keep_checkpoints,
                                   self.cfg.train.portable_checkpoints)
        self._record("checkpoint", tag=tag)
        self.log.flush()

    def _run_phase(self, bar: Progress, data: StepBatches) -> bool:
        """Train the rest of the current phase on ``data`` (the run's micro-batch stream);
        False if stopped by a signal. The next micro-batches are prepared while a step runs;
        losses stay on the device until a step record is written (every ``log_every`` steps
        and before every evaluation, checkpoint and phase end), the one host sync of that
        interval. The ranks agree on a stop signal at that record, so a signal is honoured
        within ``log_every`` steps."""
        s, t, v = self.state, self.cfg.train, self.cfg.vcycle
        steps, _ = self.cfg.phase_steps(s.phase)
        level = self.cfg.phases[s.phase].level
        length = v.length_factor(level)
        after_up = s.phase > 0 and self.cfg.phases[s.phase - 1].level > level
        dropout = DropoutWindow(self.engine.module, after_up, v.dropout, v.dropout_steps)
        window = LossWindow()
        while s.step_in_phase < steps:
            rate = dropout.at(s.step_in_phase)
            lr = float(self.engine.get_lr()[0])  # the scheduler's number: no device sync
            window.begin()
            window.add(train_step(self.engine, data.next_step(), self.device, length), lr)
            g = t.global_batch_size
            s.advance(g, g * self.cfg.data.seq_length, self.step_flops[level])
            evaluate = s.step_in_phase == steps or s.global_step % t.eval_every == 0
            checkpoint = bool(t.checkpoint_every) and s.global_step % t.checkpoint_every == 0
            if not (evaluate or checkpoint or s.global_step % t.log_every == 0):
                continue
            means = self._log_steps(window, level, rate, bar)
            bar.update(s.global_step, f"phase {s.phase} L{level} loss {means.loss:.3f} "
                       f"val {self.last_val or float('nan'):.3f}")
            if evaluate:
                self._evaluate()
            if checkpoint:
                self._checkpoint()
            if means.stop:
                data.close()
                self._checkpoint()
                self._record("preempted", signal=self.stop.signal)
                return False
        return True

    def _log_steps(self, window: LossWindow, level: int, rate: float | None,
                   bar: Progress) -> WindowMeans:
        """The step record of the steps since the last one (their mean loss, their throughput,
        ``mlsys.train.throughput``), after checking that the loss and the last gradient norm
        are finite; the ranks' stop flags agreed. Rank 0 prints it as one line (stdout,
        flushed: also under SLURM and without a progress bar)."""
        s, g = self.state, self.cfg.train.global_batch_size
        means = window.close(stop=self.stop.local)
        for what, value in (("the training loss", means.loss),
                            ("the gradient norm", grad_norm(self.engine))):
            check_finite(what, value, s.global_step, s.phase, level)
        extra = {} if rate is None else {"dropout": rate}
        speed = throughput(means.steps * g * self.cfg.data.seq_length,
                           means.steps * self.step_flops[level], means.steps * means.seconds,
                           self.world, self.peak_tflops)
        record = self._record("step", loss=means.loss, lr=means.lr, seconds=means.seconds,
                              window=means.steps, **speed.fields(),
                              peak_memory_bytes=peak_memory_bytes(), wall=self._wall(),
                              **extra)
        if self.rank == 0:
            bar.log(log_line(record, self.cfg.total_steps))
        return means

    def _stop_agreed(self) -> bool:
        """Whether any rank got a stop signal (one all-reduce; used between phases)."""
        return any_rank(self.stop.local)

    def _transition(self) -> None:
        """Move to the next phase's level on a new engine (``mlsys.vcycle.transition``). With
        ``vcycle.optimizer: map`` the new engine is built before the old one is destroyed."""
        t0 = time.perf_counter()
        s, v = self.state, self.cfg.vcycle
        src, dst = self.cfg.phases[s.phase].level, self.cfg.phases[s.phase + 1].level
        old = self.engine
        if self.cfg.train.export_levels:
            self._export(self.run_dir.level_export(s.phase, src), src)
        if dst > src:
            path = self.run_dir.saved_weights(s.phase, src)
            model = transition.down(old.module, v, path)
            s.saved[src] = str(path)
        else:
            seed = self.cfg.train.seed
            model = transition.up(old.module, self.configs[dst], s.saved.get(dst), v, seed=seed,
                                  noise_seed=seed + s.phase)
        if v.optimizer == "reset":
            self._destroy_engine()
        s.next_phase()
        self._new_engine(model, s.phase)
        if v.optimizer == "map":
            transition.carry_optimizer(old, self.engine, v)
            destroy_engine(old)
        del old
        release_free_memory()
        self._record("transition", from_level=src, to_level=dst,
                     transition_seconds=time.perf_counter() - t0,
                     peak_memory_bytes=peak_memory_bytes(), rss_bytes=resident_memory_bytes(),
                     device_memory_bytes=device_memory_bytes())
        self._evaluate()

    def _export(self, out_dir: Any, level: int) -> None:
        """Export the current model (at ``level``) like final/ (collective gather)."""
        weights = gather_weights(self.engine.module)
        if self.rank == 0:
            export_run_model(weights, self.configs[level], out_dir, self.cfg, self.data,
                             self.state, self.last_val, self.cfg.vcycle.length_factor(level))

    def _finish(self) -> dict[str, Any]:
        level = self.cfg.phases[self.state.phase].level
        self._export(self.run_dir.final, level)
        self._destroy_engine()
        self.hf_ds = None  # plain (unpartitioned) construction from here on
        gc.collect()
        result = {"val_loss": self.last_val, "flops": self.state.flops, "wall": self._wall(),
                  "peak_memory_bytes": peak_memory_bytes(), "final_dir": str(self.run_dir.final),
                  "steps": self.state.global_step, "status": "done"}
        if self.rank == 0:
            self._record("end", **{k: v for k, v in result.items() if k != "status"})
            self.log.close()
            plot_val_loss(read_metrics(self.run_dir.metrics), self.run_dir.plot,
                          title=self.cfg.name)
            write_json(self.run_dir.done, result)
        barrier()
        return result

    def run(self) -> dict[str, Any]:
        """The whole run: returns {status: done|preempted|already-done, val_loss, flops, ...}."""
        cfg, g = self.cfg, self.cfg.train.global_batch_size
        check_run_data(cfg, cfg.train_samples, cfg.train.eval_batches * g)
        check_before_start(self.run_dir, cfg, self.resume)
        start, lock = open_run(self.run_dir, cfg, self.resume, self.accept_changes, self.world)
        try:
            if start.already_done:
                return {**json.loads(self.run_dir.done.read_text()), "status": "already-done"}
            self._prepare(start.logged_through)
            self._start(start.tag)
            return self._train()
        finally:
            if lock is not None:
                lock.release()

    def _train(self) -> dict[str, Any]:
        self.stop.immediate = False  # from here a signal is honoured at a record: checkpoint
        self._t0 = time.perf_counter()
        s, t = self.state, self.cfg.train
        # One loader for the rest of the run: its workers are forked here, once, and never
        # after a transition (mlsys.data.loader: why forking there can hang a worker).
        data = StepBatches(self.data.train, self.data.collate, s.consumed_samples,
                           self.cfg.total_steps - s.global_step, self.micro, self.world,
                           self.rank, self.accum, t.global_batch_size, t.data_workers)
        with Progress(self.cfg.total_steps, s.global_step,
                      enabled=self.show_progress and self.rank == 0) as bar:
            try:
                finished = self._run_phase(bar, data)
                while finished and s.phase < len(self.cfg.phases) - 1:
                    self._transition()
                    self._checkpoint()
                    if self._stop_agreed():
                        self._record("preempted", signal=self.stop.signal)
                        finished = False
                        break
                    finished = self._run_phase(bar, data)
            finally:
                data.close()
        if finished:
            return self._finish()
        self._destroy_engine()
        self.log.close()
        return {"status": "preempted", "step": self.state.global_step}


def run_training(cfg: RunConfig, ds_config: dict[str, Any], resume: bool | str = "auto",
                 stop: StopFlag | None = None, progress: bool = True,
                 accept_changes: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run (or resume) the training run ``cfg`` with the resolved DeepSpeed config on every
    rank of the initialised process group; see the module docstring."""
    return Controller(cfg, ds_config, resume=resume, stop=stop, progress=progress,
                      accept_changes=accept_changes).run()
