"""DLedgerCommitLog on the simulator: puts, stamping, dispatch identical on every replica."""

import struct

from dledger.broker import PutMessageStatus, decode
from dledger.broker.message_codec import tags_hash_code

from .helpers import OK, BrokerGroup, cq_bytes


def test_puts_are_dispatched_byte_identically_on_every_replica_with_real_offsets(tmp_path):
    with BrokerGroup(tmp_path) as g:
        g.elected()
        items = [(f"T{i % 3}", i % 4, b"body-%d" % i) for i in range(120)]
        rs = g.put_many(items)
        assert [r.status for r in rs] == [OK] * 120
        g.settle()
        per_queue = {}
        for (t, q, _b), r in zip(items, rs):
            assert r.queue_offset == per_queue.get((t, q), 0)
            per_queue[(t, q)] = r.queue_offset + 1
        images = {i: cq_bytes(log) for i, log in g.logs.items()}
        assert images["n0"] == images["n1"] == images["n2"]
        assert {k: len(v) // 20 for k, v in images["n0"].items()} == per_queue
        for node, log in g.logs.items():
            assert log.reput.problems == []
            for (t, q, b), r in zip(items, rs):
                raw = log.get_message(r.wrote_offset, r.wrote_bytes)
                m = decode(raw)
                assert (m.topic, m.queue_id, m.body, m.queue_offset) == (t, q, b, r.queue_offset)
                assert m.physical_offset == r.wrote_offset, node
                assert m.store_timestamp == r.store_timestamp > 0
            raws = [log.get_message(r.wrote_offset, r.wrote_bytes) for r in rs]
            assert raws == [g.logs["n0"].get_message(r.wrote_offset, r.wrote_bytes) for r in rs]
        for (t, q), data in images["n0"].items():
            units = [struct.unpack_from(">qiq", data, k) for k in range(0, len(data), 20)]
            wanted = [(r.wrote_offset, r.wrote_bytes, tags_hash_code(None))
                      for (tt, qq, _b), r in zip(items, rs) if (tt, qq) == (t, q)]
            assert units == wanted


def test_a_put_on_a_follower_is_refused_naming_the_leader_and_writes_nothing(tmp_path):
    with BrokerGroup(tmp_path) as g:
        lead = g.elected()
        follower = next(i for i in g.c.ids if i != lead)
        assert g.c.run_until(lambda: g.c.servers[follower].leader_id == lead, 2_000)
        g.settle()
        end = g.c.servers[lead].store.ledger_end_index
        r = g.put("T", 0, b"x", via=follower)
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert r.leader_id == lead and lead in r.detail
        g.c.run_for(200)
        assert g.c.servers[lead].store.ledger_end_index == end
