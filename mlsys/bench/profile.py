"""Benchmark profiles (``configs/bench/<name>.yaml``): a validated schema, ``extends``, forks.

A profile fixes, per family, the shared sections of every run (model, data, train) and lists
the runs, each adding its own sections (``phases``, ``vcycle``, ...)::

    ranks: 1                          # local ranks per run
    ds_config: configs/ds/zero1.json
    window: 3                         # evaluations in the trailing mean of the target loss
    extends: cpu-small                # optional: that profile's families and runs first
    families: {gpt: {model: ..., data: ..., train: ...}, ...}
    runs:
      baseline: {phases: [...]}
      id-width0.5:
        fork: {from: vcycle2-gentle, after_phase: 1}   # start from that run's checkpoint
        vcycle: {...}                                  # at the end of phase 1
        phases: [...]

``load_profile`` raises ``ConfigError`` naming the file and field; ``run_configs`` gives the
run configs of one family (each validated by ``mlsys.config`` before anything trains).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mlsys.config import ConfigError, parse_run_config


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Fork(_Strict):
    source: str = Field(alias="from", min_length=1)
    after_phase: int = Field(ge=0)


class Profile(_Strict):
    ds_config: str
    ranks: int = Field(default=1, gt=0)
    window: int = Field(default=3, gt=0)
    families: dict[str, dict[str, Any]] = Field(min_length=1)
    runs: dict[str, dict[str, Any]] = Field(min_length=1)

    @model_validator(mode="after")
    def _forks_name_earlier_runs(self) -> Profile:
        names = list(self.runs)
        for i, (name, run) in enumerate(self.runs.items()):
            if "fork" not in run:
                continue
            try:
                fork = Fork.model_validate(run["fork"])
            except ValidationError as err:
                raise ValueError(f"runs.{name}.fork: {err.errors()[0]['msg']}") from None
            if fork.source not in names[:i]:
                raise ValueError(f"runs.{name}.fork.from: {fork.source!r} is not a run listed "
                                 f"before it ({', '.join(names[:i]) or 'none'})")
            if fork.after_phase >= len(run.get("phases", [])) - 1:
                raise ValueError(f"runs.{name}.fork.after_phase: {fork.after_phase} leaves no "
                                 "phase to train after the fork")
        return self


def profile_path(name: str, root: str | Path) -> Path:
    return Path(root) / "configs" / "bench" / f"{name}.yaml"


def load_profile(name: str, root: str | Path) -> Profile:
    """The profile ``configs/bench/<name>.yaml`` under ``root``, with ``extends`` resolved (the
    base profile's families and runs, then this one's runs)."""
    path = profile_path(name, root)
    if not path.exists():
        known = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ConfigError(f"{path}: no such profile (known: {', '.join(known)})")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: YAML error: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    base = data.pop("extends", None)
    if base:
        parent = load_profile(base, root).model_dump()
        data = {**parent, **data, "runs": {**parent["runs"], **data.get("runs", {})}}
    try:
        return Profile.model_validate(data)
    except ValidationError as err:
        fields = "\n".join(f"  {'.'.join(str(x) for x in e['loc'])}: "
                           f"{e['msg'].removeprefix('Value error, ')}" for e in err.errors())
        raise ConfigError(f"{path}: invalid profile\n{fields}") from None


def _merged(shared: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    cfg = copy.deepcopy(shared)
    for section, value in copy.deepcopy(run).items():
        if isinstance(value, dict) and isinstance(cfg.get(section), dict):
            cfg[section] = {**cfg[section], **value}
        else:
            cfg[section] = value
    return cfg


def run_configs(profile: Profile, family: str, out: Path, scale: float = 1.0
                ) -> dict[str, dict[str, Any]]:
    """Run config (a dict) per run name for ``family``: the family's shared sections plus the
    run's own, ``schedule.scale``, ``name`` and ``run_dir``. A forked run's ``fork`` becomes
    ``{from, step}`` (the global step at the end of ``after_phase``, after scaling), and its
    source keeps a checkpoint at every fork step."""
    if family not in profile.families:
        raise ConfigError(f"family: {family!r} is not in this profile "
                          f"({', '.join(profile.families)})")
    configs, totals = {}, {}
    for name, run in profile.runs.items():
        cfg = _merged(profile.families[family], run)
        cfg["schedule"] = {"scale": scale}
        cfg["name"] = f"{family}-{name}"
        cfg["run_dir"] = str(out / name)
        fork = cfg.pop("fork", None)
        parsed = parse_run_config(cfg, source=f"{family}/{name}")
        totals[name] = parsed.total_steps
        if fork is not None:
            cfg["fork"] = {"from": fork["from"], "step": sum(
                parsed.phase_steps(i)[0] for i in range(fork["after_phase"] + 1))}
        configs[name] = cfg
    for name, cfg in configs.items():  # a fork source keeps a checkpoint at every fork step
        if "fork" in cfg:
            train = configs[cfg["fork"]["from"]].setdefault("train", {})
            every = math.gcd(train.get("checkpoint_every", 0), cfg["fork"]["step"])
            train.update(checkpoint_every=every,
                         keep_checkpoints=totals[name] // every + 2 * len(cfg["phases"]))
    return configs
