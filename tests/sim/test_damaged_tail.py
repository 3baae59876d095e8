"""A leader stuck on a damaged entry that no peer gives it a copy of (core.damaged_tail).

- Its uncommitted tail entry is flipped at rest and held by nobody else: the repair pulls'
  answers prove it was never committed, the leader cuts its log there, and the group commits
  again (swarm seeds 6147, 90016, 90026, 90079 stopped for good here).
- Its damaged entry has an intact copy only on a peer it cannot reach: it steps aside, the peer
  with the copy leads, and the group commits again.
- A damaged entry at or below the commit index is never cut, even when no peer holds it.
"""

from __future__ import annotations

import shutil

import pytest

from dledger.errors import CorruptStoreError
from dledger.sim.cluster import Cluster
from helpers.store_files import flip_bit, record_location


def _where(c: Cluster, node: str, index: int):
    cfg = c.config_for(node)
    return record_location(cfg.default_path, index, cfg.mapped_file_size_for_entry_index,
                           cfg.mapped_file_size_for_entry_data)


def _commit(c: Cluster, count: int, prefix: bytes) -> None:
    for k in range(count):
        f = c.append(b"%s-%03d" % (prefix, k) * 3)
        assert c.run_until(f.done, 5000) and f.result().ok, f.result() if f.done() else "pending"


def _commits_again(c: Cluster, timeout_ms: int = 15_000) -> int:
    deadline = c.now_ms + timeout_ms
    while c.now_ms < deadline:
        if not c.run_until(lambda: c.leader() is not None, max(1, deadline - c.now_ms)):
            break
        f = c.append(b"after")
        if c.run_until(f.done, 2000) and f.result().ok:
            return f.result().index
    raise AssertionError({i: (c.servers[i].driver.node.role, c.servers[i].store.ledger_end_index,
                              list(c.servers[i].store.damaged())) for i in c.live()})


@pytest.mark.parametrize("durability", ["fsync", "page_cache"])
def test_a_leader_cuts_a_damaged_tail_entry_that_no_peer_holds_and_the_group_commits_again(durability):
    """Leader L appends entries 6-9 while both followers are down (never committed), then its
    copy of entry 7 is flipped at rest. With everyone back L is elected (its log is the
    longest) and cannot push entry 7. In ``fsync`` mode both followers answer the repair pull,
    not recovering, that their logs end at 5 (rule a); in ``page_cache`` mode every restarted
    node is recovering (rule b). L cuts its log at 7, and the group commits again."""
    c = Cluster(n=3, seed=21, store="file", durability=durability)
    try:
        assert c.run_until(lambda: c.leader() is not None, 5000)
        _commit(c, 6, b"committed")
        lead = c.leader()
        followers = [i for i in c.ids if i != lead]
        for f in followers:
            c.crash(f)
        for k in range(4):
            c.append(b"never-committed-%d" % k)        # they time out: only the leader holds them
        c.run_for(1000)
        store = c.servers[lead].store
        assert store.ledger_end_index == 9 and c.servers[lead].driver.node.committed_index == 5
        loc = _where(c, lead, 7)
        c.crash(lead)
        flip_bit(loc.path, loc.offset + loc.size - 2, 5)
        for node in c.ids:
            c.restart(node)
        index = _commits_again(c)
        assert c.leader() == lead and c.servers[lead].driver.node.tail.cuts == 1
        # the cut dropped the damaged entry and what followed it, nothing committed; entry 6,
        # before it, stays (its append timed out: it may commit later, and does)
        assert index >= 7
        dropped = {b"never-committed-%d" % k for k in (1, 2, 3)}
        for node in c.ids:
            st = c.servers[node].store
            assert not st.damaged()
            assert [st.get(i).body for i in range(7)] == [b"committed-%03d" % k * 3 for k in range(6)] + [
                b"never-committed-0"]
            assert not {st.get(i).body for i in range(7, st.ledger_end_index + 1)} & dropped
        assert c.run_until(lambda: all(c.servers[i].driver.node.applied_index >= index for i in c.ids), 5000)
        c.check()
    finally:
        c.close()


def test_a_leader_that_cannot_reach_the_only_intact_copy_steps_aside_for_the_peer_that_holds_it():
    """Entries 5-9 are committed by leader L and follower P while Q is down; then L's copy of
    entry 7 is flipped at rest. L leads again (with Q), but cannot send to P, which holds the
    only intact copy: no repair, and no proof that 7 was never committed (P does not say its log
    ends before it). After ``STEP_ASIDE_MS`` L steps down and lets the others stand first; P is
    elected with Q's vote, brings Q up to date, and the group commits again."""
    c = Cluster(n=3, seed=22, store="file", durability="fsync")
    try:
        assert c.run_until(lambda: c.leader() is not None, 5000)
        lead = c.leader()
        p, q = [i for i in c.ids if i != lead]
        _commit(c, 5, b"first")
        c.crash(q)
        _commit(c, 5, b"second")
        assert c.leader() == lead
        c.run_for(500)
        loc = _where(c, lead, 7)
        c.crash(lead)
        flip_bit(loc.path, loc.offset + loc.size - 2, 5)
        c.partition([p], [lead, q])
        c.restart(lead)
        c.restart(q)
        assert c.run_until(lambda: c.leader() == lead, 10_000)
        c.heal()
        c.network.cut(lead, p)                       # L's pulls (and pushes) never reach P
        with pytest.raises(CorruptStoreError):
            c.servers[lead].store.get(7)
        assert c.run_until(lambda: c.leader() == p, 15_000)
        index = _commits_again(c)
        assert c.servers[q].store.get(7).body == b"second-%03d" % 2 * 3
        assert c.servers[lead].driver.node.tail.cuts == 0
        c.heal()                                     # L repairs entry 7 from P's copy
        assert c.run_until(lambda: not c.servers[lead].store.damaged() and all(
            c.servers[i].driver.node.applied_index >= index for i in c.ids), 10_000)
        c.check()
    finally:
        c.close()


def test_a_damaged_entry_at_or_below_the_commit_index_is_never_cut_even_when_no_peer_holds_it():
    """Every entry is committed and checkpointed (``page_cache`` mode writes the commit index into
    the checkpoint); then the leader's copy of entry 5 is flipped and both followers' stores are
    wiped (a majority's disks lost: no promise holds, but nothing wrong may follow). No intact
    copy of 5 exists and no peer's log reaches it, but the leader knows it committed: it never
    cuts it (unavailable, never wrong), and steps aside now and then for nothing."""
    c = Cluster(n=3, seed=23, store="file", durability="page_cache")
    try:
        assert c.run_until(lambda: c.leader() is not None, 5000)
        _commit(c, 12, b"entry")
        c.run_for(1000)                              # flushed and checkpointed
        lead = c.leader()
        loc = _where(c, lead, 5)
        for node in c.ids:
            c.crash(node)
        flip_bit(loc.path, loc.offset + loc.size - 2, 5)
        for node in c.ids:
            if node != lead:
                shutil.rmtree(c.config_for(node).default_path)
        for node in c.ids:
            c.restart(node)
        assert c.servers[lead].driver.node.committed_index == 11
        c.run_for(15_000)
        st = c.servers[lead].store
        assert st.ledger_end_index >= 11 and 5 in st.damaged()
        assert all(c.servers[i].driver.node.tail.cuts == 0 for i in c.ids)
        assert all(c.servers[i].store.ledger_end_index < 5 for i in c.ids if i != lead)
        assert c.invariants.problems == []
    finally:
        c.close()
