"""Benchmark profiles: every shipped profile parses into valid run configs; ``extends`` and
``fork`` resolve to the steps the runs will really take; a bad profile names its field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mlsys.bench.profile import (
    Seeds,
    is_variant,
    load_profile,
    run_configs,
    seed_of,
    without_seed,
)
from mlsys.bench.runner import BOOKKEEPING, _same_config, select_runs
from mlsys.config import ConfigError, parse_run_config
from mlsys.train.rundir import RunDir

ROOT = Path(__file__).parents[1]
PROFILES = sorted(p.stem for p in (ROOT / "configs/bench").glob("*.yaml")
                  if p.stem != "transitions")


@pytest.mark.parametrize("name", PROFILES)
def test_every_run_of_every_profile_is_a_valid_config(name, tmp_path):
    profile = load_profile(name, ROOT)
    for family in profile.families:
        for run, cfg in run_configs(profile, family, tmp_path).items():
            cfg = dict(cfg)
            fork = cfg.pop("fork", None)
            parsed = parse_run_config(cfg, source=f"{name}/{family}/{run}")
            if fork:  # the source keeps a checkpoint exactly at the fork step
                source = run_configs(profile, family, tmp_path)[fork["from"]]
                assert fork["step"] % source["train"]["checkpoint_every"] == 0
                assert [p.level for p in parsed.phases[:2]] == [
                    p["level"] for p in source["phases"][:2]]


@pytest.mark.parametrize("scale, step", [(1.0, 1100), (0.05, 55), (0.013, 15)])
def test_extends_and_fork_step(scale, step, tmp_path):
    base = load_profile("cpu-small-untuned", ROOT)
    ablation = load_profile("cpu-small-ablation", ROOT)
    assert list(ablation.runs)[:len(base.runs)] == list(base.runs)
    assert ablation.families == base.families
    cfgs = run_configs(ablation, "gpt", tmp_path, scale=scale)
    assert cfgs["id-width0.5"]["fork"] == {"from": "vcycle2-gentle", "step": step}
    source = parse_run_config(cfgs["vcycle2-gentle"], source="gentle")
    assert sum(source.phase_steps(i)[0] for i in range(2)) == step
    assert source.train.checkpoint_every == step  # made to keep the fork's checkpoint
    assert source.train.keep_checkpoints > source.total_steps // step + 2  # and every later one


@pytest.mark.parametrize("text, field", [
    ("ds_config: x.json\nfamilies: {}\nruns: {b: {}}\n", "families"),
    ("ds_config: x.json\nranks: 0\nfamilies: {g: {}}\nruns: {b: {}}\n", "ranks"),
    ("ds_config: x.json\nfamilies: {g: {}}\nruns: {b: {}}\nwindw: 3\n", "windw"),
    ("ds_config: x.json\nfamilies: {g: {}}\nruns:\n  a: {fork: {from: b, after_phase: 0},"
     " phases: [1, 2]}\n  b: {}\n", "runs.a.fork.from"),
    ("ds_config: x.json\nfamilies: {g: {}}\nruns:\n  b: {}\n  a: {fork: {from: b, after_phase: 1},"
     " phases: [1, 2]}\n", "runs.a.fork.after_phase"),
    ("ds_config: x.json\nfamilies: {g: {}}\nruns:\n  b: {}\n  a: {fork: {from: b, after_phase: 0,"
     " source_end: true}, phases: [1, 2]}\n", "runs.a.fork: give exactly one"),
    ("ds_config: x.json\nbudget: 0\nfamilies: {g: {}}\nruns: {b: {}}\n", "budget"),
])
def test_a_bad_profile_names_the_file_and_field(text, field, tmp_path):
    (tmp_path / "configs" / "bench").mkdir(parents=True)
    (tmp_path / "configs" / "bench" / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError, match=rf"bad\.yaml(.|\n)*{field}"):
        load_profile("bad", tmp_path)


def test_a_run_stored_before_a_new_default_still_resumes(tmp_path):
    """A run config stored without a field added since (with its default) is the same run;
    a changed value is not (the runner would start over instead of resuming)."""
    profile = load_profile("cpu-small", ROOT)
    cfg = dict(run_configs(profile, "gpt", tmp_path)["baseline-lr4e-3"])
    cfg.pop("fork", None)
    run = RunDir(cfg["run_dir"])
    run.root.mkdir(parents=True)
    stored = parse_run_config(cfg, source="x").model_dump(mode="json")
    del stored["train"]["log_every"]  # as written by a version without the field
    run.run_config.write_text(json.dumps(stored))
    assert _same_config(cfg, run)
    stored["train"].update(checkpoint_every=1100, keep_checkpoints=9)  # a fork added since
    run.run_config.write_text(json.dumps(stored))
    assert _same_config(cfg, run)
    stored["phases"][0]["lr"] = 123.0
    run.run_config.write_text(json.dumps(stored))
    assert not _same_config(cfg, run)
    run.run_config.write_text("{not json")
    assert not _same_config(cfg, run)


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_a_run_keeps_its_schedule_section(scale, tmp_path):
    """``schedule.scale`` is added to a run's own schedule section, never replaces it (a
    ``span: run`` V-cycle once ran with per-phase schedules this way)."""
    cfgs = run_configs(load_profile("cpu-small", ROOT), "gpt", tmp_path, scale=scale)
    spans = {}
    for name, cfg in cfgs.items():
        cfg = {k: v for k, v in cfg.items() if k != "fork"}
        parsed = parse_run_config(cfg, source=name)
        assert parsed.schedule.scale == scale
        spans[name] = parsed.schedule.span
    assert spans["vcycle2-wsd-lr4e-3"] == "run" and spans["growth-wsd-lr4e-3"] == "run"
    assert spans["vcycle2-wsdphase-lr4e-3"] == "phase" and spans["baseline-lr4e-3"] == "phase"


def test_a_step_sweep_sets_the_last_phase_and_forks_after_the_small_phase(tmp_path):
    """``sweep.steps`` on a V-cycle sets its last phase's length: the same cycle at smaller
    budgets, branched from the full cycle's checkpoint after the up-transition."""
    cfgs = run_configs(load_profile("cpu-small", ROOT), "gpt", tmp_path)
    full = cfgs["vcycle2-wsd-lr4e-3"]
    for steps in (625, 1125):
        short = cfgs[f"vcycle2-wsd-budget-lr4e-3-s{steps}"]
        assert [p["steps"] for p in short["phases"]] == [100, 1000, steps]
        assert [p["lr"] for p in short["phases"]] == [p["lr"] for p in full["phases"]]
        assert short["fork"] == {"from": "vcycle2-wsd-lr4e-3", "step": 1100}
        parsed = parse_run_config({k: v for k, v in short.items() if k != "fork"}, source="s")
        assert parsed.schedule.span == "run" and parsed.total_steps == 1100 + steps
    assert [p["steps"] for p in cfgs["wsd-lr4e-3-s500"]["phases"]] == [500]


def test_runs_are_chosen_by_full_name_or_by_profile_entry(tmp_path):
    """``--runs wsd`` is every sweep point of the ``wsd`` entry (not ``wsd``-prefixed entries
    of other names); a full name picks one run; a name that matches nothing is an error."""
    cfgs = run_configs(load_profile("cpu-small", ROOT), "gpt", tmp_path)
    chosen = select_runs(cfgs, ["vcycle2-wsd", "stable-lr1e-3"])
    assert sorted(chosen) == ["stable-lr1e-3"] + [f"vcycle2-wsd-lr{t}" for t in
                                                   ("1e-3", "2e-3", "4e-3", "8e-3")]
    assert len(select_runs(cfgs, ["wsd"])) == 16  # not wsd-long's points
    assert sorted(select_runs(cfgs, ["stable-long"])) == ["stable-long-lr2e-3",
                                                          "stable-long-lr4e-3"]
    with pytest.raises(ConfigError, match="--runs: vcycle9"):
        select_runs(cfgs, ["vcycle9"])
    # an entry named like a sweep point's prefix is not one of its points
    assert not is_variant("x-small-lr1e-3", "x") and is_variant("x-lr2.5e-4-s500", "x")


def test_a_trunk_extended_from_its_end_feeds_forks_beyond_the_budget(tmp_path):
    """``fork.source_end``: ``stable-long`` starts from ``stable``'s last step (which the
    source keeps) and trains on at the same constant lr; ``wsd-long`` decays from it."""
    cfgs = run_configs(load_profile("cpu-small", ROOT), "bert", tmp_path)
    trunk, longer = cfgs["stable-lr5e-4"], cfgs["stable-long-lr5e-4"]
    assert longer["fork"] == {"from": "stable-lr5e-4", "step": 1600}
    assert 1600 % trunk["train"]["checkpoint_every"] == 0
    assert longer["phases"] == [{**trunk["phases"][0], "steps": 2400}]
    assert longer["train"]["decay"] == trunk["train"]["decay"] == "constant"
    assert cfgs["wsd-long-lr5e-4-s2500"]["fork"] == {"from": "stable-long-lr5e-4", "step": 2000}
    assert cfgs["wsd-long-lr5e-4-s3000"]["fork"] == {"from": "stable-long-lr5e-4", "step": 2400}


def test_a_fork_from_the_source_end_must_train_on(tmp_path):
    (tmp_path / "configs" / "bench").mkdir(parents=True)
    profile = load_profile("cpu-small", ROOT).model_dump(by_alias=True)
    profile["runs"]["stable-long"]["phases"][0]["steps"] = 1600
    (tmp_path / "configs" / "bench" / "short.yaml").write_text(yaml.safe_dump(profile))
    with pytest.raises(ConfigError, match=r"runs\.stable-long-lr2e-3\.fork: starts at step 1600"):
        run_configs(load_profile("short", tmp_path), "gpt", tmp_path)


def test_seed_variants_repeat_the_headline_runs_and_their_trunks(tmp_path):
    """``seeds`` repeats the named runs at other seeds: the same config but ``train.seed`` (and
    ``data.valid_seed``, the family's seed), named ``-seed<k>``; a forked run's source is
    repeated at the same seed and the fork branches from that variant at the same step; the
    family's own runs are unchanged."""
    profile = load_profile("cpu-budget-gpt", ROOT)
    assert profile.seeds.values == [1235, 1236]
    cfgs = run_configs(profile, "gpt", tmp_path)
    plain = run_configs(profile.model_copy(update={"seeds": None}), "gpt", tmp_path)
    assert {n: c for n, c in cfgs.items() if n in plain} == plain
    for seed in (1235, 1236):
        for name in ("wsd-lr2e-3-s2000", "gpt-ls-b2000-lr2e-3", "stable-lr2e-3"):
            variant = cfgs[f"{name}-seed{seed}"]
            assert parse_run_config({k: v for k, v in variant.items() if k != "fork"},
                                    source=name).train.seed == seed
            same = {k: v for k, v in variant.items() if k not in ("train", "data", "name",
                                                                   "run_dir", "fork")}
            assert same == {k: v for k, v in cfgs[name].items()
                            if k not in ("train", "data", "name", "run_dir", "fork")}
            # it validates on the family's own seed's samples: its loss reads on the frontier
            assert variant["data"] == {**cfgs[name]["data"], "valid_seed": 1234}
            other = ("seed", *BOOKKEEPING)  # a trunk variant keeps only its forks' checkpoints
            assert {k: v for k, v in variant["train"].items() if k not in other} == {
                k: v for k, v in cfgs[name]["train"].items() if k not in other}
        assert cfgs[f"wsd-lr2e-3-s2000-seed{seed}"]["fork"] == {
            "from": f"stable-lr2e-3-seed{seed}", "step": cfgs["wsd-lr2e-3-s2000"]["fork"]["step"]}
        assert "fork" not in cfgs[f"gpt-ls-b2000-lr2e-3-seed{seed}"]
    assert parse_run_config({k: v for k, v in cfgs["stable-lr2e-3"].items()},
                            source="s").train.seed == 1234
    assert not any(n.endswith("-seed1235") for n in plain)
    assert is_variant("wsd-lr2e-3-s2000-seed1235", "wsd")
    # --runs picks a seed variant by its full name only
    assert "wsd-lr2e-3-s2000-seed1235" not in select_runs(cfgs, ["wsd-lr2e-3-s2000", "wsd"])
    assert list(select_runs(cfgs, ["wsd-lr2e-3-s2000-seed1235"])) == ["wsd-lr2e-3-s2000-seed1235"]
    assert seed_of("wsd-lr2e-3-s2000-seed1235") == 1235 and seed_of("wsd-lr2e-3-s2000") is None
    assert without_seed("wsd-lr2e-3-s2000-seed1235") == "wsd-lr2e-3-s2000"


@pytest.mark.parametrize("seeds, match", [
    ({"values": [1234], "runs": ["wsd-lr2e-3-s2000"]}, "1234 is the family's own seed"),
    ({"values": [7], "runs": ["wsd-lr3e-3-s2000"]}, "wsd-lr3e-3-s2000 is not a run"),
])
def test_bad_seeds_name_the_field(seeds, match, tmp_path):
    profile = load_profile("cpu-budget-gpt", ROOT).model_copy(
        update={"seeds": Seeds.model_validate(seeds)})
    with pytest.raises(ConfigError, match=match):
        run_configs(profile, "gpt", tmp_path)
