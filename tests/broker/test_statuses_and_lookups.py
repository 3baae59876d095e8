"""Refused puts (a clear status, nothing written), key and message-id lookups, consumer reads
at the end of a queue, consume-queue file roll-over and the index file's layout."""

import os
import struct

from dledger.broker import DLedgerCommitLog, PutMessageStatus
from dledger.broker.consume_queue import file_name
from dledger.broker.index_file import HEADER, HEADER_SIZE, SLOT_SIZE, key_hash

from .helpers import OK, BrokerGroup

S = PutMessageStatus


def test_bad_messages_get_a_status_naming_the_problem_and_nothing_is_written(tmp_path):
    with BrokerGroup(tmp_path) as g:
        lead = g.elected()
        g.settle()
        end = g.c.servers[lead].store.ledger_end_index
        log = g.logs[lead]
        cases = [
            (log.put_message_async("", 0, b"x"), S.MESSAGE_ILLEGAL, "topic: is empty"),
            (log.put_message_async("T", -1, b"x"), S.MESSAGE_ILLEGAL, "queue_id"),
            (log.put_message_async("T", 0, "text"), S.MESSAGE_ILLEGAL, "body: must be bytes"),
            (log.put_message_async("T", 0, b"x" * (4 * 1024 * 1024)), S.MESSAGE_ILLEGAL, "message: "),
            (log.put_message_async("T", 0, b"x", properties={"P": "v" * 40000}), S.PROPERTIES_SIZE_EXCEEDED,
             "properties: "),
            (log.put_message_async("T", 0, b"x", tags="a\x01b"), S.MESSAGE_ILLEGAL, "property value"),
            (log.put_message_async("T", 0, b"x", born_host=("nope", 1)), S.MESSAGE_ILLEGAL, "bornHost"),
            (log.put_messages_async([{"topic": "T", "body": b"ok"}, {"topic": "", "body": b"x"}]), S.MESSAGE_ILLEGAL,
             "messages[1]: topic: is empty"),
            (log.put_messages_async([{"topic": "T", "body": b"ok", "key": "k1"}]), S.MESSAGE_ILLEGAL,
             "messages[0]: unknown field(s) key"),
            (log.put_messages_async([{"topic": "T", "body": b"ok"}, ("T", b"x")]), S.MESSAGE_ILLEGAL,
             "messages[1]: must be a dict, got tuple"),
        ]
        for f, status, text in cases:
            assert f.done()
            r = f.result()
            if isinstance(r, list):
                assert [(x.status, x.detail) for x in r] == [(status, r[0].detail)] and text in r[0].detail
                continue
            assert r.status is status and text in r.detail and r.wrote_offset == -1
        g.c.run_for(100)
        assert g.c.servers[lead].store.ledger_end_index == end


def test_a_batch_put_assigns_consecutive_queue_offsets(tmp_path):
    with BrokerGroup(tmp_path) as g:
        log = g.logs[g.elected()]
        f = log.put_messages_async([{"topic": "B", "queue_id": 1, "body": b"b%d" % i, "tags": "t"} for i in range(50)])
        assert g.c.run_until(f.done, 3_000)
        rs = f.result()
        assert [r.status for r in rs] == [OK] * 50 and [r.queue_offset for r in rs] == list(range(50))
        assert [r.wrote_offset for r in rs] == sorted(r.wrote_offset for r in rs)
        g.settle()
        msgs, nxt = g.logs["n2"].get_messages("B", 1, 45, 10)
        assert [m.body for m in msgs] == [b"b%d" % i for i in range(45, 50)] and nxt == 50
        assert g.logs["n2"].get_messages("B", 1, 50, 10) == ([], 50)
        assert g.logs["n2"].get_messages("nope", 0, 0, 10) == ([], 0)


def test_lookups_by_key_and_by_message_id_on_every_replica(tmp_path):
    with BrokerGroup(tmp_path) as g:
        g.elected()
        r1 = g.put("K", 0, b"one", keys=["order-1", "user-7"], properties={"UNIQ_KEY": "U1"})
        r2 = g.put("K", 1, b"two", keys=["order-2", "user-7"])
        g.put("Other", 0, b"three", keys=["user-7"])
        g.settle()
        for log in g.logs.values():
            assert [m.body for m in log.query_by_key("K", "order-1")] == [b"one"]
            assert sorted(m.body for m in log.query_by_key("K", "user-7")) == [b"one", b"two"]
            assert [m.body for m in log.query_by_key("K", "U1")] == [b"one"]
            assert log.query_by_key("K", "missing") == []
            assert log.look_message_by_id(r2.msg_id).body == b"two"
            m = log.look_message_by_id(r1.msg_id)
            assert m.keys == "order-1 user-7" and m.physical_offset == r1.wrote_offset


def test_role_changes_switch_master_and_slave_once_each_and_in_order(tmp_path):
    with BrokerGroup(tmp_path, seed=4) as g:
        first = g.elected()
        g.c.crash(first)
        second = g.elected()
        g.logs[first].close()
        g.logs[first] = DLedgerCommitLog(g.c.restart(first))
        g.c.run_for(1_000)
        h = g.logs[second].roles.history
        assert h[-1][1] == "MASTER"
        assert all(a != b for a, b in zip(h, h[1:])) and [t for t, _ in h] == sorted(t for t, _ in h)
        assert not g.logs[first].roles.writable and g.logs[second].roles.writable
        r = g.put("T", 0, b"x", via=first)
        assert r.status is S.SERVICE_NOT_AVAILABLE and r.leader_id == second


def test_consume_queue_files_roll_over_with_20_digit_names(tmp_path):
    with BrokerGroup(tmp_path) as g:
        lead = g.elected()
        for node in g.c.ids:
            g.logs[node].close()
            g.logs[node] = DLedgerCommitLog(g.c.servers[node], cq_units_per_file=10)
        rs = g.put_many([("R", 0, b"r%d" % i) for i in range(25)], via=g.elected())
        assert all(r.status is OK for r in rs)
        g.settle()
        d = os.path.join(g.logs["n1"].root, "consumequeue", "R", "0")
        assert sorted(os.listdir(d)) == [file_name(0), file_name(200), file_name(400)] == \
            ["00000000000000000000", "00000000000000000200", "00000000000000000400"]
        assert all(os.path.getsize(os.path.join(d, n)) == 200 for n in os.listdir(d))
        msgs, nxt = g.logs["n1"].get_messages("R", 0, 8, 5)
        assert [m.body for m in msgs] == [b"r%d" % i for i in range(8, 13)] and nxt == 13


def test_the_key_index_file_follows_rocketmqs_layout(tmp_path):
    with BrokerGroup(tmp_path) as g:
        g.elected()
        r = g.put("IDX", 0, b"x", keys=["alpha"])
        g.settle()
        f = g.logs["n0"].reput.index.files[-1]
        with open(f.path, "rb") as fh:
            data = fh.read()
        begin_ts, end_ts, begin_off, end_off, slots_used, count = HEADER.unpack_from(data, 0)
        assert (begin_off, end_off, slots_used, count) == (r.wrote_offset, r.wrote_offset, 1, 2)
        assert begin_ts == end_ts == r.store_timestamp
        h = key_hash("IDX#alpha")
        assert struct.unpack_from(">i", data, HEADER_SIZE + (h % f.slots) * SLOT_SIZE)[0] == 1
        entry = struct.unpack_from(">iqii", data, HEADER_SIZE + f.slots * SLOT_SIZE + 20)
        assert entry == (h, r.wrote_offset, 0, 0)
        assert len(os.path.basename(f.path)) == 17


def test_a_put_answered_after_a_step_down_and_back_keeps_its_stamp(tmp_path):
    """Found by the benchmark: a starved leader told CANDIDATE then LEADER again (same term)
    while puts were in flight answered them UNKNOWN_ERROR (their stamps had been dropped)."""
    from dledger.core import Role, RoleChange

    with BrokerGroup(tmp_path) as g:
        lead = g.elected()
        log = g.logs[lead]
        f = log.put_message_async("T", 0, b"x")
        assert g.c.run_until(lambda: log._stamped, 1_000)
        term = g.c.servers[lead].node.term
        log._on_role_change(RoleChange(term, Role.CANDIDATE, None))
        log._on_role_change(RoleChange(term, Role.LEADER, lead))
        assert g.c.run_until(f.done, 2_000)
        r = f.result()
        assert r.status is OK and r.queue_offset == 0 and r.msg_id


def test_a_put_ok_result_built_slot_by_slot_is_the_dataclass_itself():
    import dataclasses

    import pytest

    from dledger.broker.put_result import PutMessageResult, put_ok
    r = put_ok(1048, 180, 7, "0A0000010000271100000000000418", 1_764_000_000_000, "n0")
    want = PutMessageResult(PutMessageStatus.PUT_OK, 1048, 180, 7, "0A0000010000271100000000000418",
                            1_764_000_000_000, "n0")
    assert r == want and hash(r) == hash(want) and repr(r) == repr(want) and r.ok and r.detail == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.queue_offset = 8


def test_a_batch_answer_gives_each_message_what_its_own_answer_would_give():
    """``_results`` (a batch append's answer, read once) agrees with ``_result`` message by
    message: PUT_OK with the stamps, UNKNOWN_ERROR for a message without one, the mapped status
    for every message of a refused append."""
    from types import SimpleNamespace

    from dledger.protocol import DLedgerResponseCode as Code

    log = DLedgerCommitLog.__new__(DLedgerCommitLog)
    log._id_prefix = "7F00000100002A9F"
    raws = [b"a" * 100, b"b" * 120, b"c" * 90]
    for code in (Code.SUCCESS, Code.WAIT_QUORUM_ACK_TIMEOUT, Code.NOT_LEADER):
        resp = SimpleNamespace(code=code, leader_id="n1", positions=[0, 148, 316])
        stamps = {0: (4, 1_764_000_000_000), 316: (5, 1_764_000_000_001)}   # none for 148
        log._stamped = dict(stamps)
        got = log._results(resp, raws)
        log._stamped = dict(stamps)
        want = [log._result(resp, p, len(r)) for p, r in zip(resp.positions, raws)]
        assert got == want and log._stamped == {}
        if code == Code.SUCCESS:
            assert [r.status for r in got] == [PutMessageStatus.PUT_OK, PutMessageStatus.UNKNOWN_ERROR,
                                               PutMessageStatus.PUT_OK]
            assert got[2].msg_id == "7F00000100002A9F" + f"{316 + 48:016X}" and got[2].queue_offset == 5
