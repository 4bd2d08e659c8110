"""Run config: the schema of a training run, loaded from YAML and validated before anything runs.

A run config has a ``name``, an optional ``run_dir`` and the sections ``model`` (the level-1
model), ``data``, ``train``, ``vcycle``, ``schedule`` and ``phases``; ``name``, ``model``,
``data`` and ``phases`` are required, everything else has a default. Every field states its
contract in the docstring under it (pydantic's ``use_attribute_docstrings``: it becomes the
field's description); ``docs/config.md`` is the reference generated from them
(``mlsys.config_reference``, ``make docs``). A small V-cycle::

    name: tiny-bert-vcycle
    model: {family: bert, hidden_size: 128, num_layers: 4, num_heads: 4, max_position: 128}
    data: {seq_length: 128}         # no tokenizer_dir / data_prefix: the default corpus
    phases:                         # level 1 = full size; each transition moves one level
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
from mlsys.recipe import expand_recipe


class ConfigError(ValueError):
    """A run or DeepSpeed config is invalid; the message names the file and the fields."""


class _Strict(BaseModel):
    # unknown fields are errors; a field's docstring is its description (docs/config.md)
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


# Hugging Face attention implementations a run may ask for (model.extra.attn_implementation).
ATTENTION = ("sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention")


class ModelConfig(_Strict):
    """The level-1 (full-size) model. Its Hugging Face config is built from the fields below
    (under the names the family declares, ``Family.fields``), then the family's
    ``config_defaults``, then ``extra`` (``mlsys.models.hf_config``); every level below 1 is
    derived from it by coalescing (``vcycle``). For the deepest level L the phases reach,
    ``num_heads``, ``hidden_size`` and the ffn size must be divisible by
    ``vcycle.width``^(L-1), and ``num_layers`` by ``vcycle.depth``^(L-1)."""

    family: str
    """The model family, a name registered in ``mlsys/families/``: ``bert`` (masked LM),
    ``gpt`` (GPT-2), ``llama``, ``qwen2``, ``qwen3``, ``mistral`` (causal LMs), ``vit``,
    ``deit`` (image classification). The family fixes the data kind (``causal``, ``masked`` or
    ``vision``), the Hugging Face classes and the operator table (see ``Family`` below); an
    unknown name is refused, listing the known ones."""
    hidden_size: int = Field(gt=0)
    """The hidden size (model width) of the level-1 model. Must be divisible by ``num_heads``
    (head_dim = hidden_size / num_heads, which coalescing never changes) and by
    ``vcycle.width``^(L-1) for the deepest level L."""
    num_layers: int = Field(gt=0)
    """Transformer layers of the level-1 model; must be divisible by ``vcycle.depth``^(L-1) for
    the deepest level L (depth coalescing merges pairs of layers)."""
    num_heads: int = Field(gt=0)
    """Attention (query) heads of the level-1 model; must divide ``hidden_size`` and be
    divisible by ``vcycle.width``^(L-1) (width coalescing halves whole heads). Grouped-query
    attention's key/value heads are set in ``extra`` (``num_key_value_heads``); they halve
    with the query heads, so an odd count where a level halves them is an error."""
    ffn_size: int | None = Field(default=None, gt=0)
    """Inner size of each feed-forward block. null: 4 × ``hidden_size`` (passed to the Hugging
    Face config explicitly). Must be divisible by ``vcycle.width``^(L-1) for the deepest
    level L."""
    max_position: int = Field(default=512, gt=0)
    """Size of the position table (the family's position limit: ``max_position_embeddings``,
    GPT-2's ``n_positions``); must be at least ``data.seq_length`` (checked at load; a limit
    set in ``extra`` under the family's own field name wins, and is checked against the data
    before training). Also the exported tokenizer's ``model_max_length``. Vision families
    have no position limit and ignore it (their positions follow ``extra.image_size`` and
    ``extra.patch_size``)."""
    vocab_size: int | None = Field(default=None, gt=0)
    """Rows of the token embedding and the LM head; for a vision family the classifier's
    ``num_labels``. null: the tokenizer's vocabulary size (image data: its number of
    classes). A value below the tokenizer's vocabulary is a ``ConfigError`` before training;
    rows above it are never looked up."""
    dropout: float = Field(default=0.1, ge=0.0, lt=1.0)
    """Dropout probability in [0, 1), set on every config field the family lists in
    ``Family.dropout_fields`` (e.g. BERT's hidden and attention dropout, GPT-2's
    ``resid_pdrop``, ``embd_pdrop``, ``attn_pdrop``), at every level; 0 disables them. A
    field of that name in ``extra`` wins; ``vcycle.dropout`` overrides every dropout module
    for the first steps after an up-transition."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Any other Hugging Face config field, passed through to the family's config class as a
    keyword argument, last (so it overrides the fields above and ``Family.config_defaults``);
    e.g. ``num_key_value_heads``, ``tie_word_embeddings``, ``rope_theta``. Vision families
    need ``image_size`` and ``patch_size`` (integers, ``patch_size`` dividing
    ``image_size``). ``attn_implementation`` must be ``sdpa`` (PyTorch's fused
    scaled_dot_product_attention), ``eager`` (plain matmul-softmax), ``flash_attention_2``
    (needs the flash-attn package and bf16), ``flash_attention_3`` or ``flex_attention``;
    unset, Hugging Face chooses. ``--set`` may add new keys here (only here)."""
    init_from: str | None = None
    """Start from weights: a Hugging Face model directory of this family (another run's
    ``final/``, a ``save_pretrained`` directory with safetensors: ``model.safetensors`` or a
    ``model.safetensors.index.json`` and its shards). On a fresh start the level-1 model is
    built as usual, then its parameters are set to the directory's (also under ZeRO-3), before
    the optimizer sees them; with ``vcycle.growth`` it is then coalesced to the first phase's
    level; the run evaluates the loaded model at step 0. Checked before the run directory is
    touched (``mlsys.train.init_from``): the directory's ``config.json`` must have this
    family's ``model_type`` and the level-1 model's hidden size, layers, heads, ffn,
    vocabulary and positions, and its weights every parameter at its shape. A resume loads
    its checkpoint instead (the directory is not read again), and the field is compared on
    resume like any other. null: a fresh initialisation (seeded by ``train.seed``)."""

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


def _check_blend(d: DataConfig) -> None:
    if d.data_prefix is not None:
        raise ValueError("blend: give data_prefix or blend, not both")
    if d.tokenizer_dir is None:
        raise ValueError("blend: needs tokenizer_dir (the tokenizer every corpus was made with)")
    if not d.blend:
        raise ValueError("blend: an empty list (give [[weight, prefix], ...])")
    for i, (weight, _) in enumerate(d.blend):
        if not (weight > 0 and math.isfinite(weight)):
            raise ValueError(f"blend[{i}]: weight {weight} is not a positive number")
    prefixes = [p for _, p in d.blend]
    twice = sorted({p for p in prefixes if prefixes.count(p) > 1})
    if twice:
        raise ValueError(f"blend: {', '.join(twice)} listed twice (give one weight)")


class DataConfig(_Strict):
    """Where the data comes from and how it is cut into samples. Text families (``causal``,
    ``masked``) read megatron-core indexed shards made by ``data_prep`` with its tokenizer;
    vision families read ``data_prep``'s image shards. With ``tokenizer_dir`` and
    ``data_prefix`` both null the default data is prepared under ``prepare_dir`` (rank 0,
    idempotently, while the other ranks wait). The data is checked against the config before
    the run directory is touched (``mlsys.data.checks``)."""

    tokenizer_dir: str | None = None
    """Text: the tokenizer directory written by ``data_prep`` (with its metadata file); give
    it together with ``data_prefix``, or neither (then the default corpus is prepared). It
    must exist and be the tokenizer the shards were made with. Vision: must be null (images
    have no tokenizer)."""
    data_prefix: str | None = None
    """The shards' path prefix: text, megatron's ``<prefix>.bin`` / ``<prefix>.idx`` with
    ``data_prep``'s manifest (given with ``tokenizer_dir``, or neither); vision,
    ``data_prep``'s image shards (null: scikit-learn's digits are prepared at
    ``model.extra.image_size``). Checked complete before training; a masked LM needs shards
    made with ``--split-sentences``."""
    blend: list[tuple[float, str]] | None = None
    """Text: instead of ``data_prefix``, several corpora mixed by weight, ``[[weight, prefix],
    ...]`` (positive weights, normalised; distinct prefixes), all made with ``tokenizer_dir``
    and each checked as ``data_prefix`` would be. megatron-core's blended dataset: every split
    (train, valid, test) of each corpus is mixed in these proportions, sample by sample and
    deterministically (the order depends on ``train.seed`` and ``train_samples``, so a resume
    continues it exactly); a corpus smaller than its share is read more than once."""
    prepare_dir: str = "data/default"
    """Where the default data is prepared when ``tokenizer_dir`` and ``data_prefix`` are null:
    text under ``<prepare_dir>/<kind>/`` (``packages-<kind>/`` with ``prepare_source:
    packages``), images under ``<prepare_dir>/images/``. Each step is reused when complete
    and made from the same inputs, so runs may share it. Unused when the data is given."""
    prepare_vocab_size: int = Field(default=4096, gt=0)
    """Text, default corpus only: the vocabulary size of the tokenizer trained on it (the
    model's vocabulary follows it unless ``model.vocab_size`` is set)."""
    prepare_source: Literal["stdlib", "packages", "packages-mixed"] = "stdlib"
    """Text, default corpus only: ``stdlib``, the Python standard library's sources (code, for
    a causal LM) or prose (for a masked LM); ``packages``, the standard library plus the
    installed site-packages (``data_prep.packages``: a larger corpus, its tokenizer trained on
    a deterministic sample of it); ``packages-mixed``, masked LMs only: the packages' prose
    and, after each module's prose, its code one line a sentence (about 5× the prose alone:
    long budgets without repetition)."""
    seq_length: int = Field(gt=1)
    """Tokens per sample (> 1). Text: at most ``model.max_position``. Vision: exactly the
    tokens the model sees per image, (image_size / patch_size)² + the family's
    ``extra_tokens`` (CLS, DeiT's distillation token). Either way divisible by the deepest
    level's length factor ``vcycle.length``^(L-1). A step trains on
    ``train.global_batch_size`` × seq_length tokens (throughput and FLOPs count these)."""
    split: str = "98,1,1"
    """Relative weights ``train,valid,test`` of the data split (three non-negative numbers;
    megatron's split string, normalised, so they need not sum to 100). Validation reads the
    valid split; the test split is never read. A split the run asks samples of that holds no
    token is a ``ConfigError``."""
    cache_dir: str | None = None
    """Text: where megatron-core caches the dataset indices it builds (keyed by their inputs);
    null: ``<run_dir>/data_cache``. Runs on the same data may share one. May change on
    resume."""
    valid_seed: int | None = None
    """Text: the seed of the validation samples (which samples of the valid split, in which
    order, and a masked LM's masks on them); null: ``train.seed``. Runs that differ in
    ``train.seed`` but share it validate on the same samples, so their losses compare (the
    benchmark's seed variants set it to the family's own seed). The training samples do not
    depend on it. Vision validates on a fixed set already and ignores it."""
    train_samples: int | None = Field(default=None, gt=0)
    """Samples the training dataset is built for; null: what the run consumes (its total
    steps after ``schedule.scale`` × ``train.global_batch_size``), which is also the minimum.
    Past one epoch of the train split the sample order depends on it, so runs of different
    lengths that set it equal (with the same data and ``train.seed``) read the same token
    order; up to one epoch of a single corpus it does not (every count builds that epoch in
    the same order), so a run extended from another's checkpoint may raise it."""

    @model_validator(mode="after")
    def _both_or_neither(self) -> DataConfig:
        if self.blend is not None:
            _check_blend(self)
        elif self.tokenizer_dir is not None and self.data_prefix is None:
            raise ValueError("tokenizer_dir and data_prefix: give both, or neither "
                             "(neither: the default corpus is prepared under prepare_dir)")
        parts = self.split.split(",")
        if len(parts) != 3 or not all(p.strip().replace(".", "", 1).isdigit() for p in parts):
            raise ValueError(f"split: expected 'train,valid,test' weights, got {self.split!r}")
        return self


class TrainConfig(_Strict):
    """Optimisation and bookkeeping, the same for every phase: AdamW at each phase's ``lr``
    under the schedule ``decay`` gives (``mlsys.train.engine``, ``mlsys.train.schedule``; the
    DeepSpeed config may not define an optimizer or scheduler, and its batch sizes and
    clipping come from here, ``mlsys.ds_config``), and how often the run evaluates, logs and
    checkpoints. Step counts here are global optimizer steps over the whole run."""

    seed: int = 1234
    """Seeds the level-1 model's initialisation, the data (megatron's sample order; the image
    datasets' shuffle and augmentation), the dropout masks (seed + 1 + rank) and the noise of
    each up-transition (seed + phase index)."""
    micro_batch_size: int = Field(default=8, gt=0)
    """Samples per rank in one forward/backward pass. ``global_batch_size`` must be a multiple
    of micro_batch_size × ranks (checked when the DeepSpeed config is resolved); the quotient
    is the number of gradient accumulation steps."""
    global_batch_size: int = Field(default=16, gt=0)
    """Samples per optimizer step over all ranks: micro_batch_size × ranks × gradient
    accumulation steps (DeepSpeed's ``train_batch_size``; a DeepSpeed config that sets
    another value is refused). The run consumes total steps × global_batch_size samples."""
    weight_decay: float = Field(default=0.01, ge=0.0)
    """AdamW's decoupled weight decay (≥ 0), on parameters with two or more dimensions; biases
    and norm weights get none."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW's (β1, β2): the decay rates of its first and second moment estimates."""
    eps: float = Field(default=1e-8, gt=0.0)
    """AdamW's ε (> 0), added to the root of the second moment."""
    grad_clip: float = Field(default=1.0, ge=0.0)
    """Clip the gradients' global L2 norm to this (DeepSpeed's ``gradient_clipping``; a
    DeepSpeed config that sets another value is refused); 0: no clipping."""
    decay: Literal["linear", "cosine", "constant", "wsd"] = "linear"
    """The lr after warmup, as a multiplier of the phase's ``lr``: ``linear`` or ``cosine``
    down to ``min_lr_ratio`` at the last step, ``constant``, or ``wsd`` (warmup-stable-decay:
    constant, then linear to ``min_lr_ratio`` over the last ``decay_fraction`` of the steps).
    Over each phase, or over the whole run with ``schedule.span: run``."""
    min_lr_ratio: float = Field(default=0.1, ge=0.0, le=1.0)
    """The lr at the end of the decay as a fraction of the peak, in [0, 1] (0: decay to zero);
    unused by ``decay: constant``."""
    decay_fraction: float = Field(default=0.2, gt=0.0, le=1.0)
    """``decay: wsd`` only: the fraction in (0, 1] of the schedule's steps (a phase's, or the
    run's with ``schedule.span: run``) that decays, at its end (at least one step)."""
    eval_every: int = Field(default=20, gt=0)
    """Validation every K global steps, and also at every phase's end and right after every
    transition. May change on resume."""
    eval_batches: int = Field(default=4, gt=0)
    """The validation set, in global batches: the first eval_batches × ``global_batch_size``
    samples of the valid split, the same samples at every evaluation."""
    checkpoint_every: int = Field(default=0, ge=0)
    """A checkpoint every K global steps; 0: none on a schedule. Checkpoints are also written
    after every transition and on a stop signal (SIGTERM, SIGUSR1, SIGINT). May change on
    resume."""
    keep_checkpoints: int = Field(default=2, gt=0)
    """How many checkpoints are kept (the newest, ≥ 1); older ones are removed only after a
    new one checks out. May change on resume."""
    portable_checkpoints: bool = True
    """Every checkpoint also holds the run's state without a per-rank layout (``portable/``:
    full fp32 weights, Adam's moments and step, the LR scheduler; about as large again as
    DeepSpeed's own files), so that it resumes on another number of ranks (a job requeued onto
    more or fewer nodes). false: a checkpoint resumes only on the rank count that wrote it.
    May change on resume."""
    log_every: int = Field(default=1, gt=0)
    """A step record (the mean loss of the steps since the last one, lr, throughput, memory)
    every K global steps, and at every evaluation, checkpoint and phase end. A record is the
    one host sync of its steps, and the ranks agree on a stop signal there, so a signal is
    honoured within K steps. May change on resume."""
    data_workers: int = Field(default=1, ge=0)
    """Loader processes collating the next micro-batches while a step runs; 0: collated in
    the training process. Forked once per rank when training starts or resumes, and kept for
    every phase (never forked after a transition). The data and its order do not depend on
    it. May change on resume."""
    export_levels: bool = True
    """At every transition, export the finished phase's model like ``final/`` (a Hugging Face
    model with its tokenizer or image processor) to ``levels/phase<p>-level<k>/``; false:
    only ``final/``. May change on resume."""
    peak_tflops: float | None = Field(default=None, gt=0.0)
    """One device's peak TFLOP/s, what the step records' MFU is measured against (reporting
    only). null: the dense bf16 peak of a known accelerator (``mlsys/train/throughput.py``);
    on a CPU or an accelerator not in that table MFU is null. May change on resume."""
    activation_checkpointing: bool = False
    """Hugging Face gradient checkpointing (non-reentrant) on every model the run trains
    (every level, and after a resume): layer activations are recomputed in backward instead
    of stored, trading compute for memory. FLOPs and MFU count the model's FLOPs only."""
    compile: bool = False
    """``torch.compile`` every engine's model (DeepSpeed's ``engine.compile()``), at every
    level and after a resume."""

class VCycleConfig(_Strict):
    """How the model moves between levels (``mlsys.vcycle.transition``). Level 1 is the full
    model; each level above it is one coalescing step smaller (``width``, ``depth``,
    ``length``). A down-transition (level a to a+1) saves the level-a weights and coalesces
    the model; an up-transition (a to a-1) de-coalesces it, adds ``noise``, and combines it
    with the weights saved at level a-1 (``interpolation``, ``alpha``) unless the run never
    trained that level (``growth``)."""

    scheme: Literal["stride", "adjacent"] = "stride"
    """Which units of a space pair up in width coalescing (units: channels, or whole heads):
    ``stride`` pairs unit i with unit i + n/2, ``adjacent`` pairs 2i with 2i+1. The same
    pairing maps the weights, the saved model's detail and Adam's moments."""
    alpha: float = Field(default=0.8, ge=0.0, le=1.0)
    """Interpolation weight of an up-transition, in [0, 1]. ``interpolation: all``: the new
    model is (1 − alpha) × saved + alpha × de-coalesced (1: the de-coalesced model as it
    is, 0: the saved one); ``width`` / ``detail``: 1 − alpha of the saved model's detail is
    added to the de-coalesced model. Unused where no weights were saved (``growth``)."""
    width: Literal[1, 2] = 2
    """Width factor of each coalescing step: 2 halves the hidden size, the (query and
    key/value) heads and the ffn size at every level above 1; 1 keeps them. ``width``,
    ``depth`` and ``length`` may not all be 1 when a phase is above level 1."""
    depth: Literal[1, 2] = 2
    """Depth factor of each coalescing step: 2 halves the layers at every level above 1
    (pairs of layers averaged, the pairs chosen by ``scheme``); 1 keeps them."""
    length: Literal[1, 2, 4] = 1
    """Length factor k of each coalescing step: level L runs on seq_length / k^(L-1) pooled
    positions with the same weights (token pooling, ``mlsys.length``); 1: no length levels.
    Above 1 it needs a family with length levels (``Family.length``) and a
    ``data.seq_length`` divisible by the deepest level's factor."""
    depth_mapping: Literal["copy", "identity"] = "copy"
    """How de-coalescing in depth fills a pair of layers: ``copy`` (the paper) puts the small
    layer in both; ``identity`` makes the second an identity block (its residual branches'
    output projections zero: function-preserving exactly for pre-LN models, approximately
    for post-LN ones, ``Family.identity_norms``). Coalescing inverts either exactly."""
    optimizer: Literal["reset", "map"] = "reset"
    """Adam's state across a transition: ``reset``, a fresh optimizer for every phase;
    ``map``, Adam's moments and step count carried through the same operator as the weights
    (``mlsys/vcycle/optimizer_state.py``; the new engine is built before the old one is
    destroyed, so both are in memory for a moment)."""
    noise: float = Field(default=0.0, ge=0.0, le=1.0)
    """Symmetry breaking after de-coalescing, before the interpolation: each parameter tensor
    gets Gaussian noise of standard deviation noise × the tensor's RMS (relative, in [0, 1];
    zero tensors stay zero), seeded by ``train.seed`` + phase index. 0: none."""
    interpolation: Literal["all", "width", "detail"] = "all"
    """How an up-transition combines the de-coalesced model with the weights saved at that
    level: ``all`` (the paper), (1 − alpha) × saved + alpha × de-coalesced; ``width``, the
    de-coalesced model plus 1 − alpha of the saved model's width detail
    (W_old − T_w F_w W_old); ``detail``, plus 1 − alpha of its width and depth detail
    (W_old − T F W_old). Detail coalesces to zero, so with ``width`` / ``detail`` the
    coalesced view of the model stays the small level's model exactly, noise aside
    (``mlsys/vcycle/symmetry.py``)."""
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    """Symmetry breaking: the rate, in [0, 1), of every dropout module during the first
    ``dropout_steps`` steps of a phase that an up-transition started; then the modules' own
    rates (``model.dropout``) return. 0: off."""
    dropout_steps: int = Field(default=0, ge=0)
    """How many steps at the start of a phase after an up-transition run at
    ``vcycle.dropout``; 0: off."""
    recipe: Literal["none", "auto", "chosen"] = "none"
    """``none``: the phases and the fields above as written. ``auto``: the family's measured
    best V-cycle at this budget (``mlsys.recipe``, the rule in ``Family.recipes``): the config
    gives one level-1 phase, the baseline the cycle replaces (its steps are the budget, its
    lr and warmup the baseline's), and the recipe sets the phases, ``schedule.span: run`` and
    the vcycle fields of its shape (given with another value than the recipe's, one of
    them is an error). ``chosen``: written in place of ``auto`` by the expansion (a run's
    ``run_config.json``), the phases as written. Refused for a family with no measured
    recipe (Llama-class and DeiT today)."""
    chosen: str | None = None
    """Written by ``recipe: auto``: what it chose (budget in tokens per parameter, phase
    lengths, lrs) and from which measurements. Informational."""
    growth: bool = False
    """Let the first phase start above level 1 (progressive growth): the run starts with a
    fresh model at ``phases[0].level``, and an up-transition to a level the run never trained
    uses the de-coalesced model as it is (no saved weights, no interpolation). false: the
    first phase must be at level 1."""

    def length_factor(self, level: int) -> int:
        """k at ``level``: the model runs on S / k pooled positions (``mlsys.length``)."""
        return self.length ** (level - 1)


class ScheduleConfig(_Strict):
    """How the phases' step counts and learning-rate schedules combine
    (``mlsys.train.schedule``)."""

    scale: float = Field(default=1.0, gt=0.0)
    """Multiplies every phase's ``steps`` and ``warmup`` (> 0): steps round up (at least 1),
    warmup to the nearest step (ties to even; at most the phase's steps). Shortens (0.01) or
    lengthens a run without editing its phases."""
    span: Literal["phase", "run"] = "phase"
    """``phase``: every phase warms up over its own ``warmup`` and decays (``train.decay``)
    over its own steps; ``run``: one decay over the run's global steps after phase 0's
    warmup, each phase scaling it by its own ``lr`` and re-warming over its own ``warmup``
    (0: not at all), so a transition neither decays nor re-warms by itself."""


class PhaseConfig(_Strict):
    """One phase: training at one level, on its own engine and learning-rate schedule."""

    level: int = Field(ge=1)
    """The level trained (≥ 1): 1 is the full model, each level above it one coalescing step
    (``vcycle.width``, ``depth``, ``length``) smaller. It differs from the previous phase's by
    exactly 1; the first phase is at level 1 unless ``vcycle.growth``."""
    steps: int = Field(gt=0)
    """Optimizer steps of this phase (> 0), before ``schedule.scale``."""
    lr: float = Field(gt=0.0)
    """Peak learning rate of this phase (> 0), multiplied by the schedule (warmup, then
    ``train.decay``)."""
    warmup: int = Field(default=0, ge=0)
    """Linear warmup steps at the start of this phase (before ``schedule.scale``; the first
    step runs at lr / warmup); 0: none."""


class RunConfig(_Strict):
    """A whole training run. Besides each field's own checks, the sections are checked
    against each other at load: the phases' levels (start at 1 unless ``vcycle.growth``, one
    level per transition), the model's sizes against the deepest level's factors,
    ``data.seq_length`` against the positions, image tokens and length factor, the family's
    support for length levels, and ``data.train_samples`` against what the run consumes."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    """The run's name: letters, digits, ``.``, ``_`` and ``-``, not only dots. Outputs go to
    ``runs/<name>`` unless ``run_dir`` is set; the validation plot is titled by it. May
    change on resume."""
    run_dir: str | None = None
    """The run's output directory (layout: ``mlsys.train.rundir``); null: ``runs/<name>``.
    Not empty or ``.``. Not compared on resume (a run directory may be moved);
    ``launch/train.py --run-dir`` overrides it."""
    model: ModelConfig
    """The level-1 model (required)."""
    data: DataConfig
    """The data (required: at least ``seq_length``)."""
    train: TrainConfig = TrainConfig()
    """Optimisation and bookkeeping."""
    vcycle: VCycleConfig = VCycleConfig()
    """The level transitions."""
    schedule: ScheduleConfig = ScheduleConfig()
    """Step scaling and the schedules' span."""
    phases: list[PhaseConfig] = Field(min_length=1)
    """The phases in order (at least one), each ``{level, steps, lr, warmup}``; the run trains
    them one after the other, with a transition between each two."""

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
        elif self.data.blend is None and \
                (self.data.tokenizer_dir is None) != (self.data.data_prefix is None):
            raise ValueError("data.tokenizer_dir and data.data_prefix: give both, or neither "
                             "(neither: the default corpus is prepared under prepare_dir)")
        elif self.data.prepare_source == "packages-mixed" and self.family.kind != "masked":
            raise ValueError(f"data.prepare_source: packages-mixed is a masked-LM corpus; "
                             f"{m.family} is {self.family.kind} (use packages)")
        elif self.data.seq_length > m.max_position:
            raise ValueError(f"data.seq_length: {self.data.seq_length} exceeds "
                             f"model.max_position {m.max_position}")
        return self

    def _check_image_tokens(self) -> None:
        m, d = self.model, self.data
        if d.tokenizer_dir is not None:
            raise ValueError("data.tokenizer_dir: image data has no tokenizer (set null)")
        if d.blend is not None:
            raise ValueError("data.blend: text corpora only (image data: data_prefix)")
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


def parse_run_config(data: Any, source: str = "<config>", expand: bool = True) -> RunConfig:
    """Validate a mapping; ``ConfigError`` names ``source`` and every bad field. With
    ``vcycle.recipe: auto`` the validated config is expanded into the chosen cycle
    (``mlsys.recipe``) and validated again, unless ``expand`` is false (the config as the
    user wrote it: ``--set`` edits that form)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got "
                          f"{type(data).__name__}")
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source}: invalid run config\n{_format(err)}") from None
    if not expand or cfg.vcycle.recipe != "auto":
        return cfg
    given = {f"{section}.{f}" for section in ("vcycle", "schedule")
             for f in getattr(cfg, section).model_fields_set}
    try:
        chosen = expand_recipe(cfg.model_dump(), given)
    except ValueError as err:
        raise ConfigError(f"{source}: invalid run config\n  {err}") from None
    try:
        return RunConfig.model_validate(chosen)
    except ValidationError as err:
        raise ConfigError(f"{source}: invalid run config (the cycle vcycle.recipe: auto "
                          f"chose)\n{_format(err)}") from None


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
                    source: str = "--set", fields: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """``data`` (a run config as a plain mapping) with each ``PATH=VALUE`` of ``overrides``
    applied in order (a new mapping; see the module docstring). Paths are checked against
    ``fields`` (every field present: ``model_dump()``; default ``data`` itself), so ``data``
    may hold only the fields a config sets (``model_dump(exclude_unset=True)``: a missing
    section is created). ``ConfigError`` naming the path for a malformed override, an
    unknown field or an index out of range; the schema is checked by ``parse_run_config``
    afterwards."""
    import json

    out = json.loads(json.dumps(data))  # a deep copy; tuples become lists
    schema = out if fields is None else json.loads(json.dumps(fields))
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
        node: Any = out  # where the value goes
        ref: Any = schema  # what may be set there
        for i, key in enumerate(keys):
            here, last = ".".join(keys[:i + 1]), i == len(keys) - 1
            parent = ".".join(keys[:i])
            if isinstance(ref, list):
                if not key.lstrip("-").isdigit():
                    raise ConfigError(f"{source} {path}: {parent} is a list; {key!r} is not "
                                      "an index")
                index = int(key)
                if not 0 <= index < len(ref):
                    raise ConfigError(f"{source} {path}: index {index} out of range ({parent} "
                                      f"has {len(ref)} items: 0..{len(ref) - 1})")
                if last:
                    node[index] = value
                else:
                    node, ref = node[index], ref[index]
            elif isinstance(ref, dict):
                if key not in ref and not (last and parent in FREE_FORM):
                    known = ", ".join(sorted(ref)) or "none"
                    raise ConfigError(f"{source} {path}: unknown field {here} (the fields of "
                                      f"{parent or 'the run config'}: {known})")
                if last:
                    node[key] = value
                else:
                    if key not in node:  # a section the config leaves at its defaults
                        node[key] = {} if isinstance(ref[key], dict) else \
                            json.loads(json.dumps(ref[key]))
                    node, ref = node[key], ref[key]
            else:
                raise ConfigError(f"{source} {path}: {parent} is a value "
                                  f"({ref!r}), not a section or list")
    return out


def load_run_config(path: str | Path, expand: bool = True) -> RunConfig:
    """Read and validate a YAML run config (``ConfigError`` on any problem, naming the file;
    ``expand``: as ``parse_run_config``)."""
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
    return parse_run_config(data, str(path), expand)
