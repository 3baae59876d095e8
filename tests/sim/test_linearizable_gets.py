"""A client's get (``GetEntriesRequest``) is a linearizable read by default: a deposed leader
that does not know it yet never reports an entry a newer leader committed as missing; it
answers NOT_LEADER once its read-index round fails. UNSAFE_READ reads the node's own log at
once, in any role, and may be stale. In virtual time, over the simulated network (the history
records every get and ``Cluster.check`` checks them: docs/simulation.md, "Checkers")."""

from __future__ import annotations

import zlib

import msgpack
import pytest

from dledger.core import Role
from dledger.entry import decode
from dledger.protocol import (DLedgerResponseCode as Code, Envelope, GetEntriesRequest, ReadMode, decode_envelope,
                              encode_envelope)
from dledger.sim import Cluster
from sim.test_request_handling import Probe

#: the cut-off leader's clock runs at half speed: it takes two election timeouts of virtual
#: time to notice it lost its quorum, long after the others elected a leader that commits
SLOW = 0.5


def _leader(c: Cluster) -> str:
    assert c.run_until(lambda: c.leader() is not None, 3_000)
    return c.leader()


def _commit(c: Cluster, body: bytes, via: str | None = None):
    """Append ``body`` until one append is acknowledged (a refusal, no leader yet, is tried again)."""
    deadline = c.now_ms + 3_000
    while True:
        f = c.append(body, via=via)
        assert c.run_until(f.done, 1_000)
        if f.result().ok:
            return f.result()
        assert c.now_ms < deadline, f"nothing committed: {f.result()}"
        c.run_for(20)


def _unaware_old_leader(c: Cluster) -> tuple[str, object]:
    """The leader is cut off from the others (its clock slow, so that it goes on leading for a
    while); they elect a leader that commits an entry. Returns (old leader, the new entry's
    append response), the old leader still leading and its commit index below the entry."""
    old = _leader(c)
    c.processes[old].clock.set_rate(SLOW)
    _commit(c, b"before")
    c.run_for(20)           # the followers hear of its commit (a COMMIT push, answered) before the cut
    rest = [i for i in c.ids if i != old]
    c.partition([old], rest)
    assert c.run_until(lambda: c.leader() in rest, 3_000)
    kept = _commit(c, b"kept")
    c.run_for(1)            # acknowledged strictly before what follows is invoked (for the checker)
    node = c.servers[old].node
    assert node.role is Role.LEADER and node.committed_index < kept.index, "the scenario needs an unaware leader"
    return old, kept


@pytest.mark.parametrize("seed", range(4))
def test_a_cut_off_leader_answers_not_leader_never_index_out_of_range_for_an_entry_a_newer_leader_committed(seed):
    with Cluster(n=3, seed=seed) as c:
        old, kept = _unaware_old_leader(c)
        default = c.get(kept.index, via=old)                       # READ_INDEX_READ
        local = c.get(kept.index, ReadMode.UNSAFE_READ, via=old)
        # the local read answers from the old leader's log at once: the entry seems missing
        assert c.run_until(local.done, 50)
        assert local.result().code == Code.INDEX_OUT_OF_RANGE and not default.done()
        assert c.servers[old].role is Role.LEADER
        # the default read waits for a quorum that never comes, then fails as the leader steps down
        assert c.run_until(default.done, 2_000)
        assert default.result().code == Code.NOT_LEADER, Code(default.result().code).name
        assert c.servers[old].role is not Role.LEADER
        c.heal()
        c.run_for(1_000)
        # once it heard of the new leader, it names it; the new leader serves the entry
        hinted = c.get(kept.index, via=old)
        assert c.run_until(hinted.done, 1_000)
        assert hinted.result().code == Code.NOT_LEADER and hinted.result().leader_id == c.leader()
        again = c.get(kept.index, via=hinted.result().leader_id)
        assert c.run_until(again.done, 1_000) and again.result().code == Code.SUCCESS
        assert decode(again.result().entries[0]).body == b"kept"
        c.check()                                                  # the UNSAFE_READ get is exempt


@pytest.mark.parametrize("mode", [ReadMode.RAFT_LOG_READ, ReadMode.LEASE_READ])
def test_the_other_linearizable_modes_on_a_cut_off_leader_never_report_the_entry_missing_within_the_drift_bound(mode):
    """RAFT_LOG_READ waits for a NOOP that cannot commit; LEASE_READ is answered at once only
    while the lease holds, which it does not for long after the cut (clocks within the bound)."""
    for seed in range(3):
        with Cluster(n=3, seed=seed) as c:
            old = _leader(c)
            _commit(c, b"before")
            rest = [i for i in c.ids if i != old]
            c.partition([old], rest)
            assert c.run_until(lambda: c.leader() in rest, 3_000)
            kept = _commit(c, b"kept")
            g = c.get(kept.index, mode, via=old)
            assert c.run_until(g.done, 2_000)
            assert g.result().code != Code.INDEX_OUT_OF_RANGE
            c.check()


def test_on_a_healthy_cluster_each_mode_serves_the_entry_and_followers_refuse_all_but_the_local_read():
    with Cluster(n=3, seed=5) as c:
        lead = _leader(c)
        acked = _commit(c, b"x")
        follower = next(i for i in c.ids if i != lead)
        assert c.run_until(lambda: c.servers[follower].node.committed_index >= acked.index, 1_000)
        end = c.servers[lead].store.ledger_end_index
        for mode in ReadMode:
            at_leader = c.get(acked.index, mode, via=lead)
            at_follower = c.get(acked.index, mode, via=follower)
            beyond = c.get(acked.index + 10, mode, via=lead)
            assert c.run_until(lambda: at_leader.done() and at_follower.done() and beyond.done(), 1_000)
            assert at_leader.result().code == Code.SUCCESS, mode
            assert decode(at_leader.result().entries[0]).body == b"x"
            assert beyond.result().code == Code.INDEX_OUT_OF_RANGE, mode
            if mode is ReadMode.UNSAFE_READ:
                assert at_follower.result().code == Code.SUCCESS
                assert decode(at_follower.result().entries[0]).body == b"x"
            else:
                assert at_follower.result().code == Code.NOT_LEADER and at_follower.result().leader_id == lead
        # a log read appends a NOOP, as a read in that mode does; no other mode writes
        assert c.servers[lead].store.ledger_end_index == end + 2
        c.check()


def _without_last_field(env: Envelope) -> bytes:
    """``env`` framed as a sender that does not know its message's last field frames it."""
    items = msgpack.unpackb(encode_envelope(env)[:-4])
    items[6] = items[6][:-1]
    body = msgpack.packb(items, use_bin_type=True)
    return body + zlib.crc32(body).to_bytes(4, "big")


def test_a_request_without_the_mode_field_reads_in_read_index_mode_and_a_bad_mode_is_refused():
    with Cluster(n=3, seed=6) as c:
        lead = _leader(c)
        acked = _commit(c, b"y")
        client = Probe(c, "old-client")
        # an older client's frame, without read_mode: decoded with the default, READ_INDEX_READ
        req = GetEntriesRequest(group="sim", local_id="old-client", remote_id=lead, begin_index=acked.index)
        env = decode_envelope(_without_last_field(Envelope("old-client", lead, -7, False, req)))
        assert env.msg.read_mode == ReadMode.READ_INDEX_READ
        client.sent.add(-7)
        c.servers[lead].driver.on_envelope(env)
        assert -7 not in client.answers                         # not at once: a heartbeat round first
        assert c.run_until(lambda: -7 in client.answers, 500)
        resp = client.answers.pop(-7)
        assert resp.code == Code.SUCCESS and decode(resp.entries[0]).body == b"y"
        for bad in (4, -1, 99):
            resp = client.ask(lead, GetEntriesRequest(group="sim", local_id="old-client", remote_id=lead,
                                                      begin_index=acked.index, read_mode=bad))
            assert resp.code == Code.UNEXPECTED_ARGUMENT, bad
        c.check()
