"""DLedgerMemoryStore: the store interface with nothing on disk (tests, simulations, caches).

It behaves like ``DLedgerMmapFileStore`` in everything but durability, and fixes the Java
memory store's quirks: ``truncate`` removes the whole suffix, ``reset`` really
drops the prefix, the before-begin term starts at -1, unknown indices raise instead of
returning null, followers are checked for index continuity. Positions are computed exactly as
the file store lays records out in segments of ``data_file_size`` bytes (blank padding
included), so a memory node and a file node agree on every entry's ``pos``.

Records are kept encoded, so ``get_raw`` and pushes cost no re-encoding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dledger.entry import (BODY_OFFSET, MAGIC_CONFIG_CHANGE, MAGIC_NORMAL, MAX_RECORD_SIZE, MAX_TERM, MIN_BLANK_LEN, RECORD_PREFIX,
                           VALID_MAGICS, DLedgerEntry, IndexUnit, crc32, decode)
from dledger.errors import (INCONSISTENT_STATE, INCONSISTENT_TERM, INDEX_LESS_THAN_LOCAL_BEGIN,
                            INDEX_OUT_OF_RANGE, DLedgerError, EntryTooLargeError, StoreClosedError)
from dledger.store.base import StoreBase
from dledger.store.follower_batch import next_position, plan_follower_batch
from dledger.store.log_store import (DEFAULT_DATA_FILE_SIZE, AppendBatchResult, AppendHook,
                                     RepairRefusedError)
from dledger.store.suspect import SuspectReason


class MemoryMembership:
    """The membership record, kept in memory."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] | None = None

    def load(self) -> dict[str, str] | None:
        return dict(self.items) if self.items is not None else None

    def save(self, items: list[tuple[str, str]]) -> None:
        self.items = list(items)


class DLedgerMemoryStore(StoreBase):
    """In-memory log with the file store's interface."""

    durability = "memory"
    read_only = False
    #: a memory store never fails a sync (``LogStore.failed``)
    failed: str | None = None

    def __init__(self, *, data_file_size: int = DEFAULT_DATA_FILE_SIZE,
                 max_entry_size: int = MAX_RECORD_SIZE,
                 suspect: SuspectReason | None = SuspectReason.FRESH) -> None:
        self.data_file_size = data_file_size
        self.max_entry_size = min(max_entry_size, data_file_size - MIN_BLANK_LEN)
        self.ledger_before_begin_index = -1
        self.ledger_before_begin_term = -1
        self.ledger_end_index = -1
        self.ledger_end_term = -1
        self.committed_index = -1
        self.is_disk_full = False
        self.loaded = True
        self.closed = False
        self._records: list[bytes] = []      # entry ledger_before_begin_index+1+k at k
        self._positions: list[int] = []
        self._next_pos = 0
        self._term = 0
        self._vote: str | None = None
        self._hooks: list[AppendHook] = []
        #: a new memory store is an empty store never cleared (``FRESH``); ``suspect=None``
        #: builds one that is not suspect
        self.suspect: SuspectReason | None = suspect
        #: the configuration at the log's start (``membership_file.MembershipFile``'s interface)
        self.membership = MemoryMembership()

    def clear_suspect(self) -> None:
        """The replica caught up from a leader of the current term (see ``LogStore.suspect``)."""
        self._check_open()
        self.suspect = None

    # -- lifecycle -------------------------------------------------------------------------
    def load(self) -> "DLedgerMemoryStore":
        return self

    def flush(self, *, checkpoint: bool = True) -> None:
        return None

    def flush_if_due(self, now_ms: float) -> bool:
        return False

    def close(self) -> None:
        self.closed = True

    shutdown = close

    def clean(self, now: float | None = None) -> int:
        return 0

    def remove_prefix(self, upto: int) -> int:
        return 0

    def _check_open(self) -> None:
        if self.closed:
            raise StoreClosedError("memory store is closed")

    # -- term and vote ---------------------------------------------------------------------
    @property
    def current_term(self) -> int:
        return self._term

    @property
    def vote_for(self) -> str | None:
        return self._vote

    def persist_term(self, term: int, vote_for: str | None) -> None:
        if term > MAX_TERM:
            raise DLedgerError(f"term {term} is beyond the largest term {MAX_TERM}", INCONSISTENT_TERM)
        if term < self._term:
            raise DLedgerError(f"term may not go backwards ({self._term} -> {term})", INCONSISTENT_TERM)
        self._term, self._vote = term, vote_for

    def add_append_hook(self, hook: AppendHook) -> None:
        if hook not in self._hooks:
            self._hooks.append(hook)

    def update_committed_index(self, index: int) -> None:
        if index > self.committed_index:
            self.committed_index = min(index, self.ledger_end_index)

    # -- appending -------------------------------------------------------------------------
    def _reserve(self, size: int) -> int:
        pos = self._next_pos
        start, off = next_position(pos - pos % self.data_file_size, pos % self.data_file_size, size,
                                   self.data_file_size)
        return start + off

    def append_as_leader(self, entry: DLedgerEntry) -> DLedgerEntry:
        self._append_leader((entry.body,), entry.magic, [entry])
        return entry

    def batch_append_as_leader(self, bodies: Sequence[bytes], magic: int = MAGIC_NORMAL) -> AppendBatchResult:
        return self._append_leader(bodies, magic, None)

    def _append_leader(self, bodies, magic, entries) -> AppendBatchResult:
        self._check_open()
        if magic not in VALID_MAGICS:
            raise ValueError(f"invalid magic {magic}")
        limit = self.max_entry_size - BODY_OFFSET
        for b in bodies:
            if len(b) > limit:
                raise EntryTooLargeError(f"entry body of {len(b)} bytes exceeds the maximum of {limit} bytes")
        term = self._term
        if term < self.ledger_end_term:
            raise DLedgerError(f"current term {term} is below the last entry's term "
                               f"{self.ledger_end_term}", INCONSISTENT_TERM)
        first = index = self.ledger_end_index + 1
        positions = []
        for k, body in enumerate(bodies):
            size = BODY_OFFSET + len(body)
            pos = self._reserve(size)
            rec = bytearray(size)
            RECORD_PREFIX.pack_into(rec, 0, magic, size, index, term, pos, 0, 0, 0, len(body))
            rec[BODY_OFFSET:] = body
            entry = entries[k] if entries is not None else None
            if self._hooks:
                entry = entry or DLedgerEntry(body=body, magic=magic)
                entry.index, entry.term, entry.pos, entry.size = index, term, pos, size
                with memoryview(rec) as view:
                    for hook in self._hooks:
                        hook(entry, view, BODY_OFFSET)
            crc = crc32(memoryview(rec)[BODY_OFFSET:])
            RECORD_PREFIX.pack_into(rec, 0, magic, size, index, term, pos, 0, 0, crc, len(body))
            if entry is not None:
                entry.index, entry.term, entry.pos, entry.size, entry.magic = index, term, pos, size, magic
                entry.body, entry.body_crc = bytes(rec[BODY_OFFSET:]), crc
            self._records.append(bytes(rec))
            self._positions.append(pos)
            self._next_pos = pos + size
            positions.append(pos)
            index += 1
        if positions:
            self.ledger_end_index, self.ledger_end_term = index - 1, term
        return AppendBatchResult(first, term, positions)

    def batch_append_as_follower(self, records, leader_term: int, leader_id: str | None = None) -> int:
        self._check_open()
        if leader_term != self._term:
            raise DLedgerError(f"leader term {leader_term} differs from local term {self._term}",
                               INCONSISTENT_TERM)
        view = memoryview(records)
        empty_without_position = not self._records and self._next_pos == 0 and \
            (self.ledger_end_index >= 0 or self.ledger_before_begin_index >= 0)
        plan = plan_follower_batch(view, expect_index=self.ledger_end_index + 1,
                                   last_term=self.ledger_end_term, leader_term=leader_term,
                                   next_pos=None if empty_without_position else self._next_pos,
                                   file_size=self.data_file_size, max_entry_size=self.max_entry_size)
        units = plan.units
        for off, _nbytes, k, end in plan.runs:
            for _magic, pos, size, _index, _term in units[k:end]:
                self._records.append(bytes(view[off:off + size]))
                self._positions.append(pos)
                self._next_pos = pos + size
                off += size
        if units:
            last = IndexUnit._make(units[-1])
            self.ledger_end_index, self.ledger_end_term = last.index, last.term
        return self.ledger_end_index

    # -- reading ---------------------------------------------------------------------------
    def _slot(self, index: int) -> int:
        self._check_open()
        if index < 0 or index > self.ledger_end_index:
            raise DLedgerError(f"index {index} out of range (end {self.ledger_end_index})", INDEX_OUT_OF_RANGE)
        if index <= self.ledger_before_begin_index:
            raise DLedgerError(f"index {index} is before the log's begin "
                               f"{self.ledger_before_begin_index + 1}", INDEX_LESS_THAN_LOCAL_BEGIN)
        return index - self.ledger_before_begin_index - 1

    def get(self, index: int) -> DLedgerEntry:
        return decode(self._records[self._slot(index)])

    def get_raw(self, index: int) -> bytes:
        return self._records[self._slot(index)]

    # -- damage and repair: nothing rests on a disk here, so nothing is ever damaged ---------
    def damaged(self) -> dict:
        return {}

    def repair(self, index: int, record: bytes | None = None, following: bytes | None = None) -> None:
        """Nothing to repair: accepted only when ``record`` is the entry as held (or None)."""
        slot = self._slot(index)
        if record is not None and bytes(record) != self._records[slot]:
            raise RepairRefusedError(f"entry {index}: the copy differs from the entry held")

    def get_raw_range(self, begin_index: int, max_bytes: int, max_count: int = 1 << 30, *,
                      checked: bool = False) -> tuple[bytes, int]:
        # records in memory are the ones written: nothing to check (``checked`` is for files)
        k = self._slot(begin_index)
        out = [self._records[k]]
        nbytes = len(out[0])
        end_slot = min(len(self._records), k + max_count)
        j = k + 1
        while j < end_slot and nbytes + len(self._records[j]) <= max_bytes and \
                self._positions[j] == self._positions[j - 1] + len(self._records[j - 1]):
            nbytes += len(self._records[j])
            out.append(self._records[j])
            j += 1
        return b"".join(out), len(out)

    def config_entries(self, first: int, last: int) -> list[int]:
        """The indexes in ``[first, last]`` of configuration entries (magic 3)."""
        base = self.ledger_before_begin_index + 1
        first, last = max(first, base), min(last, self.ledger_end_index)
        records = self._records
        return [i for i in range(first, last + 1) if records[i - base][3] == MAGIC_CONFIG_CHANGE
                and records[i - base][:3] == b"\0\0\0"]

    def get_entry_term(self, index: int) -> int:
        if index == self.ledger_before_begin_index:
            return self.ledger_before_begin_term
        return RECORD_PREFIX.unpack_from(self._records[self._slot(index)], 0)[3]  # the term field

    def verify(self, progress: Callable[[int], None] | None = None) -> list:
        return []

    # -- truncation and reset --------------------------------------------------------------
    def truncate(self, truncate_index: int) -> int:
        self._check_open()
        if truncate_index > self.ledger_end_index:
            return self.ledger_end_index
        self._check_truncatable(truncate_index)
        k = truncate_index - self.ledger_before_begin_index - 1
        self._next_pos = self._positions[k]
        del self._records[k:], self._positions[k:]
        self.ledger_end_index = truncate_index - 1
        self.ledger_end_term = (self.get_entry_term(self.ledger_end_index) if self._records
                                else self.ledger_before_begin_term)
        return self.ledger_end_index

    def truncate_to_entry(self, entry: DLedgerEntry, leader_term: int, leader_id: str | None = None) -> int:
        self._check_open()
        if self.ledger_before_begin_index < entry.index <= self.ledger_end_index:
            if self.get(entry.index) == entry:
                if entry.index < self.ledger_end_index:
                    self.truncate(entry.index + 1)
                return self.ledger_end_index
            self.truncate(entry.index)
        elif entry.index != self.ledger_end_index + 1:
            if entry.index <= self.committed_index:
                raise DLedgerError(f"refusing to replace committed entry {entry.index}", INCONSISTENT_STATE)
            self._records.clear()
            self._positions.clear()
            self.ledger_before_begin_index = self.ledger_end_index = entry.index - 1
            self.ledger_before_begin_term = self.ledger_end_term = -1
            self._next_pos = entry.pos
        self.append_as_follower(entry, leader_term, leader_id)
        return self.ledger_end_index

    def reset(self, before_begin_index: int, before_begin_term: int, next_pos: int | None = None) -> int:
        self._check_open()
        if before_begin_index <= self.ledger_before_begin_index:
            # a log already empty after this begin moves to ``next_pos`` (as the file store)
            if next_pos is None or before_begin_index != self.ledger_before_begin_index \
                    or self.ledger_end_index != before_begin_index \
                    or (self._next_pos == next_pos and self.ledger_before_begin_term == before_begin_term):
                return self.ledger_before_begin_index + 1
        if before_begin_index >= self.ledger_end_index:
            self._records.clear()
            self._positions.clear()
            if next_pos is not None:
                self._next_pos = next_pos
            self.ledger_end_index, self.ledger_end_term = before_begin_index, before_begin_term
        else:
            k = before_begin_index - self.ledger_before_begin_index
            del self._records[:k], self._positions[:k]
        self.ledger_before_begin_index = before_begin_index
        self.ledger_before_begin_term = before_begin_term
        self.committed_index = max(self.committed_index, min(before_begin_index, self.ledger_end_index))
        return before_begin_index + 1
