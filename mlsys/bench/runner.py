"""Running a benchmark: every run of a profile as a real training run (``launch.train`` on the
profile's local ranks), forks branched from their source's checkpoints, then the report; and
the transitions check (a tiny model cycled down and up under ZeRO-3, memory per rebuild)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from mlsys.atomic import write_json, write_text
from mlsys.bench.epochs import check_single_epoch
from mlsys.bench.profile import (
    Profile,
    declared_in,
    is_variant,
    load_profile,
    origin_of,
    run_configs,
    seed_of,
    without_seed,
)
from mlsys.bench.report import NoTarget, compare, markdown, plot, table
from mlsys.bench.results import RESULTS, compact, read_result, result_path, write_result
from mlsys.bench.results_doc import command, page_name, write_page
from mlsys.bench.schedule import Progress, start_order
from mlsys.config import ConfigError, parse_run_config
from mlsys.data.run_data import prepare_default_data
from mlsys.distributed.spawn import StopForwarder, start_ranks, wait_ranks
from mlsys.train.checkpoint import complete_tags, fork_run, step_of
from mlsys.train.metrics import read_metrics
from mlsys.train.rundir import RunDir

# glibc's allocator on a CPU run: a 4-layer model's logits and their gradients (16 x 128 x 4096
# floats, 32 MiB) are above its largest mmap threshold, so every step mapped and unmapped them
# and faulted their pages in again (~35,000 minor faults and 0.13-0.18 s of system time a
# step of cpu-small's GPT-2). Never using mmap and never trimming keeps those pages in the
# heap: the same step, same arithmetic, 12-17 % less CPU time (docs/performance.md). The
# processes keep their peak heap (~2.5 GB resident instead of 0.8). Set before the process
# starts (glibc reads them at start-up); a value already in the environment wins.
CPU_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(4 << 30)}
BOOKKEEPING = ("checkpoint_every", "keep_checkpoints")  # train fields that change no number


def _canonical(raw: dict[str, Any], source: str, location: bool = True) -> Any:
    """A run config as compared for "the same run": validated (defaults filled in), without
    ``BOOKKEEPING`` fields and ``vcycle.chosen``, and without ``run_dir`` unless
    ``location``."""
    data = json.loads(json.dumps(parse_run_config(raw, source=source).model_dump()))
    for key in BOOKKEEPING:
        data["train"].pop(key)
    data["vcycle"].pop("chosen")  # recipe: auto's choice in words: the numbers are compared
    if not location:
        data.pop("run_dir")
    return data


def _same_config(cfg: dict[str, Any], run: RunDir) -> bool:
    """True if ``run`` was started with this run config (so it may be resumed). The stored
    config is validated again, so a field added since with its default counts as unchanged;
    how often checkpoints are kept (``BOOKKEEPING``, which ``run_configs`` raises for a run
    that gains a fork) is not a different run: a fork then finds its checkpoint or says which
    ones exist."""
    if not run.run_config.is_file():
        return False
    wanted = _canonical(cfg, cfg["name"])
    try:
        stored = _canonical(json.loads(run.run_config.read_text()), str(run.run_config))
    except (ValueError, ConfigError):
        return False
    return wanted == stored


def _plain(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k != "fork"}


def done_here(cfg: dict[str, Any]) -> bool:
    """True if the run finished on this machine with this config (``run_dir``/done.json)."""
    run = RunDir(cfg["run_dir"])
    return run.is_done() and _same_config(_plain(cfg), run)


class Results:
    """A family's committed results (``mlsys.bench.results``): where each run's file is, which
    stand for their run, and writing one when a run has finished here."""

    def __init__(self, folder: Path, profile: str, family: str, root: Path) -> None:
        self.folder, self.family = Path(folder), family
        self.declared = declared_in(profile, root)

    def path(self, name: str) -> Path:
        return result_path(self.folder, origin_of(name, self.declared), self.family, name)

    def matching(self, name: str, cfg: dict[str, Any]) -> dict[str, Any] | None:
        """The committed result of run ``name`` if it was made with ``cfg`` (``_same_config``'s
        rule, ``run_dir`` ignored, the same fork point); else None."""
        path = self.path(name)
        result = read_result(path)
        if result is None or result.get("fork") != cfg.get("fork"):
            return None
        try:
            stored = _canonical(result["run_config"], str(path), location=False)
        except (KeyError, TypeError, ValueError, ConfigError):
            return None
        return result if stored == _canonical(_plain(cfg), cfg["name"], location=False) else None

    def save(self, name: str, cfg: dict[str, Any]) -> Path | None:
        """Write run ``name``'s committed result if it finished here with ``cfg`` (the file
        is left alone when it already holds the same bytes); its path, or None."""
        if not done_here(cfg):
            return None
        run, path = RunDir(cfg["run_dir"]), self.path(name)
        result = {"profile": path.parent.parent.name, "family": self.family, "run": name,
                  "run_config": json.loads(run.run_config.read_text()),
                  "fork": cfg.get("fork"), "done": json.loads(run.done.read_text()),
                  "metrics": compact(read_metrics(run.metrics))}
        if write_result(path, result):
            print(f"   {name}: result written to {path}", flush=True)
        return path


def start(cfg: dict[str, Any], ds_config: str, ranks: int, out: Path, root: Path,
          threads: int | None = None, log: Path | None = None) -> list[subprocess.Popen] | None:
    """Start one run's ranks (None: it already finished with this config). A run started
    earlier with the same config resumes where it stopped; otherwise it starts over. A run
    with ``fork: {from: NAME, step: S}`` starts from run NAME's checkpoint at global step S
    (NAME must keep it: ``train.checkpoint_every``) and trains on with its own config: runs
    that differ only after that share it exactly."""
    cfg = dict(cfg)
    fork = cfg.pop("fork", None)
    run = RunDir(cfg["run_dir"])
    same = _same_config(cfg, run)  # also fails early on a bad config
    if same and run.is_done():
        return None
    path = write_text(out / f"{cfg['name']}.yaml", yaml.safe_dump(cfg, sort_keys=False))
    if fork and not same:
        tag = fork_run(out / fork["from"], run.root, int(fork["step"]))
        print(f"   {cfg['name']}: forked from {fork['from']} at {tag}", flush=True)
    args = ["--config", str(path), "--ds_config", ds_config]
    for key in BOOKKEEPING:
        args += ["--accept-change", f"train.{key}"]
    if not fork and not (same and complete_tags(run.checkpoints)):
        args.append("--fresh")  # another config, or nothing to resume: start over
    if log is not None:
        args.append("--no-progress")
    env = dict(os.environ, DS_ACCELERATOR=os.environ.get("DS_ACCELERATOR", "cpu"))
    if env["DS_ACCELERATOR"] == "cpu":
        env = {**CPU_MALLOC, **env}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    stream = open(log, "a") if log is not None else None
    return start_ranks("launch.train", args, ranks, env=env, cwd=str(root), stdout=stream,
                       stderr=subprocess.STDOUT if stream else None)


def train(cfg: dict[str, Any], ds_config: str, ranks: int, out: Path, root: Path,
          forwarder: StopForwarder | None = None) -> None:
    """Train one run to completion (see ``start``), or until a stop signal ``forwarder`` (if
    given) passed on to it."""
    procs = start(cfg, ds_config, ranks, out, root)
    if procs is not None and wait_ranks(procs, forwarder) and (
            forwarder is None or forwarder.signum is None):
        raise RuntimeError(f"{cfg['name']}: training exited non-zero")


def fork_point_ready(cfg: dict[str, Any], source: dict[str, Any]) -> bool:
    """True if fork ``cfg`` can branch now from its running ``source``: the source's run
    directory holds this source config (so its checkpoints are this run's: a source started
    over with another config has its old checkpoints wiped before it writes its new
    run_config.json) and a complete checkpoint at the fork step. ``train_all`` then starts the
    fork beside its source instead of waiting for the source to finish (the fork copies the
    checkpoint and the metrics up to it; records past it are dropped on its start)."""
    run = RunDir(source["run_dir"])
    return _same_config(_plain(source), run) and any(
        step_of(tag) == cfg["fork"]["step"] for tag in complete_tags(run.checkpoints))


def progress_of(cfg: dict[str, Any], forks_only: bool = False) -> Progress:
    """What the scheduler needs of run ``cfg`` (``mlsys.bench.schedule``): its last step, the
    step it resumes from (its run directory's newest checkpoint, if that directory holds this
    config; else its fork step, or 0), where it forks from."""
    total = parse_run_config(_plain(cfg)).total_steps if "phases" in cfg else 0
    fork = cfg.get("fork", {})
    trained, run = fork.get("step", 0), RunDir(cfg["run_dir"])
    if _same_config(_plain(cfg), run):
        trained = total if run.is_done() else max(
            [trained, *(step_of(t) for t in complete_tags(run.checkpoints))])
    return Progress(total, trained, fork.get("from"), fork.get("step", 0), forks_only)


def train_all(configs: dict[str, dict[str, Any]], ds_config: str, ranks: int, out: Path,
              root: Path, jobs: int, results: Results | None = None,
              skip: set[str] = frozenset(), sources_only: set[str] = frozenset()
              ) -> int | None:
    """Train ``configs`` in order, ``jobs`` at a time (one thread per rank when ``jobs`` > 1,
    output to ``<out>/<name>.log``); a fork waits for its source, at ``jobs`` > 1 only until
    the source's checkpoint at the fork step exists (``fork_point_ready``), and a free slot
    goes to the run with the longest chain of steps still to train (``schedule.start_order``:
    a trunk with long forks before a shorter run listed first). Runs in ``skip`` (their
    committed result stands for them) are not started; every run that finishes (or is found
    finished) gets its committed result written to ``results``. A run in ``sources_only``
    (a trunk trained only for its forks: a seed variant's, or any with ``--stop-trunks``;
    needs ``jobs`` > 1) is not started when every fork of ``configs`` still to branch from it
    has its fork point (a complete checkpoint at the fork step), and is stopped (SIGTERM: it
    checkpoints and exits; a later start resumes it) as soon as they all have one, so that
    its forks get its slot; it gets no result.
    A stop signal to the runner (SIGTERM, SIGUSR1, SIGINT) is sent on to every run training
    (each checkpoints and exits 0, as a preempted run does) and no run starts after it; the
    runner returns once they have exited, with that signal (None: no signal, all trained)."""
    if sources_only and jobs <= 1:
        raise ConfigError(f"{', '.join(sorted(sources_only))}: a trunk run only for its forks "
                          "is stopped once their fork points exist, which needs --jobs 2")
    def finish(name: str) -> None:
        if results is not None:
            results.save(name, configs[name])

    def skipped(name: str) -> bool:
        if name in skip:
            print(f"== {configs[name]['name']}: committed result, not re-run", flush=True)
        return name in skip

    if jobs <= 1:
        with StopForwarder() as stop:
            for name, cfg in configs.items():
                if stop.signum is not None:
                    break
                if skipped(name):
                    continue
                print(f"== {cfg['name']}", flush=True)
                train(cfg, ds_config, ranks, out, root, stop)
                finish(name)
        return _stopped(stop.signum)
    if set(configs) - set(skip):  # the default data, once, before runs race for it
        first = next(iter(configs.values()))
        prepare_default_data(parse_run_config(_plain(first)))
    finished = {n for n in configs if skipped(n)}  # they need no slot, nor their source
    pending, running, stopping = [n for n in configs if n not in finished], {}, set()
    # the start order, once: the chains are read from the checkpoints as they are now
    order = start_order(pending, {n: progress_of(configs[n], n in sources_only)
                                  for n in pending})

    def forks_waiting(source: str) -> bool:  # a fork still to branch past the source's end
        return any(n in pending and not fork_point_ready(c, configs[source])
                   for n, c in configs.items() if c.get("fork", {}).get("from") == source)

    def stop_spent_sources() -> None:
        for source in sources_only & set(running) - stopping:
            if not forks_waiting(source):
                print(f"   {source}: every fork point is reached; stopped (it resumes if "
                      "started again)", flush=True)
                for p in running[source]:
                    p.terminate()
                stopping.add(source)

    with StopForwarder() as stop:
        while (pending and stop.signum is None) or running:
            for name in [n for n in order if n in pending]:
                if stop.signum is not None:
                    break
                if name in sources_only and not forks_waiting(name):  # nothing to train for
                    print(f"== {configs[name]['name']}: every fork point is reached; not "
                          "started", flush=True)
                    pending.remove(name)
                    finished.add(name)
                    continue
                if len(running) >= jobs:
                    break
                source = configs[name].get("fork", {}).get("from")
                if source in configs and source not in finished and not (
                        source in running and fork_point_ready(configs[name], configs[source])):
                    continue
                pending.remove(name)
                early = f", {source} still running" if source in running else ""
                print(f"== {configs[name]['name']} (log: {out / (name + '.log')}{early})",
                      flush=True)
                procs = start(configs[name], ds_config, ranks, out, root, threads=1,
                              log=out / f"{name}.log")
                if procs is None:
                    finished.add(name)
                    finish(name)
                else:
                    running[name] = procs
                    stop.watch(procs)
            if stop.signum is None:
                stop_spent_sources()
            time.sleep(2)
            for name, procs in list(running.items()):
                if all(p.poll() is not None for p in procs):
                    del running[name]
                    if name in stopping:  # exit 0 (checkpointed), or killed before start-up
                        if any(p.returncode not in (0, -signal.SIGTERM) for p in procs):
                            raise RuntimeError(f"{name}: stopping it failed (see {name}.log)")
                        finished.add(name)
                        continue
                    # after a stop signal a run also ends killed by it before start-up
                    ok = (0,) if stop.signum is None else (0, -stop.signum, -signal.SIGTERM)
                    if any(p.returncode not in ok for p in procs):
                        for others in running.values():
                            for p in others:
                                p.terminate()
                        raise RuntimeError(f"{name}: training exited non-zero (see "
                                           f"{name}.log)")
                    finished.add(name)
                    if done_here(configs[name]):
                        print(f"   {name}: done", flush=True)
                    else:  # stopped by a signal before its end: it checkpointed
                        print(f"   {name}: stopped before its end (checkpointed; no result; "
                              "it resumes if started again)", flush=True)
                    finish(name)
    return _stopped(stop.signum)


def _stopped(signum: int | None) -> int | None:
    """``signum``, told: the runs stopped by it checkpointed and resume if started again."""
    if signum is not None:
        print(f"stopped by {signal.Signals(signum).name}: no run started after it; the runs "
              "it stopped checkpointed and resume where they stopped when the same command "
              "is run again", flush=True)
    return signum


def sources_only(profile: Profile, runs: dict[str, dict[str, Any]]) -> set[str]:
    """The seed variants among ``runs`` that the profile's ``seeds`` does not name: trunks
    repeated at a seed only for the named runs that fork from them (``train_all`` stops
    them once those have branched)."""
    named = set(profile.seeds.runs) if profile.seeds else set()
    return {n for n in runs if seed_of(n) is not None and without_seed(n) not in named}


def trunks_of(runs: dict[str, dict[str, Any]]) -> set[str]:
    """The runs among ``runs`` that another of ``runs`` forks from (``--stop-trunks``: each is
    trained only as far as its selected forks' fork points, then stopped with a checkpoint)."""
    return {c["fork"]["from"] for c in runs.values() if "fork" in c} & set(runs)


def select_runs(configs: dict[str, dict[str, Any]], runs: list[str]
                ) -> dict[str, dict[str, Any]]:
    """The configs named by ``runs``: a run's full name (``wsd-lr2e-3-s500``) or a profile
    entry's name (``wsd``: all its sweep points); a seed variant only by its full name
    (``wsd-lr2e-3-s2000-seed1235``). A name that matches nothing is an error."""
    def chosen(name: str, r: str) -> bool:  # a seed variant only by its own name
        return name == r or (seed_of(name) is None and is_variant(name, r))

    unknown = [r for r in runs if not any(chosen(n, r) for n in configs)]
    if unknown:
        raise ConfigError(f"--runs: {', '.join(unknown)} matches no run of this profile "
                          f"(runs: {', '.join(configs)})")
    return {n: c for n, c in configs.items() if any(chosen(n, r) for r in runs)}


def plan_runs(configs: dict[str, dict[str, Any]], chosen: dict[str, dict[str, Any]],
              results: Results, rerun_sources: bool = False
              ) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """Which of ``chosen`` to train: (the runs, in profile order; those of them a committed
    result stands for, not to be started). A run finished here with its config is left to
    ``start`` (it skips it). A fork that must still branch from its source needs the source's
    checkpoints, which a committed result does not carry: such a source is an error naming
    it, or, with ``rerun_sources``, trained again first (its result replaced when done), and
    so, in turn, is its own source where that too has only a committed result (a chain of
    forks is trained again from the first run whose checkpoints are here, or from scratch)."""
    committed = {n for n, c in chosen.items() if not done_here(c) and results.matching(n, c)}
    stale: dict[str, list[str]] = {}
    to_branch = list(chosen)  # runs to be trained: each must find its source's checkpoints
    while to_branch:
        name = to_branch.pop(0)
        cfg = configs[name]
        if "fork" not in cfg or (name in committed and name not in stale) \
                or _same_config(_plain(cfg), RunDir(cfg["run_dir"])):
            continue  # nothing to branch: committed, or its own run dir resumes
        source = cfg["fork"]["from"]
        if not done_here(configs[source]) and (
                source in committed or results.matching(source, configs[source])):
            if source not in stale:
                to_branch.append(source)  # trained again: it branches from its own source
            stale.setdefault(source, []).append(name)
    if stale and not rerun_sources:
        lines = [f"  {source} (committed: {results.path(source)}) is needed by "
                 f"{', '.join(forks)}" for source, forks in stale.items()]
        raise ConfigError("forks whose source has only a committed result (no checkpoints on "
                          "this machine):\n" + "\n".join(lines) + "\nthe source must be re-run "
                          "first: --rerun-sources trains it again, then its forks (its committed "
                          "result is replaced when it finishes); nothing was trained")
    runs = {n: c for n, c in configs.items() if n in chosen or n in stale}
    return runs, committed - set(stale)


def finished_records(configs: dict[str, dict[str, Any]], results: Results
                     ) -> dict[str, list[dict[str, Any]]]:
    """Metrics records of every finished run: from its run directory where it finished here
    with its config, else from its committed result; runs with neither are left out."""
    out = {}
    for name, cfg in configs.items():
        if done_here(cfg):
            out[name] = read_metrics(RunDir(cfg["run_dir"]).metrics)
        elif (result := results.matching(name, cfg)) is not None:
            out[name] = result["metrics"]
    return out


def benchmark(profile_name: str, family: str, out: Path, root: Path, runs: list[str] | None,
              scale: float = 1.0, analyse_only: bool = False, jobs: int = 1,
              results_dir: Path | None = None, rerun_sources: bool = False,
              budget: int | None = None, docs_dir: Path | None = None,
              stop_trunks: bool = False) -> dict[str, Any]:
    """Train the profile's runs for ``family`` (only ``runs`` if given), then analyse every
    finished one: ``results.json``, ``val_loss_vs_flops.png`` and the tables, printed; at
    full scale also the results page ``<docs_dir>/<profile>-<family>.md`` with its plot
    (``docs_dir`` default ``<root>/docs/results``; ``mlsys.bench.results_doc``). ``budget``
    (default the profile's) is the one the target is taken at. ``stop_trunks``: a chosen run
    that other chosen runs fork from is stopped once all their fork points exist
    (``trunks_of``).
    Committed results (``results_dir``, default ``<root>/bench/results``) stand for runs not
    on this machine: a run with one is not trained again, and the analysis reads it; every
    run finished here gets one (``mlsys.bench.results``)."""
    profile = load_profile(profile_name, root)
    budget = profile.budget if budget is None else budget
    out.mkdir(parents=True, exist_ok=True)
    configs = run_configs(profile, family, out, scale)
    results = Results(results_dir or root / RESULTS, profile_name, family, root)
    if not analyse_only:
        chosen = select_runs(configs, runs) if runs else configs
        chosen, committed = plan_runs(configs, chosen, results, rerun_sources)
        to_train = [n for n in chosen if n not in committed and not done_here(chosen[n])]
        if profile.single_epoch and to_train:
            check_epochs(configs)
        spent = sources_only(profile, chosen) | (trunks_of(chosen) if stop_trunks else set())
        if train_all(chosen, profile.ds_config, profile.ranks, out, root, jobs, results,
                     committed, spent) is not None:
            return {}  # stopped by a signal: no analysis (--analyse-only reads what finished)
    for name, cfg in configs.items():  # runs finished here before results were committed
        results.save(name, cfg)
    records = finished_records(configs, results)
    configs = {n: c for n, c in configs.items() if n in records}
    try:
        compared = compare(configs, profile.window, budget, records)
    except NoTarget as err:
        if analyse_only:
            raise
        print(f"trained; nothing to analyse yet: {err}. `--analyse-only --budget STEPS` "
              "analyses at a budget whose baselines have finished", flush=True)
        return {}
    result = {"family": family, "profile": profile_name, "ranks": profile.ranks,
              "ds_config": profile.ds_config, "budget": budget,
              "from_committed": sorted(n for n in configs if not done_here(configs[n])),
              **compared}
    write_json(out / "results.json", result)
    plot(configs, result, out / "val_loss_vs_flops.png", f"{profile_name} / {family}", records)
    if scale == 1.0:
        name = page_name(profile_name, family, budget, profile.budget)
        folder = docs_dir or root / "docs" / "results"
        page = write_page(folder, name, result,
                          command(profile_name, family, budget, profile.budget))
        plot(configs, result, folder / f"{name}.png", f"{profile_name} / {family}", records)
        print(f"wrote {page}")
    print(table(result["runs"]))
    print(markdown(result["runs"]))
    print(f"target: {result['target']} ({result['target_val_loss']:.4f})"
          + (f"; WARNING {result['grid_edge']}" if result["grid_edge"] else ""))
    if result["from_committed"]:
        print(f"{len(result['from_committed'])} of {len(configs)} runs read from committed "
              f"results ({results.folder})")
    print(f"wrote {out / 'results.json'} and {out / 'val_loss_vs_flops.png'}")
    return result


def check_epochs(configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``check_single_epoch`` over every run of a family (the profile's ``single_epoch``), on
    the data the runs will read (the default data prepared first, as ``train_all`` does)."""
    parsed = {n: parse_run_config(_plain(c), source=n) for n, c in configs.items()}
    paths = prepare_default_data(next(iter(parsed.values())))
    if "data_prefix" not in paths:
        raise ConfigError("single_epoch: the check reads one data_prefix; a data.blend is not "
                          "supported (set single_epoch: false, and count the epochs yourself)")
    prefix = paths["data_prefix"]
    figures = check_single_epoch(parsed, prefix)
    print(f"single epoch: the longest run ({figures['longest']}) reads "
          f"{figures['max_tokens_read']:,} of the train split's {figures['split_tokens']:,} "
          f"tokens ({figures['fraction']:.0%})", flush=True)
    return figures


def transitions_check(transitions: int, out: Path, root: Path) -> dict[str, Any]:
    """Cycle a tiny model down and up ``transitions`` times under ZeRO-3 on 2 ranks; resident
    memory after every rebuild and seconds per transition."""
    out.mkdir(parents=True, exist_ok=True)
    cfg = yaml.safe_load((root / "configs" / "bench" / "transitions.yaml").read_text())
    cfg["phases"] = [{"level": 1 + (i % 2), "steps": 1, "lr": 1e-3}
                     for i in range(transitions + 1)]
    cfg["run_dir"] = str(out / "run")
    train(cfg, "configs/ds/zero3.json", 2, out, root)
    rows = [r for r in read_metrics(RunDir(out / "run").metrics) if r["event"] == "transition"]
    rss = [r["rss_bytes"] for r in rows]
    result = {"transitions": len(rows), "rss_bytes": rss,
              "transition_seconds": [r["transition_seconds"] for r in rows],
              "rss_growth_vs_first": rss[-1] / rss[0] - 1.0}
    for i, r in enumerate(rows):
        print(f"transition {i + 1:>2} L{r['from_level']}→L{r['to_level']}: "
              f"rss {r['rss_bytes'] / 2**20:8.1f} MiB, {r['transition_seconds']:.2f} s")
    print(f"resident memory after the last rebuild vs the first: "
          f"{result['rss_growth_vs_first']:+.1%} (target: within 5 %)")
    write_json(out / "transitions.json", result)
    return result
