"""``BrokerClient``: a small blocking client of the mini broker (``dledger broker``).

``BrokerClient("n0-127.0.0.1:30911;n1-127.0.0.1:30912;...")`` takes the brokers' addresses
under their DLedger ids. ``send(topic, queue_id, body, tags=None, keys=())`` finds the master
and returns a ``SendResult`` (``status``, ``msg_id``, ``queue_offset``, ``wrote_offset``);
``send_batch([{"topic": ..., "body": ...}, ...])`` sends several in one append (all taken or
none) and returns one ``SendResult`` each. It
resends only when the message certainly was not taken:
- the connection could not be opened (refused, unreachable): the request never left;
- the broker answered SERVICE_NOT_AVAILABLE (not the master; it names the leader when it knows
  it, and the client goes there next), or OS_PAGECACHE_BUSY (the leader refused it).
When the request was written and no answer came (connection lost, timeout) the outcome is
unclear: ``status`` is ``UNKNOWN`` and the message may or may not be in the log; the caller
decides whether to send it again (at least once) or not (at most once). A cached connection the
broker closed before a send (a killed master's) is noticed and opened again first, so that
send stays certain. FLUSH_SLAVE_TIMEOUT
(the message may still commit) is returned as it is, also an unclear outcome (``certain`` is
False). ``pull(topic, queue_id, offset, max_count)`` reads from the master, or from any broker
that answers, and returns ``(messages, next_offset)``; it may be retried freely.

The wire is described in ``dledger.broker.server`` and docs/broker.md.
"""

from __future__ import annotations

import itertools
import socket
import time
from dataclasses import dataclass, field

import msgpack

from dledger.transport.frames import FrameDecoder, frame_payload
from dledger.transport.tcp import split_host_port

#: statuses that say the message was not written, so sending it again is safe
RETRY_STATUSES = {"SERVICE_NOT_AVAILABLE", "OS_PAGECACHE_BUSY"}
#: statuses after which the message may be in the log
UNCLEAR_STATUSES = {"UNKNOWN", "FLUSH_SLAVE_TIMEOUT", "UNKNOWN_ERROR"}


class BrokerUnavailable(Exception):
    """No broker could serve the request before the deadline (nothing was taken)."""


class _NotSent(Exception):
    pass


class _AnswerLost(Exception):
    pass


@dataclass
class SendResult:
    status: str
    msg_id: str | None = None
    queue_offset: int = -1
    wrote_offset: int = -1
    broker: str | None = None
    detail: str = ""
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.status == "PUT_OK"

    @property
    def certain(self) -> bool:
        """Whether the outcome is known: PUT_OK (taken) or a refusal (not taken)."""
        return self.status not in UNCLEAR_STATUSES


@dataclass
class PulledMessage:
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    tags: str | None = None
    keys: list = field(default_factory=list)
    msg_id: str | None = None
    physical_offset: int = -1


def _message(topic: str, queue_id: int, body: bytes, tags: str | None, keys) -> dict:
    return {"topic": topic, "queue_id": queue_id, "body": bytes(body), "tags": tags,
            "keys": [keys] if isinstance(keys, str) else list(keys)}


def parse_brokers(brokers: str) -> dict[str, str]:
    """``'n0-host:port;n1-host:port'`` as ``{id: 'host:port'}``; ValueError naming a bad item."""
    out: dict[str, str] = {}
    for item in (brokers or "").split(";"):
        item = item.strip()
        if not item:
            continue
        node_id, sep, addr = item.partition("-")
        if not sep or not node_id or not addr:
            raise ValueError(f"brokers: {item!r} is not 'id-host:port'")
        split_host_port(addr)
        out[node_id] = addr
    if not out:
        raise ValueError("brokers: no broker given (expected 'n0-host:port;n1-host:port')")
    return out


class BrokerClient:
    """Blocking produce and pull against the brokers of one group (not thread-safe)."""

    def __init__(self, brokers: str, *, timeout: float = 5.0, send_deadline: float = 20.0) -> None:
        self.brokers = parse_brokers(brokers)
        self.timeout = timeout
        self.send_deadline = send_deadline
        self.master: str | None = None
        self._socks: dict[str, tuple[socket.socket, FrameDecoder]] = {}
        self._ids = itertools.count(1)
        self._order = itertools.cycle(list(self.brokers))

    # -- one request to one broker ------------------------------------------------------
    def _sock(self, node_id: str):
        if node_id in self._socks:
            s = self._socks[node_id][0]
            try:        # a connection the broker closed before this request is dropped, not used
                s.setblocking(False)
                dead = s.recv(1, socket.MSG_PEEK) == b""
            except (BlockingIOError, InterruptedError):
                dead = False
            except OSError:
                dead = True
            finally:
                s.setblocking(True)
            if not dead:
                return self._socks[node_id]
            self._drop(node_id)
        host, port = split_host_port(self.brokers[node_id])
        try:
            s = socket.create_connection((host, port), timeout=self.timeout)
        except OSError as exc:
            raise _NotSent(f"cannot reach broker {node_id}: {exc}") from None
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socks[node_id] = (s, FrameDecoder())
        return self._socks[node_id]

    def _drop(self, node_id: str) -> None:
        entry = self._socks.pop(node_id, None)
        if entry is not None:
            entry[0].close()

    def _request(self, node_id: str, req: dict) -> dict:
        s, decoder = self._sock(node_id)
        rid = next(self._ids)
        req["id"] = rid
        try:
            s.sendall(frame_payload(msgpack.packb(req, use_bin_type=True)))
            s.settimeout(self.timeout)
            while True:
                for payload in decoder.feed_payloads():
                    answer = msgpack.unpackb(payload, raw=False)
                    if isinstance(answer, dict) and answer.get("id") == rid:
                        return answer
                data = s.recv(64 * 1024)
                if not data:
                    raise _AnswerLost(f"broker {node_id} closed the connection")
                decoder.feed_payloads(data, limit=0)
        except _AnswerLost:
            self._drop(node_id)
            raise
        except Exception as exc:  # noqa: BLE001 - timeout, reset, bad frame: the answer is lost
            self._drop(node_id)
            raise _AnswerLost(f"no answer from broker {node_id}: {exc!r}") from None

    def _next_target(self) -> str:
        if self.master in self.brokers:
            return self.master
        return next(self._order)

    # -- the API ------------------------------------------------------------------------
    def send(self, topic: str, queue_id: int, body: bytes, tags: str | None = None, keys=()) -> SendResult:
        req = {"op": "produce", **_message(topic, queue_id, body, tags, keys)}
        answer, result = self._produce(req)
        if answer is None:
            return result
        return SendResult(result.status, answer.get("msg_id"), answer.get("queue_offset", -1),
                          answer.get("wrote_offset", -1), result.broker, result.detail, result.attempts)

    def send_batch(self, messages) -> list[SendResult]:
        """Several messages in one request and one append: all are taken or none. ``messages``
        are dicts of ``send``'s arguments; one ``SendResult`` per message, in order (a refusal
        or an unclear outcome is the same for all of them). The resend rule is ``send``'s."""
        msgs = [_message(m["topic"], m.get("queue_id", 0), m["body"], m.get("tags"), m.get("keys", ()))
                for m in messages]
        if not msgs:
            return []
        answer, result = self._produce({"op": "produce_batch", "messages": msgs})
        if answer is None or not result.ok:
            return [result] * len(msgs)
        rows = answer.get("results") or []
        if len(rows) != len(msgs):
            bad = SendResult("UNKNOWN", broker=result.broker, attempts=result.attempts,
                             detail=f"the broker answered PUT_OK with {len(rows)} results for {len(msgs)} messages")
            return [bad] * len(msgs)
        return [SendResult("PUT_OK", msg_id, queue_offset, wrote_offset, result.broker, "", result.attempts)
                for msg_id, queue_offset, wrote_offset, _wrote_bytes in rows]

    def _produce(self, req: dict) -> tuple[dict | None, SendResult]:
        """Send ``req`` to the master, following the resend rule; ``(answer, result)`` where
        ``answer`` is the final answer map (None when there was none) and ``result`` its status."""
        deadline = time.monotonic() + self.send_deadline
        attempts = 0
        last = "no broker tried"
        while True:
            attempts += 1
            target = self._next_target()
            try:
                answer = self._request(target, dict(req))
            except _NotSent as exc:
                last = str(exc)
                if self.master == target:
                    self.master = None
            except _AnswerLost as exc:
                if self.master == target:
                    self.master = None
                return None, SendResult("UNKNOWN", broker=target, detail=str(exc), attempts=attempts)
            else:
                status = answer.get("status")
                if status not in RETRY_STATUSES:
                    if status == "PUT_OK":
                        self.master = target
                    return answer, SendResult(str(status), broker=target, detail=answer.get("detail") or "",
                                              attempts=attempts)
                last = f"{target}: {status} {answer.get('detail') or ''}".strip()
                leader = answer.get("leader_id")
                self.master = leader if leader in self.brokers and leader != target else None
            if time.monotonic() >= deadline:
                return None, SendResult("SERVICE_NOT_AVAILABLE", broker=None, attempts=attempts,
                                        detail=f"no master took it within {self.send_deadline} s; last: {last}")
            if self.master is None:
                time.sleep(0.05)      # between rounds of asking: an election takes a moment

    def pull(self, topic: str, queue_id: int, offset: int, max_count: int = 32) -> tuple[list[PulledMessage], int]:
        """Messages of a topic-queue from ``offset`` on, and the next offset to ask for."""
        req = {"op": "pull", "topic": topic, "queue_id": queue_id, "offset": offset, "max_count": max_count}
        deadline = time.monotonic() + self.send_deadline
        last = "no broker tried"
        while time.monotonic() < deadline:
            target = self._next_target()
            try:
                answer = self._request(target, dict(req))
            except (_NotSent, _AnswerLost) as exc:
                last = str(exc)
                if self.master == target:
                    self.master = None
                time.sleep(0.05)
                continue
            if answer.get("status") not in ("FOUND", "NO_NEW_MSG"):
                raise ValueError(f"pull refused by {target}: {answer.get('status')} {answer.get('detail')}")
            msgs = [PulledMessage(**m) for m in answer["messages"]]
            return msgs, answer["next_offset"]
        raise BrokerUnavailable(f"no broker answered a pull within {self.send_deadline} s; last: {last}")

    def stats(self, node_id: str) -> dict:
        """One broker's ``stats`` answer (see ``dledger.broker.server``)."""
        try:
            return self._request(node_id, {"op": "stats"})
        except (_NotSent, _AnswerLost) as exc:
            raise BrokerUnavailable(str(exc)) from None

    def close(self) -> None:
        for node_id in list(self._socks):
            self._drop(node_id)

    def __enter__(self) -> "BrokerClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["BrokerClient", "BrokerUnavailable", "PulledMessage", "SendResult", "parse_brokers"]
