"""DLedgerCommitLog on the real asyncio runtime: wrapped before ``startup()``, blocking puts,
awaited puts and a consumer on a follower, each wait bounded by a timeout."""

import asyncio
import time

from dledger import DLedgerConfig, DLedgerServer
from dledger.broker import DLedgerCommitLog, PutMessageStatus
from dledger.runtime.asyncio_runtime import AsyncioRuntime
from dledger.transport.inproc import Hub
from helpers.polling import poll

PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"


def test_blocking_and_awaited_puts_on_a_real_runtime_reach_every_replica(tmp_path):
    runtime, hub = AsyncioRuntime(), Hub()
    logs = []
    for node_id in ("n0", "n1", "n2"):
        cfg = DLedgerConfig(group="b", self_id=node_id, peers=PEERS, store_base_dir=str(tmp_path),
                            mapped_file_size_for_entry_data=1 << 22, mapped_file_size_for_entry_index=32 * 65536,
                            heart_beat_time_interval_ms=500)
        log = DLedgerCommitLog(DLedgerServer(cfg, runtime=runtime, hub=hub))   # wrapped before startup
        log.server.startup()
        logs.append(log)
    try:
        def master():
            poll(lambda: any(log.roles.writable for log in logs))
            return next(log for log in logs if log.roles.writable)

        #: bodies sent again after an answer that left open whether they were written
        resent = set()

        def put(topic, queue_id, body, answered=None, **kw):
            """Through whoever is master, again after any answer but PUT_OK (``answered``: the
            first answer, already had). Under load a leader may be deposed: a refusal
            (SERVICE_NOT_AVAILABLE, OS_PAGECACHE_BUSY) says the message was not written, but
            after FLUSH_SLAVE_TIMEOUT or UNKNOWN_ERROR it may still commit, and a message sent
            again then may be in the log twice, as for any producer that retries: the check
            below allows that for those bodies only."""
            deadline = time.monotonic() + 30
            r = answered
            while r is None or not (r.ok or time.monotonic() > deadline):
                if r is not None:
                    if r.status not in (PutMessageStatus.SERVICE_NOT_AVAILABLE, PutMessageStatus.OS_PAGECACHE_BUSY):
                        resent.add(body)
                    time.sleep(0.05)
                r = master().put_message(topic, queue_id, body, timeout=15, **kw)
            return r

        acked = {}
        for i in range(20):
            r = put("RT", i % 2, b"sync-%d" % i, tags="t", keys=[f"k{i}"])
            assert r.ok, r
            acked[b"sync-%d" % i] = r

        async def produce(log):
            return await asyncio.gather(*(log.put_message_async("RT", 0, b"async-%d" % i) for i in range(10)))

        awaited = asyncio.run(asyncio.wait_for(produce(master()), 15))
        for i, r in enumerate(awaited):
            r = r if r.ok else put("RT", 0, b"async-%d" % i, answered=r)
            assert r.ok, r
            acked[b"async-%d" % i] = r
        for follower in [log for log in logs if log.server.leader_id != log.server.config.self_id]:
            poll(lambda: follower.max_queue_offset("RT", 0) >= 20)
            msgs, nxt = follower.get_messages("RT", 0, 0, 100)
            assert [m.queue_offset for m in msgs] == list(range(nxt))
            bodies = [m.body for m in msgs]
            in_queue_0 = [b for b in acked if b.startswith(b"async") or int(b.split(b"-")[1]) % 2 == 0]
            counts = {b: bodies.count(b) for b in in_queue_0}
            assert all(n == 1 or (b in resent and n == 2) for b, n in counts.items()), (counts, resent)
            assert follower.look_message_by_id(acked[b"sync-3"].msg_id).body == b"sync-3"
            assert [m.body for m in follower.query_by_key("RT", "k5")] == [b"sync-5"]
        assert all(log.reput.problems == [] for log in logs)
    finally:
        for log in logs:
            log.server.shutdown()
            log.close()
        runtime.close()
