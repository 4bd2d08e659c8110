"""``vcycle.recipe: auto`` (mlsys/recipe.py): the family's measured best V-cycle chosen from
the budget. At a measured budget it is the run that was measured; between two it
interpolates in log(tokens per parameter); the chosen config validates as itself; what it
cannot decide is an error naming the field."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from launch.train import validate
from mlsys.bench.profile import load_profile, run_configs
from mlsys.config import ConfigError, load_run_config, parse_run_config
from mlsys.families import get_family
from mlsys.families.base import NoSaving, Recipe, RecipePoint
from mlsys.recipe import (
    budget_tokens_per_param,
    layer_weights,
    no_cycle_from,
    parameters,
    point_at,
)

ROOT = Path(__file__).resolve().parents[1]
ZERO1 = str(ROOT / "configs/ds/zero1.json")
CHOSEN = ("scheme", "alpha", "width", "depth", "length", "depth_mapping", "optimizer", "noise",
          "interpolation")


@pytest.mark.parametrize("profile, family, run, budget, baseline_lr", [
    # cpu-budget at 2000 steps: the best baseline (wsd) and the best cycle both at 2e-3
    ("cpu-budget-gpt", "gpt", "gpt-ls-b2000-lr2e-3", 2000, 2.0e-3),
    # cpu-size-gpt (6 x 192: its own recipe) at 5000 steps: the target at 1e-3, the width,
    # depth and length cycle at 2e-3
    ("cpu-size-gpt", "gpt", "gpt-lwd1x-lr2e-3", 5000, 1.0e-3),
    # ... and at 17000 steps (10 tokens/param), from the same point: what the size axis there
    # measures
    ("cpu-size-gpt", "gpt", "gpt-lwd1x-b17000-lr2e-3", 17000, 1.0e-3),
    # cpu-budget-bert at 2000 steps: the target and the compound (depth + length) cycle both
    # at 1e-3, its last phase cut to 1070 steps
    ("cpu-budget-bert", "bert", "bert-ld-b2000-cut-lr1e-3-s1070", 2000, 1.0e-3),
    # ... and at 6500 and 13500 steps (10 and 20.4 tokens/param), the same cycle scaled
    ("cpu-budget-bert", "bert", "bert-ld-b6500-cut-lr1e-3-s3478", 6500, 1.0e-3),
    ("cpu-budget-bert", "bert", "bert-ld-b13500-cut-lr1e-3-s7222", 13500, 1.0e-3),
    # cpu-small: the baseline best at 5e-4, depth only at 2.5e-4, last phase cut to 1125 steps
    ("cpu-small", "vit", "depth-wsd-budget-lr2.5e-4-s1125", 2000, 5.0e-4),
])
def test_auto_at_the_measured_budget_is_the_measured_run(profile, family, run, budget,
                                                          baseline_lr):
    """The family's baseline of that budget with ``vcycle.recipe: auto`` is the benchmark run
    the recipe's point was measured on: phases, lrs, transition and schedule."""
    configs = run_configs(load_profile(profile, ROOT), family, Path("unused"))
    raw = {k: v for k, v in copy.deepcopy(configs[run]).items() if k != "fork"}
    measured = parse_run_config(raw).model_dump()
    raw["vcycle"], raw["schedule"] = {"recipe": "auto"}, {"scale": 1.0}
    raw["phases"] = [{"level": 1, "steps": budget, "lr": baseline_lr, "warmup": 50}]
    auto = parse_run_config(raw).model_dump()
    assert auto["phases"] == measured["phases"]
    assert {k: auto["vcycle"][k] for k in CHOSEN} == {k: measured["vcycle"][k] for k in CHOSEN}
    assert auto["schedule"] == measured["schedule"] and auto["schedule"]["span"] == "run"
    assert auto["train"] == measured["train"]
    assert auto["vcycle"]["recipe"] == "chosen"
    assert re.sub(r"-b\d+$", "", run.split("-lr")[0]) in auto["vcycle"]["chosen"]


@pytest.mark.parametrize("family, size, profile, budget", [
    ("gpt", 0, "cpu-small", 2000), ("gpt", 1, "cpu-size-gpt", 5000),
    ("bert", 0, "cpu-small", 2000), ("vit", 0, "cpu-small", 2000)])
def test_each_measured_point_is_at_the_budget_the_parameter_count_gives(family, size, profile,
                                                                       budget):
    """A recipe's size is what ``layer_weights`` counts for the model it was measured on, and
    its first point's tokens per parameter what ``parameters`` counts there (the profile's
    shape, ``budget`` steps of 16 sequences)."""
    section = load_profile(profile, ROOT).families[family]
    model = {"max_position": 512, "ffn_size": None, "extra": {}, **section["model"]}
    seq = section["data"]["seq_length"]
    f = get_family(family)
    n = parameters(model, f, 4096 if f.lm_head else 0, seq)
    recipe = f.recipes[size]
    assert recipe.points[0].tokens_per_param == pytest.approx(budget * 16 * seq / n, rel=2e-3)
    assert recipe.layer_weights == layer_weights(model, f)


@pytest.mark.parametrize("family", ["gpt", "bert", "llama", "vit"])
def test_parameter_count_is_within_1_5_percent_of_the_built_model(family):
    import torch

    from mlsys.models import hf_config, model_class

    kind = "vcycle" if family == "vit" else "baseline"  # (no tiny ViT baseline)
    cfg = load_run_config(ROOT / f"configs/tiny-{family}-{kind}.yaml")
    vocab = 10 if family == "vit" else 4096
    hf = hf_config(cfg.model, vocab)
    with torch.device("meta"):
        model = model_class(hf)(hf)
    built = sum(p.numel() for p in model.parameters())  # a tied weight once
    estimate = parameters(cfg.model.model_dump(), cfg.family, 0 if family == "vit" else vocab,
                          cfg.data.seq_length)
    assert abs(estimate - built) / built < 0.015, (estimate, built)  # biases, norms


def test_between_two_points_every_number_is_interpolated_in_log_budget():
    a = RecipePoint(1.0, first=0.1, small=0.4, last=0.8, lr=1.0, small_lr=2.0, source="a")
    b = RecipePoint(100.0, first=0.3, small=0.8, last=0.4, lr=0.5, small_lr=1.0, source="b")
    recipe = Recipe(vcycle={}, points=(a, b), layer_weights=1)
    mid, how = point_at(recipe, 10.0)  # halfway in log
    assert (mid.first, mid.small, mid.last, mid.lr, mid.small_lr) == pytest.approx(
        (0.2, 0.6, 0.6, 0.75, 1.5))
    assert "interpolated" in how
    assert point_at(recipe, 0.5)[0] is a and point_at(recipe, 1000.0)[0] is b
    with pytest.raises(ValueError, match="increasing"):
        Recipe(vcycle={}, points=(b, a), layer_weights=1)


def test_between_points_of_different_shapes_the_nearer_is_taken_whole():
    """A cycle with a length level and one without are two cycles: no number is mixed
    across them; the point nearer in log budget is taken, shape, numbers and warmup."""
    a = RecipePoint(1.0, first=0.1, small=0.4, last=0.8, lr=1.0, small_lr=2.0, source="a")
    b = RecipePoint(100.0, first=0.3, small=0.8, last=0.4, lr=0.5, small_lr=1.0, source="b",
                    rewarm=0.002, shape={"length": 2})
    recipe = Recipe(vcycle={"width": 2}, points=(a, b), layer_weights=1)
    assert point_at(recipe, 9.9)[0] is a and point_at(recipe, 10.1)[0] is b
    assert "another shape" in point_at(recipe, 9.9)[1]
    c = RecipePoint(1000.0, first=0.1, small=0.2, last=0.9, lr=1.0, small_lr=1.0, source="c",
                    rewarm=0.004, shape={"length": 2})
    mid, how = point_at(Recipe(vcycle={"width": 2}, points=(a, b, c), layer_weights=1),
                        10 ** 2.5)
    assert (mid.first, mid.small, mid.rewarm) == pytest.approx((0.2, 0.5, 0.003))
    assert mid.shape == {"length": 2}
    assert "interpolated" in how


def test_a_points_shape_and_warmup_reach_the_chosen_config(monkeypatch):
    """At a point with a ``shape``, ``auto`` writes it into ``vcycle`` beside the recipe's
    own fields, re-warms over the point's ``rewarm`` × B and says what level 2 coalesces;
    giving a field the point sets with another value is refused, naming it."""
    import dataclasses

    import mlsys.recipe

    gpt = get_family("gpt")
    measured = gpt.recipes[0]
    point = RecipePoint(measured.points[0].tokens_per_param, first=0.05, small=0.5,
                        last=0.75, lr=1.0, small_lr=1.0, source="p", rewarm=0.004,
                        shape={"length": 2})
    family = dataclasses.replace(
        gpt, recipes=(dataclasses.replace(measured, points=(point,), no_saving=None),))
    monkeypatch.setattr(mlsys.recipe, "get_family", lambda name: family)
    raw = yaml.safe_load((ROOT / "configs/tiny-gpt-vcycle.yaml").read_text())
    raw["phases"][0]["steps"] = 5000
    cfg = parse_run_config(raw)
    assert [(p.level, p.steps, p.warmup) for p in cfg.phases] == \
        [(1, 250, raw["phases"][0]["warmup"]), (2, 2500, 20), (1, 3750, 20)]
    assert (cfg.vcycle.width, cfg.vcycle.depth, cfg.vcycle.length) == (2, 2, 2)
    assert "level 2 with width / 2, depth / 2, length / 2" in cfg.vcycle.chosen
    raw["vcycle"]["length"] = 1
    with pytest.raises(ValueError, match="vcycle.length: 1, but vcycle.recipe: auto sets it to 2"):
        parse_run_config(raw)


def test_a_model_gets_the_recipe_measured_nearest_its_size():
    """GPT-2's recipes were measured at two sizes (4 × 128 and 6 × 192); ``auto`` takes the
    one nearer in log(layer weights), so the switch sits at their geometric mean (1,444,768,
    between 6 and 8 layers of 128), and the chosen words name both sizes. Recipes out of size
    order are refused, naming the field."""
    import dataclasses

    gpt = get_family("gpt")
    small, big = gpt.recipes
    raw = yaml.safe_load((ROOT / "configs/tiny-gpt-vcycle.yaml").read_text())
    raw["phases"][0]["steps"] = 1000
    for layers, recipe in [(4, small), (6, small), (8, big), (48, big)]:
        vcycle = parse_run_config({**raw, "model": {**raw["model"], "num_layers": layers}}).vcycle
        assert vcycle.length == recipe.vcycle["length"], layers
        assert f"measured on a model of {recipe.layer_weights:,} layer weights, the nearest" \
            in vcycle.chosen
        assert f"{layers * 196_608:,} in the layers' linear maps" in vcycle.chosen
    assert small.vcycle["length"] == 1 and big.vcycle["length"] == 2
    with pytest.raises(ValueError, match="recipes: gpt's, by strictly increasing"):
        dataclasses.replace(gpt, recipes=(big, small))


def test_the_chosen_config_validates_as_itself_and_resumes_as_written():
    cfg = load_run_config(ROOT / "configs/tiny-gpt-vcycle.yaml")
    assert [p.level for p in cfg.phases] == [1, 2, 1] and cfg.vcycle.recipe == "chosen"
    assert parse_run_config(cfg.model_dump()) == cfg


def test_towards_a_budget_where_the_cycle_cost_more_auto_keeps_the_baseline():
    """GPT-2's cycle saved at 3.09 tokens/param and cost more at 10: from their geometric
    mean (5.56) up, ``auto`` trains the baseline as given (one phase, its own lr and warmup)
    and says why; just below, the cycle of the nearest point."""
    recipe = get_family("gpt").recipes[0]  # cpu-small's size, the tiny config's
    start = no_cycle_from(recipe)
    assert start == pytest.approx((3.09 * 10.0) ** 0.5)
    raw = yaml.safe_load((ROOT / "configs/tiny-gpt-vcycle.yaml").read_text())
    per_step = budget_tokens_per_param(parse_run_config(raw, expand=False).model_dump(), 1)[0]
    below, above = int(start / per_step), int(start / per_step) + 1
    raw["phases"][0]["steps"] = below
    assert [p.level for p in parse_run_config(raw).phases] == [1, 2, 1]
    raw["phases"][0]["steps"] = above
    cfg = parse_run_config(raw)
    assert [p.model_dump() for p in cfg.phases] == \
        [{**cfg.phases[0].model_dump(), "level": 1, "steps": above, "lr": 2.0e-3, "warmup": 20}]
    assert cfg.vcycle.recipe == "chosen" and cfg.schedule.span == "phase"
    assert "no V-cycle, the baseline as given" in cfg.vcycle.chosen
    assert "gpt-vc-b6500-lr2e-3" in cfg.vcycle.chosen
    assert parse_run_config(cfg.model_dump()) == cfg
    point = RecipePoint(3.0, first=0.1, small=0.4, last=0.8, lr=1.0, small_lr=2.0, source="a")
    with pytest.raises(ValueError, match="no_saving: its budget must be above"):
        Recipe(vcycle={}, points=(point,), layer_weights=1,
               no_saving=NoSaving(3.0, measured="x", source="y"))


def test_set_edits_the_budget_as_written(tmp_path):
    """``--set phases.0.steps=1000`` on an auto config changes the budget: the cycle is
    chosen again for 1000 steps (5 / 80 / 60 % for GPT-2)."""
    cfg, _ = validate(str(ROOT / "configs/tiny-gpt-vcycle.yaml"), ZERO1, 1,
                      overrides=["phases.0.steps=1000"])
    assert [p.steps for p in cfg.phases] == [50, 800, 600]


def _tiny(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load((ROOT / "configs/tiny-gpt-vcycle.yaml").read_text())
    edit(data)
    path = tmp_path / "auto.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["phases"].append({"level": 2, "steps": 10, "lr": 1e-3}), "phases"),
    (lambda d: d["vcycle"].update(width=1), "vcycle.width"),
    (lambda d: d["vcycle"].update(alpha=0.8), "vcycle.alpha"),  # the default, given: refused
    (lambda d: d.update(schedule={"span": "phase"}), "schedule.span"),
    (lambda d: d["data"].update(tokenizer_dir="tok", data_prefix="corpus"), "model.vocab_size"),
    (lambda d: d["model"].update(family="llama", extra={"num_key_value_heads": 2}),
     "vcycle.recipe"),
])
def test_what_auto_cannot_decide_is_an_error_naming_the_field(tmp_path, edit, field):
    path = _tiny(tmp_path, edit)
    with pytest.raises(ConfigError, match=rf"auto\.yaml: invalid run config\n  {field}"):
        load_run_config(path)


def test_set_cannot_give_a_field_the_recipe_sets():
    with pytest.raises(ConfigError, match="vcycle.depth_mapping: 'copy', but vcycle.recipe"):
        validate(str(ROOT / "configs/tiny-gpt-vcycle.yaml"), ZERO1, 1,
                 overrides=["vcycle.depth_mapping=copy"])
    cfg, _ = validate(str(ROOT / "configs/tiny-gpt-vcycle.yaml"), ZERO1, 1,
                      overrides=["vcycle.noise=0.001", "train.seed=3"])  # the recipe's own
    assert cfg.train.seed == 3 and cfg.vcycle.recipe == "chosen"


def test_the_benchmark_sees_the_cycle_auto_chose(tmp_path):
    """A profile's auto run is analysed as the cycle it is (levels, phases, lrs, what it
    chose), not as the one-level baseline it was written as: cpu-size-gpt with an auto entry
    is the length cycle measured there."""
    profile = yaml.safe_load((ROOT / "configs/bench/cpu-size-gpt.yaml").read_text())
    profile["runs"] = {"auto": {"vcycle": {"recipe": "auto"},
                                "train": {"decay": "wsd", "decay_fraction": 0.2},
                                "phases": [{"level": 1, "steps": 5000, "lr": 1.0e-3,
                                            "warmup": 50}],
                                "sweep": {"lr": [1.0e-3]}}}
    profile.pop("seeds")
    (tmp_path / "configs/bench").mkdir(parents=True)
    (tmp_path / "configs/bench/size-auto.yaml").write_text(yaml.safe_dump(profile))
    configs = run_configs(load_profile("size-auto", tmp_path), "gpt", Path("unused"))
    auto = configs["auto-lr1e-3"]
    assert [(p["level"], p["steps"], p["lr"]) for p in auto["phases"]] == \
        [(1, 250, 2.0e-3), (2, 2500, 2.0e-3), (1, 3750, 2.0e-3)]
    assert (auto["vcycle"]["width"], auto["vcycle"]["depth"], auto["vcycle"]["length"]) == \
        (2, 2, 2)
    assert auto["vcycle"]["recipe"] == "chosen" and "gpt-lwd1x" in auto["vcycle"]["chosen"]


def test_the_words_of_what_auto_chose_are_not_a_config_change():
    from mlsys.train.resume import config_changes

    cfg = load_run_config(ROOT / "configs/tiny-gpt-vcycle.yaml")
    stored = cfg.model_dump()
    stored["vcycle"]["chosen"] = "the same cycle, described by an older version"
    assert config_changes(stored, cfg, "run_config.json") == {}
    stored["phases"][1]["steps"] += 1
    assert list(config_changes(stored, cfg, "run_config.json")) == ["phases.1.steps"]
