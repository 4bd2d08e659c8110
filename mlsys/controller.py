"""The stage controller: walks a run config's phases on DeepSpeed engines, one engine per phase.

``run_training(cfg, ds_config)`` is the whole run (every rank calls it after
``deepspeed.init_distributed``). Per phase it builds a fresh engine (AdamW + the phase's LR
schedule; ``vcycle.optimizer: reset``) and trains ``steps`` optimizer steps on the shared data
stream. Between phases:

- down (level a -> a+1): save the level-a weights (fp32 masters, ``<run_dir>/vcycle/``),
  ``coalesce`` the engine's model, destroy the old engine;
- up (level a -> a-1): ``decoalesce`` to the level a-1 config, destroy the old engine, load the
  saved level a-1 weights into a second model and ``interpolate(saved, decoalesced, alpha)``
  (``vcycle.interpolation: width`` / ``detail``: instead add ``1 - alpha`` of the saved
  model's width detail / width and depth detail to the de-coalesced one, see
  mlsys/symmetry.py); training continues on the result, with
  ``vcycle.dropout`` for its first ``vcycle.dropout_steps`` steps.

Under ZeRO-3 every model is built partitioned (an ``HfDeepSpeedConfig`` stays alive for the
whole run) and the operators gather one layer at a time. Checkpoints (see mlsys/checkpoint.py)
are written every ``train.checkpoint_every`` steps, right after every transition, and when
SIGTERM/SIGUSR1 arrives; a run resumes at the newest one. At the end rank 0 exports
``final/`` and plots validation loss against FLOPs.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import shutil
import time
from typing import Any

import torch
import torch.distributed as dist

from mlsys import checkpoint as ckpt
from mlsys.config import RunConfig
from mlsys.evaluate import validation_metrics
from mlsys.flops import dims_of, flops_per_step
from mlsys.metrics import MetricsLog, plot_val_loss, read_metrics, truncate_after
from mlsys.preempt import StopFlag
from mlsys.progress import Progress
from mlsys.stream import batches, eval_indices, micro_indices
from mlsys.symmetry import dropout_after_up, set_dropout
from mlsys.weights_io import barrier, gather_weights, rank, save_weights

DONE_FILE = "done.json"


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def peak_memory_bytes() -> int:
    """Peak accelerator memory if there is one, else this process's peak resident memory."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def release_free_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc ``malloc_trim``), so
    resident memory reflects what the new engine holds, not the old one's freed arenas."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def destroy_engine(engine: Any) -> None:
    """``engine.destroy()``, then drop what DeepSpeed 0.19.8 keeps behind and would keep every
    old engine (model, optimizer, hooks) alive across transitions: ZeRO-3 pushes the model
    onto the module-level ``FWD_MODULE_STACK`` and never pops it, and the parameter
    coordinator's ``lru_cache``d method holds its modules."""
    engine.destroy()
    try:
        from deepspeed.runtime.zero import parameter_offload
    except ImportError:  # pragma: no cover
        parameter_offload = None
    if parameter_offload is not None:
        mods = {id(m) for m in engine.module.modules()}
        parameter_offload.FWD_MODULE_STACK[:] = [
            m for m in parameter_offload.FWD_MODULE_STACK if id(m) not in mods]
        from deepspeed.runtime.zero.partitioned_param_coordinator import (
            PartitionedParameterCoordinator,
        )

        _clear_method_caches(PartitionedParameterCoordinator)
    release_free_memory()


def _clear_method_caches(cls: type) -> None:
    """Clear ``functools.lru_cache``s on ``cls``'s methods (also under a decorator): they are
    class-wide and keyed by ``self``, so they keep every instance alive."""
    for fn in vars(cls).values():
        seen = [fn]
        while seen:
            f = seen.pop()
            if hasattr(f, "cache_clear"):
                f.cache_clear()
            seen += [c.cell_contents for c in (getattr(f, "__closure__", None) or ())
                     if callable(getattr(c, "cell_contents", None))]
            if hasattr(f, "__wrapped__"):
                seen.append(f.__wrapped__)


def resident_memory_bytes() -> int:
    """This process's resident memory now (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


class Controller:
    """One training run. Construct on every rank, then ``run()``."""

    def __init__(self, cfg: RunConfig, ds_config: dict[str, Any], resume: bool | str = "auto",
                 stop: StopFlag | None = None, progress: bool = True) -> None:
        from deepspeed.accelerator import get_accelerator
        from transformers.integrations import HfDeepSpeedConfig

        self.cfg, self.ds_config = cfg, ds_config
        self.resume, self.stop = resume, stop or StopFlag()
        self.out = cfg.out_dir
        self.ckpt_root = self.out / "checkpoints"
        self.device = torch.device(get_accelerator().current_device_name())
        self.world, self.rank = world_size(), rank()
        self.micro = cfg.train.micro_batch_size
        self.accum = cfg.train.global_batch_size // (self.micro * self.world)
        self.hf_ds: HfDeepSpeedConfig | None = HfDeepSpeedConfig(ds_config)  # keep alive
        self.show_progress = progress
        self.engine: Any = None
        self.state = ckpt.ControllerState()
        self.last_val: float | None = None

    # ----- setup -------------------------------------------------------------------------
    def _setup(self) -> bool:
        """Decide fresh vs resume, build data and configs. False if the run is already done."""
        from mlsys.models import hf_config, level_config
        from mlsys.run_data import build_run_data

        cfg = self.cfg
        tag = ckpt.latest_tag(self.ckpt_root)
        if self.resume is True and tag is None:
            raise FileNotFoundError(f"{self.ckpt_root}: --resume given but no checkpoint found")
        fresh = self.resume is False or (tag is None and self.resume == "auto")
        if not fresh and tag is None:
            fresh = True
        if fresh:
            if self.rank == 0:
                for name in ("checkpoints", "vcycle", "final", "metrics.jsonl", DONE_FILE,
                             "val_loss_vs_flops.png"):
                    p = self.out / name
                    shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
            barrier()
            self.tag = None
        else:
            if (self.out / DONE_FILE).exists() and self.resume == "auto":
                return False
            self.tag = tag
            if self.rank == 0:  # drop what the resumed run will redo, before appending
                at = ckpt.read_state(self.ckpt_root, tag)
                self.dropped = truncate_after(self.out / "metrics.jsonl", at.global_step,
                                              at.phase)
        g = cfg.train.global_batch_size
        self.data = build_run_data(cfg, cfg.total_steps * g, cfg.train.eval_batches * g)
        self.level1 = hf_config(cfg.model, self.data.vocab_size)
        levels = sorted({p.level for p in cfg.phases})
        self.configs = {lv: level_config(self.level1, lv, cfg.vcycle) for lv in levels}
        self.step_flops = {lv: flops_per_step(dims_of(c), cfg.data.seq_length, g)
                           for lv, c in self.configs.items()}
        self.log = MetricsLog(self.out / "metrics.jsonl", enabled=self.rank == 0)
        if self.rank == 0:
            (self.out / "run_config.json").write_text(json.dumps(cfg.model_dump(), indent=1))
            (self.out / "ds_config.json").write_text(json.dumps(self.ds_config, indent=1))
        return True

    def _new_engine(self, model: torch.nn.Module, phase: int) -> None:
        from mlsys.engine import build_engine

        steps, warmup = self.cfg.phase_steps(phase)
        self.engine = build_engine(model, self.ds_config, self.cfg.train,
                                   self.cfg.phases[phase].lr, steps, warmup)

    def _destroy_engine(self) -> None:
        if self.engine is not None:
            destroy_engine(self.engine)
            self.engine = None

    def _start(self) -> None:
        from mlsys.models import build_model

        if self.tag is None:
            level = self.cfg.phases[0].level
            model = build_model(self.configs[level], self.cfg.model.family, self.cfg.train.seed)
            torch.manual_seed(self.cfg.train.seed + 1 + self.rank)  # dropout stream per rank
            self._new_engine(model, 0)
            return
        state = ckpt.read_state(self.ckpt_root, self.tag)
        level = self.cfg.phases[state.phase].level
        model = build_model(self.configs[level], self.cfg.model.family, self.cfg.train.seed)
        self._new_engine(model, state.phase)
        self.state = ckpt.load_checkpoint(self.engine, self.ckpt_root, self.tag)
        if self.rank == 0:
            evals = [r for r in read_metrics(self.out / "metrics.jsonl") if r["event"] == "eval"]
            self.last_val = evals[-1]["val_loss"] if evals else None
        self._record("resume", tag=self.tag)
        if self.rank == 0:
            print(f"resumed from {self.tag} (phase {self.state.phase}, step "
                  f"{self.state.step_in_phase}; dropped {self.dropped} later records)", flush=True)

    # ----- records -----------------------------------------------------------------------
    def _wall(self) -> float:
        return self.state.wall_seconds + time.perf_counter() - self._t0

    def _record(self, event: str, **fields: Any) -> None:
        s = self.state
        self.log.write({"event": event, "step": s.global_step, "phase": s.phase,
                        "level": self.cfg.phases[s.phase].level, "phase_step": s.step_in_phase,
                        "tokens": s.tokens, "flops": s.flops, **fields})

    def _evaluate(self) -> float:
        n = self.cfg.train.eval_batches * self.cfg.train.global_batch_size
        idx = eval_indices(n, self.micro, self.world, self.rank)
        metrics = validation_metrics(self.engine, batches(self.data.valid, idx,
                                                          self.data.collate),
                                     self.cfg.kind, self.device)
        loss = self.last_val = metrics["val_loss"]
        self._record("eval", **metrics, wall=self._wall())
        return loss

    def _checkpoint(self) -> None:
        self.state.wall_seconds = self._wall()
        self._t0 = time.perf_counter()
        tag = ckpt.save_checkpoint(self.engine, self.ckpt_root, self.state,
                                   self.cfg.train.keep_checkpoints)
        self._record("checkpoint", tag=tag)

    # ----- training ----------------------------------------------------------------------
    def _train_step(self) -> tuple[float, float]:
        s, e = self.state, self.engine
        lr = float(e.get_lr()[0])
        idx = micro_indices(s.consumed_samples, self.micro, self.world, self.rank, self.accum)
        total = torch.zeros((), dtype=torch.float64)
        for batch in batches(self.data.train, idx, self.data.collate):
            out = e(**{k: v.to(self.device) for k, v in batch.items()})
            e.backward(out.loss)
            e.step()
            total += out.loss.detach().double().cpu()
        if self.world > 1:
            dist.all_reduce(total)
        g = self.cfg.train.global_batch_size
        s.consumed_samples += g
        s.tokens += g * self.cfg.data.seq_length
        s.flops += self.step_flops[self.cfg.phases[s.phase].level]
        s.global_step += 1
        s.step_in_phase += 1
        return float(total) / (self.accum * self.world), lr

    def _run_phase(self, bar: Progress) -> bool:
        """Train the rest of the current phase; False if stopped by a signal."""
        s, t = self.state, self.cfg.train
        steps, _ = self.cfg.phase_steps(s.phase)
        level = self.cfg.phases[s.phase].level
        v = self.cfg.vcycle
        after_up = s.phase > 0 and self.cfg.phases[s.phase - 1].level > level
        applied = None  # a phase's engine starts with its modules' own dropout rates
        while s.step_in_phase < steps:
            rate = dropout_after_up(after_up, s.step_in_phase, v.dropout, v.dropout_steps)
            if rate != applied:
                set_dropout(self.engine.module, rate)
                applied = rate
            t_step = time.perf_counter()
            loss, lr = self._train_step()
            seconds = time.perf_counter() - t_step
            extra = {} if rate is None else {"dropout": rate}
            self._record("step", loss=loss, lr=lr, seconds=seconds, wall=self._wall(), **extra)
            if s.step_in_phase == steps or s.global_step % t.eval_every == 0:
                self._evaluate()
            if t.checkpoint_every and s.global_step % t.checkpoint_every == 0:
                self._checkpoint()
            bar.update(s.global_step, f"phase {s.phase} L{level} loss {loss:.3f} "
                       f"val {self.last_val or float('nan'):.3f}")
            if self.stop.agreed():
                self._checkpoint()
                self._record("preempted", signal=self.stop.signal)
                return False
        return True

    def _transition(self) -> None:
        """Move from the current phase's level to the next phase's, on a fresh engine.

        With ``vcycle.optimizer: map`` the new engine is built before the old one is destroyed
        and Adam's moments (and step count) are carried through the same operator."""
        from mlsys.models import build_model
        from mlsys.operators import coalesce, decoalesce, interpolate
        from mlsys.optimizer_state import adam_state_of, map_adam_state
        from mlsys.symmetry import add_detail, add_relative_noise
        from mlsys.weights_io import load_weights

        t0 = time.perf_counter()
        s, v, fam = self.state, self.cfg.vcycle, self.cfg.model.family
        src, dst = self.cfg.phases[s.phase].level, self.cfg.phases[s.phase + 1].level
        old = self.engine
        if dst > src:
            path = self.out / "vcycle" / f"phase{s.phase}-level{src}.safetensors"
            save_weights(old.module, path)
            s.saved[src] = str(path)
            model = coalesce(old.module, width=v.width, depth=v.depth, scheme=v.scheme,
                             depth_mapping=v.depth_mapping)
        else:
            large = decoalesce(old.module, self.configs[dst], scheme=v.scheme,
                               depth_mapping=v.depth_mapping)
            add_relative_noise(large, v.noise, seed=self.cfg.train.seed + s.phase)
            model = build_model(self.configs[dst], fam, self.cfg.train.seed)
            load_weights(model, s.saved[dst])
            if v.interpolation == "all":
                interpolate(model, large, v.alpha)
            else:  # only the saved model's detail, weighted like the paper's 1 - α
                depth = v.depth if v.interpolation == "detail" else 1
                add_detail(large, model, 1.0 - v.alpha, v.width, depth, v.scheme,
                           v.depth_mapping)
                model = large
            del large
        if v.optimizer == "reset":
            self._destroy_engine()
        s.phase += 1
        s.step_in_phase = 0
        self._new_engine(model, s.phase)
        if v.optimizer == "map":
            map_adam_state(old.module, adam_state_of(old), self.engine.module,
                           adam_state_of(self.engine), scheme=v.scheme,
                           depth_mapping=v.depth_mapping)
            destroy_engine(old)
        del old
        release_free_memory()
        self._record("transition", from_level=src, to_level=dst,
                     transition_seconds=time.perf_counter() - t0,
                     peak_memory_bytes=peak_memory_bytes(), rss_bytes=resident_memory_bytes())
        self._evaluate()

    def _finish(self) -> dict[str, Any]:
        from mlsys.export import export_pretrained

        weights = gather_weights(self.engine.module)
        level = self.cfg.phases[self.state.phase].level
        self._destroy_engine()
        final = self.out / "final"
        self.hf_ds = None  # plain (unpartitioned) construction from here on
        gc.collect()
        result = {"val_loss": self.last_val, "flops": self.state.flops, "wall": self._wall(),
                  "peak_memory_bytes": peak_memory_bytes(), "final_dir": str(final),
                  "steps": self.state.global_step, "status": "done"}
        if self.rank == 0:
            export_pretrained(weights, self.configs[level], self.cfg.model.family,
                              self.data.tokenizer_dir, final)
            self._record("end", **{k: v for k, v in result.items() if k != "status"})
            self.log.close()
            plot_val_loss(read_metrics(self.out / "metrics.jsonl"),
                          self.out / "val_loss_vs_flops.png", title=self.cfg.name)
            tmp = self.out / f"{DONE_FILE}.tmp"
            tmp.write_text(json.dumps(result, indent=1))
            os.replace(tmp, self.out / DONE_FILE)
        barrier()
        return result

    def run(self) -> dict[str, Any]:
        """The whole run: returns {status: done|preempted|already-done, val_loss, flops, ...}."""
        if not self._setup():
            return {"status": "already-done", **json.loads((self.out / DONE_FILE).read_text())}
        self._start()
        self._t0 = time.perf_counter()
        n = len(self.cfg.phases)
        with Progress(self.cfg.total_steps, self.state.global_step,
                      enabled=self.show_progress and self.rank == 0) as bar:
            while True:
                if not self._run_phase(bar):
                    self._destroy_engine()
                    self.log.close()
                    return {"status": "preempted", "step": self.state.global_step}
                if self.state.phase == n - 1:
                    break
                self._transition()
                self._checkpoint()
        return self._finish()


def run_training(cfg: RunConfig, ds_config: dict[str, Any], resume: bool | str = "auto",
                 stop: StopFlag | None = None, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the training run ``cfg`` with the resolved DeepSpeed config on every
    rank of the initialised process group; see the module docstring."""
    return Controller(cfg, ds_config, resume=resume, stop=stop, progress=progress).run()
