"""The mini broker's wire, frame by frame: produce and pull against a one-node commit log on a
real runtime, malformed requests answered with a clear BAD_REQUEST (never a crash, the
connection and the server still serving), a broken frame answered then closed, and the client
following SERVICE_NOT_AVAILABLE to the leader it names."""

import socket
import time

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dledger import DLedgerConfig, DLedgerServer
from dledger.broker import DLedgerCommitLog
from dledger.broker.client import BrokerClient
from dledger.broker.put_result import PutMessageResult, PutMessageStatus, refused
from dledger.broker.server import BrokerServer, RequestHandler
from dledger.runtime.asyncio_runtime import AsyncioRuntime
from dledger.transport.frames import FrameDecoder, frame_payload
from dledger.transport.inproc import Hub

from transport.tcp_helpers import free_ports


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("mini")
    runtime = AsyncioRuntime()
    cfg = DLedgerConfig(group="m", self_id="n0", peers=f"n0-127.0.0.1:{free_ports(1)[0]}", store_base_dir=str(base),
                        mapped_file_size_for_entry_data=1 << 22, mapped_file_size_for_entry_index=32 * 65536,
                        heart_beat_time_interval_ms=100, bootstrap=True)
    server = DLedgerServer(cfg, runtime=runtime, hub=Hub()).startup()
    log = DLedgerCommitLog(server)
    deadline = time.monotonic() + 15
    while not log.roles.writable:
        assert time.monotonic() < deadline, "the single node did not become master"
        time.sleep(0.01)
    b = BrokerServer(log, "127.0.0.1", 0).start()
    yield b
    b.close()
    log.close()
    server.shutdown()
    runtime.close()


class Raw:
    """A raw connection speaking frames by hand."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.dec = FrameDecoder()

    def send_payload(self, payload: bytes):
        self.sock.sendall(frame_payload(payload))

    def answer(self):
        while True:
            got = self.dec.feed_payloads(b"", limit=1)
            if got:
                return msgpack.unpackb(got[0], raw=False)
            data = self.sock.recv(65536)
            if not data:
                return None
            self.dec.feed_payloads(data, limit=0)

    def ask(self, req):
        self.send_payload(msgpack.packb(req, use_bin_type=True))
        return self.answer()


def test_produce_then_pull_over_frames_returns_the_message_and_the_next_offset(broker):
    c = Raw(broker.port)
    a = c.ask({"op": "produce", "id": 7, "topic": "Wire", "queue_id": 1, "body": b"hello", "tags": "TagA",
               "keys": ["k1", "k2"]})
    assert a["id"] == 7 and a["status"] == "PUT_OK" and a["queue_offset"] == 0 and a["wrote_offset"] > 0
    deadline = time.monotonic() + 10
    while True:
        p = c.ask({"op": "pull", "id": 8, "topic": "Wire", "queue_id": 1, "offset": 0, "max_count": 10})
        if p["messages"] or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert p["status"] == "FOUND" and p["next_offset"] == 1
    [m] = p["messages"]
    assert (m["body"], m["tags"], m["keys"], m["queue_offset"]) == (b"hello", "TagA", ["k1", "k2"], 0)
    assert m["msg_id"] == a["msg_id"] and m["physical_offset"] == a["wrote_offset"]
    end = c.ask({"op": "pull", "id": 9, "topic": "Wire", "queue_id": 1, "offset": 1, "max_count": 10})
    assert end["status"] == "NO_NEW_MSG" and end["next_offset"] == 1 and end["messages"] == []


@pytest.mark.parametrize("payload, words", [
    (b"\xc1not msgpack", "payload: not msgpack"),
    (msgpack.packb([1, 2]), "request: must be a map"),
    (msgpack.packb({"op": "delete", "id": 1}), "op: 'delete'"),
    (msgpack.packb({"op": "produce", "id": 1, "queue_id": 0, "body": b"x"}), "topic: is missing"),
    (msgpack.packb({"op": "produce", "id": 1, "topic": "T", "queue_id": "0", "body": b"x"}), "queue_id: must be int"),
    (msgpack.packb({"op": "produce", "id": 1, "topic": "T", "queue_id": 0, "body": "text"}), "body: must be bytes"),
    (msgpack.packb({"op": "produce", "id": 1, "topic": "T", "queue_id": 0, "body": b"x", "keys": [1]}), "keys:"),
    (msgpack.packb({"op": "pull", "id": 1, "topic": "T", "queue_id": 0, "offset": -1}), "offset: -1 is negative"),
    (msgpack.packb({"op": "pull", "id": 1, "topic": "T", "queue_id": 0, "offset": 0, "max_count": 0}), "max_count"),
    (msgpack.packb({"op": "produce_batch", "id": 1}), "messages: is missing"),
    (msgpack.packb({"op": "produce_batch", "id": 1, "messages": []}), "messages: 0 messages; 1..1024"),
    (msgpack.packb({"op": "produce_batch", "id": 1, "messages": [{"topic": "T", "queue_id": 0, "body": b"x"}] * 1025}),
     "messages: 1025 messages"),
    (msgpack.packb({"op": "produce_batch", "id": 1, "messages": [{"topic": "T", "queue_id": 0, "body": b"x"}, 7]}),
     "messages[1]: must be a map"),
    (msgpack.packb({"op": "produce_batch", "id": 1, "messages": [{"topic": "T", "queue_id": 0, "body": b"x"},
                                                                 {"queue_id": 0, "body": b"x"}]}),
     "messages[1].topic: is missing"),
])
def test_a_malformed_request_gets_a_bad_request_naming_the_field_and_the_connection_keeps_serving(broker, payload,
                                                                                                  words):
    c = Raw(broker.port)
    c.send_payload(payload)
    a = c.answer()
    assert a["status"] == "BAD_REQUEST" and words in a["detail"], a
    ok = c.ask({"op": "pull", "id": 2, "topic": "Nothing", "queue_id": 0, "offset": 0})
    assert ok["status"] == "NO_NEW_MSG" and ok["id"] == 2


def test_a_refused_message_answers_its_status_and_nothing_is_written(broker):
    c = Raw(broker.port)
    a = c.ask({"op": "produce", "id": 3, "topic": "", "queue_id": 0, "body": b"x"})
    assert a["status"] == "MESSAGE_ILLEGAL" and "topic" in a["detail"]
    a = c.ask({"op": "produce", "id": 4, "topic": "T", "queue_id": -1, "body": b"x"})
    assert a["status"] == "MESSAGE_ILLEGAL" and "queue_id" in a["detail"]


def test_a_batch_is_one_append_its_results_in_order_and_a_refused_message_refuses_it_whole(broker):
    c = Raw(broker.port)
    batch = [{"topic": "Batch", "queue_id": 2, "body": b"m%d" % i, "tags": "T", "keys": [f"k{i}"]} for i in range(5)]
    a = c.ask({"op": "produce_batch", "id": 5, "messages": batch})
    assert a["id"] == 5 and a["status"] == "PUT_OK" and len(a["results"]) == 5
    assert [r[1] for r in a["results"]] == [0, 1, 2, 3, 4]                  # queue offsets
    offsets = [r[2] for r in a["results"]]
    assert offsets == sorted(offsets) and len(set(offsets)) == 5
    refused_batch = [{"topic": "Batch", "queue_id": 2, "body": b"late"}, {"topic": "", "queue_id": 2, "body": b"x"}]
    r = c.ask({"op": "produce_batch", "id": 6, "messages": refused_batch})
    assert r["status"] == "MESSAGE_ILLEGAL" and r["detail"].startswith("messages[1]: topic") and r["results"] == []
    deadline = time.monotonic() + 10
    while True:
        p = c.ask({"op": "pull", "id": 7, "topic": "Batch", "queue_id": 2, "offset": 0, "max_count": 100})
        if len(p["messages"]) >= 5 or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert [m["body"] for m in p["messages"]] == [b"m%d" % i for i in range(5)]       # nothing of the refused one
    assert [m["msg_id"] for m in p["messages"]] == [r[0] for r in a["results"]]


def test_stats_count_what_this_replica_dispatched_and_its_lag(broker):
    c = Raw(broker.port)
    before = c.ask({"op": "stats", "id": 1})
    assert before["status"] == "OK" and before["lag_ms"][-1] == [None, before["dispatched"]]
    a = c.ask({"op": "produce_batch", "id": 2, "messages": [{"topic": "Stats", "queue_id": 0, "body": b"s"}] * 3})
    assert a["status"] == "PUT_OK"
    deadline = time.monotonic() + 10
    while (after := c.ask({"op": "stats", "id": 3}))["dispatched"] < before["dispatched"] + 3:
        assert time.monotonic() < deadline, after
        time.sleep(0.01)
    assert after["dispatched"] == before["dispatched"] + 3 and after["cpu_s"] > 0
    counts = [n for _le, n in after["lag_ms"]]
    assert counts == sorted(counts) and counts[-1] == after["dispatched"]
    assert 0 <= after["lag_sum_ms"] - before["lag_sum_ms"] < 3 * 10_000


def test_a_frame_over_the_limit_is_answered_and_closed_and_the_server_still_serves(broker):
    c = Raw(broker.port)
    c.sock.sendall((0x7FFFFFFF).to_bytes(4, "big") + b"xx")
    a = c.answer()
    assert a["status"] == "BAD_REQUEST" and "frame" in a["detail"]
    assert c.answer() is None                           # then the broker closes the connection
    again = Raw(broker.port).ask({"op": "pull", "id": 1, "topic": "Nothing", "queue_id": 0, "offset": 0})
    assert again["status"] == "NO_NEW_MSG"


class FakeLog:
    def __init__(self, result):
        self.result, self.puts = result, []

    def put_message(self, topic, queue_id, body, **kw):
        self.puts.append((topic, queue_id, body))
        return self.result

    def put_messages(self, messages, **kw):
        self.puts.append([(m["topic"], m["queue_id"], m["body"]) for m in messages])
        return [self.result] * len(messages) if self.result.ok else [self.result]

    def get_messages(self, *a):
        raise AssertionError("not used")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.binary(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["op", "id", "topic", "queue_id", "body", "tags", "keys", "offset",
                                         "max_count"]) | st.text(max_size=4), inner, max_size=8), max_leaves=12))
def test_any_decoded_request_gets_an_answer_map_never_an_exception(req):
    if isinstance(req, dict) and req.get("op") == "pull":
        req = {**req, "op": "produce"}      # the fake log serves puts only
    answer = RequestHandler(FakeLog(PutMessageResult(PutMessageStatus.PUT_OK, 48, 10, 0, "X"))).handle(req)
    assert isinstance(answer, dict) and isinstance(answer["status"], str) and "id" in answer


@pytest.fixture
def follower_and_leader():
    """Two brokers on fake logs: n0 refuses puts naming n1 as the leader, n1 takes them."""
    follower = FakeLog(refused(PutMessageStatus.SERVICE_NOT_AVAILABLE, "n0 is not the master", "n1"))
    leader = FakeLog(PutMessageResult(PutMessageStatus.PUT_OK, 148, 90, 3, "MSGID"))
    ports = free_ports(2)
    brokers = {"n0": f"127.0.0.1:{ports[0]}", "n1": f"127.0.0.1:{ports[1]}"}
    servers = [BrokerServer(follower, "127.0.0.1", ports[0], brokers=brokers).start(),
               BrokerServer(leader, "127.0.0.1", ports[1], brokers=brokers).start()]
    yield follower, leader, ports, brokers
    for s in servers:
        s.close()


def test_the_client_follows_service_not_available_to_the_leader_it_names(follower_and_leader):
    follower, leader, ports, brokers = follower_and_leader
    a = Raw(ports[0]).ask({"op": "produce", "id": 1, "topic": "T", "queue_id": 0, "body": b"x"})
    assert a["status"] == "SERVICE_NOT_AVAILABLE" and a["leader_id"] == "n1" and a["leader_broker"] == brokers["n1"]
    with BrokerClient(f"n0-{brokers['n0']};n1-{brokers['n1']}", timeout=5, send_deadline=10) as client:
        client.master = "n0"
        r = client.send("T", 0, b"payload", keys="k")
    assert (r.status, r.broker, r.queue_offset, r.wrote_offset, r.msg_id) == ("PUT_OK", "n1", 3, 148, "MSGID")
    assert leader.puts == [("T", 0, b"payload")] and len(follower.puts) == 2   # refused: sent again


def test_the_client_sends_a_batch_to_the_leader_a_follower_names_and_gets_a_result_each(follower_and_leader):
    follower, leader, _ports, brokers = follower_and_leader
    with BrokerClient(f"n0-{brokers['n0']};n1-{brokers['n1']}", timeout=5, send_deadline=10) as client:
        client.master = "n0"
        rs = client.send_batch([{"topic": "T", "queue_id": q, "body": b"p%d" % q, "keys": "k"} for q in range(3)])
        assert client.send_batch([]) == []
    assert [(r.status, r.broker, r.msg_id) for r in rs] == [("PUT_OK", "n1", "MSGID")] * 3
    assert leader.puts == [[("T", 0, b"p0"), ("T", 1, b"p1"), ("T", 2, b"p2")]] and len(follower.puts) == 1


def test_a_send_whose_answer_never_comes_is_reported_unknown_and_not_sent_again():
    ports = free_ports(1)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", ports[0]))
    lsock.listen(1)
    try:
        with BrokerClient(f"n0-127.0.0.1:{ports[0]}", timeout=0.5, send_deadline=5) as client:
            r = client.send("T", 0, b"x")
        assert r.status == "UNKNOWN" and not r.certain and r.attempts == 1
    finally:
        lsock.close()


def test_a_connection_the_broker_closed_between_sends_is_reopened_and_the_send_stays_certain():
    import threading

    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(2)
    port = lsock.getsockname()[1]

    def serve_one_request_per_connection():
        for _ in range(2):
            conn, _addr = lsock.accept()
            dec = FrameDecoder()
            payloads = []
            while not payloads:
                payloads = dec.feed_payloads(conn.recv(65536))
            rid = msgpack.unpackb(payloads[0], raw=False)["id"]
            conn.sendall(frame_payload(msgpack.packb({"id": rid, "status": "PUT_OK", "queue_offset": rid})))
            conn.close()                 # the broker goes away after answering

    t = threading.Thread(target=serve_one_request_per_connection, daemon=True)
    t.start()
    try:
        with BrokerClient(f"n0-127.0.0.1:{port}", timeout=5, send_deadline=5) as client:
            first = client.send("T", 0, b"a")
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:       # wait until the close has arrived
                s = client._socks["n0"][0]
                s.setblocking(False)
                try:
                    if s.recv(1, socket.MSG_PEEK) == b"":
                        break
                except BlockingIOError:
                    pass
                finally:
                    s.setblocking(True)
                time.sleep(0.01)
            second = client.send("T", 0, b"b")
        assert first.ok and second.ok and second.attempts == 1, (first, second)
    finally:
        t.join(5)
        lsock.close()
