"""Failover mid-stream and restarts: acknowledged messages exactly once, queue offsets without
gaps, dispatch resumed without double dispatch or skips."""

import os

import pytest

from dledger.broker import decode
from dledger.broker.reput import CHECKPOINT

from .helpers import OK, BrokerGroup, check_exactly_once, cq_bytes

TOPICS = [("A", 0), ("A", 1), ("B", 0)]


def produce(g, n, start=0, timeout_ms=3_000):
    """Put ``n`` messages one after another through whoever leads; (item, result) pairs, with
    every non-OK send retried until acknowledged."""
    sent = []
    for i in range(start, start + n):
        t, q = TOPICS[i % len(TOPICS)]
        body = b"m-%d" % i
        for _attempt in range(20):
            lead = g.leader()
            if lead is None:
                g.c.run_until(lambda: g.leader() is not None, 3_000)
                continue
            f = g.logs[lead].put_message_async(t, q, body, keys=[f"k{i}"])
            g.c.run_until(f.done, timeout_ms)
            r = f.result() if f.done() else None
            sent.append(((t, q, body), r))
            if r is not None and r.status is OK:
                break
    return sent




def test_failover_mid_stream_keeps_every_acknowledged_message_exactly_once(tmp_path):
    with BrokerGroup(tmp_path, seed=3) as g:
        old = g.elected()
        sent = produce(g, 30)
        # a burst in flight when the leader dies
        burst = [g.logs[old].put_message_async("A", 0, b"burst-%d" % i) for i in range(10)]
        g.c.run_for(1)
        g.c.crash(old)
        sent += produce(g, 30, start=30)
        g.c.restart(old)
        g.logs[old].close()
        g.logs[old] = type(g.logs[old])(g.c.servers[old])
        sent += produce(g, 30, start=60)
        g.settle()
        acked = check_exactly_once(g, sent)
        assert len(acked) == 90
        # the burst was never acknowledged (its leader died): what of it committed is in the
        # queue like any message (check_exactly_once saw no gap), and no more than was sent
        assert not any(f.done() and f.result().status is OK for f in burst)
        bodies = [m.body for m in g.logs[g.leader()].get_messages("A", 0, 0, 10_000)[0]]
        assert all(bodies.count(b"burst-%d" % i) <= 1 for i in range(10))
        history = g.logs[g.leader()].roles.history
        assert history and history[-1][1] == "MASTER"
        assert [t for t, _r in history] == sorted(t for t, _r in history)


def test_a_consumer_resumes_by_queue_offset_across_a_failover(tmp_path):
    with BrokerGroup(tmp_path, seed=5) as g:
        sent = produce(g, 12)
        g.settle()
        reader = next(i for i in g.c.ids if i != g.leader())
        got, nxt = g.logs[reader].get_messages("A", 0, 0, 2)
        g.c.crash(g.leader())
        sent += produce(g, 12, start=12)
        g.c.run_until(lambda: g.logs[reader].reput.next_index > g.c.servers[g.leader()].node.committed_index, 3_000)
        while True:
            more, n2 = g.logs[reader].get_messages("A", 0, nxt, 3)
            if n2 == nxt:
                break
            got += more
            nxt = n2
        want = [body for (t, q, body), r in sent if (t, q) == ("A", 0) and r is not None and r.status is OK]
        assert [m.body for m in got] == want
        assert [m.queue_offset for m in got] == list(range(len(want)))


@pytest.mark.parametrize("who", ["follower", "leader"])
def test_a_restarted_node_recovers_its_queues_and_dispatches_nothing_twice(tmp_path, who):
    with BrokerGroup(tmp_path, seed=7) as g:
        sent = produce(g, 20)
        g.settle()
        node = g.leader() if who == "leader" else next(i for i in g.c.ids if i != g.leader())
        g.restart(node)
        sent += produce(g, 20, start=20)
        g.settle()
        check_exactly_once(g, sent)
        assert sum(len(v) for v in cq_bytes(g.logs[node]).values()) == 40 * 20


def test_a_crash_between_queue_writes_and_the_checkpoint_truncates_and_redispatches_once(tmp_path):
    with BrokerGroup(tmp_path, seed=9) as g:
        sent = produce(g, 15)
        g.settle()
        node = next(i for i in g.c.ids if i != g.leader())
        log = g.logs[node]
        path = os.path.join(log.root, CHECKPOINT)
        # the checkpoint as it was after the first five entries: the units after it are on disk
        # but not vouched for (a crash before the checkpoint caught up)
        e = g.c.servers[node].store.get(5)
        g.c.crash(node)
        with open(path, "w") as f:
            f.write(f"6 {e.pos + e.size}\n")
        before = cq_bytes(log)
        g.c.restart(node)
        log.close()
        g.logs[node] = type(log)(g.c.servers[node])
        units_after_open = sum(len(v) for v in cq_bytes(g.logs[node]).values()) // 20
        assert units_after_open < 15
        g.settle()
        assert cq_bytes(g.logs[node]) == before
        check_exactly_once(g, sent)
        index_offsets = sorted(e[1] for f in g.logs[node].reput.index.files for e in f.entries())
        assert len(index_offsets) == len(set(index_offsets)) == 15


def test_messages_across_segment_ends_keep_their_real_offsets(tmp_path):
    with BrokerGroup(tmp_path, seed=11, mapped_file_size_for_entry_data=16 * 1024) as g:
        g.elected()
        rs = g.put_many([("S", 0, bytes([i]) * 1000) for i in range(60)])
        assert all(r.status is OK for r in rs)
        g.settle()
        seg = 16 * 1024
        assert len({r.wrote_offset // seg for r in rs}) > 3
        for log in g.logs.values():
            for i, r in enumerate(rs):
                m = decode(log.get_message(r.wrote_offset, r.wrote_bytes))
                assert m.physical_offset == r.wrote_offset and m.body == bytes([i]) * 1000
                assert r.wrote_offset // seg == (r.wrote_offset + r.wrote_bytes - 1) // seg
        assert all(log.min_offset() == 0 and log.confirm_offset() == log.max_offset() <= log.written_offset()
                   and log.max_offset() == rs[-1].wrote_offset + rs[-1].wrote_bytes for log in g.logs.values())


def test_leadership_back_and_forth_continues_queue_offsets_on_each_new_master(tmp_path):
    """A node that led before must not reuse its old table: offsets go on from the log."""
    with BrokerGroup(tmp_path, seed=13) as g:
        a = g.elected()
        b = next(i for i in g.c.ids if i != a)
        sent = produce(g, 6)
        for target in (b, a, b):
            f = g.c.servers[g.leader()].transfer_leadership(target)
            assert g.c.run_until(lambda: f.done() and g.leader() == target, 5_000)
            sent += produce(g, 6, start=len(sent))
        g.settle()
        acked = check_exactly_once(g, sent)
        assert len(acked) == 24
        assert [r.queue_offset for (t, q, _b), r in acked if (t, q) == ("A", 0)] == list(range(8))


def test_a_follower_cut_off_catches_up_and_dispatches_what_it_missed_once(tmp_path):
    with BrokerGroup(tmp_path, seed=17) as g:
        sent = produce(g, 9)
        g.settle()
        lead = g.leader()
        lagger = next(i for i in g.c.ids if i != lead)
        others = [i for i in g.c.ids if i != lagger]
        g.c.partition(others, [lagger])
        sent += produce(g, 30, start=9)
        g.c.run_for(500)
        assert g.logs[lagger].max_queue_offset("A", 0) == 3          # nothing committed reached it
        g.c.heal()
        g.settle()
        check_exactly_once(g, sent)
        assert g.logs[lagger].max_queue_offset("A", 0) == 13


def test_a_new_master_shows_every_acknowledged_message_without_waiting_for_a_put(tmp_path):
    """The leader dies right after its last put was acknowledged, before the followers heard
    that it committed: the new master holds the message but has committed nothing of its own
    term, and Raft's rule commits older entries only through an entry of the current term.
    With no producer left, its consumers must still see every acknowledged message (RocketMQ
    waits, on becoming master, until its log is committed to the end): the commit log asks the
    node for a read that appends a no-op, as Java DLedger's FastAdvanceCommitIndexService."""
    with BrokerGroup(tmp_path, seed=3) as g:
        old = g.elected()
        sent = produce(g, 6)
        assert all(r is not None and r.status is OK for _item, r in sent)
        g.c.crash(old)                   # at once: the followers' commit index lags its
        assert g.c.run_until(lambda: g.leader() not in (None, old), 5_000)
        new = g.leader()
        node = g.c.servers[new].node
        g.c.run_for(2_000)               # no put: only the master's own doing
        assert node.committed_index == g.c.servers[new].store.ledger_end_index
        want = [body for (t, q, body), _r in sent if (t, q) == ("A", 0)]
        got = [m.body for m in g.logs[new].get_messages("A", 0, 0, 100)[0]]
        assert got == want


def test_a_commit_log_wrapped_around_a_new_leader_commits_the_earlier_terms_too(tmp_path):
    """The same as above when the host wraps the server only once it leads: the commit log
    adopts the role it finds and asks for the no-op then. (The followers' commit logs are
    closed first, so that none of them asks when it is elected.)"""
    with BrokerGroup(tmp_path, seed=3) as g:
        old = g.elected()
        sent = produce(g, 6)
        for i in g.c.ids:
            if i != old:
                g.logs[i].close()
        g.c.crash(old)
        assert g.c.run_until(lambda: g.c.leader() not in (None, old), 5_000)
        new = g.c.leader()
        server, node = g.c.servers[new], g.c.servers[new].node
        g.c.run_for(500)
        assert node.committed_index < server.store.ledger_end_index      # a closed commit log asked nothing
        g.logs[new] = type(g.logs[new])(server)
        g.c.run_for(2_000)
        assert node.committed_index == server.store.ledger_end_index
        want = [body for (t, q, body), _r in sent if (t, q) == ("A", 0)]
        assert [m.body for m in g.logs[new].get_messages("A", 0, 0, 100)[0]] == want
