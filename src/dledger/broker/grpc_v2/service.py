"""The RPC handlers of ``apache.rocketmq.v2.MessagingService`` on a ``DLedgerCommitLog`` (grpc.aio).

Served: QueryRoute, Heartbeat, Telemetry (answers a client's Settings with ``routes.settings``),
SendMessage, ReceiveMessage (a status frame, the messages, then a ``delivery_timestamp`` frame;
an empty result is one MESSAGE_NOT_FOUND status frame and the timestamp), AckMessage,
ChangeInvisibleDuration, QueryAssignment and NotifyClientTermination. Every other RPC answers the
gRPC status UNIMPLEMENTED.

Bad input never takes the broker down: a request missing what it needs, or holding a bad name,
handle or duration, gets a v2 ``Status`` with the code that names it (BAD_REQUEST,
ILLEGAL_TOPIC, ILLEGAL_CONSUMER_GROUP, INVALID_RECEIPT_HANDLE, ILLEGAL_INVISIBLE_TIME, ...)
and a message naming the field; an unexpected error is an INTERNAL_SERVER_ERROR status (logged).
Writes (sends, and the POP records of receive and ack) are served by the master only; elsewhere
they answer a status whose message names the master's endpoint.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

import grpc

from dledger.broker.grpc_v2.convert import Refused, to_put, to_v2
from dledger.broker.grpc_v2.pop import PopConsumption, PopError
from dledger.broker.grpc_v2.pop_state import parse_handle
from dledger.broker.grpc_v2.rocketmq_v2 import definition_pb2 as pb
from dledger.broker.grpc_v2.rocketmq_v2 import service_pb2 as spb
from dledger.broker.grpc_v2.rocketmq_v2 import service_pb2_grpc
from dledger.broker.grpc_v2.routes import LONG_POLLING_TIMEOUT_S, Routes
from dledger.broker.loop_handoff import Handoff
from dledger.broker.put_checks import topic_problem
from dledger.broker.topics import is_system_topic

log = logging.getLogger(__name__)

MAX_BATCH = 1024
MAX_POLL_MS = 60_000
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
#: a receive without an invisible duration (push consumers, ``auto_renew``): the proxy's default;
#: this broker does not renew it while the client consumes
DEFAULT_INVISIBLE_MS = 60_000
PUT_TIMEOUT_S = 10.0

_PUT_CODES = {"PUT_OK": pb.OK, "SERVICE_NOT_AVAILABLE": pb.HA_NOT_AVAILABLE,
              "FLUSH_SLAVE_TIMEOUT": pb.SLAVE_PERSISTENCE_TIMEOUT, "OS_PAGECACHE_BUSY": pb.TOO_MANY_REQUESTS,
              "MESSAGE_ILLEGAL": pb.BAD_REQUEST, "PROPERTIES_SIZE_EXCEEDED": pb.MESSAGE_PROPERTIES_TOO_LARGE}
_POP_CODES = {"not_master": pb.HA_NOT_AVAILABLE, "refused": pb.INTERNAL_SERVER_ERROR, "timeout": pb.PROXY_TIMEOUT}

UNIMPLEMENTED = ("ForwardMessageToDeadLetterQueue", "UpdateOffset", "GetOffset", "QueryOffset", "EndTransaction",
                 "RecallMessage", "SyncLiteSubscription")
UNIMPLEMENTED_STREAMS = ("PullMessage",)


class BadInput(ValueError):
    """A request field the broker cannot take: ``code`` is the v2 status code to answer."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code


def status(code: int = pb.OK, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)


def _answering(response_type):
    """Wrap a unary handler: bad input and unexpected errors become the response's status."""
    def wrap(fn):
        @functools.wraps(fn)
        async def handler(self, request, context):
            try:
                return await fn(self, request, context)
            except (BadInput, Refused) as exc:
                return response_type(status=status(exc.code, str(exc)))
            except PopError as exc:
                return response_type(status=status(_POP_CODES[exc.reason], self._not_master(str(exc))))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a request never takes the broker down
                log.exception("%s failed", fn.__name__)
                return response_type(status=status(pb.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}"))
        return handler
    return wrap


def _topic(resource, field: str = "topic") -> str:
    name = resource.name
    why = topic_problem(name)
    if why:
        raise BadInput(pb.ILLEGAL_TOPIC, f"{field}: {why.partition(': ')[2]}")
    if is_system_topic(name):
        raise BadInput(pb.TOPIC_NOT_FOUND, f"{field}: {name} is a system topic")
    return name


def _group(resource) -> str:
    why = topic_problem(resource.name)
    if why:
        raise BadInput(pb.ILLEGAL_CONSUMER_GROUP, f"group: {why.partition(': ')[2]}")
    return resource.name


def _millis(duration, field: str, low: int, high: int, default: int | None = None) -> int:
    if duration is None:
        if default is None:
            raise BadInput(pb.BAD_REQUEST, f"{field}: is missing")
        return default
    ms = duration.seconds * 1000 + duration.nanos // 1_000_000
    if not low <= ms <= high:
        code = pb.ILLEGAL_INVISIBLE_TIME if "invisible" in field else pb.ILLEGAL_POLLING_TIME
        raise BadInput(code, f"{field}: {ms} ms is not in {low}..{high} ms")
    return ms


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, commit_log, routes: Routes, *, put_timeout: float = PUT_TIMEOUT_S) -> None:
        self.log = commit_log
        self.routes = routes
        self.pop = PopConsumption(commit_log)
        self.put_timeout = put_timeout
        self._handoff = Handoff()

    def _not_master(self, detail: str) -> str:
        master = self.routes.master_endpoint()
        return f"{detail}; the master's endpoint is {master or 'unknown'}"

    # -- routes and clients -----------------------------------------------------------------------
    @_answering(spb.QueryRouteResponse)
    async def QueryRoute(self, request, context):
        _topic(request.topic)
        queues = self.routes.route(request.topic)
        if queues is None:
            return spb.QueryRouteResponse(status=status(pb.HA_NOT_AVAILABLE, "no master is known yet"))
        return spb.QueryRouteResponse(status=status(), message_queues=queues)

    @_answering(spb.QueryAssignmentResponse)
    async def QueryAssignment(self, request, context):
        _topic(request.topic)
        _group(request.group)
        queues = self.routes.assignment(request.topic)
        if queues is None:
            return spb.QueryAssignmentResponse(status=status(pb.HA_NOT_AVAILABLE, "no master is known yet"))
        return spb.QueryAssignmentResponse(status=status(), assignments=[pb.Assignment(message_queue=q)
                                                                         for q in queues])

    @_answering(spb.HeartbeatResponse)
    async def Heartbeat(self, request, context):
        if request.HasField("group") and request.group.name:
            _group(request.group)
        return spb.HeartbeatResponse(status=status())

    @_answering(spb.NotifyClientTerminationResponse)
    async def NotifyClientTermination(self, request, context):
        return spb.NotifyClientTerminationResponse(status=status())

    async def Telemetry(self, request_iterator, context):
        """Answer each ``Settings`` the client sends with the settings it must use; other
        commands (thread stack traces, verify results) are taken and not answered."""
        try:
            async for command in request_iterator:
                if command.WhichOneof("command") == "settings":
                    yield spb.TelemetryCommand(status=status(), settings=self.routes.settings(command.settings))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the stream ends, the broker stays
            log.warning("telemetry stream ended: %s", exc)

    # -- send ---------------------------------------------------------------------------------------
    @_answering(spb.SendMessageResponse)
    async def SendMessage(self, request, context):
        if not request.messages:
            raise BadInput(pb.BAD_REQUEST, "messages: is empty")
        if len(request.messages) > MAX_BATCH:
            raise BadInput(pb.BAD_REQUEST, f"messages: {len(request.messages)}; at most {MAX_BATCH}")
        puts = []
        for i, m in enumerate(request.messages):
            try:
                _topic(m.topic, f"messages[{i}].topic")
                put = to_put(m, self.routes.max_body_size)
            except (BadInput, Refused) as exc:
                raise BadInput(exc.code, f"messages[{i}]: {exc}" if len(request.messages) > 1 else str(exc)) from None
            count = self.routes.queue_count(put["topic"])
            if not 0 <= put["queue_id"] < count:
                raise BadInput(pb.BAD_REQUEST, f"queue_id: {put['queue_id']} is not a queue of {put['topic']} "
                                               f"(0..{count - 1})")
            puts.append(put)
        try:
            if len(puts) == 1:
                p = puts[0]
                results = [await self._handoff.result(self.log.put_message_async(p.pop("topic"), p.pop("queue_id"),
                                                                                 p.pop("body"), **p), self.put_timeout)]
            else:
                results = await self._handoff.result(self.log.put_messages_async(puts), self.put_timeout)
        except TimeoutError:
            return spb.SendMessageResponse(status=status(pb.PROXY_TIMEOUT, f"no answer from the log within "
                                                         f"{self.put_timeout} s; the message may still be stored"))
        entries = []
        for m, r in zip(request.messages, results):
            code = _PUT_CODES.get(r.status.name, pb.INTERNAL_SERVER_ERROR)
            text = "OK" if r.ok else (self._not_master(r.detail or r.status.name)
                                      if code == pb.HA_NOT_AVAILABLE else f"{r.status.name}: {r.detail or ''}")
            entry = spb.SendResultEntry(status=status(code, text), message_id=m.system_properties.message_id)
            if r.ok:
                entry.offset = r.queue_offset
            entries.append(entry)
        first = next((e.status for e in entries if e.status.code != pb.OK), status())
        return spb.SendMessageResponse(status=first, entries=entries)

    # -- POP consumption -----------------------------------------------------------------------------
    async def ReceiveMessage(self, request, context):
        """A status frame, one frame per message, then a delivery-timestamp frame."""
        try:
            group = _group(request.group)
            topic = _topic(request.message_queue.topic)
            q = request.message_queue.id
            count = self.routes.queue_count(topic)
            if q == -1 or 0 <= q < count:       # as the proxy: a receive pops from every queue
                start = max(q, 0)
                queue_ids = [*range(start, count), *range(start)]
            else:
                raise BadInput(pb.BAD_REQUEST, f"message_queue.id: {q} is not a queue of {topic} (0..{count - 1})")
            batch = request.batch_size
            if not 1 <= batch <= MAX_BATCH:
                raise BadInput(pb.BAD_REQUEST, f"batch_size: {batch} is not in 1..{MAX_BATCH}")
            fe = request.filter_expression
            if fe.type == pb.SQL:
                raise BadInput(pb.ILLEGAL_FILTER_EXPRESSION, "filter_expression: SQL filters are not supported")
            invisible = _millis(request.invisible_duration if request.HasField("invisible_duration") else None,
                                "invisible_duration", MIN_INVISIBLE_MS, MAX_INVISIBLE_MS, DEFAULT_INVISIBLE_MS)
            poll = _millis(request.long_polling_timeout if request.HasField("long_polling_timeout") else None,
                           "long_polling_timeout", 0, MAX_POLL_MS, LONG_POLLING_TIMEOUT_S * 1000)
            deliveries = await self.pop.receive(group, topic, queue_ids, batch, invisible, poll,
                                                fe.expression if fe.type == pb.TAG else "*")
            if deliveries:
                yield spb.ReceiveMessageResponse(status=status())
                for d in deliveries:
                    yield spb.ReceiveMessageResponse(message=to_v2(
                        d.message, receipt_handle=d.receipt_handle, attempt=d.attempt, invisible_ms=invisible,
                        namespace=request.message_queue.topic.resource_namespace))
            else:
                yield spb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))
        except (BadInput, Refused) as exc:
            yield spb.ReceiveMessageResponse(status=status(exc.code, str(exc)))
        except PopError as exc:
            yield spb.ReceiveMessageResponse(status=status(_POP_CODES[exc.reason], self._not_master(str(exc))))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            log.exception("ReceiveMessage failed")
            yield spb.ReceiveMessageResponse(status=status(pb.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}"))
        ts = spb.ReceiveMessageResponse()
        ts.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
        yield ts

    @staticmethod
    def _handle(text: str) -> tuple[int, int, int]:
        try:
            return parse_handle(text)
        except ValueError as exc:
            raise BadInput(pb.INVALID_RECEIPT_HANDLE, str(exc)) from None

    @_answering(spb.AckMessageResponse)
    async def AckMessage(self, request, context):
        group, topic = _group(request.group), _topic(request.topic)
        if not request.entries:
            raise BadInput(pb.BAD_REQUEST, "entries: is empty")
        entries = []
        for e in request.entries:
            try:
                q, o, seq = self._handle(e.receipt_handle)
                ok = await self.pop.ack(group, topic, q, o, seq)
                st = status() if ok else status(pb.INVALID_RECEIPT_HANDLE, "receipt_handle: expired (the message "
                                                "was acknowledged, or handed out again) or not this group's")
            except BadInput as exc:
                st = status(exc.code, str(exc))
            entries.append(spb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle,
                                                     status=st))
        first = next((e.status for e in entries if e.status.code != pb.OK), status())
        if len(entries) > 1 and first.code != pb.OK:
            first = status(pb.MULTIPLE_RESULTS, "some entries failed")
        return spb.AckMessageResponse(status=first, entries=entries)

    @_answering(spb.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(self, request, context):
        group, topic = _group(request.group), _topic(request.topic)
        q, o, seq = self._handle(request.receipt_handle)
        ms = _millis(request.invisible_duration if request.HasField("invisible_duration") else None,
                     "invisible_duration", MIN_INVISIBLE_MS, MAX_INVISIBLE_MS)
        new = await self.pop.change_invisible(group, topic, q, o, seq, ms)
        if new is None:
            return spb.ChangeInvisibleDurationResponse(status=status(
                pb.INVALID_RECEIPT_HANDLE, "receipt_handle: expired (acknowledged, or handed out again)"))
        return spb.ChangeInvisibleDurationResponse(status=status(), receipt_handle=new)


def _unimplemented(name: str, stream: bool):
    detail = f"{name} is not implemented by this broker"
    if stream:
        async def handler(self, request, context):
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, detail)
            yield  # pragma: no cover - abort raises
    else:
        async def handler(self, request, context):
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, detail)
    handler.__name__ = name
    return handler


for _name in UNIMPLEMENTED:
    setattr(MessagingService, _name, _unimplemented(_name, False))
for _name in UNIMPLEMENTED_STREAMS:
    setattr(MessagingService, _name, _unimplemented(_name, True))


__all__ = ["MAX_BATCH", "MessagingService", "UNIMPLEMENTED", "status"]
