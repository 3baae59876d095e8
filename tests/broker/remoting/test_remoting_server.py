"""The remoting server on a three-node group: every request code it serves, answered as a
RocketMQ broker would (statuses, fields, the stored bytes), and bad input answered with one line
naming what is wrong, the node serving on and its term unmoved."""

import json
import socket
import struct
import threading
import time
import zlib

import pytest

from dledger.broker import decode
from dledger.broker.consumer_state import SYSTEM_TOPIC
from dledger.broker.message_codec import message_id
from dledger.broker.remoting import codes
from dledger.broker.remoting.command import RemotingCommand, encode

from helpers.polling import poll
from broker.remoting.remoting_client import RemotingClient

PROPS = "KEYS\x01order-1\x02TAGS\x01TagA\x02UNIQ_KEY\x017F0000010001ABCDEF0123456789ABCD\x02color\x01red\x02"


def send(c, topic="T", queue_id=0, body=b"hello", props=PROPS, **kw):
    return c.call(codes.SEND_MESSAGE, {"producerGroup": "p", "topic": topic, "queueId": queue_id, "sysFlag": 0,
                                       "bornTimestamp": 1, "flag": 0, "properties": props, **kw}, body)


def pull(c, topic="T", queue_id=0, offset=0, **kw):
    ext = {"consumerGroup": "g", "topic": topic, "queueId": queue_id, "queueOffset": offset, "maxMsgNums": 32,
           "sysFlag": 0, **kw}
    return c.call(codes.PULL_MESSAGE, ext)


def split_messages(body: bytes) -> list[bytes]:
    out, off = [], 0
    while off < len(body):
        size = struct.unpack_from(">i", body, off)[0]
        out.append(body[off:off + size])
        off += size
    return out


def wait_dispatched(group, i, topic, queue_id, n):
    poll(lambda: group.logs[i].max_queue_offset(topic, queue_id) >= n, what="dispatch")


def test_a_send_is_stored_with_the_clients_properties_and_pulled_back_byte_for_byte(remoting_group):
    g = remoting_group
    m = g.master()
    with RemotingClient(g.servers[m].address) as c:
        a = send(c, queue_id=1)
        assert a.code == codes.SUCCESS and a.remark is None, a
        assert a.ext["queueId"] == "1" and a.ext["queueOffset"] == "0"
        log = g.logs[m]
        stored = log.get_message_at(int(a.ext["msgId"][-16:], 16))
        assert a.ext["msgId"] == message_id(log.store_host, decode(stored).physical_offset)
        msg = decode(stored)
        assert msg.body == b"hello" and msg.topic == "T" and msg.queue_id == 1
        assert msg.properties == {"KEYS": "order-1", "TAGS": "TagA", "UNIQ_KEY": "7F0000010001ABCDEF0123456789ABCD",
                                  "color": "red"}
        assert stored.endswith(PROPS.encode())            # the client's properties string, as sent
        wait_dispatched(g, m, "T", 1, 1)
        p = pull(c, queue_id=1)
        assert p.code == codes.SUCCESS and p.body == stored
        assert p.ext == {"nextBeginOffset": "1", "minOffset": "0", "maxOffset": "1", "suggestWhichBrokerId": "0"}
    s = g.slave()                                         # any replica serves what it dispatched
    wait_dispatched(g, s, "T", 1, 1)
    with RemotingClient(g.servers[s].address) as c:
        assert pull(c, queue_id=1).body == stored


def test_send_v2_short_names_binary_headers_and_a_compressed_body(remoting_group):
    g = remoting_group
    m = g.master()
    with RemotingClient(g.servers[m].address) as c:
        a = c.call(codes.SEND_MESSAGE_V2, {"a": "p", "b": "T2", "e": 0, "f": 1, "h": 7, "i": "TAGS\x01B\x02"},
                   zlib.compress(b"z" * 5000), serialize_type=codes.SERIALIZE_ROCKETMQ)
        assert a.code == codes.SUCCESS and a.serialize_type == codes.SERIALIZE_ROCKETMQ, a
        msg = decode(g.logs[m].get_message_at(int(a.ext["msgId"][-16:], 16)))
        assert msg.body == b"z" * 5000 and msg.flag == 7 and msg.sys_flag & 1 == 0 and msg.tags == "B"
        bad = c.call(codes.SEND_MESSAGE_V2, {"a": "p", "b": "T2", "e": 0, "f": 1}, b"not zlib")
        assert bad.code == codes.MESSAGE_ILLEGAL and "not zlib data" in bad.remark


def batch_body(items):
    out = b""
    for body, props in items:
        p = props.encode()
        out += struct.pack(">iiiii", 20 + len(body) + 2 + len(p), 0, 0, 0, len(body)) + body + struct.pack(">h", len(p)) + p
    return out


def test_a_batch_is_stored_whole_with_one_id_per_message(remoting_group):
    g = remoting_group
    m = g.master()
    with RemotingClient(g.servers[m].address) as c:
        a = c.call(codes.SEND_BATCH_MESSAGE, {"producerGroup": "p", "topic": "TB", "queueId": 2, "batch": "true"},
                   batch_body([(b"one", "KEYS\x01k1\x02"), (b"two", "KEYS\x01k2\x02"), (b"three", "")]))
        assert a.code == codes.SUCCESS, a
        ids = a.ext["msgId"].split(",")
        assert len(ids) == 3 and a.ext["queueOffset"] == "0"
        assert [decode(g.logs[m].get_message_at(int(i[-16:], 16))).body for i in ids] == [b"one", b"two", b"three"]
        for bad_body, words in [(b"", "no message"), (b"\x00\x00\x00\x10", "shorter than its 20-byte head"),
                                (batch_body([(b"x", "")])[:-1], "totalSize"),
                                (struct.pack(">iiiii", 30, 0, 0, 0, 99) + b"x" * 10, "bodyLength 99")]:
            r = c.call(codes.SEND_BATCH_MESSAGE, {"producerGroup": "p", "topic": "TB", "queueId": 2}, bad_body)
            assert r.code == codes.MESSAGE_ILLEGAL and words in r.remark, (words, r)
        assert g.logs[m].max_queue_offset("TB", 2) <= 3


def test_a_put_on_a_slave_answers_service_not_available_and_writes_nothing(remoting_group):
    g = remoting_group
    s = g.slave()
    before = g.logs[s].server.store.ledger_end_index
    with RemotingClient(g.servers[s].address) as c:
        a = send(c)
        assert a.code == codes.SERVICE_NOT_AVAILABLE and "not the master" in a.remark
        u = c.call(codes.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T", "queueId": 0, "commitOffset": 3})
        assert u.code == codes.SERVICE_NOT_AVAILABLE
    assert g.logs[s].server.store.ledger_end_index == before


@pytest.mark.parametrize("ext, code, words", [
    ({"topic": "bad topic"}, codes.MESSAGE_ILLEGAL, "only letters"),
    ({"topic": SYSTEM_TOPIC}, codes.NO_PERMISSION, "system topic"),
    ({"queueId": "x"}, codes.SYSTEM_ERROR, "queueId: 'x' is not an integer"),
    ({"queueId": 4}, codes.SYSTEM_ERROR, "not a queue of T (0..3)"),
    ({"sysFlag": 4}, codes.NO_PERMISSION, "transactional"),
])
def test_a_bad_send_answers_its_code_and_names_the_field(remoting_group, ext, code, words):
    g = remoting_group
    with RemotingClient(g.servers[g.master()].address) as c:
        base = {"producerGroup": "p", "topic": "T", "queueId": 0, "properties": ""}
        a = c.call(codes.SEND_MESSAGE, {**base, **ext}, b"x")
        assert a.code == code and words in a.remark, a
        missing = c.call(codes.SEND_MESSAGE, {"producerGroup": "p", "topic": "T"}, b"x")
        assert missing.code == codes.SYSTEM_ERROR and missing.remark == "queueId: is missing"


def test_a_negative_queue_id_picks_a_queue_of_the_topic(remoting_group):
    g = remoting_group
    with RemotingClient(g.servers[g.master()].address) as c:
        queues = {send(c, queue_id=-1).ext["queueId"] for _ in range(8)}
    assert queues == {"0", "1", "2", "3"}


def test_pull_statuses_offsets_moved_and_tag_filtering(remoting_group):
    g = remoting_group
    m = g.master()
    with RemotingClient(g.servers[m].address) as c:
        for i in range(6):
            assert send(c, topic="F", props=f"TAGS\x01Tag{i % 3}\x02").code == codes.SUCCESS
        wait_dispatched(g, m, "F", 0, 6)
        empty = pull(c, topic="Nothing")
        assert empty.code == codes.PULL_NOT_FOUND and empty.ext["nextBeginOffset"] == "0"
        end = pull(c, topic="F", offset=6)
        assert end.code == codes.PULL_NOT_FOUND and end.ext["maxOffset"] == "6"
        past = pull(c, topic="F", offset=9)
        assert past.code == codes.PULL_OFFSET_MOVED and past.ext["nextBeginOffset"] == "6"
        tagged = pull(c, topic="F", subscription="Tag1 || Tag2")
        assert [decode(raw).tags for raw in split_messages(tagged.body)] == ["Tag1", "Tag2", "Tag1", "Tag2"]
        assert tagged.ext["nextBeginOffset"] == "6"
        few = pull(c, topic="F", maxMsgNums=2, subscription="Tag2")
        assert [decode(raw).queue_offset for raw in split_messages(few.body)] == [2, 5]
        none = pull(c, topic="F", subscription="TagX")
        assert none.code == codes.PULL_RETRY_IMMEDIATELY and none.ext["nextBeginOffset"] == "6"
        everything = pull(c, topic="F", subscription="*")
        assert len(split_messages(everything.body)) == 6


def test_a_suspended_pull_is_held_until_a_message_arrives_and_others_are_served_meanwhile(remoting_group):
    g = remoting_group
    m = g.master()
    address = g.servers[m].address
    with RemotingClient(address) as c:
        hold = RemotingCommand(codes.PULL_MESSAGE, 900, 0, None,
                               {"consumerGroup": "g", "topic": "H", "queueId": "0", "queueOffset": "0",
                                "maxMsgNums": "32", "sysFlag": "2", "suspendTimeoutMillis": "15000"})
        c.send_raw(encode(hold))
        started = time.monotonic()
        route = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "H"})   # the same connection is not blocked
        assert route.code == codes.SUCCESS and time.monotonic() - started < 5
        with RemotingClient(address) as producer:
            assert send(producer, topic="H").code == codes.SUCCESS
        answer = c.read()
        assert answer.opaque == 900 and answer.code == codes.SUCCESS and decode(answer.body).topic == "H"
        assert time.monotonic() - started < 10
        t0 = time.monotonic()
        timed_out = pull(c, topic="H", offset=1, sysFlag=2, suspendTimeoutMillis=300)
        waited = time.monotonic() - t0
        assert timed_out.code == codes.PULL_NOT_FOUND and 0.25 <= waited < 5
        t0 = time.monotonic()
        assert pull(c, topic="H", offset=1, suspendTimeoutMillis=5000).code == codes.PULL_NOT_FOUND
        assert time.monotonic() - t0 < 2.5            # no suspend flag: answered at once
    assert len(g.servers[m].ctx.holds) == 0


def test_consumer_offsets_queue_offsets_and_search_by_time(remoting_group):
    g = remoting_group
    m = g.master()
    with RemotingClient(g.servers[m].address) as c:
        q = {"consumerGroup": "g1", "topic": "O", "queueId": 0}
        assert c.call(codes.QUERY_CONSUMER_OFFSET, q).ext == {"offset": "0"}     # a new group reads from 0
        for _ in range(3):
            send(c, topic="O")
        wait_dispatched(g, m, "O", 0, 3)
        assert c.call(codes.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": 2}).code == codes.SUCCESS
        assert c.call(codes.QUERY_CONSUMER_OFFSET, q).ext == {"offset": "2"}
        assert c.call(codes.GET_MAX_OFFSET, {"topic": "O", "queueId": 0}).ext == {"offset": "3"}
        assert c.call(codes.GET_MIN_OFFSET, {"topic": "O", "queueId": 0}).ext == {"offset": "0"}
        future = int(time.time() * 1000) + 60_000
        assert c.call(codes.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "O", "queueId": 0, "timestamp": future}).ext == \
            {"offset": "3"}
        assert c.call(codes.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "O", "queueId": 0, "timestamp": 0}).ext == \
            {"offset": "0"}
        bad = c.call(codes.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": -1})
        assert bad.code == codes.SYSTEM_ERROR and "commitOffset" in bad.remark


def test_heartbeats_list_the_groups_clients_until_they_leave(remoting_group):
    g = remoting_group
    address = g.servers[g.master()].address
    beat = {"clientID": "10.0.0.1@1", "consumerDataSet": [
        {"groupName": "G", "subscriptionDataSet": [{"topic": "T", "subString": "TagA || TagB"}]}],
        "producerDataSet": [{"groupName": "P"}]}
    with RemotingClient(address) as c, RemotingClient(address) as other:
        none = c.call(codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
        assert none.code == codes.SYSTEM_ERROR and "no consumer for this group" in none.remark
        assert c.call(codes.HEART_BEAT, body=json.dumps(beat).encode()).code == codes.SUCCESS
        assert other.call(codes.HEART_BEAT, body=json.dumps({**beat, "clientID": "b"}).encode()).code == codes.SUCCESS
        assert c.json(codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})[1] == \
            {"consumerIdList": ["10.0.0.1@1", "b"]}
        assert c.call(codes.UNREGISTER_CLIENT, {"clientID": "10.0.0.1@1", "consumerGroup": "G"}).code == codes.SUCCESS
        assert c.json(codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})[1] == {"consumerIdList": ["b"]}
        assert g.servers[g.master()].ctx.groups.subscription("G", "T") == "TagA || TagB"
        bad = c.call(codes.HEART_BEAT, body=b"{nope")
        assert bad.code == codes.SYSTEM_ERROR and "heartbeat: the body is not JSON" in bad.remark
    with RemotingClient(address) as c:      # "b"'s connection closed: it left
        poll(lambda: c.call(codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"}).code == codes.SYSTEM_ERROR)


def test_every_broker_answers_routes_naming_the_master(remoting_group):
    g = remoting_group
    m = g.master()
    master_addr = g.servers[m].address
    for i, server in enumerate(g.servers):
        with RemotingClient(server.address) as c:
            def route():
                return c.json(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%group-1"})[1]
            poll(lambda: route()["brokerDatas"][0]["brokerAddrs"].get("0") == master_addr, what="master known")
            data = route()
            assert data["queueDatas"] == [{"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4,
                                           "perm": 6, "topicSynFlag": 0}]
            if i != m:
                assert data["brokerDatas"][0]["brokerAddrs"][str(i + 1)] == server.address
            for topic, words in [(SYSTEM_TOPIC, "system topic"), ("a b", "only letters")]:
                a = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
                assert a.code == codes.TOPIC_NOT_EXIST and words in a.remark
            assert c.json(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})[0].code == codes.SUCCESS


def test_unknown_codes_are_not_supported_and_oneway_requests_get_no_answer(remoting_group):
    g = remoting_group
    m = g.master()
    with RemotingClient(g.servers[m].address) as c:
        a = c.call(36, {"group": "g"})
        assert a.code == codes.REQUEST_CODE_NOT_SUPPORTED and a.remark == "request code 36 is not supported"
        oneway = RemotingCommand(codes.UPDATE_CONSUMER_OFFSET, 77, codes.FLAG_ONEWAY, None,
                                 {"consumerGroup": "ow", "topic": "T", "queueId": "0", "commitOffset": "5"})
        c.send_raw(encode(oneway))
        after = c.call(codes.QUERY_CONSUMER_OFFSET, {"consumerGroup": "ow", "topic": "T", "queueId": 0})
        assert after.ext == {"offset": "5"}                 # served, and the next answer is the query's


def terms(g):
    return [log.server.node.term for log in g.logs]


def test_malformed_frames_get_one_line_answers_and_the_node_serves_on(remoting_group):
    g = remoting_group
    m = g.master()
    address = g.servers[m].address
    before, end_index = terms(g), g.logs[m].server.store.ledger_end_index
    with RemotingClient(address) as c:
        c.send_raw(struct.pack(">ii", 4 + 9, 9) + b"{not json")          # a header that is not JSON
        a = c.read()
        assert a.code == codes.SYSTEM_ERROR and "not JSON" in a.remark and "\n" not in a.remark
        c.send_raw(struct.pack(">ii", 4 + 3, (1 << 24) | 3) + b"\x00\x01\x02")   # not the binary layout
        assert "binary layout" in c.read().remark
        c.send_raw(struct.pack(">ii", 4 + 2, (5 << 24) | 2) + b"{}")     # an unknown serialize type
        assert "serialize type 5" in c.read().remark
        assert send(c, body=b"still serving").code == codes.SUCCESS      # the same connection goes on
    for raw, words in [(struct.pack(">i", 1 << 30), "declared length"), (struct.pack(">i", 2) + b"ab", "declared length")]:
        with RemotingClient(address) as c:
            c.send_raw(raw)
            a = c.read()
            assert a.code == codes.SYSTEM_ERROR and words in a.remark
            assert c.read() is None                                      # and closed
    with RemotingClient(address) as c:
        c.send_raw(struct.pack(">ii", 100, 2) + b"{}")                   # a frame that never completes:
        t0 = time.monotonic()
        assert c.read() is None and 2.5 < time.monotonic() - t0 < 10     # closed when idle (3 s here)
    wait_dispatched(g, m, "T", 0, 1)
    with RemotingClient(address) as c:
        assert c.call(codes.GET_MAX_OFFSET, {"topic": "T", "queueId": 0}).ext == {"offset": "1"}
    assert terms(g) == before
    assert g.logs[m].server.store.ledger_end_index == end_index + 1      # only the good send was written


def test_a_connection_flood_is_bounded_and_the_broker_serves_after_it(remoting_group):
    g = remoting_group
    m = g.master()
    server = g.servers[m]
    host, port = server.address.split(":")
    socks = []
    try:
        for _ in range(40):                            # the fixture allows 16 at once
            socks.append(socket.create_connection((host, int(port)), timeout=5))
        poll(lambda: server.refused_connections >= 24, what="refusals")
        assert server.connections == 16
    finally:
        for s in socks:
            s.close()
    poll(lambda: server.connections == 0, what="connections closed")
    with RemotingClient(server.address) as c:
        assert send(c).code == codes.SUCCESS


def test_puts_from_many_threads_all_get_distinct_offsets(remoting_group):
    g = remoting_group
    m = g.master()
    results, errors = [], []

    def worker(k):
        try:
            with RemotingClient(g.servers[m].address) as c:
                for i in range(10):
                    a = send(c, topic="MT", queue_id=k % 2, body=b"%d-%d" % (k, i))
                    results.append((a.code, a.ext.get("queueId"), a.ext.get("queueOffset")))
        except Exception as exc:     # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == 40 and all(code == codes.SUCCESS for code, _q, _o in results)
    for q in ("0", "1"):
        assert sorted(int(o) for code, qq, o in results if qq == q) == list(range(20))


def test_a_put_without_quorum_answers_what_rocketmq_answers_and_the_client_may_retry(remoting_group):
    g = remoting_group
    m = g.master()
    for i, log in enumerate(g.logs):
        if i != m:
            g.servers[i].close()
            log.server.shutdown()
    with RemotingClient(g.servers[m].address, timeout=30) as c:
        a = send(c, body=b"no quorum")
    # no quorum within the put timeout: SYSTEM_ERROR "[PC_SYNCHRONIZED]" (Java's DLedgerCommitLog turns
    # WAIT_QUORUM_ACK_TIMEOUT into OS_PAGECACHE_BUSY, answered so); a leader that stepped down first: 14
    assert (a.code == codes.SYSTEM_ERROR and a.remark.startswith("[PC_SYNCHRONIZED]")) or \
        a.code == codes.SERVICE_NOT_AVAILABLE, a


def test_messages_gone_from_the_log_move_the_min_offset_and_a_pull_below_it(remoting_group):
    """The log's head goes (retention; or a replica that caught up past the leader's
    retention): GET_MIN_OFFSET names the first message still held, and a pull below it answers
    PULL_OFFSET_MOVED to there (RocketMQ's OFFSET_TOO_SMALL), so a consumer moves on instead of
    waiting for ever at an offset no replica can serve."""
    from dledger.entry import BODY_OFFSET
    g = remoting_group
    m = g.master()
    log = g.logs[m]
    with RemotingClient(g.servers[m].address) as c:
        for _ in range(6):
            assert send(c, topic="R").code == codes.SUCCESS
        wait_dispatched(g, m, "R", 0, 6)
        third = log._on_runtime(lambda: log.reput.find_queue("R", 0).unit(3)[0]) - BODY_OFFSET

        def drop_head():
            store = log.server.store
            k = next(i for i in range(store.ledger_end_index + 1) if store.get(i).pos == third) - 1
            store.reset(k, store.get_entry_term(k))

        log._on_runtime(drop_head)
        assert c.call(codes.GET_MIN_OFFSET, {"topic": "R", "queueId": 0}).ext == {"offset": "3"}
        below = pull(c, topic="R", offset=1)
        assert below.code == codes.PULL_OFFSET_MOVED
        assert (below.ext["nextBeginOffset"], below.ext["minOffset"], below.ext["maxOffset"]) == ("3", "3", "6")
        rest = pull(c, topic="R", offset=3)
        assert [decode(raw).queue_offset for raw in split_messages(rest.body)] == [3, 4, 5]
        assert c.call(codes.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "R", "queueId": 0, "timestamp": 0}).ext == \
            {"offset": "3"}


def test_pipelined_sends_on_one_connection_are_each_answered_once_by_opaque(remoting_group):
    # the C++ client shares one connection among its sending threads: requests go out back to
    # back and answers come as their puts are answered (a send needs no task of its own)
    g = remoting_group
    m = g.master()
    frames, expect = [], {}
    for i in range(120):
        ext = {"producerGroup": "p", "topic": "Pipe", "queueId": str(i % 4), "sysFlag": "0", "bornTimestamp": "1",
               "flag": "0", "properties": f"KEYS\x01k{i}\x02"}
        if i == 50:
            ext["topic"] = "bad topic"                  # refused on its own; the others go on
        flag = codes.FLAG_ONEWAY if i == 70 else 0      # stored, never answered
        frames.append(encode(RemotingCommand(codes.SEND_MESSAGE, 1000 + i, flag, None, ext, b"m%d" % i,
                                             language="CPP")))
        if not flag:
            expect[1000 + i] = codes.MESSAGE_ILLEGAL if i == 50 else codes.SUCCESS
    with RemotingClient(g.servers[m].address) as c:
        c.send_raw(b"".join(frames))
        answers = [c.read() for _ in expect]
        got = {a.opaque: a for a in answers}
        assert len(got) == len(expect) == 119              # one answer each, none for the oneway send
        assert {o: a.code for o, a in got.items()} == expect
        assert "bad topic" in got[1050].remark
        offsets = sorted((a.ext["queueId"], int(a.ext["queueOffset"])) for a in answers if a.code == codes.SUCCESS)
        for q in "0123":                                    # 119 stored (the oneway one too), none twice
            mine = [o for qq, o in offsets if qq == q]
            assert mine == sorted(set(mine))
        later = send(c, topic="Pipe", queue_id=2)           # the oneway send (queue 2) was stored before it
        stored_on_2 = sum(1 for i in range(120) if i % 4 == 2 and i != 50)
        assert later.code == codes.SUCCESS and int(later.ext["queueOffset"]) == stored_on_2 == 29
