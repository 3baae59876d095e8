"""StateMachine and StateMachineCaller: the host's state machine and who feeds it.

Rules:
- committed entries are applied in index order, each exactly once per process lifetime
  (``applied_index`` only grows; a restarted node rebuilds its state from its newest snapshot
  and replays the log after it, or replays the log from its first entry without one);
- applying pauses while a snapshot is being saved (``pause``/``resume``: the entries still
  commit, the host's appends complete when they are applied after it), and stops while the
  node waits for a snapshot it cannot rebuild its state without (``needs_snapshot``: its log
  begins after entries no snapshot here covers); ``restored`` moves ``applied_index`` to a
  loaded snapshot's index;
- NOOP and CONFIG_CHANGE entries are not handed to the state machine, but their index counts
  as applied;
- the state machine runs synchronously inside the core step that advanced the commit index,
  so a client's append completes after its entry is applied (Java DLedger completes it
  when the entry commits);
- an exception from the state machine stops applying (``error`` is set) and is reported
  once; the node keeps serving the log but applies nothing more;
- a committed entry the store cannot read (damaged: ``DLedgerError``) is never applied nor
  skipped: applying stops before it (reported once per index) and is tried again at the next
  commit, so the node keeps running and a repaired entry is applied then.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dledger.entry import MAGIC_NORMAL, DLedgerEntry
from dledger.errors import DLedgerError

if TYPE_CHECKING:
    from dledger.store import LogStore

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ApplyEntry:
    """One committed entry for the state machine; set ``resp`` to answer the appender."""

    entry: DLedgerEntry
    resp: Any = None

    @property
    def index(self) -> int:
        return self.entry.index


class StateMachine(Protocol):
    def on_apply(self, entries: list[ApplyEntry]) -> None:
        """Apply committed NORMAL entries (in order). May set ``ApplyEntry.resp``."""

    def on_shutdown(self) -> None:  # pragma: no cover - protocol
        ...

    # Optional, for snapshots (docs/embedding.md): ``on_snapshot_save(writer)`` writes the state
    # as of the last applied entry to a binary file-like ``writer``; ``on_snapshot_load(reader)``
    # replaces the state with what a binary file-like ``reader`` holds; ``snapshot_state()``,
    # when present, returns a point-in-time view at once and ``on_snapshot_save(writer, view)``
    # then writes that view while applying goes on.


class StateMachineCaller:
    def __init__(self, store: "LogStore", state_machine: StateMachine | None, applied_index: int) -> None:
        self.store = store
        self.state_machine = state_machine
        self.applied_index = applied_index
        self.error: BaseException | None = None
        self.max_batch = 1024
        #: the committed entry the store could not read last (reported once)
        self.unreadable_index = -1
        #: snapshot saves in progress that hold applying (``pause``)
        self.paused = 0
        #: no snapshot here covers what this log no longer holds: apply nothing until one is
        #: installed (``restored``)
        self.needs_snapshot = False
        #: the index of the last snapshot loaded by ``restored`` (-1: none), and how many were
        self.restored_index = -1
        self.restores = 0
        #: the highest index a durable snapshot of this node covers (-1: none)
        self.snapshot_index = -1

    def pause(self) -> None:
        self.paused += 1

    def resume(self) -> None:
        self.paused -= 1

    def restored(self, index: int) -> None:
        """A snapshot of the state after entry ``index`` was loaded into the state machine."""
        self.applied_index = index
        self.restored_index = index
        self.snapshot_index = max(self.snapshot_index, index)
        self.restores += 1
        self.needs_snapshot = False
        self.unreadable_index = -1

    def on_committed(self, committed_index: int) -> dict[int, Any]:
        """Apply everything up to ``committed_index``; returns ``{index: resp}`` of set resps."""
        if committed_index <= self.applied_index or self.error is not None or self.paused or \
                self.needs_snapshot:
            return {}
        if self.state_machine is None:
            self.applied_index = committed_index
            return {}
        results: dict[int, Any] = {}
        if self.applied_index < self.store.ledger_before_begin_index:
            # the entries after what was applied are gone from this log: only a snapshot can
            # bring the state forward (never skip them)
            log.error("entries %d..%d were never applied and this log no longer holds them: applying "
                      "waits for the leader's snapshot", self.applied_index + 1,
                      self.store.ledger_before_begin_index)
            self.needs_snapshot = True
            return results
        while self.applied_index < committed_index and self.error is None:
            lo = self.applied_index + 1
            hi = min(committed_index, self.applied_index + self.max_batch)
            entries: list[DLedgerEntry] = []
            unreadable = False
            try:
                for e in self.store.iter_entries(lo, hi):
                    entries.append(e)
            except DLedgerError as exc:
                unreadable = True
                bad = lo + len(entries)
                if bad != self.unreadable_index:
                    self.unreadable_index = bad
                    log.error("committed entry %d cannot be read: %s; applying stops before it", bad, exc)
                hi = bad - 1
            batch = [ApplyEntry(e) for e in entries if e.magic == MAGIC_NORMAL]
            try:
                if batch:
                    self.state_machine.on_apply(batch)
            except Exception as exc:  # the host's code failed: stop applying, say so once
                self.error = exc
                log.error("state machine failed applying %d..%d: %r; applying stops",
                          self.applied_index + 1, hi, exc)
                return results
            for a in batch:
                if a.resp is not None:
                    results[a.index] = a.resp
            self.applied_index = hi
            if unreadable:
                break
        return results

    def shutdown(self) -> None:
        sm = self.state_machine
        if sm is not None and hasattr(sm, "on_shutdown"):
            sm.on_shutdown()
