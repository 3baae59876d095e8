"""The broker store under the simulator's faults, seed by seed (see ``broker_swarm``)."""

import pytest

from .broker_swarm import BrokerSwarm

SEEDS = range(1, 13)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_broker_keeps_its_promises_under_faults(tmp_path, seed):
    swarm = BrokerSwarm(tmp_path, seed)
    try:
        acked = swarm.run()
    finally:
        swarm.close()
    assert acked, swarm.why("nothing was acknowledged: the run proves nothing")
