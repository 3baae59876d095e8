"""Catch-up past retention with three ``dledger broker`` processes on loopback: a follower is
stopped, the group writes on, retention deletes the head of the leader's log (past the
follower's end), the follower is restarted on its directory, and the leader moves its log start
over TCP (``core.log_start``). The follower's log then begins where the leader's does, holds the
leader's bytes at the same positions, and its broker starts every consume queue at the queue
offset of the first message still held (RocketMQ's min offset, GET_MIN_OFFSET); a pull below it
is answered PULL_OFFSET_MOVED to there.

How retention is brought on in another process, with nothing added to the product: a data
segment's age is its file's modification time (``store.retention``), and every running server
cleans every 100 ms. The nodes run with ``file_reserved_hours = 1`` and ``delete_when`` naming
every hour, so nothing is old enough until the test sets the modification time of the head
segments of the two running nodes two hours back (``os.utime``), as if they had been written
then: the next pass deletes them. Every wait polls with a deadline."""

import os
import time

from dledger.broker import decode
from dledger.broker.client import BrokerClient
from dledger.broker.remoting import codes
from dledger.entry import BODY_OFFSET
from dledger.store import DLedgerMmapFileStore

from broker.remoting.remoting_client import RemotingClient
from broker.remoting.rmq_cluster import IDS, Cluster, split_messages
from transport.node_processes import wait_for

SEGMENT = 4096
INDEX_SEGMENT = 32 * 64
CONFIG = f"""mapped_file_size_for_entry_data = {SEGMENT}
mapped_file_size_for_entry_index = {INDEX_SEGMENT}
heart_beat_time_interval_ms = 500
bootstrap = true
file_reserved_hours = 1
delete_when = "{';'.join(str(h) for h in range(24))}"
"""
QUEUES = [("A", 0), ("A", 1), ("B", 0)]
BEFORE, AFTER = 30, 90          # messages sent before the follower stops, and while it is down


def send(client: BrokerClient, numbers: range) -> list[tuple[str, int, int, int]]:
    """Message ``k`` of ``numbers`` to ``QUEUES[k % 3]``, in batches of ten (one entry each);
    ``(topic, queue_id, queue_offset, physical_offset)`` of each, as the master answered."""
    out = []
    for lo in range(numbers.start, numbers.stop, 10):
        batch = [{"topic": QUEUES[k % 3][0], "queue_id": QUEUES[k % 3][1], "body": b"m%03d-" % k + bytes(150)}
                 for k in range(lo, min(lo + 10, numbers.stop))]
        results = client.send_batch(batch)
        assert [r.status for r in results] == ["PUT_OK"] * len(batch), results[0]
        out += [(m["topic"], m["queue_id"], r.queue_offset, r.wrote_offset) for m, r in zip(batch, results)]
    return out


def offsets(c: Cluster, node: str, code: int) -> dict[tuple[str, int], int] | None:
    """``node``'s GET_MIN_OFFSET or GET_MAX_OFFSET of every queue (None while it does not serve)."""
    try:
        with RemotingClient(c.remoting[node], timeout=5) as rc:
            return {(t, q): int(rc.call(code, {"topic": t, "queueId": q}).ext["offset"]) for t, q in QUEUES}
    except OSError:
        return None


def pull(c: Cluster, node: str, topic: str, queue_id: int, offset: int):
    with RemotingClient(c.remoting[node], timeout=5) as rc:
        return rc.call(codes.PULL_MESSAGE, {"consumerGroup": "catch-up", "topic": topic, "queueId": queue_id,
                                            "queueOffset": offset, "maxMsgNums": 32, "sysFlag": 0})


def data_segments(c: Cluster, node: str) -> dict[int, str]:
    """``node``'s data segment files by the log position each begins at (its name)."""
    d = c.base / f"dledger-{node}" / "data"
    return {int(name): str(d / name) for name in os.listdir(d)}


def log_bytes(c: Cluster, node: str, lo: int, hi: int) -> bytes:
    """The bytes of ``node``'s data segments from log position ``lo`` to ``hi`` (read from the files)."""
    out = bytearray()
    for start in range(lo - lo % SEGMENT, hi, SEGMENT):
        with open(c.base / f"dledger-{node}" / "data" / f"{start:020d}", "rb") as fh:
            fh.seek(max(lo, start) - start)
            out += fh.read(min(hi, start + SEGMENT) - max(lo, start))
    return bytes(out)


def test_a_follower_restarted_past_the_leaders_retention_catches_up_over_tcp(tmp_path):
    c = Cluster(tmp_path, CONFIG)
    try:
        for node in IDS:
            c.start_broker(node, register=False)
        with BrokerClient(c.brokers, timeout=5, send_deadline=30) as client:
            sent = send(client, range(BEFORE))
            follower = next(n for n in IDS if n != client.master)
            held = {(t, q): sum(1 for m in sent if m[:2] == (t, q)) for t, q in QUEUES}
            wait_for(lambda: offsets(c, follower, codes.GET_MAX_OFFSET) == held, f"{follower} to dispatch", 30)
            c.procs[follower].terminate()
            assert c.procs[follower].wait(30) == 0
            sent += send(client, range(BEFORE, BEFORE + AFTER))
            master = client.master
        live = [n for n in IDS if n != follower]
        held = {(t, q): sum(1 for m in sent if m[:2] == (t, q)) for t, q in QUEUES}
        for node in live:
            wait_for(lambda: offsets(c, node, codes.GET_MAX_OFFSET) == held, f"{node} to dispatch", 30)

        # age the segments wholly before the 60th message sent while the follower was down; the
        # follower's next entry (the first sent then) lies in one of them
        next_pos = sent[BEFORE][3] - BODY_OFFSET
        keep_from = sent[BEFORE + 60][3] - BODY_OFFSET
        keep_from -= keep_from % SEGMENT
        assert next_pos < keep_from
        old = time.time() - 2 * 3600
        aged = {node: [p for start, p in data_segments(c, node).items() if start < keep_from] for node in live}
        for paths in aged.values():
            for p in paths:
                os.utime(p, (old, old))
        for node in live:
            wait_for(lambda: not any(map(os.path.exists, aged[node])), f"{node}'s retention", 30)
            mins = offsets(c, node, codes.GET_MIN_OFFSET)
            assert mins and all(v > 0 for v in mins.values()), mins      # every queue's head is gone

        c.start_broker(follower, register=False)
        wait_for(lambda: offsets(c, follower, codes.GET_MAX_OFFSET) == held, f"{follower} to catch up", 30)
        mins = {node: offsets(c, node, codes.GET_MIN_OFFSET) for node in IDS}
        assert master != follower and all(m == mins[master] for m in mins.values()), mins
        for (t, q), lo in mins[follower].items():
            below = pull(c, follower, t, q, 0)
            assert below.code == codes.PULL_OFFSET_MOVED, (t, q, below.code, below.remark)
            assert (below.ext["nextBeginOffset"], below.ext["minOffset"]) == (str(lo), str(lo))
            got, want = (pull(c, node, t, q, lo) for node in (follower, master))
            assert got.code == want.code == codes.SUCCESS
            ours = [decode(raw) for raw in split_messages(got.body)]
            assert [(m.queue_offset, m.physical_offset, m.body) for m in ours] == \
                [(m.queue_offset, m.physical_offset, m.body) for m in map(decode, split_messages(want.body))]
            assert ours[0].queue_offset == lo
        assert "log start moved to the leader's" in (tmp_path / f"{follower}.log").read_text()
    finally:
        exits = c.stop()
    assert set(exits.values()) == {0}, exits

    stores = {node: DLedgerMmapFileStore.open(str(tmp_path / f"dledger-{node}"), read_only=True,
                                              data_file_size=SEGMENT, index_file_size=INDEX_SEGMENT)
              for node in IDS}
    try:
        leader = stores[master]
        begin = leader.ledger_before_begin_index
        first = leader.get(begin + 1).pos
        assert first >= keep_from > next_pos             # the follower's next entry was deleted
        for s in stores.values():
            assert (s.ledger_before_begin_index, s.ledger_end_index) == (begin, leader.ledger_end_index)
        entries = {node: [(e.index, e.term, e.pos, e.body) for e in s.iter_entries()] for node, s in stores.items()}
        assert entries[follower] == entries[master] == entries[next(n for n in live if n != master)]
        assert entries[follower][0][2] == first
        last = leader.get(leader.ledger_end_index)
        end = last.pos + last.size
        assert all(log_bytes(c, node, first, end) == log_bytes(c, master, first, end) for node in IDS)
    finally:
        for s in stores.values():
            s.close()
    # each queue's min offset is the queue offset of its first message the log still holds
    for (t, q), lo in mins[follower].items():
        assert lo == min(qo for topic, queue_id, qo, phys in sent if (topic, queue_id) == (t, q)
                         and phys - BODY_OFFSET >= first)
