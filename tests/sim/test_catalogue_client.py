"""Client, membership and bad-input scenarios of the reliability catalogue
(docs/catalogue.md), in virtual time.

Each test names the behaviour it proves; its docstring names the catalogue row.
"""

from __future__ import annotations

import pytest

from dledger.core import Role
from dledger.errors import DLedgerError
from dledger.protocol import (DLedgerResponseCode as Code, Envelope, HeartBeatRequest, PushEntryRequest,
                              PushEntryType, ReadMode, VoteRequest, VoteResponse, VoteResult)
from dledger.sim import Cluster
from sim.test_request_handling import Probe

ELECTION_TIMEOUT = 300


def _leader(c: Cluster) -> str:
    assert c.run_until(lambda: c.leader() is not None, 3_000)
    return c.leader()


def _hinted_append(c: Cluster, start: str, body: bytes, max_tries: int = 20) -> tuple:
    """A client that knows only ``start``: it follows a NOT_LEADER hint at once; without a
    hint, or when the hinted node fails, it waits 100 ms and asks ``start`` again. Returns
    (response or None, nodes asked in order)."""
    asked, node = [], start
    for _ in range(max_tries):
        asked.append(node)
        f = c.append(body, via=node)
        assert c.run_until(f.done, 3_000)
        resp = f.result()
        if resp.ok:
            return resp, asked
        if resp.code == Code.NOT_LEADER and resp.leader_id and resp.leader_id != node:
            node = resp.leader_id
            continue
        c.run_for(100)
        node = start
    return None, asked


@pytest.mark.parametrize("seed", range(3))
def test_a_client_that_knows_only_a_follower_reaches_the_leader_in_one_hop(seed):
    """CL-01: a follower answers NOT_LEADER naming the leader; the client's next call there
    succeeds."""
    with Cluster(n=5, seed=seed) as c:
        lead = _leader(c)
        for follower in [i for i in c.ids if i != lead]:
            assert c.run_until(lambda: c.servers[follower].node.leader_id == lead, 1_000)
            resp, asked = _hinted_append(c, follower, b"via-" + follower.encode())
            assert resp is not None and asked == [follower, lead]
        c.check()


@pytest.mark.parametrize("seed", range(5))
def test_stale_hints_after_the_leader_dies_do_not_loop_and_the_client_gets_through(seed):
    """CL-01 during a failover: the followers' hints name the dead leader for a while; a
    client following them reaches the new leader within a bounded number of tries and a
    bounded time, never bouncing for ever."""
    with Cluster(n=5, seed=seed) as c:
        lead = _leader(c)
        start = next(i for i in c.ids if i != lead)
        assert c.run_until(lambda: c.servers[start].node.leader_id == lead, 1_000)
        c.crash(lead)
        began = c.now_ms
        resp, asked = _hinted_append(c, start, b"after-failover")
        assert resp is not None, asked
        assert len(asked) <= 20 and c.now_ms - began <= 2_000, (asked, c.now_ms - began)
        c.check()


@pytest.mark.parametrize("seed", range(3))
def test_a_flood_beyond_the_pending_limit_is_refused_at_once_and_memory_stays_bounded(seed):
    """CL-07 (DLedger#295): 1,000 appends at once, at most 50 pending allowed, a slow
    follower link so they stay pending. The excess is refused with LEADER_PENDING_FULL, every
    other append succeeds, the pending queue never exceeds the limit, and it drains."""
    limit = 50
    with Cluster(n=3, seed=seed, max_pending_requests_num=limit) as c:
        lead = _leader(c)
        for f in c.ids:
            if f != lead:
                c.network.set_link(lead, f, 30, 60)
        pusher = c.servers[lead].node.pusher
        futures = [c.append(b"f%04d" % k) for k in range(1_000)]
        most = 0
        while not all(f.done() for f in futures):
            c.run_for(1)
            most = max(most, pusher.pending_count())
        codes = {f.result().code for f in futures}
        assert codes == {Code.SUCCESS, Code.LEADER_PENDING_FULL}
        assert most <= limit
        assert sum(f.result().ok for f in futures) >= limit
        assert c.run_until(lambda: pusher.pending_count() == 0, 1_000)
        after = c.append(b"after")
        assert c.run_until(after.done, 1_000) and after.result().ok
        c.check()


@pytest.mark.parametrize("seed", range(3))
def test_clients_that_give_up_mid_append_leave_no_pending_state_and_their_appends_may_commit(seed):
    """CL-08 (DLedger PR #309): 100 appends whose clients go away (their futures are
    cancelled) while a follower link is slow. The server goes on: the appends commit, nothing
    stays pending, and the next append succeeds."""
    with Cluster(n=3, seed=seed, strict_history=False) as c:
        lead = _leader(c)
        for f in c.ids:
            if f != lead:
                c.network.set_link(lead, f, 30, 60)
        server = c.servers[lead]
        futures = [server.append(b"gone-%d" % k) for k in range(100)]
        c.run_for(5)
        assert sum(f.cancel() for f in futures) > 0
        assert c.run_until(lambda: server.node.pusher.pending_count() == 0, 2_000)
        after = c.append(b"after")
        assert c.run_until(after.done, 1_000) and after.result().ok
        assert [e.body for e in c.committed_log()][-101:] == [b"gone-%d" % k for k in range(100)] + [b"after"]
        c.check()


@pytest.mark.parametrize("seed", range(3))
def test_role_changes_are_reported_once_each_in_term_order_across_restarts(seed):
    """CL-09 (RocketMQ#1464): every node's role handler, through leader crashes and
    restarts, sees each transition once, terms never going back, also from one process of a
    node to the next."""
    with Cluster(n=3, seed=seed) as c:
        seen: dict[str, list] = {i: [] for i in c.ids}

        def watch(node_id):
            c.servers[node_id].add_role_change_handler(lambda ch: seen[node_id].append((ch.term, ch.role)))

        for i in c.ids:
            watch(i)
        for _ in range(3):
            lead = _leader(c)
            c.crash(lead)
            c.run_for(ELECTION_TIMEOUT * 2)
            c.restart(lead)
            watch(lead)
            c.run_for(ELECTION_TIMEOUT * 2)
        _leader(c)
        for node_id, changes in seen.items():
            assert changes, node_id
            assert all(a != b for a, b in zip(changes, changes[1:])), (node_id, changes)
            terms = [t for t, _role in changes]
            assert terms == sorted(terms), (node_id, changes)
        c.check()


def test_requests_from_a_node_of_another_group_or_outside_the_peer_list_are_refused_without_a_term_change():
    """MB-01 and BI-04: a node started with another group name, or with an id that is not in
    the peer list, asks for votes with a huge term, claims leadership and pushes. Each request
    is refused (UNKNOWN_GROUP, REJECT_UNKNOWN_LEADER, UNKNOWN_MEMBER, INCONSISTENT_LEADER) and
    no term moves; the cluster goes on committing."""
    with Cluster(n=3, seed=4) as c:
        lead = _leader(c)
        follower = next(i for i in c.ids if i != lead)
        terms = {i: c.servers[i].node.term for i in c.ids}
        p = Probe(c, "n9")
        t = terms[follower] + 100
        for group, sender, expect_vote, expect_hb in (("other", follower, None, Code.UNKNOWN_GROUP),
                                                      ("sim", "n9", VoteResult.REJECT_UNKNOWN_LEADER,
                                                       Code.UNKNOWN_MEMBER)):
            r = p.ask(follower, VoteRequest(group=group, local_id=sender, remote_id=follower, leader_id=sender,
                                            term=t, ledger_end_index=1_000, ledger_end_term=t))
            if expect_vote is None:
                assert r.code == Code.UNKNOWN_GROUP
            else:
                assert r.vote_result == expect_vote
            r = p.ask(follower, HeartBeatRequest(group=group, local_id=sender, remote_id=follower, leader_id=sender,
                                                 term=t))
            assert r.code == expect_hb
        r = p.ask(follower, PushEntryRequest(group="sim", local_id="n9", remote_id=follower, leader_id="n9",
                                             term=terms[follower], type=PushEntryType.COMMIT, commit_index=50))
        assert r.code == Code.INCONSISTENT_LEADER
        assert {i: c.servers[i].node.term for i in c.ids} == terms
        f = c.append(b"after")
        assert c.run_until(f.done, 1_000) and f.result().ok
        c.check()


@pytest.mark.parametrize("seed", range(3))
def test_vote_grants_from_outside_the_peer_list_are_never_counted(seed):
    """MB-01: a candidate cut off from its peers receives, for every vote request it sends,
    an ACCEPT from a node that is not a peer (same request id). It never becomes leader."""
    with Cluster(n=3, seed=seed) as c:
        lead = _leader(c)
        victim = next(i for i in c.ids if i != lead)
        endpoint = c.network.endpoints[victim]
        send = endpoint.send

        def forge(env):
            send(env)
            if isinstance(env.msg, VoteRequest):
                grant = VoteResponse(group="sim", local_id="n9", remote_id=victim, leader_id=victim,
                                     term=env.msg.term, vote_result=VoteResult.ACCEPT)
                c.network.blocked.discard(("n9", victim))
                c.network._send(Envelope("n9", victim, env.request_id, True, grant))

        endpoint.send = forge
        c.partition([victim], [i for i in c.ids if i != victim])
        became_leader = False
        for _ in range(5_000):
            c.run_for(1)
            became_leader |= c.servers[victim].role is Role.LEADER
        assert not became_leader
        c.heal()
        c.check()


@pytest.mark.parametrize("seed", range(3))
def test_a_two_node_cluster_with_one_node_dead_commits_nothing_and_serves_no_linearizable_read(seed):
    """MB-04: with one of two nodes dead, no append succeeds, no node claims leadership for
    long, and linearizable reads fail rather than answer from a lone node."""
    with Cluster(n=2, seed=seed) as c:
        lead = _leader(c)
        f = c.append(b"before")
        assert c.run_until(f.done, 1_000) and f.result().ok
        other = next(i for i in c.ids if i != lead)
        c.crash(other)
        c.run_for(2 * ELECTION_TIMEOUT)
        assert c.servers[lead].role is not Role.LEADER
        appends = [c.append(b"lost-%d" % k, via=lead) for k in range(5)]
        reads = [c.read(mode, via=lead) for mode in (ReadMode.RAFT_LOG_READ, ReadMode.READ_INDEX_READ,
                                                     ReadMode.LEASE_READ)]
        c.run_for(5_000)
        assert not [x for x in appends + reads if x.done() and x.result().ok]
        assert c.servers[lead].role is not Role.LEADER
        c.restart(other)
        g = c.append(b"after")
        assert c.run_until(lambda: c.leader() is not None, 3_000)
        g = c.append(b"after")
        assert c.run_until(g.done, 2_000) and g.result().ok
        c.check()


def test_an_entry_larger_than_a_segment_is_refused_and_later_appends_are_unaffected():
    """BI-06 (camunda#6318): an append larger than a data segment (1 MiB in the simulator)
    is refused with an error code, nothing is written anywhere, and the next append takes
    the next index as if nothing happened."""
    with Cluster(n=3, seed=5) as c:
        lead = _leader(c)
        f = c.append(b"ok")
        assert c.run_until(lambda: f.done() and all(c.servers[i].store.ledger_end_index == f.result().index
                                                    for i in c.ids), 1_000)
        ends = {i: c.servers[i].store.ledger_end_index for i in c.ids}
        big = c.append(b"x" * (2 << 20))
        assert c.run_until(big.done, 1_000)
        assert not big.result().ok and Code.of(big.result().code) is not Code.UNKNOWN
        c.run_for(500)
        assert {i: c.servers[i].store.ledger_end_index for i in c.ids} == ends
        g = c.append(b"next")
        assert c.run_until(g.done, 1_000) and g.result().ok and g.result().index == f.result().index + 1
        assert c.leader() == lead
        c.check()


def test_reads_outside_the_log_raise_the_documented_error_and_nothing_else():
    """BI-07: ``get`` of a negative index, of an index beyond the commit index or far beyond
    the log raises ``DLedgerError`` with INDEX_OUT_OF_RANGE (or INDEX_LESS_THAN_LOCAL_BEGIN),
    never another exception; the node serves the next read."""
    with Cluster(n=3, seed=6) as c:
        lead = _leader(c)
        f = c.append(b"one")
        assert c.run_until(f.done, 1_000) and f.result().ok
        server = c.servers[lead]
        for index in (-1, -(1 << 62), server.node.committed_index + 1, 1 << 60):
            with pytest.raises(DLedgerError) as exc:
                server.get(index)
            assert exc.value.code in (Code.INDEX_OUT_OF_RANGE, Code.INDEX_LESS_THAN_LOCAL_BEGIN), index
        assert server.get(f.result().index).body == b"one"
        c.check()
