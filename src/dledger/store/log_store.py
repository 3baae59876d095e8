"""LogStore: the interface of a Raft log store, as the core and the server use it.

``DLedgerMmapFileStore`` (files), ``DLedgerMemoryStore`` (memory) and the simulator's
``FaultyStore`` wrapping either satisfy it; the core and the server type against it, never
against one store class. ``tests/store/test_log_store.py`` checks every member of every
implementation, signatures included.

Also here, shared by the stores without one importing the other: ``AppendBatchResult``,
``AppendHook``, ``RepairRefusedError`` and the default segment sizes.

Rules every implementation keeps:
- entries ``ledger_before_begin_index < i <= ledger_end_index`` are contiguous and their terms
  do not decrease; ``committed_index`` never goes backwards and never passes the end;
- a call that raises has changed nothing that a later call can observe (a refused follower
  batch writes nothing; a refused truncation removes nothing);
- the store reads no clock: ``flush_if_due(now_ms)`` and ``clean(now)`` are given the time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from dledger.entry import INDEX_UNIT_SIZE, MAGIC_NORMAL, DLedgerEntry
from dledger.errors import INCONSISTENT_STATE, CorruptStoreError, DLedgerError
from dledger.store.suspect import SuspectReason

#: Java DLedger's defaults: 1 GiB data segments, index segments of 5 Mi units.
DEFAULT_DATA_FILE_SIZE = 1024 * 1024 * 1024
DEFAULT_INDEX_FILE_SIZE = INDEX_UNIT_SIZE * 5 * 1024 * 1024

#: ``hook(entry, record, body_offset)``: runs on the leader before a record is written and may
#: change body bytes in place (see ``add_append_hook``).
AppendHook = Callable[[DLedgerEntry, memoryview, int], None]


class BatchedAppendHook:
    """An append hook with a batch form. Called per record as any hook is; and where the store
    writes a batch of records in one piece (``LogWriter``'s joined leader append), it calls
    ``on_records(records, starts, sizes, indexes, positions, term, magic)`` once instead:
    ``records`` a writable buffer of the batch's records back to back (index, term and pos set,
    CRCs not yet), record ``k`` at ``starts[k]``, ``sizes[k]`` bytes, header included, with its
    index, log position, and the batch's term and magic. It must change the bytes exactly as
    ``per_record`` on each record in order would (the store takes the CRCs afterwards); the
    store uses it only when every hook it runs has one."""

    __slots__ = ("per_record", "on_records")

    def __init__(self, per_record: AppendHook, on_records: Callable[..., None]) -> None:
        self.per_record = per_record
        self.on_records = on_records

    def __call__(self, entry: DLedgerEntry, record: memoryview, body_offset: int) -> None:
        self.per_record(entry, record, body_offset)


class RepairRefusedError(DLedgerError):
    """A repair was refused: the candidate does not prove itself the damaged entry, or the
    entry cannot be located locally. Nothing was written."""

    code = INCONSISTENT_STATE


@dataclass(slots=True)
class AppendBatchResult:
    """What a batch append wrote: indices ``first_index .. first_index+len(positions)-1``."""

    first_index: int
    term: int
    positions: list[int]

    @property
    def last_index(self) -> int:
        return self.first_index + len(self.positions) - 1


@runtime_checkable
class LogStore(Protocol):
    """What the core and the server ask of a store (see the module docstring)."""

    ledger_before_begin_index: int
    ledger_before_begin_term: int
    ledger_end_index: int
    ledger_end_term: int
    committed_index: int
    max_entry_size: int
    #: None, or why the store stopped acknowledging (a failed sync); only reopening clears it
    failed: str | None
    #: None, or why this replica may have lost acknowledged entries or a vote it cast: it must
    #: not vote nor count toward a commit quorum until it has caught up from a leader of the
    #: current term, then ``clear_suspect()`` (see ``dledger.store.suspect``). Durable.
    suspect: SuspectReason | None

    # -- term and vote ---------------------------------------------------------------------
    @property
    def current_term(self) -> int: ...

    @property
    def vote_for(self) -> str | None: ...

    def persist_term(self, term: int, vote_for: str | None) -> None: ...

    def clear_suspect(self) -> None: ...

    # -- appending -------------------------------------------------------------------------
    def add_append_hook(self, hook: AppendHook) -> None: ...

    def update_committed_index(self, index: int) -> None: ...

    def append_as_leader(self, entry: DLedgerEntry) -> DLedgerEntry: ...

    def batch_append_as_leader(self, bodies: Sequence[bytes], magic: int = MAGIC_NORMAL) -> AppendBatchResult: ...

    def append_as_follower(self, entry: DLedgerEntry, leader_term: int,
                           leader_id: str | None = None) -> DLedgerEntry: ...

    def batch_append_as_follower(self, records, leader_term: int, leader_id: str | None = None) -> int: ...

    # -- reading ---------------------------------------------------------------------------
    def get(self, index: int) -> DLedgerEntry: ...

    def get_entry_term(self, index: int) -> int: ...

    def get_raw(self, index: int) -> bytes: ...

    def get_raw_range(self, begin_index: int, max_bytes: int, max_count: int = 1 << 30, *,
                      checked: bool = False) -> tuple[bytes, int]: ...

    def iter_entries(self, begin: int | None = None, end: int | None = None) -> Iterator[DLedgerEntry]: ...

    def get_first_log_of_target_term(self, term: int, end_index: int) -> DLedgerEntry | None: ...

    # -- damage and repair -----------------------------------------------------------------
    def damaged(self) -> dict[int, CorruptStoreError]:
        """Entries found damaged (by the open or a read) and not repaired yet: reads refuse
        them. Index -> the error naming the file and offset."""
        ...

    def repair(self, index: int, record: bytes | None = None, following: bytes | None = None) -> None:
        """Repair entry ``index`` from the local data (``record`` None: a damaged index unit)
        or from a peer's copy of its record (``following``: that peer's record of ``index +
        1``, read with it), only once proven to be the same entry; else
        ``RepairRefusedError``, nothing written."""
        ...

    # -- cutting ---------------------------------------------------------------------------
    def truncate(self, truncate_index: int) -> int: ...

    def reset(self, before_begin_index: int, before_begin_term: int, next_pos: int | None = None) -> int: ...

    # -- durability, retention, lifecycle --------------------------------------------------
    def flush(self, *, checkpoint: bool = True) -> None: ...

    def flush_if_due(self, now_ms: float) -> bool: ...

    def clean(self, now: float | None = None) -> int: ...

    def remove_prefix(self, upto: int) -> int:
        """Delete what a snapshot covers: head segments whose entries are all committed and at
        or below ``upto``. Returns segments deleted (a memory store keeps everything: 0)."""
        ...

    def close(self) -> None: ...
