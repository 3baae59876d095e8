"""Linearizable reads (READ_INDEX_READ, LEASE_READ) never return a state older than an append
acknowledged before the read was invoked: also on a leader re-elected in the same term after a
restart, and on an old leader after a leadership transfer whose messages to it are lost; read
modes given by name or number work, anything else fails at once."""

from __future__ import annotations

import pytest

from dledger.core import Role
from dledger.protocol import DLedgerResponseCode as Code, PushEntryRequest, ReadMode
from dledger.sim import Cluster
from core.wiring import Wired

LINEARIZABLE = (ReadMode.READ_INDEX_READ, ReadMode.LEASE_READ)


def _elected(seed: int) -> Wired:
    w = Wired(3, seed=seed)
    assert w.run_until(lambda: w.leader() is not None, 3000)
    return w


def _read(w: Wired, node_id: str, token, mode) -> None:
    node = w.nodes[node_id]
    node.read(w.now, token, mode)
    w._collect(node)
    w.deliver()


@pytest.mark.parametrize("mode", LINEARIZABLE)
def test_leader_reelected_in_the_same_term_does_not_read_at_its_restored_commit_index(mode):
    w = _elected(seed=11)
    lead = w.leader()
    term = w.nodes[lead].term
    for k in range(3):
        w.propose(lead, ("w", k), [b"v%d" % k])
        w.run(20)
    acked = w.completions[("w", 2)].response
    assert acked.code == Code.SUCCESS
    # the leader dies; its checkpoint had recorded only an older commit index of this term
    store = w.stores[lead]
    w.stop(lead)
    store.committed_index = w.completions[("w", 0)].response.index
    w.start(lead)
    # its pushes are lost, so nothing of the new leadership can commit
    w.drop = lambda env: env.src == lead and isinstance(env.msg, PushEntryRequest)
    assert w.run_until(lambda: w.nodes[lead].role is Role.LEADER, 3000)
    assert w.nodes[lead].term == term                     # the same term: its vote was durable
    _read(w, lead, "r", mode)
    w.run(300)
    done = w.completions.get("r")
    assert done is None or done.response.code != Code.SUCCESS or done.response.index >= acked.index, \
        (done and done.response, acked.index)
    # once the pushes flow, the read is served at an index covering the acknowledged append
    w.drop = None
    _read(w, lead, "r2", mode)
    assert w.run_until(lambda: "r2" in w.completions, 3000)
    resp = w.completions["r2"].response
    assert resp.code == Code.SUCCESS and resp.index >= acked.index


def test_leader_reelected_in_the_term_it_led_before_a_restart_has_no_lease_in_it():
    w = _elected(seed=12)
    lead = w.leader()
    w.propose(lead, "w", [b"v"])
    w.run(20)
    assert w.nodes[lead].elector.lease_valid(w.now)
    term = w.nodes[lead].term
    w.stop(lead)
    w.start(lead)
    assert w.run_until(lambda: w.nodes[lead].role is Role.LEADER, 3000) and w.nodes[lead].term == term
    w.propose(lead, "w2", [b"v2"])
    assert w.run_until(lambda: "w2" in w.completions, 1000)
    # an earlier incarnation may have started a transfer in this term: READ_INDEX only
    assert not w.nodes[lead].elector.lease_valid(w.now)
    _read(w, lead, "r", ReadMode.LEASE_READ)
    assert "r" not in w.completions                       # waits for a heartbeat round
    assert w.run_until(lambda: "r" in w.completions, 1000)
    assert w.completions["r"].response.code == Code.SUCCESS


def test_old_leader_serves_no_lease_read_after_a_transfer_whose_answers_are_lost():
    c = Cluster(n=3, seed=5, rpc_timeout_ms=40)
    assert c.run_until(lambda: c.leader() is not None, 3000)
    old = c.leader()
    target = next(i for i in c.ids if i != old)
    f = c.append(b"before")
    assert c.run_until(f.done, 1000) and f.result().ok
    old_term = c.servers[old].node.term
    c.network.drop_if = lambda env: env.dst == old          # nothing reaches the old leader
    c.servers[old].transfer_leadership(target)
    assert c.run_until(lambda: c.servers[target].role is Role.LEADER, 1000)
    assert c.servers[target].node.term > old_term
    g = c.append(b"after", via=target)
    assert c.run_until(g.done, 1000) and g.result().ok
    new_index = g.result().index
    # the old leader still believes it leads its term: whatever it answers, it is not stale
    for _ in range(20):
        if c.servers[old].role is not Role.LEADER:
            break
        r = c.read(ReadMode.LEASE_READ, via=old)
        c.run_until(r.done, 50)
        if r.done() and r.exception() is None:
            resp = r.result()
            assert resp.code != Code.SUCCESS or resp.index >= new_index, (resp, new_index)
        c.run_for(5)
    c.network.drop_if = None
    c.check()


@pytest.mark.parametrize("mode", ["LEASE_READ", "lease_read", 3, ReadMode.LEASE_READ, "READ_INDEX_READ", 2,
                                  "raft_log_read", "UNSAFE_READ", 0])
def test_read_modes_by_name_or_number_are_served(mode):
    c = Cluster(n=3, seed=3)
    assert c.run_until(lambda: c.leader() is not None, 3000)
    f = c.append(b"x")
    assert c.run_until(f.done, 1000) and f.result().ok
    r = c.read(mode)
    assert c.run_until(r.done, 1000)
    assert r.result().code == Code.SUCCESS


@pytest.mark.parametrize("mode", ["LEASE", "", "lease-read", 4, -1, True, 2.0, None, b"LEASE_READ"])
def test_unknown_read_mode_raises_at_once_naming_the_valid_modes(mode):
    c = Cluster(n=3, seed=3)
    assert c.run_until(lambda: c.leader() is not None, 3000)
    server = c.servers[c.leader()]
    with pytest.raises(ValueError, match="LEASE_READ"):
        server.read(mode)
