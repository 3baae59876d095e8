"""Log matching under storage faults: a follower accepts an APPEND only when the entry before
its first index exists locally with the leader's term for it, and answers a TRUNCATE with
SUCCESS only when its store really cut (or had nothing to cut)."""

from __future__ import annotations

import random

from dledger.config import DLedgerConfig
from dledger.core import Node, Role
from dledger.protocol import DLedgerResponseCode as Code, Envelope, HeartBeatRequest, PushEntryRequest, PushEntryType
from dledger.sim import Cluster
from dledger.store import DLedgerMemoryStore

PEERS = "n0-h:1;n1-h:2;n2-h:3"


def _store(terms_bodies) -> DLedgerMemoryStore:
    """A store holding one entry per (term, body), each written by a leader of its term."""
    store = DLedgerMemoryStore(data_file_size=1 << 16, suspect=None)
    for term, body in terms_bodies:
        store.persist_term(term, "n1")
        store.batch_append_as_leader([body])
    return store


def _follower(store, term: int = 3) -> Node:
    store.persist_term(term, None)
    node = Node(DLedgerConfig(self_id="n0", peers=PEERS, group="g").validate(), store, random.Random(1))
    node.take_ready()
    node.receive(0, Envelope("n1", "n0", 1, False, HeartBeatRequest(group="g", local_id="n1", remote_id="n0",
                                                                   leader_id="n1", term=term)))
    node.take_ready()
    assert node.role is Role.FOLLOWER
    return node


def _push(node, rid=7, **kw):
    base = dict(group="g", local_id="n1", remote_id="n0", leader_id="n1", term=3, type=PushEntryType.APPEND)
    base.update(kw)
    node.receive(1, Envelope("n1", "n0", rid, False, PushEntryRequest(**base)))
    out = [m.msg for m in node.take_ready().messages if m.request_id == rid]
    return out[0] if out else None


def test_append_is_refused_when_the_previous_entry_has_another_term():
    # the follower's entry 1 comes from term 1; the leader's entry 1 from term 2 (same size)
    follower = _follower(_store([(1, b"e0"), (1, b"e1")]))
    leader = _store([(1, b"e0"), (2, b"e1"), (3, b"e2")])
    raw = leader.get_raw(2)
    resp = _push(follower, entries=raw, first_entry_index=2, count=1, last_entry_term=3,
                 pre_log_index=1, pre_log_term=leader.get_entry_term(1))
    assert resp.code == Code.INCONSISTENT_STATE
    assert follower.store.ledger_end_index == 1 and follower.store.get_entry_term(1) == 1


def test_append_is_accepted_when_the_previous_entry_matches():
    follower = _follower(_store([(1, b"e0"), (2, b"e1")]))
    leader = _store([(1, b"e0"), (2, b"e1"), (3, b"e2")])
    resp = _push(follower, entries=leader.get_raw(2), first_entry_index=2, count=1, last_entry_term=3,
                 pre_log_index=1, pre_log_term=2)
    assert resp.code == Code.SUCCESS and follower.store.ledger_end_index == 2


class _TruncateDoesNothing:
    """A store whose ``truncate`` reports success without cutting (a lying or broken disk)."""

    def __init__(self, inner) -> None:
        object.__setattr__(self, "inner", inner)

    def __getattr__(self, name):
        if name == "truncate":
            return lambda index: self.inner.ledger_end_index
        return getattr(self.inner, name)

    def __setattr__(self, name, value) -> None:
        setattr(self.inner, name, value)


def test_truncate_answers_success_only_when_the_store_really_cut():
    store = _TruncateDoesNothing(_store([(1, b"e0"), (1, b"e1"), (1, b"e2")]))
    follower = _follower(store)
    assert _push(follower, rid=5, type=PushEntryType.COMPARE, pre_log_index=0, pre_log_term=1).code == Code.SUCCESS
    resp = _push(follower, type=PushEntryType.TRUNCATE, pre_log_index=1)
    assert resp.code != Code.SUCCESS
    assert store.ledger_end_index == 2


def test_truncate_without_a_compare_match_in_this_term_is_refused():
    follower = _follower(_store([(1, b"e0"), (1, b"e1"), (1, b"e2")]))
    resp = _push(follower, type=PushEntryType.TRUNCATE, pre_log_index=2)
    assert resp.code == Code.INCONSISTENT_STATE
    # nothing was taken as verified: a commit hint cannot commit the unchecked entries
    _push(follower, rid=9, type=PushEntryType.COMMIT, commit_index=2)
    assert follower.committed_index == -1


def test_truncate_beyond_the_local_log_verifies_nothing():
    follower = _follower(_store([(1, b"e0"), (1, b"e1"), (1, b"e2")]))
    assert _push(follower, rid=5, type=PushEntryType.COMPARE, pre_log_index=0, pre_log_term=1).code == Code.SUCCESS
    resp = _push(follower, type=PushEntryType.TRUNCATE, pre_log_index=50, commit_index=2)
    assert resp.code == Code.INCONSISTENT_STATE
    assert follower.committed_index <= 0


def test_failed_truncates_on_a_follower_never_diverge_the_replicas():
    c = Cluster(n=3, seed=21, disk_faults=True)
    assert c.run_until(lambda: c.leader() is not None, 3000)
    lead = c.leader()
    followers = [i for i in c.ids if i != lead]
    # one follower misses some appends and then gets a divergent tail of an isolated old leader
    c.partition([lead, followers[0]], [followers[1]])
    for k in range(3):
        f = c.append(b"a%d" % k)
        assert c.run_until(f.done, 2000) and f.result().ok
    c.heal()
    c.partition([lead], followers)
    c.append(b"lost", via=lead)                         # never commits: it stays on the old leader
    c.run_for(50)
    for i in c.ids:
        c.disks[i].fail("truncate", times=3)
    assert c.run_until(lambda: c.leader() in followers, 5000)
    c.heal()
    for k in range(3):
        f = c.append(b"b%d" % k)
        assert c.run_until(f.done, 5000)
    c.run_for(3000)
    c.check()
    ends = {i: c.servers[i].store.ledger_end_index for i in c.ids}
    assert len(set(ends.values())) == 1, ends


# -- corruption is never pushed ------------------------------------------------------------------
def test_a_damaged_entry_on_the_leader_is_never_pushed_and_is_repaired_before_it_is(caplog):
    from helpers.store_files import flip_bit, record_location

    c = Cluster(n=3, seed=4, store="file")
    try:
        assert c.run_until(lambda: c.leader() is not None, 3000)
        lead = c.leader()
        lagging, other = [i for i in c.ids if i != lead]
        c.crash(lagging)
        for k in range(6):
            f = c.append(b"entry-%d" % k)
            assert c.run_until(f.done, 2000) and f.result().ok
        c.run_for(500)                                  # flushed and checkpointed
        # the other follower cannot reach the lagging one, so only the damaged leader can refill
        # it. (Every node crashed in page_cache mode: each comes back recovering and the first
        # election needs all three votes; only the leader reaches both others, so it wins.)
        c.crash(other)
        cfg = c.config_for(lead)
        c.crash(lead)
        loc = record_location(cfg.default_path, 4, cfg.mapped_file_size_for_entry_index,
                              cfg.mapped_file_size_for_entry_data)
        flip_bit(loc.path, loc.offset + loc.size - 1)   # a body bit of entry 4
        c.network.cut(other, lagging)
        c.network.cut(lagging, other)
        c.restart(other)
        c.restart(lead)
        c.restart(lagging)
        caplog.clear()
        c.run_for(5000)
        assert lead not in c.crashed and lagging not in c.crashed
        lag_store = c.servers[lagging].store
        other_store = c.servers[other].store
        # whatever the lagging node holds it got intact, byte for byte the copy the other
        # follower kept: the damaged record never left the leader, which repaired entry 4 from
        # the other follower (core/peer_repair.py) before it pushed it
        for i in range(lag_store.ledger_end_index + 1):
            assert bytes(lag_store.get_raw(i)) == bytes(other_store.get_raw(i))
        assert c.leader() == lead and lag_store.ledger_end_index == 5
        assert bytes(c.servers[lead].store.get_raw(4)) == bytes(other_store.get_raw(4))
        # no hot loop: the damaged range is retried at most once per push timeout
        retries = [r for r in caplog.records if "cannot read entries" in r.getMessage()]
        assert len(retries) <= 5000 // cfg.max_push_timeout_ms + 2, len(retries)
        c.heal()
        c.run_for(3000)
        assert c.leader() is not None
    finally:
        c.close()
