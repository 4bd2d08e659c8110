"""The benchmark's start order: the longest chain of steps still to train goes first."""

from mlsys.bench.schedule import Progress, chain_steps, start_order


def test_a_trunk_chain_runs_through_its_longest_fork():
    runs = {"trunk": Progress(total=1000),
            "decay": Progress(total=1200, trained=800, source="trunk", fork_step=800),
            "cut": Progress(total=1900, trained=500, source="trunk", fork_step=500)}
    chains = chain_steps(runs)
    assert chains == {"trunk": 500 + 1400, "decay": 400, "cut": 1400}


def test_progress_already_made_shortens_the_chain():
    runs = {"trunk": Progress(total=1000, trained=700),
            "decay": Progress(total=1200, trained=800, source="trunk", fork_step=800)}
    assert chain_steps(runs)["trunk"] == 100 + 400
    past = {"trunk": Progress(total=1000, trained=900),  # its checkpoint is past the fork
            "decay": Progress(total=1200, trained=800, source="trunk", fork_step=800)}
    assert chain_steps(past)["trunk"] == 400  # the fork copies the 800-step checkpoint


def test_a_trunk_kept_only_for_its_forks_counts_only_the_steps_to_them():
    runs = {"trunk": Progress(total=10800, trained=0, forks_only=True),
            "cut": Progress(total=2000, trained=600, source="trunk", fork_step=600)}
    assert chain_steps(runs)["trunk"] == 600 + 1400
    alone = {"trunk": Progress(total=10800, forks_only=True)}
    assert chain_steps(alone)["trunk"] == 0


def test_a_fork_whose_source_is_finished_elsewhere_counts_its_own_steps():
    runs = {"decay": Progress(total=1200, trained=800, source="trunk", fork_step=800)}
    assert chain_steps(runs) == {"decay": 400}


def test_the_trunk_of_the_longest_chain_starts_before_runs_listed_first():
    """Two resumed runs listed first (5,700 and 5,100 steps left) wait for a from-scratch
    cycle whose cut makes an 18,700-step chain (budget-plan §20)."""
    runs = {"cut-seed1235": Progress(total=18697, trained=13028, source="cycle-1235",
                                     fork_step=11475),
            "stable-seed1236": Progress(total=10800, trained=5704),
            "cycle-seed1236": Progress(total=19575, forks_only=True),
            "cut-seed1236": Progress(total=18697, trained=11475, source="cycle-seed1236",
                                     fork_step=11475)}
    order = start_order(list(runs), runs)
    assert order == ["cycle-seed1236", "cut-seed1236", "cut-seed1235", "stable-seed1236"]


def test_equal_chains_put_a_fork_first_then_keep_the_given_order():
    runs = {"a": Progress(total=0), "b": Progress(total=0),
            "a-fork": Progress(total=0, source="a"), "c": Progress(total=0)}
    assert start_order(["a", "b", "a-fork", "c"], runs) == ["a-fork", "a", "b", "c"]
