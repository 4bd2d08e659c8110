"""The order a benchmark starts its runs in at ``--jobs`` > 1: the longest chain of training
still to do first (a trunk whose forks make the longest path, not the run listed first), so
that the runs that finish last start first. Pure: the runner reads the checkpoints."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """One run as the scheduler sees it. ``total``: its last step; ``trained``: the step it
    resumes from (its newest checkpoint; a fork not yet started: its fork step); ``source`` and
    ``fork_step``: the run it branches from and where (None: from scratch); ``forks_only``: it
    is trained only as far as its forks' points (a trunk stopped for them)."""

    total: int
    trained: int = 0
    source: str | None = None
    fork_step: int = 0
    forks_only: bool = False


def chain_steps(runs: dict[str, Progress]) -> dict[str, int]:
    """Per run, the steps left on the longest chain through it: its own steps still to train
    (to its end, or 0 when ``forks_only``), or its steps to a fork's point plus that fork's
    chain, whichever is longer. Steps of every level count alike (a level-2 step costs less:
    the order is a plan, not a forecast). A source not in ``runs`` is finished or trained
    elsewhere: its forks' chains start at their own fork step."""
    forks: dict[str, list[str]] = {}
    for name, run in runs.items():
        if run.source in runs:
            forks.setdefault(run.source, []).append(name)
    chains: dict[str, int] = {}

    def chain(name: str) -> int:
        if name not in chains:
            run = runs[name]
            own = 0 if run.forks_only else max(0, run.total - run.trained)
            through = [max(0, runs[f].fork_step - run.trained) + chain(f)
                       for f in forks.get(name, [])]
            chains[name] = max([own, *through])
        return chains[name]

    for name in runs:
        chain(name)
    return chains


def start_order(pending: list[str], runs: dict[str, Progress]) -> list[str]:
    """``pending`` by chain length, longest first; between equal chains a fork goes before a
    run from scratch (its trunk's checkpoints are freed sooner), then the given order."""
    chains = chain_steps(runs)
    return sorted(pending, key=lambda n: (-chains[n], runs[n].source is None))
