"""The mini broker's request serving: produce and pull over TCP, on top of a ``DLedgerCommitLog``.

The wire is the project's own, not RocketMQ's remoting protocol: each request and each answer
is one frame of ``transport.frames`` (a 4-byte big-endian length, then the payload) whose
payload is one msgpack map. Requests:

- ``{"op": "produce", "id": n, "topic": str, "queue_id": int, "body": bytes, "tags": str|None,
  "keys": [str, ...]}`` → ``{"id": n, "status": <PutMessageStatus name>, "msg_id",
  "queue_offset", "wrote_offset", "wrote_bytes", "leader_id", "leader_broker", "detail"}``;
- ``{"op": "produce_batch", "id": n, "messages": [{"topic", "queue_id", "body", "tags", "keys"},
  ...]}`` (1 to ``MAX_BATCH`` messages in one append: all are taken or none) → ``{"id": n,
  "status", "results": [[msg_id, queue_offset, wrote_offset, wrote_bytes], ...], "leader_id",
  "leader_broker", "detail"}``; ``results`` is empty unless the status is PUT_OK, and a field
  error names the message (``messages[3].topic: is missing``);
- ``{"op": "pull", "id": n, "topic": str, "queue_id": int, "offset": int, "max_count": int}`` →
  ``{"id": n, "status": "FOUND" | "NO_NEW_MSG", "messages": [{"topic", "queue_id",
  "queue_offset", "body", "tags", "keys", "msg_id", "physical_offset"}, ...], "next_offset"}``;
- ``{"op": "stats", "id": n}`` → ``{"id": n, "status": "OK", "dispatched", "lag_ms": [[le, count],
  ...], "lag_sum_ms", "cpu_s"}``: the messages this replica dispatched, their dispatch lag
  (store timestamp to consume-queue unit written) as a cumulative histogram whose last bound is
  null (+Inf), and the process's CPU seconds.

A request that is not such a map gets ``{"status": "BAD_REQUEST", "detail": ...}`` naming what
is wrong (the connection stays open); a stream whose framing is broken (a declared length over
``MAX_REQUEST_BYTES``) gets one BAD_REQUEST answer and is closed. A put on a node that is not the
master answers SERVICE_NOT_AVAILABLE with ``leader_id`` (the DLedger id of the leader, when
known) and ``leader_broker`` (its broker address, when this broker knows the list). Nothing a
client sends makes the server raise: an unexpected error is an UNKNOWN_ERROR answer.

The listener is a ``socketserver.ThreadingTCPServer`` (one thread per connection); a put
blocks its connection's thread until the commit log answers. There is no authentication on
the broker port (the Raft port keeps its own): run it on a trusted network.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import threading
import time
from typing import Any

import msgpack

from dledger.broker.message_codec import message_id
from dledger.protocol import FrameError
from dledger.transport.frames import FrameDecoder, frame_payload

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 8 * 1024 * 1024
MAX_PULL = 1024
MAX_BATCH = 1024
PUT_TIMEOUT_S = 10.0


class BadRequest(ValueError):
    """A request the broker cannot serve (the message names the field)."""


def pack(answer: dict) -> bytes:
    """One answer as one frame."""
    return frame_payload(msgpack.packb(answer, use_bin_type=True))


def _field(req: dict, name: str, kinds, *, optional: bool = False, default=None):
    if name not in req or req[name] is None:
        if optional:
            return default
        raise BadRequest(f"{name}: is missing")
    value = req[name]
    if isinstance(value, bool) or not isinstance(value, kinds):
        want = kinds.__name__ if isinstance(kinds, type) else " or ".join(k.__name__ for k in kinds)
        raise BadRequest(f"{name}: must be {want}, got {type(value).__name__}")
    return value


class RequestHandler:
    """Turns one decoded request into one answer map (no I/O; the listener calls it)."""

    def __init__(self, commit_log, brokers: dict[str, str] | None = None, put_timeout: float = PUT_TIMEOUT_S) -> None:
        self.log = commit_log
        self.brokers = dict(brokers or {})
        self.put_timeout = put_timeout

    def handle_payload(self, payload: bytes) -> dict:
        try:
            req = msgpack.unpackb(payload, raw=False)
        except Exception as exc:  # noqa: BLE001 - any undecodable payload is a bad request
            return {"id": None, "status": "BAD_REQUEST", "detail": f"payload: not msgpack ({exc})"}
        return self.handle(req)

    def handle(self, req: Any) -> dict:
        rid = req.get("id") if isinstance(req, dict) else None
        if not isinstance(rid, (int, str)) or isinstance(rid, bool):
            rid = None
        try:
            if not isinstance(req, dict):
                raise BadRequest(f"request: must be a map, got {type(req).__name__}")
            op = req.get("op")
            if op == "produce":
                answer = self._produce(req)
            elif op == "produce_batch":
                answer = self._produce_batch(req)
            elif op == "stats":
                answer = self._stats()
            elif op == "pull":
                answer = self._pull(req)
            else:
                raise BadRequest(f"op: {op!r} is not 'produce', 'produce_batch', 'pull' or 'stats'")
        except BadRequest as exc:
            answer = {"status": "BAD_REQUEST", "detail": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a request never takes the broker down
            log.exception("request failed")
            answer = {"status": "UNKNOWN_ERROR", "detail": f"{type(exc).__name__}: {exc}"}
        answer["id"] = rid
        return answer

    @staticmethod
    def _message(req: dict, where: str = "") -> dict:
        """One message's fields, checked (``where`` prefixes the field names of a batch's)."""
        try:
            topic = _field(req, "topic", str)
            queue_id = _field(req, "queue_id", int)
            body = _field(req, "body", bytes)
            tags = _field(req, "tags", str, optional=True)
            keys = _field(req, "keys", (list, tuple), optional=True, default=())
        except BadRequest as exc:
            raise BadRequest(f"{where}{exc}") from None
        if not all(isinstance(k, str) for k in keys):
            raise BadRequest(f"{where}keys: must be a list of strings")
        return {"topic": topic, "queue_id": queue_id, "body": body, "tags": tags, "keys": list(keys)}

    def _answer(self, r, **fields) -> dict:
        leader = r.leader_id
        return {"status": r.status.name, "leader_id": leader,
                "leader_broker": self.brokers.get(leader) if leader else None, "detail": r.detail, **fields}

    def _produce(self, req: dict) -> dict:
        m = self._message(req)
        try:
            r = self.log.put_message(m.pop("topic"), m.pop("queue_id"), m.pop("body"), timeout=self.put_timeout, **m)
        except TimeoutError:
            return {"status": "UNKNOWN_ERROR", "detail": f"no answer from the log within {self.put_timeout} s"}
        return self._answer(r, msg_id=r.msg_id, queue_offset=r.queue_offset, wrote_offset=r.wrote_offset,
                            wrote_bytes=r.wrote_bytes)

    def _produce_batch(self, req: dict) -> dict:
        """Several messages in one append: all are taken or none (a refused message, a
        non-master, a failed append refuse the whole batch with one status)."""
        items = _field(req, "messages", (list, tuple))
        if not 1 <= len(items) <= MAX_BATCH:
            raise BadRequest(f"messages: {len(items)} messages; 1..{MAX_BATCH} per batch")
        batch = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise BadRequest(f"messages[{i}]: must be a map, got {type(item).__name__}")
            batch.append(self._message(item, f"messages[{i}]."))
        try:
            results = self.log.put_messages(batch, timeout=self.put_timeout)
        except TimeoutError:
            return {"status": "UNKNOWN_ERROR", "detail": f"no answer from the log within {self.put_timeout} s",
                    "results": []}
        first = next((r for r in results if not r.ok), results[0])
        if not first.ok:
            return self._answer(first, results=[])
        return self._answer(first, results=[[r.msg_id, r.queue_offset, r.wrote_offset, r.wrote_bytes]
                                            for r in results])

    def _stats(self) -> dict:
        """How this replica's dispatch is doing, and the process's CPU time (for benchmarks)."""
        buckets, count, total = self.log.dispatch_lag.snapshot()
        return {"status": "OK", "dispatched": count, "lag_sum_ms": total, "cpu_s": time.process_time(),
                "lag_ms": [[None if le == float("inf") else le, n] for le, n in buckets]}

    def _pull(self, req: dict) -> dict:
        topic = _field(req, "topic", str)
        queue_id = _field(req, "queue_id", int)
        offset = _field(req, "offset", int)
        max_count = _field(req, "max_count", int, optional=True, default=32)
        if offset < 0:
            raise BadRequest(f"offset: {offset} is negative")
        if not 1 <= max_count <= MAX_PULL:
            raise BadRequest(f"max_count: {max_count} is not in 1..{MAX_PULL}")
        messages, next_offset = self.log.get_messages(topic, queue_id, offset, max_count)
        out = [{"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset, "body": m.body,
                "tags": m.tags, "keys": m.key_list, "physical_offset": m.physical_offset,
                "msg_id": message_id(m.store_host, m.physical_offset)} for m in messages]
        return {"status": "FOUND" if out else "NO_NEW_MSG", "messages": out, "next_offset": next_offset}


class _Connection(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        handler: RequestHandler = self.server.handler      # type: ignore[attr-defined]
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        decoder = FrameDecoder(MAX_REQUEST_BYTES)
        while not self.server.closing.is_set():            # type: ignore[attr-defined]
            try:
                data = sock.recv(64 * 1024)
            except OSError:
                return
            if not data:
                return
            try:
                payloads = decoder.feed_payloads(data)
            except FrameError as exc:
                self._send(sock, {"id": None, "status": "BAD_REQUEST", "detail": f"frame: {exc}"})
                return
            for payload in payloads:
                if not self._send(sock, handler.handle_payload(payload)):
                    return

    @staticmethod
    def _send(sock: socket.socket, answer: dict) -> bool:
        try:
            sock.sendall(pack(answer))
            return True
        except OSError:
            return False


class _Listener(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class BrokerServer:
    """Serves produce and pull on ``host:port`` for ``commit_log`` (``start()``, ``close()``)."""

    def __init__(self, commit_log, host: str, port: int, *, brokers: dict[str, str] | None = None,
                 put_timeout: float = PUT_TIMEOUT_S) -> None:
        self.handler = RequestHandler(commit_log, brokers, put_timeout)
        self.host, self.port = host, port
        self._listener: _Listener | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "BrokerServer":
        listener = _Listener((self.host, self.port), _Connection)
        listener.handler = self.handler       # type: ignore[attr-defined]
        listener.closing = threading.Event()  # type: ignore[attr-defined]
        self.port = listener.server_address[1]
        self._listener = listener
        self._thread = threading.Thread(target=listener.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="broker-listener", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        listener = self._listener
        if listener is None:
            return
        self._listener = None
        listener.closing.set()                # type: ignore[attr-defined]
        listener.shutdown()
        listener.server_close()
        if self._thread is not None:
            self._thread.join(5)


__all__ = ["MAX_BATCH", "MAX_PULL", "MAX_REQUEST_BYTES", "BadRequest", "BrokerServer", "RequestHandler", "pack"]
