"""The broker store under the simulator's faults, seed by seed (see ``broker_swarm``)."""

import pytest

from .broker_swarm import BrokerSwarm

SEEDS = range(1, 25)
#: seeds that found a bug (docs/simulation.md, "Bugs found"), kept by name
FOUND = {
    9: "a torn key-index header made opening the file undo entries the checkpoint vouched for",
    10: "a commit log closed after its node died wrote a checkpoint over wrecked files",
}

#: seeds that found a mistake of this test's own (docs/simulation.md, "Bugs found")
FOUND_IN_THE_TEST = {
    128: "replicas compared before they converged: a new master's commit index, still behind its "
         "log, was taken as the target",
    154: "the same",
    656: "the master changed after the puts stopped: one elected while the group settled had "
         "committed nothing of its term, and no put came to make it",
}


def _run(tmp_path, seed):
    swarm = BrokerSwarm(tmp_path, seed)
    try:
        acked = swarm.run()
    finally:
        swarm.close()
    assert acked, swarm.why("nothing was acknowledged: the run proves nothing")
    return swarm


@pytest.mark.parametrize("seed", SEEDS)
def test_the_broker_keeps_its_promises_under_faults(tmp_path, seed):
    _run(tmp_path, seed)


@pytest.mark.parametrize("seed", sorted(FOUND))
def test_regression_seed_found_by_the_broker_swarm(tmp_path, seed):
    swarm = _run(tmp_path, seed)
    assert swarm.damaged > 0, swarm.why("no power cut wrecked the broker's files: the seed no longer tests it")


@pytest.mark.parametrize("seed", sorted(FOUND_IN_THE_TEST))
def test_regression_seed_that_found_a_mistake_of_the_test(tmp_path, seed):
    _run(tmp_path, seed)
