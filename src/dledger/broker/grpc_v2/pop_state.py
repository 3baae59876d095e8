"""POP-style consumption state: per consumer group and topic-queue, a cursor and the messages in
flight. A pure class: ``apply(record)`` changes it, every other method reads it (no I/O, no clock:
times are given).

RocketMQ 5.x clients consume by POP: a receive hands out messages with a **receipt handle** and
makes them invisible to the group for an **invisible duration**; an ack removes a message for
good; a message not acked when its duration ends is handed out again, its **delivery attempt**
counted up. Per ``(group, topic, queue_id)`` this keeps:

- ``cursor``: the next queue offset never handed out (None: the group never received from the
  queue; it starts at the queue's first retained message);
- ``inflight``: queue offset -> ``Inflight(deadline_ms, attempt, seq)`` for every message handed
  out and not acknowledged. ``seq`` counts the handle's versions: each delivery and each change
  of invisible duration makes a new handle and invalidates the one before.

The records are replicated through the Raft log (``ConsumerState.submit_async``) and applied on
every replica in log order, so each replica holds the same state and a new master redelivers
only what was not acknowledged. Each record says what its writer saw, and ``apply`` takes only
what is still true, so a record written from a stale view (two receives racing, an ack racing a
redelivery, the records of an old master committed by a new one) changes nothing it should not:

- ``{"op": "receive", "g", "t", "deadline", "parts": [{"q", "from", "to", "new": [offsets],
  "again": [[offset, seq], ...]}, ...]}``: per queue, the messages of ``new`` (read from the
  cursor ``from`` up to ``to``, those the filter kept) are handed out if the cursor is still
  ``from`` (then it moves to ``to``); each ``again`` message is handed out again if it is still in
  flight with that ``seq``. ``apply`` returns the deliveries granted, ``[(q, offset, attempt, seq)]``.
- ``{"op": "ack", "g", "t", "q", "o", "seq"}``: the message leaves ``inflight`` if the handle's
  ``seq`` is its current one; ``apply`` returns True if it did.
- ``{"op": "change", "g", "t", "q", "o", "seq", "deadline"}``: a new deadline and a new handle
  (``seq + 1``) if ``seq`` is current; ``apply`` returns the new seq, or None.

A record that is not such a map raises ``ValueError`` naming the field (``apply`` changes nothing
then). Receipt handles are ``"dl1:<queue_id>:<offset>:<seq>"`` (``handle`` / ``parse_handle``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

KIND = "grpc_pop"
HANDLE_PREFIX = "dl1"


@dataclass(slots=True)
class Inflight:
    deadline_ms: int
    attempt: int
    seq: int


@dataclass(slots=True)
class QueueState:
    cursor: int | None = None
    inflight: dict[int, Inflight] = field(default_factory=dict)


def handle(queue_id: int, offset: int, seq: int) -> str:
    return f"{HANDLE_PREFIX}:{queue_id}:{offset}:{seq}"


def parse_handle(text: str) -> tuple[int, int, int]:
    """``(queue_id, offset, seq)`` of a receipt handle; ``ValueError`` naming what is wrong."""
    if not isinstance(text, str) or not text:
        raise ValueError("receipt_handle: is empty")
    parts = text.split(":")
    if len(parts) != 4 or parts[0] != HANDLE_PREFIX:
        raise ValueError(f"receipt_handle: {text[:80]!r} is not a handle this broker gave")
    try:
        q, o, s = (int(p) for p in parts[1:])
    except ValueError:
        raise ValueError(f"receipt_handle: {text[:80]!r} is not a handle this broker gave") from None
    if not (0 <= q < 2**31 and 0 <= o < 2**63 and 1 <= s < 2**31):
        raise ValueError(f"receipt_handle: {text[:80]!r} is out of range")
    return q, o, s


def _get(record: dict, name: str, kind):
    value = record.get(name)
    if isinstance(value, bool) or not isinstance(value, kind):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ValueError(f"{name}: must be {want}, got {type(value).__name__}")
    return value


def _offsets(values, name: str) -> list[int]:
    if not isinstance(values, list) or not all(type(v) is int and v >= 0 for v in values):
        raise ValueError(f"{name}: must be a list of offsets")
    return values


class PopState:
    def __init__(self) -> None:
        self.queues: dict[tuple[str, str, int], QueueState] = {}

    # -- reads ------------------------------------------------------------------------------
    def queue(self, group: str, topic: str, queue_id: int) -> QueueState:
        """The state of one group's topic-queue (an empty one if it has none; not stored)."""
        return self.queues.get((group, topic, queue_id)) or QueueState()

    def cursor(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.queue(group, topic, queue_id).cursor

    def expired(self, group: str, topic: str, queue_id: int, now_ms: int, limit: int) -> list[tuple[int, int]]:
        """In-flight messages whose invisible duration has ended by ``now_ms``, as ``(offset,
        seq)``, lowest offset first, at most ``limit``."""
        qs = self.queues.get((group, topic, queue_id))
        if qs is None or limit <= 0:
            return []
        due = sorted(o for o, inf in qs.inflight.items() if inf.deadline_ms <= now_ms)
        return [(o, qs.inflight[o].seq) for o in due[:limit]]

    def next_deadline(self, group: str, topic: str, queue_ids) -> int | None:
        """The earliest deadline of the messages in flight on these queues (None: none)."""
        best = None
        for q in queue_ids:
            qs = self.queues.get((group, topic, q))
            if qs is not None:
                for inf in qs.inflight.values():
                    if best is None or inf.deadline_ms < best:
                        best = inf.deadline_ms
        return best

    def inflight(self, group: str, topic: str, queue_id: int, offset: int) -> Inflight | None:
        qs = self.queues.get((group, topic, queue_id))
        return None if qs is None else qs.inflight.get(offset)

    # -- the one writer ---------------------------------------------------------------------
    def apply(self, record: dict):
        """Apply one replicated record (see the module's doc); what it granted."""
        if not isinstance(record, dict):
            raise ValueError(f"record: must be a map, got {type(record).__name__}")
        op = record.get("op")
        group, topic = _get(record, "g", str), _get(record, "t", str)
        if op == "receive":
            return self._receive(group, topic, record)
        if op not in ("ack", "change"):
            raise ValueError(f"op: {op!r} is not 'receive', 'ack' or 'change'")
        q, o, seq = _get(record, "q", int), _get(record, "o", int), _get(record, "seq", int)
        deadline = _get(record, "deadline", int) if op == "change" else None
        qs = self.queues.get((group, topic, q))
        inf = None if qs is None else qs.inflight.get(o)
        if inf is None or inf.seq != seq:
            return False if op == "ack" else None
        if op == "ack":
            del qs.inflight[o]
            return True
        inf.seq += 1
        inf.deadline_ms = deadline
        return inf.seq

    def _receive(self, group: str, topic: str, record: dict) -> list[tuple[int, int, int, int]]:
        deadline = _get(record, "deadline", int)
        parts = record.get("parts")
        if not isinstance(parts, list):
            raise ValueError("parts: must be a list")
        checked = []
        for i, part in enumerate(parts):
            if not isinstance(part, dict):
                raise ValueError(f"parts[{i}]: must be a map")
            q, start, end = _get(part, "q", int), _get(part, "from", int), _get(part, "to", int)
            new = _offsets(part.get("new"), f"parts[{i}].new")
            again = part.get("again")
            if not isinstance(again, list) or not all(
                    isinstance(a, list) and len(a) == 2 and all(type(v) is int for v in a) for a in again):
                raise ValueError(f"parts[{i}].again: must be a list of [offset, seq]")
            if not (0 <= start <= end and all(start <= o < end for o in new)):
                raise ValueError(f"parts[{i}]: new offsets must lie in from..to")
            checked.append((q, start, end, new, again))
        granted = []
        for q, start, end, new, again in checked:
            qs = self.queues.setdefault((group, topic, q), QueueState())
            for o, seq in again:
                inf = qs.inflight.get(o)
                if inf is not None and inf.seq == seq:
                    inf.seq += 1
                    inf.attempt += 1
                    inf.deadline_ms = deadline
                    granted.append((q, o, inf.attempt, inf.seq))
            if (qs.cursor is None or qs.cursor == start) and end > start:
                qs.cursor = end
                for o in new:
                    qs.inflight[o] = Inflight(deadline, 1, 1)
                    granted.append((q, o, 1, 1))
            elif qs.cursor is None:
                qs.cursor = start
        return granted


__all__ = ["HANDLE_PREFIX", "KIND", "Inflight", "PopState", "QueueState", "handle", "parse_handle"]
