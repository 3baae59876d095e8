"""Store errors injected with ``FaultyStore``: the node reports them and keeps going."""

from dledger.core import Role
from dledger.protocol import DLedgerResponseCode as Code
from dledger.sim import Cluster


def test_a_follower_disk_error_is_survived_and_the_follower_catches_up():
    with Cluster(n=3, seed=1, disk_faults=True) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        victim = next(i for i in c.ids if i != lead)
        c.disks[victim].fail("batch_append_as_follower", times=3)
        futures = [c.append(b"d%d" % i) for i in range(20)]
        assert c.run_until(lambda: all(f.done() for f in futures), 2_000)
        assert all(f.result().code == Code.SUCCESS for f in futures)       # the other follower suffices
        assert c.run_until(lambda: c.servers[victim].store.ledger_end_index == 19, 3_000)
        assert c.disks[victim].injected == 3
        c.check()


def test_a_full_disk_on_the_leader_fails_appends_but_the_node_keeps_leading():
    with Cluster(n=3, seed=2, disk_faults=True) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        c.disks[lead].full = True
        f = c.append(b"no room")
        assert c.run_until(f.done, 500) and f.result().code == Code.DISK_FULL
        c.run_for(2_000)
        assert c.servers[lead].role is Role.LEADER                         # heartbeats go on
        c.disks[lead].full = False
        g = c.append(b"room again")
        assert c.run_until(g.done, 500) and g.result().code == Code.SUCCESS
        c.check()


def test_a_failing_term_file_write_refuses_the_vote_and_crashes_nothing():
    with Cluster(n=3, seed=3, disk_faults=True) as c:
        for i in c.ids:
            c.disks[i].fail("persist_term", times=2)
        assert c.run_until(lambda: c.leader() is not None, 5_000)
        f = c.append(b"x")
        assert c.run_until(f.done, 1_000) and f.result().ok
        c.check()


def test_file_stores_can_be_wrapped_too(tmp_path):
    with Cluster(n=3, seed=4, store="file", base_dir=tmp_path, disk_faults=True) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        f = c.append(b"on disk")
        assert c.run_until(f.done, 1_000) and f.result().ok
        victim = next(i for i in c.ids if i != c.leader())
        c.restart(victim)
        assert c.run_until(lambda: c.servers[victim].role is Role.FOLLOWER, 2_000)
        c.check()
