"""A simulated broker group: a ``dledger.sim.Cluster`` whose every server is wrapped in a
``DLedgerCommitLog`` (again after each restart), and helpers to put and wait in virtual time."""

from __future__ import annotations

import os

from dledger.broker import DLedgerCommitLog, PutMessageStatus
from dledger.broker.consume_queue import CQ_UNIT_SIZE, list_queues
from dledger.sim import Cluster


class BrokerGroup:
    def __init__(self, tmp_path, n: int = 3, seed: int = 1, **config) -> None:
        self.c = Cluster(n=n, seed=seed, store="file", base_dir=tmp_path, **config)
        self.logs: dict[str, DLedgerCommitLog] = {i: DLedgerCommitLog(s) for i, s in self.c.servers.items()}

    def close(self) -> None:
        for log in self.logs.values():
            log.close()
        self.c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def elected(self) -> str:
        assert self.c.run_until(lambda: self.leader() is not None, 5_000)
        return self.leader()

    def leader(self) -> str | None:
        lead = self.c.leader()
        return lead if lead is not None and self.logs[lead].roles.writable else None

    def restart(self, node_id: str) -> DLedgerCommitLog:
        old = self.logs[node_id]
        server = self.c.restart(node_id)
        old.close()
        self.logs[node_id] = DLedgerCommitLog(server)
        return self.logs[node_id]

    def put(self, topic, queue_id, body, via=None, timeout_ms=5_000, **kw):
        log = self.logs[via or self.elected()]
        f = log.put_message_async(topic, queue_id, body, **kw)
        assert self.c.run_until(f.done, timeout_ms)
        return f.result()

    def put_many(self, items, via=None, timeout_ms=10_000):
        """Put ``(topic, queue_id, body)`` items at once through one node; their results."""
        log = self.logs[via or self.elected()]
        fs = [log.put_message_async(t, q, b) for t, q, b in items]
        assert self.c.run_until(lambda: all(f.done() for f in fs), timeout_ms)
        return [f.result() for f in fs]

    def settled(self) -> bool:
        """Whether the leader has committed everything its log holds and every live replica has
        committed and dispatched as far. (A leader whose commit index is still behind its log,
        as a new one is until an entry of its term commits, is not a target: replicas that
        committed more under the previous leader would differ from it.)"""
        lead = self.c.leader()
        if lead is None:
            return False
        target = self.c.servers[lead].node.committed_index
        if target < self.c.servers[lead].store.ledger_end_index:
            return False
        return all(self.c.servers[i].node.committed_index >= target
                   and self.logs[i].reput.next_index > target for i in self.c.live())

    def settle(self, timeout_ms=5_000) -> None:
        """Run until ``settled``."""
        assert self.c.run_until(self.settled, timeout_ms)


def cq_bytes(log: DLedgerCommitLog) -> dict[tuple[str, int], bytes]:
    """Every consume queue's units, as bytes, read from the files."""
    out = {}
    for topic, qid in list_queues(log.root):
        d = os.path.join(log.root, "consumequeue", topic, str(qid))
        data = b"".join(open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d)))
        cq = log.reput.find_queue(topic, qid)
        out[(topic, qid)] = data[:cq.max_offset * CQ_UNIT_SIZE]
    return out


OK = PutMessageStatus.PUT_OK


def check_exactly_once(g, sent):
    """Every live replica holds the same consume queues, without gap or repeat, and every
    acknowledged ``((topic, queue_id, body), result)`` of ``sent`` exactly once, at the queue
    offset and physical offset its put was answered with; the acknowledged pairs."""
    acked = [(item, r) for item, r in sent if r is not None and r.status is OK]
    images = {i: cq_bytes(g.logs[i]) for i in g.c.live()}
    first = images[g.c.live()[0]]
    assert all(img == first for img in images.values())
    for node in g.c.live():
        log = g.logs[node]
        assert log.reput.problems == []
        for (t, q), data in images[node].items():
            msgs, nxt = log.get_messages(t, q, 0, 10_000)
            assert nxt == len(data) // 20
            assert [m.queue_offset for m in msgs] == list(range(nxt))        # no gap, no repeat
        for (t, q, body), r in acked:
            msgs, _ = log.get_messages(t, q, r.queue_offset, 1)
            assert [(m.body, m.physical_offset) for m in msgs] == [(body, r.wrote_offset)]
            all_msgs, _ = log.get_messages(t, q, 0, 10_000)
            assert [m.physical_offset for m in all_msgs].count(r.wrote_offset) == 1
    return acked

