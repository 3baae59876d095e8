"""Consumer state replicated through the Raft log: committed offsets, and records of any kind.

RocketMQ's DLedger mode keeps consumer offsets per broker and copies them to slaves on a timer,
so a master failover loses the offsets committed since the last copy and consumers read again
what they had consumed. Here a commit is a message in the system topic ``SYSTEM_TOPIC`` (queue
0) whose body is one msgpack map ``{"k": kind, "r": record}``: it is appended through the
leader like any put, answered once a quorum holds it, and dispatched on every replica in log
order. So a commit answered PUT_OK is in the log of every later leader (Raft), and a replica
answers it once its commit index covers it: the master that took it at once, another replica
(a next master included) once it has learned the commit (a new leader learns it with the first
entry of its own term that commits, at the latest).

- ``commit_offset(group, topic, queue_id, offset)`` / ``commit_offset_async`` record a consumer
  group's next offset on a queue; ``offset(...)`` answers the last one applied on this replica
  (None: the group never committed on that queue). A later commit replaces an earlier one,
  lower or higher (a reset is a commit).
- ``submit_async(kind, record)`` appends a record of any other ``kind`` (a msgpack-able dict);
  ``subscribe(kind, apply)`` calls ``apply(record)`` for every committed record of that kind,
  in log order, on the runtime thread: first for the records already dispatched (those the log
  still retains), then for each new one as it is dispatched.

Records are applied after each dispatch batch, in the order of the system topic's consume
queue: the dispatch kept their bodies from its one parse of each message
(``ReputService.keep_bodies_of``); a record it did not keep (dispatched before this process
started applying, or before a subscriber asked) is read from the log through its unit. A
record that does not decode (a put to the system topic by some other writer) is logged and
passed over. The offsets table is saved with the dispatch checkpoint
(``consumer_offsets.json``: the table and how many records it covers, written atomically), so
offsets committed before the retained part of the log survive; on open, the records after the
saved count are applied again (applying a record twice gives the same table). Subscribers of
other kinds see only what the log retains: their records matter only for messages the log still
holds.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Callable

import msgpack

from dledger.broker.checkpoint_writer import write_atomic
from dledger.broker.message_codec import MessageFormatError, decode
from dledger.broker.put_checks import queue_id_problem, topic_problem
from dledger.broker.put_result import PutMessageStatus, done_future, refused
from dledger.broker.store_view import read_at

log = logging.getLogger(__name__)

SYSTEM_TOPIC = "RMQ_SYS_DLEDGER_CONSUMER_STATE"
OFFSET = "offset"
SNAPSHOT = "consumer_offsets.json"
#: units read from the system topic's consume queue in one go
_READ_UNITS = 256


def _group_problem(group) -> str | None:
    if not isinstance(group, str) or not group:
        return "group: must be a non-empty str"
    return topic_problem(group) and f"group: {topic_problem(group)}"


class ConsumerState:
    """Reachable as ``DLedgerCommitLog(...).consumer_state``; everything but the public calls
    runs on the server's runtime thread."""

    def __init__(self, commit_log) -> None:
        self.log = commit_log
        self.path = os.path.join(commit_log.root, SNAPSHOT)
        #: (group, topic, queue id) -> the group's next offset on that queue
        self.offsets: dict[tuple[str, str, int], int] = {}
        #: how many records of the system topic's queue the table covers (applied)
        self.applied = 0
        self._subscribers: dict[str, list[Callable[[dict], None]]] = {}
        # the dispatch hands over the bodies of the records it dispatches (no second parse)
        commit_log.reput.keep_bodies_of = (SYSTEM_TOPIC, 0)
        self._load()

    # -- writes (any thread; the master only) --------------------------------------------
    def commit_offset_async(self, group: str, topic: str, queue_id: int, offset: int):
        """Record ``group``'s next ``offset`` on ``topic``/``queue_id``: a future of the put's
        ``PutMessageResult`` (a bad argument: MESSAGE_ILLEGAL naming it, at once)."""
        why = (_group_problem(group) or topic_problem(topic) or queue_id_problem(queue_id)
               or (None if type(offset) is int and 0 <= offset < 1 << 63 else "offset: must be an int >= 0"))
        if why:
            return done_future(refused(PutMessageStatus.MESSAGE_ILLEGAL, why))
        return self.submit_async(OFFSET, {"g": group, "t": topic, "q": queue_id, "o": offset})

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, *, timeout: float | None = 10.0):
        return self.commit_offset_async(group, topic, queue_id, offset).result(timeout)

    def submit_async(self, kind: str, record: dict):
        """Append ``record`` of ``kind`` through the log: a future of the put's result."""
        body = msgpack.packb({"k": kind, "r": record}, use_bin_type=True)
        return self.log.put_message_async(SYSTEM_TOPIC, 0, body)

    # -- reads ----------------------------------------------------------------------------
    def offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The last committed offset of ``group`` on the queue applied on this replica."""
        def read():
            self.log.dispatch_committed()         # what is committed here, not only what the timer took
            self.catch_up()
            return self.offsets.get((group, topic, queue_id))
        return self.log._on_runtime(read)

    def subscribe(self, kind: str, apply: Callable[[dict], None]) -> None:
        """Call ``apply(record)`` for every committed record of ``kind``, from the oldest the
        log retains on, in log order, on the runtime thread."""
        def add():
            self.catch_up()
            for k, record in self._records(0, self.applied):
                if k == kind:
                    apply(record)
            self._subscribers.setdefault(kind, []).append(apply)
        self.log._on_runtime(add)

    # -- applying (runtime thread) ----------------------------------------------------------
    def catch_up(self) -> None:
        """Apply the records dispatched since the last call (after each dispatch batch)."""
        reput = self.log.reput
        kept = reput.take_kept()
        cq = reput.queues.get((SYSTEM_TOPIC, 0))      # every queue on disk is open
        if cq is None or cq.max_offset <= self.applied:
            return
        for kind, record in self._records(self.applied, cq.max_offset, kept):
            self._apply(kind, record)
        self.applied = cq.max_offset

    def _records(self, begin: int, end: int, kept: dict | None = None):
        """``(kind, record)`` of the system topic's records ``begin .. end - 1``: their bodies
        from ``kept`` (queue offset -> (physical offset, body), as the dispatch kept them), the
        others read from the log (those the store still holds). The ones that do not decode are
        logged and passed over."""
        cq = self.log.reput.find_queue(SYSTEM_TOPIC, 0)
        if cq is None:
            return
        store = self.log.server.store
        q = begin
        units, first = [], begin                  # units read from the queue, the first of ``first``
        while q < end:
            if kept and q in kept:
                phys, body = kept[q]
            else:
                if not first <= q < first + len(units):
                    units, first = cq.units(q, min(_READ_UNITS, end - q)), q
                    if not units:
                        return
                phys, size, _tags = units[q - first]
                raw = read_at(store, phys, size)
                if raw is None:           # trimmed by retention
                    q += 1
                    continue
                try:
                    body = decode(raw, inflate=False).body
                except MessageFormatError as exc:
                    log.warning("%s: consumer-state record %d at %d passed over: %s", SYSTEM_TOPIC, q, phys, exc)
                    q += 1
                    continue
            q += 1
            try:
                doc = msgpack.unpackb(body, raw=False)
                kind, record = doc["k"], doc["r"]
                if not isinstance(kind, str) or not isinstance(record, dict):
                    raise ValueError("not a {k: str, r: map} record")
            except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
                log.warning("%s: consumer-state record %d at %d passed over: %s", SYSTEM_TOPIC, q - 1, phys, exc)
                continue
            yield kind, record

    def _apply(self, kind: str, record: dict) -> None:
        if kind == OFFSET:
            g, t, q, o = record.get("g"), record.get("t"), record.get("q"), record.get("o")
            if isinstance(g, str) and isinstance(t, str) and type(q) is int and type(o) is int:
                self.offsets[(g, t, q)] = o
            else:
                log.warning("%s: an offset record without group/topic/queue/offset passed over: %r",
                            SYSTEM_TOPIC, record)
        for apply in self._subscribers.get(kind, ()):
            apply(record)

    # -- the saved table ------------------------------------------------------------------
    def snapshot(self) -> tuple[str, bytes]:
        """The offsets table and the count it covers, as ``save`` writes them: ``(path,
        bytes)`` (for a checkpoint job, which writes it after the dispatch checkpoint)."""
        doc = {"applied": self.applied, "offsets": [[g, t, q, o] for (g, t, q), o in sorted(self.offsets.items())]}
        return self.path, json.dumps(doc, separators=(",", ":")).encode()

    def save(self) -> None:
        """Write the offsets table and the count it covers, atomically (with the dispatch
        checkpoint: the count never exceeds what the checkpoint vouches for)."""
        write_atomic(*self.snapshot())

    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
            applied = doc["applied"]
            offsets = {(g, t, q): o for g, t, q, o in doc["offsets"]}
            if type(applied) is not int or applied < 0 or not all(
                    isinstance(g, str) and isinstance(t, str) and type(q) is int and type(o) is int
                    for (g, t, q), o in offsets.items()):
                raise ValueError("a field of the wrong type")
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("%s: cannot be read (%s): the consumer offsets are rebuilt from the log", self.path, exc)
            return
        cq = self.log.reput.find_queue(SYSTEM_TOPIC, 0)
        if applied > (cq.max_offset if cq is not None else 0):
            # the dispatch is starting over (its checkpoint was unusable): the queue will be
            # rebuilt with the same records; keep the table, apply again from what is there
            applied = cq.max_offset if cq is not None else 0
        self.offsets, self.applied = offsets, applied
