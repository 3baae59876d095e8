"""The gRPC v2 endpoint in process, driven with the generated stubs over TCP: a one-node broker
on the real runtime. Route, settings, send with a body digest, POP receive / ack / change of
invisible duration / redelivery, long polling, and bad input answered with a status (never a
crash; the node's term does not move)."""

import time
import zlib

import grpc
import pytest

from dledger import DLedgerConfig, DLedgerServer
from dledger.broker import DLedgerCommitLog
from dledger.broker.grpc_v2.endpoint import GrpcEndpoint
from dledger.broker.grpc_v2.rocketmq_v2 import definition_pb2 as pb
from dledger.broker.grpc_v2.rocketmq_v2 import service_pb2 as spb
from dledger.broker.grpc_v2.rocketmq_v2 import service_pb2_grpc
from dledger.runtime.asyncio_runtime import AsyncioRuntime
from dledger.transport.inproc import Hub
from helpers.polling import poll


@pytest.fixture
def broker(tmp_path):
    runtime, hub = AsyncioRuntime(), Hub()
    cfg = DLedgerConfig(group="g", self_id="n0", peers="n0-127.0.0.1:20911", store_base_dir=str(tmp_path),
                        mapped_file_size_for_entry_data=1 << 22, mapped_file_size_for_entry_index=32 * 65536)
    log = DLedgerCommitLog(DLedgerServer(cfg, runtime=runtime, hub=hub))
    log.server.startup()
    poll(lambda: log.roles.writable)
    endpoint = GrpcEndpoint(log, "127.0.0.1", 0).start()
    channel = grpc.insecure_channel(endpoint.address)
    try:
        yield log, endpoint, service_pb2_grpc.MessagingServiceStub(channel)
    finally:
        channel.close()
        endpoint.close()
        log.close()
        log.server.shutdown()
        runtime.close()


def message(topic, body, mid, queue_id=0, tag=None, digest=True, **props):
    m = pb.Message(body=body)
    m.topic.name = topic
    m.system_properties.message_id = mid
    m.system_properties.queue_id = queue_id
    m.system_properties.message_type = pb.NORMAL
    if tag:
        m.system_properties.tag = tag
    if digest:
        m.system_properties.body_digest.type = pb.CRC32
        m.system_properties.body_digest.checksum = f"{zlib.crc32(body):08X}"
    m.user_properties.update(props)
    return m


def send(stub, *messages):
    return stub.SendMessage(spb.SendMessageRequest(messages=list(messages)), timeout=10)


def receive(stub, group, topic, queue_id=-1, batch=32, invisible_s=30, poll_s=0, tag="*"):
    req = spb.ReceiveMessageRequest(batch_size=batch)
    req.group.name = group
    req.message_queue.topic.name = topic
    req.message_queue.id = queue_id
    req.filter_expression.type = pb.TAG
    req.filter_expression.expression = tag
    req.invisible_duration.FromSeconds(invisible_s)
    req.long_polling_timeout.FromSeconds(poll_s)
    return list(stub.ReceiveMessage(req, timeout=poll_s + 10))


def receive_n(stub, group, topic, n, **kw):
    """Receive until ``n`` messages came (a send is answered once committed; its message is
    received once dispatched, a few ms later)."""
    got, deadline = [], time.monotonic() + 15
    while len(got) < n:
        assert time.monotonic() < deadline, f"{len(got)} of {n} messages"
        frames = receive(stub, group, topic, poll_s=2, **kw)
        assert frames[-1].HasField("delivery_timestamp")
        got += [f.message for f in frames if f.HasField("message")]
    return got


def ack(stub, group, topic, m):
    req = spb.AckMessageRequest()
    req.group.name, req.topic.name = group, topic
    req.entries.add(message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle)
    return stub.AckMessage(req, timeout=10)


def test_route_and_settings(broker):
    _log, endpoint, stub = broker
    req = spb.QueryRouteRequest()
    req.topic.name = "T"
    r = stub.QueryRoute(req, timeout=10)
    assert r.status.code == pb.OK and [q.id for q in r.message_queues] == [0, 1, 2, 3]
    q = r.message_queues[0]
    assert q.permission == pb.READ_WRITE and q.broker.id == 0 and list(q.accept_message_types) == [pb.NORMAL]
    assert (q.broker.endpoints.addresses[0].host, q.broker.endpoints.addresses[0].port) == ("127.0.0.1", endpoint.port)

    cmd = spb.TelemetryCommand()
    cmd.settings.client_type = pb.PRODUCER
    cmd.settings.publishing.SetInParent()
    answers = stub.Telemetry(iter([cmd]), timeout=10)
    answer = next(answers)
    assert answer.status.code == pb.OK and answer.settings.publishing.max_body_size == 4 * 1024 * 1024
    assert answer.settings.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
    answers.cancel()


def test_send_receive_ack_and_redelivery(broker):
    log, _endpoint, stub = broker
    mids = [f"01AA{i:030X}" for i in range(3)]
    for i, mid in enumerate(mids):
        r = send(stub, message("T", b"body-%d" % i, mid, queue_id=i % 2, tag="a" if i != 1 else "b", k="v"))
        assert r.status.code == pb.OK, r
        assert r.entries[0].message_id == mid
    stored = log.get_messages("T", 0, 0, 10)[0]
    assert stored[0].uniq_key == mids[0] and stored[0].properties["k"] == "v"

    frames = receive(stub, "G", "T", batch=10, invisible_s=1, poll_s=2)
    assert frames[0].status.code == pb.OK and frames[-1].HasField("delivery_timestamp")
    got = [f.message for f in frames[1:-1]]
    got += receive_n(stub, "G", "T", 3 - len(got), batch=10, invisible_s=1) if len(got) < 3 else []
    assert sorted(m.body for m in got) == [b"body-0", b"body-1", b"body-2"]
    for m in got:
        sp = m.system_properties
        assert sp.delivery_attempt == 1 and sp.body_digest.checksum == f"{zlib.crc32(m.body):08X}"
        assert sp.message_id in mids and m.user_properties["k"] == "v"
    # nothing more for now: one MESSAGE_NOT_FOUND status (and the timestamp)
    frames = receive(stub, "G", "T")
    assert frames[0].status.code == pb.MESSAGE_NOT_FOUND and len(frames) == 2
    # ack two; the third comes back after its invisible duration, attempt 2 (long polling waits)
    keep = next(m for m in got if m.body == b"body-2")
    for m in got:
        if m is not keep:
            assert ack(stub, "G", "T", m).status.code == pb.OK
    assert ack(stub, "G", "T", got[0]).status.code == pb.INVALID_RECEIPT_HANDLE      # twice
    t0 = time.monotonic()
    frames = receive(stub, "G", "T", poll_s=5, invisible_s=30)
    again = [f.message for f in frames if f.HasField("message")]
    assert [m.body for m in again] == [b"body-2"] and again[0].system_properties.delivery_attempt == 2
    assert time.monotonic() - t0 < 4
    # the first handle of that message is no longer good; the new one is
    assert ack(stub, "G", "T", keep).status.code == pb.INVALID_RECEIPT_HANDLE
    assert ack(stub, "G", "T", again[0]).status.code == pb.OK
    # a new group starts at each queue's first message; a tag filter keeps only its tags
    assert [m.body for m in receive_n(stub, "H", "T", 1, tag="b")] == [b"body-1"]
    assert receive(stub, "H", "T")[0].status.code == pb.MESSAGE_NOT_FOUND


def test_change_invisible_duration_and_long_polling_wakes_on_a_send(broker):
    _log, _endpoint, stub = broker
    assert send(stub, message("C", b"x", "01BB" + "0" * 30)).status.code == pb.OK
    m = receive_n(stub, "G", "C", 1, invisible_s=1)[0]
    req = spb.ChangeInvisibleDurationRequest(receipt_handle=m.system_properties.receipt_handle,
                                             message_id=m.system_properties.message_id)
    req.group.name, req.topic.name = "G", "C"
    req.invisible_duration.FromSeconds(60)
    r = stub.ChangeInvisibleDuration(req, timeout=10)
    assert r.status.code == pb.OK and r.receipt_handle != m.system_properties.receipt_handle
    assert stub.ChangeInvisibleDuration(req, timeout=10).status.code == pb.INVALID_RECEIPT_HANDLE
    # a long poll is answered when a message arrives, not at its timeout
    import threading
    threading.Timer(0.5, lambda: send(stub, message("C", b"y", "01BC" + "0" * 30))).start()
    t0 = time.monotonic()
    frames = receive(stub, "G", "C", poll_s=20)
    assert [f.message.body for f in frames if f.HasField("message")] == [b"y"]
    assert time.monotonic() - t0 < 10


def test_bad_input_gets_a_status_never_a_crash_and_the_term_stays(broker):
    log, endpoint, stub = broker
    term = log.server.node.term
    bad_digest = message("T", b"abc", "01CC" + "0" * 30)
    bad_digest.system_properties.body_digest.checksum = "00000000"
    cases = [
        (send(stub, bad_digest), pb.MESSAGE_CORRUPTED),
        (send(stub, message("T", b"", "01CC" + "1" * 30)), pb.MESSAGE_BODY_EMPTY),
        (send(stub, message("bad topic", b"x", "01CC" + "2" * 30)), pb.ILLEGAL_TOPIC),
        (send(stub, message("T", b"x", "")), pb.ILLEGAL_MESSAGE_ID),
        (send(stub, message("T", b"x", "01CC" + "3" * 30, queue_id=99)), pb.BAD_REQUEST),
        (send(stub, message("T", b"x", "01CC" + "4" * 30, TAGS="no")), pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (send(stub, message("RMQ_SYS_DLEDGER_CONSUMER_STATE", b"x", "01CC" + "5" * 30)), pb.TOPIC_NOT_FOUND),
        (stub.SendMessage(spb.SendMessageRequest(), timeout=10), pb.BAD_REQUEST),
        (stub.QueryRoute(spb.QueryRouteRequest(), timeout=10), pb.ILLEGAL_TOPIC),
        (stub.AckMessage(spb.AckMessageRequest(), timeout=10), pb.ILLEGAL_CONSUMER_GROUP),
    ]
    for response, code in cases:
        assert response.status.code == code, (response, pb.Code.Name(code))
    req = spb.AckMessageRequest()
    req.group.name, req.topic.name = "G", "T"
    req.entries.add(message_id="x", receipt_handle="garbage")
    assert stub.AckMessage(req, timeout=10).entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
    frames = receive(stub, "G", "T", invisible_s=0)
    assert frames[0].status.code == pb.ILLEGAL_INVISIBLE_TIME and frames[-1].HasField("delivery_timestamp")
    assert receive(stub, "G", "T", batch=0)[0].status.code == pb.BAD_REQUEST
    assert receive(stub, "G", "T", queue_id=7)[0].status.code == pb.BAD_REQUEST
    # bytes that are no protobuf at all: a gRPC error status
    raw = grpc.insecure_channel(endpoint.address)
    call = raw.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage")
    with pytest.raises(grpc.RpcError) as exc:
        call(b"\xff\xff\xff\xff", timeout=10)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "SendMessageRequest" in exc.value.details()
    telemetry = raw.stream_stream("/apache.rocketmq.v2.MessagingService/Telemetry")
    with pytest.raises(grpc.RpcError) as exc:
        list(telemetry(iter([b"\xff\xff"]), timeout=10))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    raw.close()
    # the RPCs not served answer UNIMPLEMENTED
    with pytest.raises(grpc.RpcError) as exc:
        stub.QueryOffset(spb.QueryOffsetRequest(), timeout=10)
    assert exc.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(grpc.RpcError) as exc:
        list(stub.PullMessage(spb.PullMessageRequest(), timeout=10))
    assert exc.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # still serving, same term
    assert send(stub, message("T", b"fine", "01CC" + "6" * 30)).status.code == pb.OK
    assert log.server.node.term == term


def test_a_new_group_starts_at_the_first_message_the_log_still_holds():
    """Retention trims the log's head: the consume queue still has units for messages the log
    no longer holds. The cursor of a group new to the queue goes to the first one held."""
    from types import SimpleNamespace

    from dledger.broker.grpc_v2.pop import PopConsumption

    held = range(37, 50)

    class TrimmedLog:                        # as DLedgerCommitLog answers (test_queue_min_offset.py)
        def max_queue_offset(self, topic, q):
            return 50

        def min_queue_offset(self, topic, q):
            return held[0]

        def get_messages(self, topic, q, offset, n):
            offset = max(offset, held[0])
            out = [SimpleNamespace(queue_offset=o, tags=None) for o in range(offset, min(offset + n, 50))]
            return out, offset + len(out)

    pop = PopConsumption(TrimmedLog())
    for start in (0, 1, 36, 37, 45, 50):
        assert pop._first_retained("T", 0, start) == max(start, 37)
    parts, read = pop._plan("G", "T", [0], 4, lambda tags: True)
    assert parts == [{"q": 0, "from": 0, "to": 41, "new": [37, 38, 39, 40], "again": []}]
    assert sorted(read) == [(0, 37), (0, 38), (0, 39), (0, 40)]


def test_a_port_in_use_is_an_os_error_naming_it(broker):
    log, endpoint, _stub = broker
    with pytest.raises(OSError, match=f"127.0.0.1:{endpoint.port}"):
        GrpcEndpoint(log, "127.0.0.1", endpoint.port).start()
