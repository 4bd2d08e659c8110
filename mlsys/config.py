"""Run config: the schema of a training run, loaded from YAML and validated before anything runs.

Schema (every section but ``name``, ``model``, ``data`` and ``phases`` has defaults)::

    name: tiny-bert-vcycle          # the run's name; outputs go to run_dir (default runs/<name>)
    run_dir: runs/tiny-bert-vcycle
    model:                          # the level-1 (full size) model
      family: bert                  # a registered family (mlsys/families/): bert, gpt, vit,
                                    # deit, llama, qwen2, qwen3, mistral (GQA and the rest via
                                    # extra: num_key_value_heads, tie_word_embeddings, ...);
                                    # vision families read image data (extra: image_size,
                                    # patch_size; seq_length = tokens per image:
                                    # (image_size/patch_size)^2 + the family's extra tokens)
      hidden_size: 128
      num_layers: 4
      num_heads: 4
      ffn_size: 512                 # null: 4 x hidden_size
      max_position: 128             # position table size (>= data.seq_length)
      vocab_size: null              # null: the tokenizer's vocabulary size
      dropout: 0.1
      extra: {}                     # any other Hugging Face config field, passed through;
                                    # attn_implementation: sdpa (the default: PyTorch's fused
                                    # scaled_dot_product_attention, flash / memory-efficient
                                    # kernels on a GPU) | eager (the plain matmul-softmax) |
                                    # flash_attention_2 (needs the flash-attn package, bf16)
    data:
      tokenizer_dir: data/x/tokenizer   # both null: build the default corpus with data_prep
      data_prefix: data/x/shards/train  # (prepare_dir, prepare_vocab_size)
      prepare_dir: data/default
      prepare_vocab_size: 4096
      prepare_source: stdlib        # stdlib | packages (stdlib + site-packages, data_prep)
      seq_length: 128
      split: "98,1,1"
      cache_dir: null               # megatron index cache (default <run_dir>/data_cache)
      train_samples: null           # dataset size (default: the run's samples); set it equal
                                    # across runs of different lengths to share a token order
    train:
      seed: 1234
      micro_batch_size: 8           # per rank
      global_batch_size: 16         # micro x ranks x gradient accumulation
      weight_decay: 0.01
      betas: [0.9, 0.999]
      eps: 1.0e-8
      grad_clip: 1.0
      decay: linear                 # after warmup: linear | cosine | constant | wsd
      min_lr_ratio: 0.1             # lr at the end of the decay, as a fraction of the peak
      decay_fraction: 0.2           # wsd: the last fraction of the steps decays, linearly
      eval_every: 20                # validation every K steps (and at every phase end)
      eval_batches: 4               # validation set: this many global batches
      checkpoint_every: 0           # steps; 0: only at transitions, signals and the end
      keep_checkpoints: 2
      log_every: 1                  # a step record (mean loss since the last) every K steps,
                                    # and at evaluations, checkpoints and phase ends
      data_workers: 1               # processes preparing the next micro-batches (0: inline)
      export_levels: true           # export every phase's model to levels/phase<p>-level<k>/
      peak_tflops: null             # one device's peak TFLOP/s for MFU; null: the bf16 dense
                                    # peak of a known accelerator (mlsys/train/throughput.py),
                                    # none on a CPU (MFU null)
      activation_checkpointing: false   # Hugging Face gradient checkpointing on every model
                                    # (every level, after resume): layer activations are
                                    # recomputed in backward instead of stored
      compile: false                # torch.compile every engine's model (engine.compile())
    vcycle:
      scheme: stride                # stride | adjacent
      alpha: 0.8                    # interpolation: (1-alpha) * saved + alpha * de-coalesced
      width: 2                      # per level: 1 or 2
      depth: 2
      length: 1                     # per level: 1, 2 or 4, the length factor k of each
                                    # coalescing step: level L runs on S / length^(L-1) pooled
                                    # positions, same weights (mlsys/length.py)
      depth_mapping: copy           # copy (the paper) | identity (2nd copy an identity block)
      optimizer: reset              # reset: a fresh optimizer per phase | map: Adam moments
                                    # carried through the operators (mlsys/optimizer_state.py)
      noise: 0.0                    # after de-coalescing: relative Gaussian noise per tensor
    schedule:
      scale: 1.0                    # multiplies every phase's steps and warmup
      span: phase                   # phase: every phase warms up and decays on its own;
                                    # run: one decay over the whole run (see train/schedule.py)
    phases:                         # level 1 = full size; each transition moves one level;
                                    # a run starts at level 1 unless vcycle.growth is true
      - {level: 1, steps: 20, lr: 1.0e-3, warmup: 5}
      - {level: 2, steps: 100, lr: 2.0e-3, warmup: 5}
      - {level: 1, steps: 100, lr: 1.0e-3, warmup: 10}

``load_run_config(path)`` raises ``ConfigError`` naming the file and every bad field
(``phases.1.level: ...``) before any model, process group or file is created.

``apply_overrides(data, ["train.seed=3", "phases.1.steps=500"])`` sets fields by dotted path
(``launch/train.py --set``): list items by index, values read as YAML (``3``, ``1.0e-3``,
``null``, ``true``, ``[0.9, 0.95]``; ``1e-3`` is a number too, as in YAML 1.2). Only existing
fields can be set, and new keys only under ``model.extra``; an unknown field or an index out
of range is a ``ConfigError`` naming the path, and the result is validated by the same schema.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mlsys.families import NAMES, Family, get_family


class ConfigError(ValueError):
    """A run or DeepSpeed config is invalid; the message names the file and the fields."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Hugging Face attention implementations a run may ask for (model.extra.attn_implementation).
ATTENTION = ("sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention")


class ModelConfig(_Strict):
    family: str
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    ffn_size: int | None = Field(default=None, gt=0)
    max_position: int = Field(default=512, gt=0)
    vocab_size: int | None = Field(default=None, gt=0)
    dropout: float = Field(default=0.1, ge=0.0, lt=1.0)
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("family")
    @classmethod
    def _known_family(cls, name: str) -> str:
        if name not in NAMES:
            raise ValueError(f"unknown family {name!r}; known: {', '.join(NAMES)}")
        return name

    @field_validator("extra")
    @classmethod
    def _known_attention(cls, extra: dict[str, Any]) -> dict[str, Any]:
        impl = extra.get("attn_implementation")
        if impl is not None and impl not in ATTENTION:
            raise ValueError(f"attn_implementation: {impl!r} is not one of "
                             f"{', '.join(ATTENTION)}")
        return extra

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> ModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"num_heads: {self.num_heads} does not divide "
                             f"hidden_size {self.hidden_size}")
        return self

    @property
    def ffn(self) -> int:
        return self.ffn_size if self.ffn_size is not None else 4 * self.hidden_size


class DataConfig(_Strict):
    tokenizer_dir: str | None = None
    data_prefix: str | None = None
    prepare_dir: str = "data/default"
    prepare_vocab_size: int = Field(default=4096, gt=0)
    prepare_source: Literal["stdlib", "packages"] = "stdlib"
    seq_length: int = Field(gt=1)
    split: str = "98,1,1"
    cache_dir: str | None = None
    train_samples: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _both_or_neither(self) -> DataConfig:
        if self.tokenizer_dir is not None and self.data_prefix is None:
            raise ValueError("tokenizer_dir and data_prefix: give both, or neither "
                             "(neither: the default corpus is prepared under prepare_dir)")
        parts = self.split.split(",")
        if len(parts) != 3 or not all(p.strip().replace(".", "", 1).isdigit() for p in parts):
            raise ValueError(f"split: expected 'train,valid,test' weights, got {self.split!r}")
        return self


class TrainConfig(_Strict):
    seed: int = 1234
    micro_batch_size: int = Field(default=8, gt=0)
    global_batch_size: int = Field(default=16, gt=0)
    weight_decay: float = Field(default=0.01, ge=0.0)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(default=1e-8, gt=0.0)
    grad_clip: float = Field(default=1.0, ge=0.0)
    decay: Literal["linear", "cosine", "constant", "wsd"] = "linear"
    min_lr_ratio: float = Field(default=0.1, ge=0.0, le=1.0)
    decay_fraction: float = Field(default=0.2, gt=0.0, le=1.0)
    eval_every: int = Field(default=20, gt=0)
    eval_batches: int = Field(default=4, gt=0)
    checkpoint_every: int = Field(default=0, ge=0)
    keep_checkpoints: int = Field(default=2, gt=0)
    log_every: int = Field(default=1, gt=0)
    data_workers: int = Field(default=1, ge=0)
    export_levels: bool = True
    peak_tflops: float | None = Field(default=None, gt=0.0)
    activation_checkpointing: bool = False
    compile: bool = False


class VCycleConfig(_Strict):
    scheme: Literal["stride", "adjacent"] = "stride"
    alpha: float = Field(default=0.8, ge=0.0, le=1.0)
    width: Literal[1, 2] = 2
    depth: Literal[1, 2] = 2
    length: Literal[1, 2, 4] = 1
    depth_mapping: Literal["copy", "identity"] = "copy"
    optimizer: Literal["reset", "map"] = "reset"
    noise: float = Field(default=0.0, ge=0.0, le=1.0)
    interpolation: Literal["all", "width", "detail"] = "all"
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    dropout_steps: int = Field(default=0, ge=0)
    growth: bool = False

    def length_factor(self, level: int) -> int:
        """k at ``level``: the model runs on S / k pooled positions (``mlsys.length``)."""
        return self.length ** (level - 1)


class ScheduleConfig(_Strict):
    scale: float = Field(default=1.0, gt=0.0)
    span: Literal["phase", "run"] = "phase"


class PhaseConfig(_Strict):
    level: int = Field(ge=1)
    steps: int = Field(gt=0)
    lr: float = Field(gt=0.0)
    warmup: int = Field(default=0, ge=0)


class RunConfig(_Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    run_dir: str | None = None
    model: ModelConfig
    data: DataConfig
    train: TrainConfig = TrainConfig()
    vcycle: VCycleConfig = VCycleConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    phases: list[PhaseConfig] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _not_a_path(cls, name: str) -> str:
        if set(name) == {"."}:
            raise ValueError(f"{name!r} names a directory above or at runs/, not a run")
        return name

    @field_validator("run_dir")
    @classmethod
    def _not_empty(cls, run_dir: str | None) -> str | None:
        if run_dir is not None and run_dir.strip() in ("", "."):
            raise ValueError(f"{run_dir!r} is the current directory, not a run directory")
        return run_dir

    @model_validator(mode="after")
    def _check_schedule(self) -> RunConfig:
        if self.phases[0].level != 1 and not self.vcycle.growth:
            raise ValueError(f"phases.0.level: a run starts at level 1, got "
                             f"{self.phases[0].level} (vcycle.growth: true starts smaller)")
        for i in range(1, len(self.phases)):
            a, b = self.phases[i - 1].level, self.phases[i].level
            if abs(a - b) != 1:
                raise ValueError(f"phases.{i}.level: moves from level {a} to {b}; "
                                 "each transition moves exactly one level")
        need = self.total_steps * self.train.global_batch_size
        if self.data.train_samples is not None and self.data.train_samples < need:
            raise ValueError(f"data.train_samples: {self.data.train_samples} is fewer than the "
                             f"{need} samples this run trains on")
        deepest = max(p.level for p in self.phases)
        v = self.vcycle
        if deepest > 1 and v.width == 1 and v.depth == 1 and v.length == 1:
            raise ValueError("vcycle.width, vcycle.depth, vcycle.length: all 1 leave nothing "
                             "to coalesce")
        k = v.length_factor(deepest)
        if k > 1 and self.family.length is None:
            raise ValueError(f"vcycle.length: the {self.model.family} family has no length "
                             "levels (set 1)")
        if self.data.seq_length % k:
            raise ValueError(f"data.seq_length: {self.data.seq_length} is not divisible by "
                             f"the length factor {k} (vcycle.length {v.length} at level "
                             f"{deepest})")
        w, d = self.vcycle.width ** (deepest - 1), self.vcycle.depth ** (deepest - 1)
        m = self.model
        for field, value, factor in (("num_heads", m.num_heads, w), ("hidden_size",
                                     m.hidden_size, w), ("ffn_size", m.ffn, w),
                                     ("num_layers", m.num_layers, d)):
            if value % factor:
                raise ValueError(f"model.{field}: {value} is not divisible by {factor}, "
                                 f"needed to reach level {deepest}")
        if self.family.kind == "vision":
            self._check_image_tokens()
        elif (self.data.tokenizer_dir is None) != (self.data.data_prefix is None):
            raise ValueError("data.tokenizer_dir and data.data_prefix: give both, or neither "
                             "(neither: the default corpus is prepared under prepare_dir)")
        elif self.data.seq_length > m.max_position:
            raise ValueError(f"data.seq_length: {self.data.seq_length} exceeds "
                             f"model.max_position {m.max_position}")
        return self

    def _check_image_tokens(self) -> None:
        m, d = self.model, self.data
        if d.tokenizer_dir is not None:
            raise ValueError("data.tokenizer_dir: image data has no tokenizer (set null)")
        size, patch = m.extra.get("image_size"), m.extra.get("patch_size")
        if not (isinstance(size, int) and isinstance(patch, int) and patch > 0
                and size % patch == 0):
            raise ValueError(f"model.extra: image_size and patch_size must be integers, "
                             f"patch_size dividing image_size (got {size!r}, {patch!r})")
        tokens = (size // patch) ** 2 + self.family.extra_tokens
        if d.seq_length != tokens:
            raise ValueError(f"data.seq_length: {m.family} at image_size {size}, patch_size "
                             f"{patch} sees {tokens} tokens per image, not {d.seq_length}")

    @property
    def family(self) -> Family:
        """The model family's declaration (mlsys/families/)."""
        return get_family(self.model.family)

    @property
    def kind(self) -> str:
        """Data kind: 'causal' (causal LM), 'masked' (masked LM) or 'vision' (classification)."""
        return self.family.kind

    @property
    def out_dir(self) -> Path:
        return Path(self.run_dir if self.run_dir is not None else f"runs/{self.name}")

    def phase_steps(self, index: int) -> tuple[int, int]:
        """(steps, warmup) of phase ``index`` after ``schedule.scale`` (steps at least 1)."""
        p = self.phases[index]
        steps = max(1, math.ceil(p.steps * self.schedule.scale - 1e-9))
        return steps, min(steps, round(p.warmup * self.schedule.scale))

    @property
    def total_steps(self) -> int:
        return sum(self.phase_steps(i)[0] for i in range(len(self.phases)))

    @property
    def train_samples(self) -> int:
        """Training samples the dataset is built for: ``data.train_samples`` or what the run
        consumes."""
        need = self.total_steps * self.train.global_batch_size
        return self.data.train_samples if self.data.train_samples is not None else need


def _format(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        head, sep, rest = msg.partition(": ")
        if loc and sep and re.fullmatch(r"[A-Za-z_][\w.]*", head):  # a section's own check
            loc, msg = f"{loc}.{head}", rest
        lines.append(f"  {loc}: {msg}" if loc else f"  {msg}")
    return "\n".join(lines)


def parse_run_config(data: Any, source: str = "<config>") -> RunConfig:
    """Validate a mapping; ``ConfigError`` names ``source`` and every bad field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got "
                          f"{type(data).__name__}")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source}: invalid run config\n{_format(err)}") from None


# Paths under which --set may add keys (free-form sections passed through to Hugging Face).
FREE_FORM = ("model.extra",)
_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _override_value(text: str) -> Any:
    """A --set value: YAML (a scalar, or a flow list / mapping); ``1e-3`` is a float."""
    value = yaml.safe_load(text)
    if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
        return float(value)
    return value


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...],
                    source: str = "--set") -> dict[str, Any]:
    """``data`` (a run config as a plain mapping, every field present: ``model_dump()``) with
    each ``PATH=VALUE`` of ``overrides`` applied in order (a new mapping; see the module
    docstring). ``ConfigError`` naming the path for a malformed override, an unknown field
    or an index out of range; the schema is checked by ``parse_run_config`` afterwards."""
    import json

    out = json.loads(json.dumps(data))  # a deep copy; tuples become lists
    for item in overrides:
        path, sep, text = item.partition("=")
        path = path.strip()
        if not sep or not path:
            raise ConfigError(f"{source} {item!r}: expected PATH=VALUE (e.g. train.seed=3)")
        try:
            value = _override_value(text)
        except yaml.YAMLError as err:
            raise ConfigError(f"{source} {path}: value {text!r} is not YAML: "
                              f"{getattr(err, 'problem', err)}") from None
        keys = path.split(".")
        node: Any = out
        for i, key in enumerate(keys):
            here, last = ".".join(keys[:i + 1]), i == len(keys) - 1
            parent = ".".join(keys[:i])
            if isinstance(node, list):
                if not key.lstrip("-").isdigit():
                    raise ConfigError(f"{source} {path}: {parent} is a list; {key!r} is not "
                                      "an index")
                index = int(key)
                if not 0 <= index < len(node):
                    raise ConfigError(f"{source} {path}: index {index} out of range ({parent} "
                                      f"has {len(node)} items: 0..{len(node) - 1})")
                if last:
                    node[index] = value
                else:
                    node = node[index]
            elif isinstance(node, dict):
                if key not in node and not (last and parent in FREE_FORM):
                    known = ", ".join(sorted(node)) or "none"
                    raise ConfigError(f"{source} {path}: unknown field {here} (the fields of "
                                      f"{parent or 'the run config'}: {known})")
                if last:
                    node[key] = value
                else:
                    node = node[key]
            else:
                raise ConfigError(f"{source} {path}: {parent} is a value "
                                  f"({node!r}), not a section or list")
    return out


def load_run_config(path: str | Path) -> RunConfig:
    """Read and validate a YAML run config (``ConfigError`` on any problem, naming the file)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read run config: {err.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: YAML error: {getattr(err, 'problem', err)}") from None
    return parse_run_config(data, str(path))
