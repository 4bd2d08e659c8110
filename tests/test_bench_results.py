"""Committed benchmark results (``mlsys.bench.results``): a finished run leaves a compact file in
the repository; on a fresh machine (no ``runs/``) a run with a matching one is not trained
again and the analysis gives the same numbers from it; a fork whose source has only a
committed result stops with the source's name. And the profile's ``single_epoch`` check runs
before anything trains."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import yaml

from mlsys.bench import runner
from mlsys.bench.compare import median_step_seconds
from mlsys.bench.profile import declared_in, load_profile, origin_of, run_configs
from mlsys.bench.report import NoTarget, compare
from mlsys.bench.results import compact, read_result, result_path, write_result
from mlsys.bench.schedule import Progress
from mlsys.config import ConfigError, parse_run_config
from mlsys.train.checkpoint import complete_tags
from mlsys.train.metrics import read_metrics
from mlsys.train.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]


def _records(steps: int = 2000) -> list[dict]:
    out = []
    for s in range(1, steps + 1):
        level = 2 if 100 < s <= 1100 else 1
        out.append({"event": "step", "step": s, "phase": 0, "level": level, "flops": 10.0 * s,
                    "loss": 9.0 - s / 1000, "lr": 1e-3, "seconds": 0.1 + (s % 7) / 100,
                    "wall": 0.2 * s, "tokens": 2048 * s, "phase_step": s})
        if s in (100, 1100):
            out.append({"event": "transition", "step": s, "phase": 1 if s == 100 else 2,
                        "level": 3 - level, "flops": 10.0 * s, "from_level": level,
                        "to_level": 3 - level, "transition_seconds": 1.5,
                        "peak_memory_bytes": 1})
        if s % 200 == 0:
            out.append({"event": "checkpoint", "step": s, "phase": 0, "tag": f"s{s}"})
        if s % 50 == 0:
            out.append({"event": "eval", "step": s, "phase": 0 if s <= 100 else 1 + (s > 1100),
                        "level": level, "flops": 10.0 * s, "val_loss": 9.0 - s / 900,
                        "wall": 0.2 * s, "tokens": 2048 * s, "phase_step": s})
    out.append({"event": "end", "step": steps, "flops": 10.0 * steps, "wall": 0.2 * steps,
                "val_loss": 6.0, "peak_memory_bytes": 5, "final_dir": "x"})
    return out


def test_compact_keeps_what_the_analysis_reads():
    records = _records()
    kept = compact(records)
    events = [r["event"] for r in kept]
    assert [r for r in kept if r["event"] in ("eval", "transition", "end")] == \
        [r for r in records if r["event"] in ("eval", "transition", "end")]
    assert [r["step"] for r in kept if r["event"] == "step"] == list(range(50, 2001, 50))
    assert "checkpoint" not in events
    assert kept[0]["count"] == 2000 and median_step_seconds(kept) == median_step_seconds(records)
    cfg = {"phases": [{"level": 1, "steps": 2000, "lr": 1e-3}]}
    full = compare({"a": cfg}, 3, records={"a": records})
    assert compare({"a": cfg}, 3, records={"a": kept}) == full


def test_a_result_is_written_atomically_once_and_read_back(tmp_path):
    path = result_path(tmp_path / "results", "p", "gpt", "run")
    assert read_result(path) is None
    result = {"run": "run", "metrics": compact(_records())}
    assert write_result(path, result)
    before = path.stat().st_mtime_ns
    assert not write_result(path, result)  # the same bytes: left alone (no change for git)
    assert path.stat().st_mtime_ns == before
    assert read_result(path)["metrics"] == result["metrics"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["run.json.gz"]  # no temp left
    path.write_bytes(gzip.compress(b"{cut"))
    with pytest.raises(RuntimeError, match="unreadable committed result"):
        read_result(path)


def test_a_result_is_stored_under_the_profile_that_declares_the_run():
    declared = declared_in("cpu-budget-gpt", REPO)
    assert origin_of("stable-lr1e-3", declared) == "cpu-budget"
    assert origin_of("wsd-long-lr2e-3-s16000", declared) == "cpu-budget"
    assert origin_of("gpt-ls-b2000-lr4e-3", declared) == "cpu-budget-gpt"


def test_the_budget_profiles_ask_for_the_single_epoch_check():
    for name in ("cpu-budget", "cpu-budget-gpt", "cpu-budget-bert"):
        assert load_profile(name, REPO).single_epoch
    assert not load_profile("cpu-small", REPO).single_epoch


def _profile(root: Path, data: dict, lr: float = 1e-3, samples: int | None = None,
             steps: int = 12, decay_fraction: float = 0.25, wsd_steps: int | None = None,
             **extra) -> None:
    """A tiny profile: a constant-lr trunk (12 steps) and a WSD decay forked from it (as
    long, or ``wsd_steps``)."""
    profile = {
        "ds_config": str(REPO / "configs" / "ds" / "zero1.json"), "ranks": 1, "window": 2,
        "budget": steps, **extra,
        "families": {"gpt": {
            "model": {"family": "gpt", "hidden_size": 32, "num_layers": 2, "num_heads": 2,
                      "ffn_size": 64, "max_position": 32, "dropout": 0.0},
            "data": {"tokenizer_dir": data["tokenizer_dir"], "data_prefix": data["data_prefix"],
                     "seq_length": 32, "split": "90,10,0",
                     **({"train_samples": samples} if samples else {})},
            "train": {"seed": 1, "micro_batch_size": 2, "global_batch_size": 2,
                      "eval_every": 4 if steps <= 100 else 50, "eval_batches": 1,
                      "checkpoint_every": 0}}},
        "runs": {
            "stable": {"train": {"decay": "constant"},
                       "phases": [{"level": 1, "steps": steps, "lr": lr}]},
            "wsd": {"fork": {"from": "stable", "before_decay": True},
                    "train": {"decay": "wsd", "decay_fraction": decay_fraction},
                    "phases": [{"level": 1, "steps": wsd_steps or steps, "lr": lr}]}}}
    (root / "configs" / "bench").mkdir(parents=True, exist_ok=True)
    (root / "configs" / "bench" / "tiny.yaml").write_text(yaml.safe_dump(profile))


@pytest.fixture
def training_env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    started = []
    ENVS.clear()
    real = runner.start_ranks
    monkeypatch.setattr(runner, "start_ranks",
                        lambda *a, **k: started.append(a[1][1]) or ENVS.append(k["env"])
                        or real(*a, **k))
    return started


ENVS: list[dict[str, str]] = []  # the environment of every run training_env started


def test_a_fresh_machine_reruns_nothing_and_analyses_committed_results(
        gpt_data, tmp_path, training_env):
    started = training_env
    root = tmp_path / "repo"
    _profile(root, gpt_data)
    folder = root / "bench" / "results" / "tiny" / "gpt"
    first = runner.benchmark("tiny", "gpt", tmp_path / "runs" / "tiny", root, None)
    assert len(started) == 2 and first["from_committed"] == []
    assert sorted(p.name for p in folder.iterdir()) == ["stable.json.gz", "wsd.json.gz"]
    stored = read_result(folder / "wsd.json.gz")
    assert stored["fork"] == {"from": "stable", "step": 9} and stored["done"]["steps"] == 12
    assert [r["step"] for r in stored["metrics"] if r["event"] == "eval"] == [4, 8, 12]
    assert all(e["MALLOC_MMAP_MAX_"] == "0" for e in ENVS) and len(ENVS) == 2  # CPU runs
    page = root / "docs" / "results" / "tiny-gpt.md"  # the results page, beside its plot
    written = page.read_text()
    assert "| stable | 1 |" in written and "| wsd | 1 |" in written
    assert f"`{first['target']}`, {first['target_val_loss']:.4f}" in written
    assert (root / "docs" / "results" / "tiny-gpt.png").stat().st_size > 0

    shutil.rmtree(tmp_path / "runs")  # a fresh machine: nothing under runs/ survives
    started.clear()
    out = tmp_path / "elsewhere" / "tiny"  # another --out: run_dir is no part of the match
    again = runner.benchmark("tiny", "gpt", out, root, None)
    assert started == []  # no training started
    assert again["from_committed"] == ["stable", "wsd"]
    assert again["runs"] == first["runs"] and again["target"] == first["target"]
    assert not (out / "stable").exists() and not (out / "wsd").exists()
    assert page.read_text() == written  # the same runs, read back: the same page
    only = runner.benchmark("tiny", "gpt", out, root, None, analyse_only=True)
    assert only["runs"] == first["runs"] and started == []

    # a fork whose source has only a committed result: an error naming the source
    (folder / "wsd.json.gz").unlink()
    with pytest.raises(ConfigError, match=r"stable \(committed: .*stable\.json\.gz\) is needed "
                                          r"by wsd(.|\n)*--rerun-sources"):
        runner.benchmark("tiny", "gpt", out, root, None)
    assert started == [] and not (out / "wsd").exists()
    # ... or, asked to, the source is trained again first, then the fork
    redone = runner.benchmark("tiny", "gpt", out, root, None, rerun_sources=True)
    assert len(started) == 2 and redone["from_committed"] == []
    assert (folder / "wsd.json.gz").is_file()
    assert [r["final_val_loss"] for r in redone["runs"]] == \
        [r["final_val_loss"] for r in first["runs"]]


def test_training_before_the_budget_has_its_baseline_ends_without_an_analysis(
        gpt_data, tmp_path, training_env, capsys):
    """The profile's budget (40 steps) has no baseline yet: training what was asked for
    writes its results and ends cleanly; asking for the analysis itself is the error."""
    root = tmp_path / "repo"
    _profile(root, gpt_data, budget=40)
    out = tmp_path / "runs" / "tiny"
    assert runner.benchmark("tiny", "gpt", out, root, None) == {}
    assert "nothing to analyse yet: budget: no finished baseline of 40 steps" in \
        capsys.readouterr().out
    assert (root / "bench" / "results" / "tiny" / "gpt" / "wsd.json.gz").is_file()
    with pytest.raises(NoTarget, match="no finished baseline of 40 steps"):
        runner.benchmark("tiny", "gpt", out, root, None, analyse_only=True)
    at = runner.benchmark("tiny", "gpt", out, root, None, budget=12)  # both are 12 steps long
    assert at["budget"] == 12 and at["target"] in ("stable", "wsd")


def _commit_only(results: runner.Results, name: str, cfg: dict) -> None:
    """A committed result of run ``name`` made with ``cfg``, and no run directory here."""
    raw = {k: v for k, v in cfg.items() if k != "fork"}
    stored = parse_run_config(raw, source="x").model_dump(mode="json")
    write_result(results.path(name), {"run_config": {**stored, "run_dir": "/gone"},
                                      "fork": cfg.get("fork"), "done": {}, "metrics": []})


def test_a_changed_config_does_not_take_the_committed_result(gpt_data, tmp_path):
    """Only a result made with the run's config (BOOKKEEPING fields aside) stands for it."""
    root = tmp_path / "repo"
    _profile(root, gpt_data)
    results = runner.Results(root / "bench" / "results", "tiny", "gpt", root)
    configs = run_configs(load_profile("tiny", root), "gpt", tmp_path / "runs")
    cfg = dict(configs["stable"])
    _commit_only(results, "stable", cfg)
    assert results.matching("stable", cfg) is not None
    bookkeeping = {**cfg, "train": {**cfg["train"], "checkpoint_every": 3}}
    assert results.matching("stable", bookkeeping) is not None
    _profile(root, gpt_data, lr=2e-3)
    changed = run_configs(load_profile("tiny", root), "gpt", tmp_path / "runs")
    assert results.matching("stable", changed["stable"]) is None
    chosen, committed = runner.plan_runs(changed, changed, results)
    assert committed == set() and list(chosen) == ["stable", "wsd"]


def test_rerun_sources_trains_a_chain_of_committed_sources_again_from_its_first(
        gpt_data, tmp_path):
    """A fork of a fork, both sources committed only: --rerun-sources trains the whole chain
    again (stable, then long from it, then the fork), not only the nearest source."""
    root = tmp_path / "repo"
    _profile(root, gpt_data)
    path = root / "configs" / "bench" / "tiny.yaml"
    profile = yaml.safe_load(path.read_text())
    wsd = profile["runs"]["wsd"]
    wsd["fork"]["from"], wsd["phases"][0]["steps"] = "long", 20
    profile["runs"] = {"stable": profile["runs"]["stable"],
                       "long": {"fork": {"from": "stable", "source_end": True},
                                "train": {"decay": "constant"},
                                "phases": [{"level": 1, "steps": 16, "lr": 1e-3}]},
                       "wsd": wsd}
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    results = runner.Results(root / "bench" / "results", "tiny", "gpt", root)
    configs = run_configs(load_profile("tiny", root), "gpt", tmp_path / "runs")
    for name in ("stable", "long"):  # committed results only: no checkpoints here
        _commit_only(results, name, configs[name])
        assert results.matching(name, configs[name]) is not None
    wanted = {"wsd": configs["wsd"]}
    with pytest.raises(ConfigError, match=r"(?s)long \(committed.*needed by wsd.*"
                                          r"stable \(committed.*needed by long"):
        runner.plan_runs(configs, wanted, results)
    runs, committed = runner.plan_runs(configs, wanted, results, rerun_sources=True)
    assert list(runs) == ["stable", "long", "wsd"] and committed == set()
    # asked for the middle of the chain as well: it is trained again, not taken as committed
    both = {"long": configs["long"], "wsd": configs["wsd"]}
    runs, committed = runner.plan_runs(configs, both, results, rerun_sources=True)
    assert list(runs) == ["stable", "long", "wsd"] and committed == set()


def test_a_run_that_would_read_a_sample_twice_stops_before_anything_trains(
        gpt_data, tmp_path, training_env):
    root = tmp_path / "repo"
    _profile(root, gpt_data, single_epoch=True, samples=10**6)
    out = tmp_path / "runs" / "tiny"
    with pytest.raises(ConfigError, match="read twice"):
        runner.benchmark("tiny", "gpt", out, root, None)
    assert training_env == [] and not (out / "stable").exists()
    _profile(root, gpt_data, single_epoch=True)  # the runs' own samples fit
    configs = run_configs(load_profile("tiny", root), "gpt", out)
    assert runner.check_epochs(configs)["fraction"] < 1.0


def test_a_fork_starts_beside_its_source_once_the_checkpoint_exists(
        gpt_data, tmp_path, monkeypatch, training_env):
    """At --jobs 2 a fork starts as soon as its source's checkpoint at the fork step exists,
    while the source still trains, and ends exactly where it ends when started after it."""
    root = tmp_path / "repo"
    _profile(root, gpt_data, steps=2000, decay_fraction=0.5)  # the decay forks at step 1000
    out = tmp_path / "runs" / "tiny"
    source_done_at_fork_start = []
    real = runner.start

    def start(cfg, *args, **kwargs):
        if cfg["name"] == "gpt-wsd":
            source_done_at_fork_start.append(runner.RunDir(out / "stable").is_done())
        return real(cfg, *args, **kwargs)

    monkeypatch.setattr(runner, "start", start)
    early = runner.benchmark("tiny", "gpt", out, root, None, jobs=2)
    assert source_done_at_fork_start == [False]  # started beside its source
    records = read_metrics(out / "wsd" / "metrics.jsonl")
    source = read_metrics(out / "stable" / "metrics.jsonl")
    steps = [r["step"] for r in records if r["event"] == "step"]
    assert steps == sorted(set(steps)) and steps[-1] == 2000  # nothing after the fork twice
    assert [r for r in records if r["event"] == "eval" and r["step"] <= 1000] == \
        [r for r in source if r["event"] == "eval" and r["step"] <= 1000]
    late = runner.benchmark("tiny", "gpt", tmp_path / "late", root, None, jobs=1,
                            results_dir=tmp_path / "other-results")
    assert [r["final_val_loss"] for r in early["runs"]] == \
        [r["final_val_loss"] for r in late["runs"]]
    configs = run_configs(load_profile("tiny", root), "gpt", out, 1.0)
    assert runner.progress_of(configs["wsd"]) == Progress(2000, 2000, "stable", 1000)
    assert runner.progress_of(configs["stable"], forks_only=True) == \
        Progress(2000, 2000, forks_only=True)
    fresh = run_configs(load_profile("tiny", root), "gpt", tmp_path / "new", 1.0)
    assert runner.progress_of(fresh["wsd"]) == Progress(2000, 1000, "stable", 1000)
    assert runner.progress_of(fresh["stable"]) == Progress(2000, 0)


class FakeProc:
    """A training process for the scheduler tests: ends (exit 0) after ``length`` polls, or at
    the next poll once terminated; counts its polls in ``polls`` and its stops in ``stopped``."""

    def __init__(self, name: str, length: int, polls: dict, stopped: list | None = None):
        self.name, self.left, self.returncode = name, length, None
        self.polls, self.stopped = polls, stopped

    def poll(self):
        self.left -= 1
        self.polls[self.name] = self.polls.get(self.name, 0) + 1
        if self.left <= 0:
            self.returncode = 0
        return self.returncode

    def terminate(self):
        self.stopped.append(self.name)
        self.left = 0


def test_the_scheduler_puts_a_ready_fork_before_a_new_trunk(tmp_path, monkeypatch):
    """At --jobs 2: trunk A and trunk B start; when A's fork point exists its fork takes the
    next free slot before trunk C; a committed run neither waits for its source nor takes a
    slot. (Training replaced by processes that end after a few polls.)"""
    order, polls = [], {}
    lengths = {"a": 3, "b": 2, "c": 1, "a-fork": 1}

    def start(cfg, *args, **kwargs):
        order.append(cfg["name"])
        return [FakeProc(cfg["name"], lengths[cfg["name"]], polls)]

    monkeypatch.setattr(runner, "start", start)
    monkeypatch.setattr(runner.time, "sleep", lambda s: None)
    monkeypatch.setattr(runner, "fork_point_ready", lambda cfg, src: polls.get(src["name"], 0) >= 1)
    monkeypatch.setattr(runner, "prepare_default_data", lambda cfg: {})
    monkeypatch.setattr(runner, "parse_run_config", lambda cfg: cfg)
    cfg = {n: {"name": n, "run_dir": str(tmp_path / n)} for n in ("a", "b", "c", "a-fork")}
    cfg["a-fork"]["fork"] = {"from": "a", "step": 1}
    cfg["c-fork"] = {"name": "c-fork", "run_dir": "x", "fork": {"from": "c", "step": 1}}
    runner.train_all(cfg, "ds.json", 1, tmp_path, tmp_path, jobs=2, skip={"c-fork"})
    assert order == ["a", "b", "a-fork", "c"]


def test_a_free_slot_goes_to_the_longest_chain_not_the_run_listed_first(tmp_path,
                                                                       monkeypatch):
    """At --jobs 2 with three runs from scratch: the two with the longest chains of steps (a
    trunk through its fork; a long run) start first, the short run listed first waits."""
    order, polls = [], {}
    monkeypatch.setattr(runner, "start", lambda cfg, *a, **k: order.append(cfg["name"]) or [
        FakeProc(cfg["name"], 2, polls)])
    monkeypatch.setattr(runner.time, "sleep", lambda s: None)
    monkeypatch.setattr(runner, "fork_point_ready", lambda cfg, src: False)
    monkeypatch.setattr(runner, "prepare_default_data", lambda cfg: {})
    monkeypatch.setattr(runner, "parse_run_config", lambda cfg: cfg)
    steps = {"short": Progress(500), "trunk": Progress(1000),
             "trunk-cut": Progress(3000, 800, "trunk", 800), "long": Progress(2000)}
    monkeypatch.setattr(runner, "progress_of", lambda cfg, forks_only=False: steps[cfg["name"]])
    cfg = {n: {"name": n, "run_dir": str(tmp_path / n)} for n in steps}
    cfg["trunk-cut"]["fork"] = {"from": "trunk", "step": 800}
    runner.train_all(cfg, "ds.json", 1, tmp_path, tmp_path, jobs=2)
    assert order == ["trunk", "long", "trunk-cut", "short"]


def test_a_trunk_run_only_for_its_seed_forks_stops_once_they_branched(
        gpt_data, tmp_path, training_env):
    """A trunk's seed variant (run only because a headline run at that seed forks from it)
    trains as far as its forks need: once they have branched it is stopped (checkpointed,
    no result); the fork trains to its end from the trunk's checkpoint at the same seed."""
    root = tmp_path / "repo"
    _profile(root, gpt_data, steps=20000, wsd_steps=400, decay_fraction=0.5,  # forks at 200
             seeds={"values": [7], "runs": ["wsd"]})
    out = tmp_path / "runs" / "tiny"
    profile = load_profile("tiny", root)
    chosen = runner.select_runs(run_configs(profile, "gpt", out), ["stable-seed7", "wsd-seed7"])
    assert runner.sources_only(profile, chosen) == {"stable-seed7"}
    results = runner.Results(tmp_path / "results", "tiny", "gpt", root)
    runner.train_all(chosen, profile.ds_config, 1, out, root, jobs=2, results=results,
                     sources_only=runner.sources_only(profile, chosen))
    trunk, fork = RunDir(out / "stable-seed7"), RunDir(out / "wsd-seed7")
    assert fork.is_done() and not trunk.is_done()
    trunk_steps = [r["step"] for r in read_metrics(trunk.metrics) if r["event"] == "step"]
    assert 200 <= trunk_steps[-1] < 20000 and complete_tags(trunk.checkpoints)
    records = read_metrics(fork.metrics)
    assert [r["step"] for r in records if r["event"] == "step"][-1] == 400
    assert [r for r in records if r["event"] == "eval" and r["step"] <= 200] == \
        [r for r in read_metrics(trunk.metrics) if r["event"] == "eval" and r["step"] <= 200]
    assert json.loads(trunk.run_config.read_text())["train"]["seed"] == 7
    assert results.matching("wsd-seed7", chosen["wsd-seed7"]) is not None
    assert not results.path("stable-seed7").exists()
    # a fresh machine with the fork's result committed does not start the trunk at all
    fresh = run_configs(profile, "gpt", tmp_path / "fresh")
    again = runner.select_runs(fresh, ["stable-seed7", "wsd-seed7"])
    again, committed = runner.plan_runs(fresh, again, results)
    assert committed == {"wsd-seed7"}
    training_env.clear()
    runner.train_all(again, profile.ds_config, 1, tmp_path / "fresh", root, jobs=2,
                     results=results, skip=committed,
                     sources_only=runner.sources_only(profile, again))
    assert training_env == [] and not (tmp_path / "fresh" / "stable-seed7").exists()
    with pytest.raises(ConfigError, match="stable-seed7: a trunk run only for its forks .* "
                                          "--jobs 2"):
        runner.train_all(again, profile.ds_config, 1, tmp_path / "fresh", root, jobs=1,
                         results=results, skip=committed, sources_only={"stable-seed7"})


def test_stop_trunks_hands_each_chosen_trunk_to_the_scheduler_to_stop(tmp_path, monkeypatch):
    """``--stop-trunks``: the trunks among the chosen runs (a chosen run forks from them) are
    handed to the scheduler as runs to stop once their forks' points exist; a trunk whose
    forks are not chosen is not one, and without the flag only seed trunks are."""
    assert runner.trunks_of({"a": {}, "a-d": {"fork": {"from": "a"}},
                             "b-d": {"fork": {"from": "b"}}}) == {"a"}
    root = tmp_path / "repo"
    _profile(root, {"tokenizer_dir": "tok", "data_prefix": "data"}, steps=20000, wsd_steps=400)
    handed = []

    class Handed(Exception):
        pass

    def train_all(*args, **kwargs):
        handed.append(args[-1])
        raise Handed

    monkeypatch.setattr(runner, "train_all", train_all)
    for flag in (True, False):
        with pytest.raises(Handed):
            runner.benchmark("tiny", "gpt", tmp_path / "out", root, ["stable", "wsd"], jobs=2,
                             results_dir=tmp_path / "results", stop_trunks=flag)
    assert handed == [{"stable"}, set()]


def test_a_trunk_to_stop_gives_its_slot_to_its_forks_once_their_points_exist(tmp_path,
                                                                           monkeypatch):
    """At --jobs 2 with two trunks to stop (``sources_only``) holding both slots: each trunk is
    stopped once its fork's point exists, and its fork takes the slot; the trunks would
    otherwise hold them 1000 polls (processes that end early only when terminated)."""
    order, polls, stopped = [], {}, []
    monkeypatch.setattr(runner, "start", lambda cfg, *a, **k: order.append(cfg["name"]) or [
        FakeProc(cfg["name"], 2 if "fork" in cfg["name"] else 1000, polls, stopped)])
    monkeypatch.setattr(runner.time, "sleep", lambda s: None)
    monkeypatch.setattr(runner, "fork_point_ready",
                        lambda cfg, src: polls.get(src["name"], 0) >= cfg["fork"]["step"])
    monkeypatch.setattr(runner, "prepare_default_data", lambda cfg: {})
    monkeypatch.setattr(runner, "parse_run_config", lambda cfg: cfg)
    monkeypatch.setattr(runner, "done_here", lambda cfg: "fork" in cfg)
    cfg = {n: {"name": n, "run_dir": str(tmp_path / n)} for n in ("a", "b")}
    cfg["a-fork"] = {"name": "a-fork", "run_dir": "x", "fork": {"from": "a", "step": 3}}
    cfg["b-fork"] = {"name": "b-fork", "run_dir": "y", "fork": {"from": "b", "step": 5}}
    runner.train_all(cfg, "ds.json", 1, tmp_path, tmp_path, jobs=2, sources_only={"a", "b"})
    # b first: its fork's point is further (a longer chain); a's fork branches first
    assert order == ["b", "a", "a-fork", "b-fork"] and stopped == ["a", "b"]
