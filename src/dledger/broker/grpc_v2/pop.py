"""POP consumption on a ``DLedgerCommitLog``: receive (with long polling), ack and change of
invisible duration, the state replicated through the Raft log.

Every change of the POP state (``pop_state``) is a record submitted with
``commit_log.consumer_state.submit_async(KIND, record)``; every replica applies the committed
records in log order (``consumer_state.subscribe``), so after a master failover the new master
knows every acknowledgement that was answered OK and redelivers only what was not acknowledged.
The master answers a request only once its record is applied locally, from what ``apply``
granted: a record planned from a stale view grants nothing it should not (``pop_state``).

A receive on queues of a topic (the endpoint asks for all of them) is planned under a
per-(group, topic) lock on the master: first the in-flight messages whose invisible duration has
ended (handed out again, ``delivery_attempt`` counted up), then new messages from the group's
cursor (a group new to a queue starts at the queue's first retained message), those the tag
filter does not keep moving the cursor without being handed out; messages retention trimmed
from the log's head are passed over (the cursor moves to the first one the log holds). With nothing to hand out it
waits (long polling) until a dispatch on this replica brings messages, an in-flight message's
duration ends, or the polling time is up; it never spins. Runs on the endpoint's asyncio loop;
the state is applied on the server's runtime thread, under a lock.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
from dataclasses import dataclass

from dledger.broker.grpc_v2.pop_state import KIND, PopState, handle

log = logging.getLogger(__name__)

MAX_SCAN = 1024                 # messages read past the filter in one receive, at most
APPLY_TIMEOUT_S = 10.0


class PopError(Exception):
    """A POP request that cannot be served: ``reason`` is ``not_master``, ``refused`` (the
    log did not take the record; ``detail`` says why) or ``timeout``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(slots=True)
class Delivery:
    message: object          # the decoded stored message (message_codec.Message)
    receipt_handle: str
    attempt: int


def tag_filter(expression: str):
    """A predicate on a message's tags for a TAG filter expression (``*`` or ``A || B``)."""
    text = (expression or "").strip()
    if not text or text == "*":
        return lambda tags: True
    wanted = {t.strip() for t in text.split("||") if t.strip()}
    return lambda tags: tags in wanted


class PopConsumption:
    def __init__(self, commit_log, now_ms=None) -> None:
        self.log = commit_log
        self.state = PopState()
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self._lock = threading.Lock()           # the state: applied on the runtime thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict[str, asyncio.Future] = {}
        self._group_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._rid = itertools.count(1)
        self._prefix = os.urandom(6).hex()
        self._arrived: asyncio.Event | None = None
        self._pollers = 0
        self.problems: list[str] = []

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Subscribe to the replicated records and to dispatch (call on ``loop``'s thread)."""
        self._loop = loop
        self._arrived = asyncio.Event()
        reput = self.log.reput
        previous = reput.on_dispatch_batch

        def on_dispatch_batch(batch) -> None:
            if previous is not None:
                previous(batch)
            if batch and self._pollers and self._loop is not None:
                loop.call_soon_threadsafe(self._wake)

        reput.on_dispatch_batch = on_dispatch_batch
        self.log.consumer_state.subscribe(KIND, self._apply)

    def stop(self) -> None:
        """The endpoint is closing: the subscriptions stay (there is no unsubscribing) but call
        nothing on the loop any more."""
        self._loop = None

    # -- the replicated state -----------------------------------------------------------------
    def _apply(self, record) -> None:
        """One committed record, on every replica (the runtime thread)."""
        try:
            with self._lock:
                outcome = self.state.apply(record)
        except ValueError as exc:       # not ours to crash on: record it, skip it
            self.problems.append(f"bad {KIND} record: {exc}")
            log.warning("skipping a bad %s record: %s", KIND, exc)
            outcome = exc
        rid = record.get("rid") if isinstance(record, dict) else None
        fut = self._waiting.get(rid) if isinstance(rid, str) else None
        loop = self._loop
        if fut is not None and loop is not None:
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(outcome))

    async def _submit(self, record: dict):
        """Replicate ``record`` and wait until this replica applied it; what it granted."""
        rid = f"{self._prefix}-{next(self._rid)}"
        record["rid"] = rid
        fut = self._loop.create_future()
        self._waiting[rid] = fut
        try:
            result = await self.log.consumer_state.submit_async(KIND, record)
            if result.status.name == "SERVICE_NOT_AVAILABLE":
                raise PopError("not_master", result.detail or "this broker is not the master")
            if not result.ok:
                raise PopError("refused", f"{result.status.name}: {result.detail or ''}".rstrip(": "))
            try:
                async with asyncio.timeout(APPLY_TIMEOUT_S):
                    outcome = await fut
            except asyncio.TimeoutError:
                raise PopError("timeout", f"the record was committed but not applied within {APPLY_TIMEOUT_S} s") from None
            if isinstance(outcome, ValueError):
                raise PopError("refused", str(outcome))
            return outcome
        finally:
            self._waiting.pop(rid, None)

    # -- long polling ---------------------------------------------------------------------------
    def _wake(self) -> None:
        event, self._arrived = self._arrived, asyncio.Event()
        event.set()

    def _lock_for(self, group: str, topic: str) -> asyncio.Lock:
        lock = self._group_locks.get((group, topic))
        if lock is None:
            lock = self._group_locks[(group, topic)] = asyncio.Lock()
        return lock

    def is_master(self) -> bool:
        return self.log.server.is_leader

    # -- receive ---------------------------------------------------------------------------------
    def _plan(self, group: str, topic: str, queue_ids, batch: int, keep) -> tuple[list[dict], dict]:
        """The parts of a receive record and the messages read for its new offsets (a thread)."""
        now = self.now_ms()
        parts, read = [], {}
        room = batch
        for q in queue_ids:
            if room <= 0:
                break
            with self._lock:
                cursor = self.state.cursor(group, topic, q)
                again = self.state.expired(group, topic, q, now, room)
            room -= len(again)
            base = cursor if cursor is not None else 0
            start = self._first_retained(topic, q, base)
            end, new, scanned = start, [], 0
            while room > 0 and scanned < MAX_SCAN:
                messages, _next = self.log.get_messages(topic, q, end, min(32, MAX_SCAN - scanned))
                if not messages:
                    break
                for m in messages:
                    end = m.queue_offset + 1
                    scanned += 1
                    if keep(m.tags):
                        new.append(m.queue_offset)
                        read[(q, m.queue_offset)] = m
                        room -= 1
                        if room <= 0:
                            break
            if again or end > base:
                parts.append({"q": q, "from": base, "to": end, "new": new, "again": [list(a) for a in again]})
        return parts, read

    def _first_retained(self, topic: str, q: int, offset: int) -> int:
        """The first queue offset at or after ``offset`` whose message the log still holds
        (retention trims the log's head; a replica that caught up past it begins later)."""
        return max(offset, self.log.min_queue_offset(topic, q))

    def _read(self, topic: str, q: int, offset: int):
        messages, _ = self.log.get_messages(topic, q, offset, 1)
        return messages[0] if messages else None

    async def receive(self, group: str, topic: str, queue_ids: list[int], batch: int, invisible_ms: int,
                      poll_ms: int, filter_expression: str = "*") -> list[Delivery]:
        """Messages for ``group`` from these queues of ``topic`` (at most ``batch``), waiting up
        to ``poll_ms`` for some; an empty list when none came. ``PopError`` when this broker
        cannot serve it (not the master, the log refused the record)."""
        keep = tag_filter(filter_expression)
        give_up = self.now_ms() + poll_ms
        while True:
            if not self.is_master():
                raise PopError("not_master", "this broker is not the master")
            self._pollers += 1
            arrived = self._arrived
            try:
                async with self._lock_for(group, topic):
                    parts, read = await asyncio.to_thread(self._plan, group, topic, queue_ids, batch, keep)
                    granted = []
                    if parts:
                        deadline = self.now_ms() + invisible_ms
                        granted = await self._submit({"op": "receive", "g": group, "t": topic,
                                                      "deadline": deadline, "parts": parts})
                if granted:
                    out = []
                    for q, offset, attempt, seq in granted:
                        m = read.get((q, offset)) or await asyncio.to_thread(self._read, topic, q, offset)
                        if m is not None:
                            out.append(Delivery(m, handle(q, offset, seq), attempt))
                    if out:
                        return out
                    continue
                now = self.now_ms()
                with self._lock:
                    next_due = self.state.next_deadline(group, topic, queue_ids)
                wait_until = give_up if next_due is None else min(give_up, next_due)
                if now >= give_up:
                    return []
                if wait_until > now:
                    try:
                        async with asyncio.timeout((wait_until - now) / 1000):
                            await arrived.wait()
                    except asyncio.TimeoutError:
                        pass
            finally:
                self._pollers -= 1

    # -- ack and change --------------------------------------------------------------------------
    async def ack(self, group: str, topic: str, queue_id: int, offset: int, seq: int) -> bool:
        """Acknowledge one delivery; False when its handle is not the message's current one
        (acknowledged already, handed out again, or never given)."""
        if not self.is_master():
            raise PopError("not_master", "this broker is not the master")
        return bool(await self._submit({"op": "ack", "g": group, "t": topic, "q": queue_id, "o": offset,
                                        "seq": seq}))

    async def change_invisible(self, group: str, topic: str, queue_id: int, offset: int, seq: int,
                               invisible_ms: int) -> str | None:
        """A new invisible duration from now; the new receipt handle, or None when the handle
        is not the message's current one."""
        if not self.is_master():
            raise PopError("not_master", "this broker is not the master")
        new_seq = await self._submit({"op": "change", "g": group, "t": topic, "q": queue_id, "o": offset,
                                      "seq": seq, "deadline": self.now_ms() + invisible_ms})
        return None if new_seq is None else handle(queue_id, offset, new_seq)


__all__ = ["APPLY_TIMEOUT_S", "MAX_SCAN", "Delivery", "PopConsumption", "PopError", "tag_filter"]
