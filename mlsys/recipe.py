"""``vcycle.recipe: auto``: the family's measured best V-cycle, chosen from the budget.

A run config that asks for it gives one level-1 phase, the baseline the cycle replaces::

    vcycle: {recipe: auto}
    phases: [{level: 1, steps: 2000, lr: 2.0e-3, warmup: 50}]   # the budget B, its lr

``expand_recipe`` turns that into the cycle the family's ``Recipe`` (``mlsys/families/``; of
several, the one measured on the model size nearest to this one's in log, sizes counted as the
weights of the layers' linear maps) gives at this budget: its ``vcycle`` fields and the point's
``shape``, ``schedule.span: run`` (one schedule over the whole cycle, ``train.decay`` as the
config says), and three phases, level 1 for ``first`` × B steps (the baseline's warmup), level
2 for ``small`` × B, level 1 for ``last`` × B (each re-warming over ``rewarm`` × B), at the
baseline's lr times the point's ``lr`` (level 2 times ``small_lr`` again). The budget is read
as tokens per parameter, B × global_batch_size × seq_length / ``parameters``; between two
measured points of the same shape every number is interpolated linearly in log(tokens per
parameter), between two of different shapes (a cycle with a length level above one without) the
point nearer in log budget is taken whole, outside them the nearest point is taken; from the
geometric mean of the last point's budget and a ``no_saving`` budget (where the cycle was
measured to cost more than the baseline) up, the baseline is kept as given, one level-1 phase.
The result says ``vcycle.recipe: chosen`` and, in ``vcycle.chosen``, what was chosen and from
which measurements, so it validates as itself (a run's ``run_config.json``).

Pure functions on plain mappings (a validated ``RunConfig.model_dump()``); ``ValueError``
names the field.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from mlsys.families import get_family
from mlsys.families.base import Family, Recipe, RecipePoint


def vocabulary(data: dict[str, Any]) -> int:
    """The vocabulary the parameter count reads: ``model.vocab_size``, else the default
    corpus's ``data.prepare_vocab_size``; ``ValueError`` where only the tokenizer knows it."""
    model, d = data["model"], data["data"]
    if model.get("vocab_size") is not None:
        return int(model["vocab_size"])
    if d.get("tokenizer_dir") is None and d.get("data_prefix") is None and not d.get("blend"):
        return int(d["prepare_vocab_size"])
    raise ValueError("model.vocab_size: vcycle.recipe: auto reads the budget as tokens per "
                     "parameter; with your own tokenizer set model.vocab_size to its vocabulary")


def layer_weights(model: dict[str, Any], family: Family) -> int:
    """Weights of the linear maps of the layers the model section describes (attention and
    feed-forward; embeddings, heads, biases and norms left out): the size a ``Recipe`` is
    keyed by (cpu-small's 4 × 128 models: 786,432)."""
    h, heads = model["hidden_size"], model["num_heads"]
    extra = model.get("extra") or {}
    f = family.fields
    head_dim = extra.get(f.head_dim) if f.head_dim else None
    head_dim = head_dim or h // heads
    kv_heads = (extra.get(f.kv_heads) if f.kv_heads else None) or heads
    ffn = model.get("ffn_size") or (f.ffn_default_multiple or 4) * h
    q, kv = heads * head_dim, kv_heads * head_dim
    return model["num_layers"] * (2 * h * q + 2 * h * kv + family.ffn_maps * h * ffn)


def parameters(model: dict[str, Any], family: Family, vocab: int, seq_length: int) -> int:
    """Weights of the model the section describes: every linear map of the layers, the
    token embedding (a tied LM head once; none for a classifier), a head transform, the
    patch embedding and the learned position table. Biases and norms are left out (0.5 % of
    GPT-2 at ``cpu-small``: 1,327,104 of 1,334,016; 1.0 % of its ViT)."""
    h, extra = model["hidden_size"], model.get("extra") or {}
    n = layer_weights(model, family)
    n += vocab * h if family.lm_head else 0
    n += h * h if family.head_transform else 0
    if family.patch_embedding:
        n += extra.get("num_channels", 3) * extra["patch_size"] ** 2 * h
    if any(any("pos" in a.spaces for a in axes) for axes in family.globals.values()):
        n += (seq_length if family.kind == "vision" else model["max_position"]) * h
    return n


def budget_tokens_per_param(data: dict[str, Any], steps: int) -> tuple[float, int]:
    """(``steps`` of ``data``'s batch in tokens per parameter, the parameters counted)."""
    family = get_family(data["model"]["family"])
    seq = data["data"]["seq_length"]
    n = parameters(data["model"], family, vocabulary(data) if family.lm_head else 0, seq)
    return steps * data["train"]["global_batch_size"] * seq / n, n


def recipe_for(family: Family, weights: int) -> tuple[Recipe, str]:
    """The family's recipe for a model with ``weights`` in its layers' linear maps: the one
    measured on the size nearest in log (the switch between two measured sizes sits at their
    geometric mean), and how it was chosen."""
    recipe = min(family.recipes, key=lambda r: abs(math.log(weights / r.layer_weights)))
    how = f"the recipe measured on a model of {recipe.layer_weights:,} layer weights"
    if len(family.recipes) > 1:
        sizes = ", ".join(f"{r.layer_weights:,}" for r in family.recipes)
        how += f", the nearest in log size of those measured ({sizes})"
    return recipe, how


def _mix(a: float, b: float, t: float) -> float:
    return a + (b - a) * t


def point_at(recipe: Recipe, tokens_per_param: float) -> tuple[RecipePoint, str]:
    """The recipe's numbers at this budget, and how they were found (the measured points
    read)."""
    lo, hi = recipe.points[0], recipe.points[-1]
    if not lo.tokens_per_param < tokens_per_param < hi.tokens_per_param:
        p = lo if tokens_per_param <= lo.tokens_per_param else hi
        return p, f"the point measured at {p.tokens_per_param:g} tokens/param ({p.source})"
    i = next(i for i, p in enumerate(recipe.points) if p.tokens_per_param > tokens_per_param)
    a, b = recipe.points[i - 1], recipe.points[i]
    t = (math.log(tokens_per_param) - math.log(a.tokens_per_param)) / \
        (math.log(b.tokens_per_param) - math.log(a.tokens_per_param))
    if a.shape != b.shape:  # two cycles, not one to interpolate: the nearer, whole
        p, other = (a, b) if t < 0.5 else (b, a)
        return p, (f"the point measured at {p.tokens_per_param:g} tokens/param ({p.source}), "
                   f"nearer in log budget than the one at {other.tokens_per_param:g}, whose "
                   "cycle has another shape")
    numbers = ("first", "small", "last", "lr", "small_lr")
    mixed = RecipePoint(tokens_per_param, *(_mix(getattr(a, k), getattr(b, k), t)
                                            for k in numbers),
                        source=f"{a.source}; {b.source}", rewarm=_mix(a.rewarm, b.rewarm, t),
                        shape=a.shape)
    return mixed, (f"interpolated between the points measured at {a.tokens_per_param:g} and "
                   f"{b.tokens_per_param:g} tokens/param ({a.source}; {b.source})")


def no_cycle_from(recipe: Recipe) -> float:
    """The budget (tokens per parameter) from which ``auto`` keeps the baseline: the
    geometric mean of the last measured point's and the ``no_saving`` budget (infinite
    without one)."""
    if recipe.no_saving is None:
        return math.inf
    return math.sqrt(recipe.points[-1].tokens_per_param * recipe.no_saving.tokens_per_param)


def _check_given(data: dict[str, Any], vcycle: dict[str, Any], given: set[str]) -> None:
    """A field the recipe sets (``vcycle``: its fields at the chosen point) may only be given
    (``given``: dotted names the config sets) with the recipe's own value."""
    for key, value in [*(("vcycle." + k, v) for k, v in vcycle.items()),
                       ("schedule.span", "run")]:
        section, field = key.split(".")
        if key in given and data[section][field] != value:
            raise ValueError(f"{key}: {data[section][field]!r}, but vcycle.recipe: auto sets "
                             f"it to {value!r} (remove it, or write the phases with recipe: "
                             "none)")


def expand_recipe(data: dict[str, Any], given: set[str]) -> dict[str, Any]:
    """``data`` (a validated config, every field present) with ``vcycle.recipe: auto``
    replaced by the chosen cycle (see the module docstring); any other config is returned as
    it is. ``given``: the dotted ``vcycle.*`` and ``schedule.*`` fields the config itself sets
    (a field the recipe sets may only be given with the recipe's own value)."""
    if data.get("vcycle", {}).get("recipe") != "auto":
        return data
    family = get_family(data["model"]["family"])
    if not family.recipes:
        raise ValueError(f"vcycle.recipe: auto: no V-cycle has been measured for the "
                         f"{family.name} family yet (write the phases, recipe: none)")
    phases = data["phases"]
    if len(phases) != 1 or phases[0]["level"] != 1:
        got = ", ".join(f"level {p['level']}" for p in phases)
        raise ValueError("phases: vcycle.recipe: auto takes one level-1 phase, the baseline "
                         f"the cycle replaces (its steps are the budget); got {got}")
    d = data["data"]
    budget, lr, warmup = phases[0]["steps"], phases[0]["lr"], phases[0]["warmup"]
    per_param, n = budget_tokens_per_param(data, budget)
    weights = layer_weights(data["model"], family)
    recipe, size_how = recipe_for(family, weights)
    model_words = (f"{family.name} at {per_param:.3g} tokens/param ({budget} steps x "
                   f"{data['train']['global_batch_size']} x {d['seq_length']} tokens, {n:,} "
                   f"parameters, {weights:,} in the layers' linear maps)")
    ns, start = recipe.no_saving, no_cycle_from(recipe)
    if ns is not None and per_param >= start:
        _check_given(data, recipe.vcycle, given)
        out = copy.deepcopy(data)
        out["vcycle"] = {**out["vcycle"], "recipe": "chosen", "chosen": (
            f"{model_words}: no V-cycle, the baseline as given (from {start:.3g} tokens/param "
            f"up; at {ns.tokens_per_param:g} the cycle was measured to cost more: "
            f"{ns.measured}, {ns.source}; {size_how})")}
        return out
    point, how = point_at(recipe, per_param)
    vcycle = {**recipe.vcycle, **point.shape}
    _check_given(data, vcycle, given)
    rewarm = max(1, round(point.rewarm * budget))
    level1_lr = lr * point.lr
    steps = [max(1, round(f * budget)) for f in (point.first, point.small, point.last)]
    out = copy.deepcopy(data)
    out["vcycle"] = {**out["vcycle"], **vcycle, "recipe": "chosen"}
    out["schedule"] = {**out.get("schedule", {}), "span": "run"}
    out["phases"] = [
        {"level": 1, "steps": steps[0], "lr": level1_lr, "warmup": min(warmup, steps[0])},
        {"level": 2, "steps": steps[1], "lr": level1_lr * point.small_lr, "warmup": rewarm},
        {"level": 1, "steps": steps[2], "lr": level1_lr, "warmup": rewarm},
    ]
    out["vcycle"]["chosen"] = (
        f"{model_words}: level 2 {_shape_words(vcycle)}, "
        f"levels 1/2/1 for {steps[0]}/{steps[1]}/{steps[2]} steps "
        f"({point.first:.4g}/{point.small:.4g}/{point.last:.4g} of the budget), level-1 lr "
        f"{point.lr:.3g}x the baseline's {lr:g}, level 2 at {point.small_lr:.3g}x that; "
        f"from {how}; {size_how}")
    return out


def _shape_words(vcycle: dict[str, Any]) -> str:
    """What level 2 coalesces, in words (``with width / 2, depth / 2, length / 2``)."""
    factors = {k: vcycle.get(k, 1) for k in ("width", "depth", "length")}
    parts = [f"{k} / {f:g}" for k, f in factors.items() if f != 1]
    return "with " + ", ".join(parts) if parts else "as level 1"
