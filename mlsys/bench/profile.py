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
      stable: {train: {decay: constant}, phases: [...], sweep: {lr: [1.0e-3, 2.0e-3]}}
      wsd:                            # one run per (lr, steps): name wsd-lr1e-3-s500, ...
        fork: {from: stable, before_decay: true}       # branched where its decay starts
        train: {decay: wsd}
        phases: [{level: 1, steps: 2000, lr: 1.0e-3, warmup: 50}]
        sweep: {lr: [1.0e-3, 2.0e-3], steps: [500, 1000, 2000]}

A ``sweep`` expands a run into one run per grid point: ``lr`` sets level 1's lr and scales
every other phase's by the same factor (the declared ratios between levels are the level lr
rule), ``steps`` sets the length of the run's last phase (a one-phase run's length; a
V-cycle's final phase, for the same cycle at several budgets; with ``vcycle.recipe: auto``
the baseline's, so the budget the cycle is chosen for). A fork from a swept run
branches from the variant with the same lr.

``seeds: {values: [1235, 1236], runs: [wsd-lr2e-3-s2000, gpt-ls-b2000-lr2e-3]}`` adds the
headline runs again at other seeds (``train.seed``: initialisation, data order, the
transitions' noise), each named ``<run>-seed<k>``, with the runs they fork from at the same
seed (``stable-lr2e-3-seed1235``): the run at the family's own seed keeps its plain name, so
adding seeds leaves the existing runs, and their committed results, as they were. Every
variant validates on the family's own seed's samples (``data.valid_seed``), so a seed's loss
reads on the one frontier (measure (b)) as the family's own runs do.

``load_profile`` raises ``ConfigError`` naming the file and field; ``run_configs`` gives the
run configs of one family (each validated by ``mlsys.config`` before anything trains).
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mlsys.config import ConfigError, RunConfig, TrainConfig, parse_run_config
from mlsys.train.schedule import decay_steps


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Fork(_Strict):
    """Start from another run's checkpoint: at the end of this run's phase ``after_phase``,
    (``before_decay``) at the step where this run's WSD decay starts, or (``source_end``) at
    the source's last step: a constant-lr run extended to more steps."""

    source: str = Field(alias="from", min_length=1)
    after_phase: int | None = Field(default=None, ge=0)
    before_decay: bool = False
    source_end: bool = False

    @model_validator(mode="after")
    def _one_point(self) -> Fork:
        if (self.after_phase is not None) + self.before_decay + self.source_end != 1:
            raise ValueError("give exactly one of after_phase, before_decay: true and "
                             "source_end: true")
        return self


class Sweep(_Strict):
    """``lr``: values, or ``grid`` (the family's ``lr_grid``) or ``mid`` (its two middle
    points); ``steps``: lengths of the run's last phase."""

    lr: list[float] | Literal["grid", "mid"] = Field(default_factory=list)
    steps: list[int] = Field(default_factory=list)

    def lrs(self, grid: list[float] | None) -> list[float]:
        if isinstance(self.lr, list):
            return self.lr
        if not grid:
            raise ConfigError(f"sweep.lr: {self.lr!r} needs the family's lr_grid")
        if self.lr == "grid":
            return grid
        mid = len(grid) // 2
        return grid[mid - 1: mid + 1] if len(grid) % 2 == 0 else grid[mid: mid + 1]


class Seeds(_Strict):
    """``values``: the extra seeds; ``runs``: the (expanded) run names to repeat at each."""

    values: list[int] = Field(min_length=1)
    runs: list[str] = Field(min_length=1)


class Profile(_Strict):
    """``budget``: level-1 steps of the full budget; the target is the best baseline of that
    length, and longer baselines only extend the frontier (default: the longest baselines).
    ``single_epoch``: before anything trains, the benchmark checks that no run of the family
    reads a sample twice (``mlsys.bench.epochs.check_single_epoch``) and stops otherwise."""

    ds_config: str
    ranks: int = Field(default=1, gt=0)
    window: int = Field(default=3, gt=0)
    budget: int | None = Field(default=None, gt=0)
    single_epoch: bool = False  # every run must read fewer tokens than the train split holds
    seeds: Seeds | None = None
    families: dict[str, dict[str, Any]] = Field(min_length=1)
    runs: dict[str, dict[str, Any]] = Field(min_length=1)

    @model_validator(mode="after")
    def _forks_and_sweeps(self) -> Profile:
        names = list(self.runs)
        for i, (name, run) in enumerate(self.runs.items()):
            sweep = _section(Sweep, run, "sweep", name)
            if sweep.steps and not run.get("phases"):
                raise ValueError(f"runs.{name}.sweep.steps: the run has no phases to set the "
                                 "last one's length")
            if "fork" not in run:
                continue
            fork = _section(Fork, run, "fork", name)
            if fork.source not in names[:i]:
                raise ValueError(f"runs.{name}.fork.from: {fork.source!r} is not a run listed "
                                 f"before it ({', '.join(names[:i]) or 'none'})")
            if fork.after_phase is not None and fork.after_phase >= len(run.get("phases", [])) - 1:
                raise ValueError(f"runs.{name}.fork.after_phase: {fork.after_phase} leaves no "
                                 "phase to train after the fork")
            if _section(Sweep, self.runs[fork.source], "sweep", fork.source).steps:
                raise ValueError(f"runs.{name}.fork.from: {fork.source!r} sweeps its length; "
                                 "a fork needs one source")
        for family, sections in self.families.items():
            grid = sections.get("lr_grid")
            if grid is not None and not (isinstance(grid, list) and len(grid) >= 2 and all(
                    isinstance(x, int | float) and x > 0 for x in grid)):
                raise ValueError(f"families.{family}.lr_grid: a list of at least 2 positive "
                                 f"learning rates, got {grid!r}")
        return self


def _section(model: type[BaseModel], run: dict[str, Any], key: str, name: str) -> Any:
    try:
        return model.model_validate(run.get(key, {}) if key == "sweep" else run[key])
    except ValidationError as err:
        e = err.errors()[0]
        where = ".".join(str(x) for x in (name, key, *e["loc"]))
        raise ValueError(f"runs.{where}: {e['msg'].removeprefix('Value error, ')}") from None


def _tag(value: float) -> str:
    """A learning rate for a run name: 0.001 -> 1e-3, 0.00025 -> 2.5e-4."""
    mantissa, exponent = f"{value:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


_SWEEP_SUFFIX = r"(-lr\d+(\.\d+)?e-?\d+)?(-s\d+)?(-seed\d+)?"  # _tag, steps, seed
_SEED_SUFFIX = re.compile(r"-seed(\d+)$")


def seed_of(name: str) -> int | None:
    """The seed a seed variant's name carries (``...-seed1235``); None for any other run."""
    m = _SEED_SUFFIX.search(name)
    return int(m.group(1)) if m else None


def without_seed(name: str) -> str:
    """The run that seed variant ``name`` repeats (``name`` itself for any other run)."""
    return _SEED_SUFFIX.sub("", name)


def is_variant(name: str, entry: str) -> bool:
    """True if run ``name`` is profile entry ``entry`` or one of its sweep points."""
    return re.fullmatch(re.escape(entry) + _SWEEP_SUFFIX, name) is not None


def expand(runs: dict[str, dict[str, Any]], grid: list[float] | None = None
           ) -> dict[str, dict[str, Any]]:
    """Every swept run replaced by its grid points (``NAME-lr<x>``, ``NAME-lr<x>-s<n>``), in
    declaration order; forks from a swept run point at the variant with the same lr."""
    out: dict[str, dict[str, Any]] = {}
    variants: dict[str, dict[float | None, str]] = {}
    for name, run in runs.items():
        sweep = Sweep.model_validate(run.get("sweep", {}))
        base = {k: copy.deepcopy(v) for k, v in run.items() if k != "sweep"}
        variants[name] = {}
        for lr in sweep.lrs(grid) or [None]:
            for steps in sweep.steps or [None]:
                cfg = copy.deepcopy(base)
                suffix = ""
                if lr is not None:  # the grid value is level 1's lr; the ratios are kept
                    ref = next((p["lr"] for p in cfg["phases"] if p["level"] == 1),
                               cfg["phases"][0]["lr"])
                    cfg["phases"] = [{**p, "lr": lr if p["lr"] == ref else p["lr"] * lr / ref}
                                     for p in cfg["phases"]]
                    suffix += f"-lr{_tag(lr)}"
                if steps is not None:
                    cfg["phases"][-1]["steps"] = steps
                    suffix += f"-s{steps}"
                if "fork" in cfg:
                    source = variants[cfg["fork"]["from"]]
                    if lr not in source and None not in source:
                        raise ConfigError(f"runs.{name}.fork.from: {cfg['fork']['from']} has no "
                                          f"variant at lr {lr:g} to fork from")
                    cfg["fork"] = {**cfg["fork"], "from": source.get(lr, source.get(None))}
                out[name + suffix] = cfg
                variants[name].setdefault(lr, name + suffix)
    return out


def with_seeds(runs: dict[str, dict[str, Any]], seeds: Seeds | None, own_seed: int
               ) -> dict[str, dict[str, Any]]:
    """``runs`` (expanded) and, after them, every run of ``seeds.runs`` at each seed, each
    preceded by the seed variant of the run it forks from (recursively). A variant validates
    on the samples of ``own_seed`` (``data.valid_seed``), the family's runs' samples."""
    if seeds is None:
        return runs
    unknown = [r for r in seeds.runs if r not in runs]
    if unknown:
        raise ConfigError(f"seeds.runs: {', '.join(unknown)} is not a run of this profile")
    out = dict(runs)

    def add(name: str, seed: int) -> str:
        variant = f"{name}-seed{seed}"
        if variant not in out:
            cfg = copy.deepcopy(runs[name])
            cfg["train"] = {**cfg.get("train", {}), "seed": seed}
            cfg["data"] = {**cfg.get("data", {}), "valid_seed": own_seed}
            if "fork" in cfg:
                cfg["fork"] = {**cfg["fork"], "from": add(cfg["fork"]["from"], seed)}
            out[variant] = cfg
        return variant

    for seed in seeds.values:
        for name in seeds.runs:
            add(name, seed)
    return out


def _fork_step(cfg: RunConfig, fork: dict[str, Any]) -> int:
    """The global step a fork starts at, after ``schedule.scale``."""
    if not fork.get("before_decay"):
        return sum(cfg.phase_steps(i)[0] for i in range(fork["after_phase"] + 1))
    if cfg.train.decay != "wsd":
        raise ConfigError(f"{cfg.name}: fork.before_decay needs train.decay: wsd")
    total = cfg.total_steps
    span = total if cfg.schedule.span == "run" else cfg.phase_steps(len(cfg.phases) - 1)[0]
    return total - decay_steps(span, cfg.train.decay_fraction)


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


def declared_in(name: str, root: str | Path) -> dict[str, str]:
    """Run entry -> the profile that declares it (the last one along ``extends`` that lists
    it: a profile that redefines a base profile's run declares its own)."""
    data = yaml.safe_load(profile_path(name, root).read_text()) or {}
    out = declared_in(data["extends"], root) if data.get("extends") else {}
    out.update({entry: name for entry in data.get("runs") or {}})
    return out


def origin_of(run: str, declared: dict[str, str]) -> str:
    """The profile that declares run ``run`` (an entry or one of its sweep points; the
    longest entry wins where two match)."""
    entries = [e for e in declared if is_variant(run, e)]
    if not entries:
        raise ConfigError(f"{run}: no profile entry declares it")
    return declared[max(entries, key=len)]


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
    run's own, ``schedule.scale``, ``name`` and ``run_dir``; a run with ``vcycle.recipe:
    auto`` gets the phases, vcycle and schedule it chose (``recipe: chosen``). A forked run's
    ``fork`` becomes ``{from, step}`` (the global step at the end of ``after_phase``, after
    scaling), and its source keeps a checkpoint at every fork step."""
    if family not in profile.families:
        raise ConfigError(f"family: {family!r} is not in this profile "
                          f"({', '.join(profile.families)})")
    shared = dict(profile.families[family])
    grid = shared.pop("lr_grid", None)
    configs, totals = {}, {}
    own_seed = shared.get("train", {}).get("seed", TrainConfig.model_fields["seed"].default)
    if profile.seeds is not None and own_seed in profile.seeds.values:
        raise ConfigError(f"seeds.values: {own_seed} is the family's own seed "
                          f"(families.{family}.train.seed): its runs are the plain-named ones")
    runs = with_seeds(expand(profile.runs, grid), profile.seeds, own_seed)
    for name, run in runs.items():
        cfg = _merged(shared, run)
        cfg["schedule"] = {**cfg.get("schedule", {}), "scale": scale}
        cfg["name"] = f"{family}-{name}"
        cfg["run_dir"] = str(out / name)
        fork = cfg.pop("fork", None)
        parsed = parse_run_config(cfg, source=f"{family}/{name}")
        if cfg.get("vcycle", {}).get("recipe") == "auto":  # the cycle it chose, as if written
            chosen = parsed.model_dump()
            cfg.update(vcycle=chosen["vcycle"], schedule=chosen["schedule"],
                       phases=chosen["phases"])
        totals[name] = parsed.total_steps
        if fork is not None:
            step = totals[fork["from"]] if fork.get("source_end") else _fork_step(parsed, fork)
            if step >= parsed.total_steps:
                raise ConfigError(f"runs.{name}.fork: starts at step {step}, where the run "
                                  f"({parsed.total_steps} steps) is already over")
            cfg["fork"] = {"from": fork["from"], "step": step}
        configs[name] = cfg
    for name, cfg in configs.items():  # a fork source keeps a checkpoint at every fork step
        if "fork" in cfg:
            train = configs[cfg["fork"]["from"]].setdefault("train", {})
            every = math.gcd(train.get("checkpoint_every", 0), cfg["fork"]["step"])
            train.update(checkpoint_every=every,
                         keep_checkpoints=totals[name] // every + 2 * len(cfg["phases"]))
    return configs
