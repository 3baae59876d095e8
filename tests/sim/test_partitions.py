"""Partition scenarios (election, replication and network faults), in virtual time."""

import pytest

from dledger.core import Role
from dledger.protocol import DLedgerResponseCode as Code, ReadMode
from dledger.sim import Cluster


def test_isolated_leader_is_replaced_and_its_uncommitted_tail_truncated():
    with Cluster(n=5, seed=1) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        old = c.leader()
        done = c.append(b"before")
        assert c.run_until(done.done, 1_000) and done.result().ok
        rest = [i for i in c.ids if i != old]
        c.partition([old], rest)
        lost = c.append(b"lost", via=old)
        assert c.run_until(lambda: c.leader() in rest, 2_000)
        new = c.leader()
        kept = c.append(b"kept", via=new)
        assert c.run_until(kept.done, 1_000) and kept.result().ok
        c.run_for(5_000)
        assert not (lost.done() and lost.result().ok)        # never acknowledged as SUCCESS
        c.heal()
        assert c.run_until(lambda: c.servers[old].store.ledger_end_index == kept.result().index
                           and c.servers[old].node.committed_index == kept.result().index, 2_000)
        assert c.servers[old].store.get(1).body == b"kept"
        assert c.run_until(lost.done, 3_000) and lost.result().code != Code.SUCCESS
        c.check()


def test_only_the_majority_side_commits():
    with Cluster(n=5, seed=2) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        others = [i for i in c.ids if i != lead]
        c.partition([lead, others[0]], others[1:])
        minority = c.append(b"minority", via=lead)
        assert c.run_until(lambda: c.leader() in others[1:], 2_000)
        majority = c.append(b"majority")
        assert c.run_until(majority.done, 1_000) and majority.result().ok
        c.run_for(3_000)
        assert not (minority.done() and minority.result().ok)
        c.heal()
        c.run_for(2_000)
        c.check()


def test_a_two_two_split_of_four_elects_nobody_until_healed():
    with Cluster(n=4, seed=3) as c:
        c.partition(["n0", "n1"], ["n2", "n3"])
        c.run_for(3_000)
        assert c.leader() is None
        c.heal()
        assert c.run_until(lambda: c.leader() is not None, 3_000)
        c.check()


def test_leader_that_can_send_but_not_receive_steps_down_and_is_replaced():
    with Cluster(n=5, seed=4) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        old = c.leader()
        for i in c.ids:
            if i != old:
                c.network.cut(i, old)              # nothing reaches the leader
        assert c.run_until(lambda: c.servers[old].role is not Role.LEADER, 1_000)
        assert c.run_until(lambda: c.leader() not in (None, old), 3_000)
        c.heal()
        f = c.append(b"after")
        assert c.run_until(f.done, 2_000) and f.result().ok
        c.check()


def test_linearizable_reads_fail_on_a_partitioned_old_leader():
    with Cluster(n=3, seed=5) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        old = c.leader()
        c.partition([old], [i for i in c.ids if i != old])
        c.run_for(1_000)      # the lease has long expired
        for mode in (ReadMode.READ_INDEX_READ, ReadMode.LEASE_READ, ReadMode.RAFT_LOG_READ):
            f = c.servers[old].read(mode)
            c.run_until(f.done, 3_000)
            assert not (f.done() and f.result().code == Code.SUCCESS), mode
        c.check()


def test_reads_on_the_leader_see_every_acknowledged_append():
    with Cluster(n=3, seed=6) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        f = c.append(b"w")
        assert c.run_until(f.done, 1_000) and f.result().ok
        for mode in ReadMode:
            r = c.servers[lead].read(mode)
            assert c.run_until(r.done, 1_000)
            assert r.result().code == Code.SUCCESS and r.result().index >= f.result().index, mode
        c.check()


def test_a_pipelining_client_gets_increasing_indices_in_call_order():
    with Cluster(n=3, seed=7) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        futures = [c.append(b"p%03d" % i) for i in range(200)]
        assert c.run_until(lambda: all(f.done() for f in futures), 2_000)
        indices = [f.result().index for f in futures]
        assert all(f.result().ok for f in futures) and indices == sorted(indices)
        c.check()



@pytest.mark.parametrize("seed", range(30))
def test_an_old_leaders_lease_ends_before_a_new_leader_can_commit(seed):
    """LEASE_READ soundness: while the old leader still answers lease reads, no other node
    may have committed anything in a newer term."""
    with Cluster(n=3, seed=seed) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        c.run_for(50 + 17 * seed)
        old = c.leader()
        c.partition([old], [i for i in c.ids if i != old])
        while c.servers[old].node.elector.lease_valid(c.now_ms):
            c.run_for(1)
        lease_end = c.now_ms
        new_commit_at = None
        f = None
        while c.now_ms < lease_end + 3_000:
            lead = c.leader()
            if lead not in (None, old) and f is None:
                f = c.append(b"new-term", via=lead)
            if f is not None and f.done() and f.result().ok:
                new_commit_at = c.now_ms
                break
            c.run_for(1)
        assert new_commit_at is not None and new_commit_at > lease_end, (new_commit_at, lease_end)
        c.check()
