"""DLedgerMmapFileStore: the Raft log on disk (data + index segment lists, term file, checkpoint).

Layout of a store directory (SPEC §1.6)::

    <dir>/data/<20-digit offset>   data segments (entries, blank padding)
    <dir>/index/<20-digit offset>  index segments (32-byte units, unit k at byte k*32)
    <dir>/currterm                 term and vote (TermFile)
    <dir>/checkpoint               endIndex / committedIndex (+ beforeBegin*) (Checkpoint)

Invariants kept by every mutation:
- entries ``ledger_before_begin_index < i <= ledger_end_index`` are contiguous, their terms do
  not decrease, index unit ``i`` names entry ``i``'s local position and size;
- an entry's ``pos`` field equals its local position: leaders stamp it, followers refuse a
  record whose ``pos`` differs from where it would land (replicas are byte-identical);
- ``body_crc`` is the CRC-32 of the final body (after append hooks) and is checked on every
  read; a record that fails a check is never returned. The one exception: ``get_raw_range``
  (the leader reading for a push) returns entries written through this object since ``load``
  unchecked, because every follower checks each pushed record, CRC included, before writing.

Recovery (``load``), stronger than SPEC §2.6:
- the log up to the checkpoint's ``endIndex`` (flushed before the checkpoint was written) is
  trusted after one spot check, so restart time does not grow with the log;
- what follows is scanned record by record (header, chain of index/term, CRC, index unit);
  the first bad record there ends the log: a torn tail is truncated, never served;
- a bad record that is followed by intact entries is mid-log corruption and stops the open
  with ``CorruptStoreError`` naming the file and offset, instead of truncating it away
  (except in ``page_cache`` mode after a checkpoint: that tail was never promised durable);
- without a usable checkpoint the scan starts at most three segments from the end (as Java);
- damage inside the trusted prefix is found by ``get`` (and by ``verify``) and reported the
  same way, never served.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, repeat, starmap
from operator import add

from dledger.entry import (BODY_OFFSET, INDEX_UNIT, INDEX_UNIT_SIZE, MAGIC_BLANK, MAGIC_NOOP,
                           MAGIC_NORMAL, MAGIC_SIZE, MAX_RECORD_SIZE, MIN_BLANK_LEN, RECORD_PREFIX,
                           VALID_MAGICS, DLedgerEntry, IndexUnit, crc32, decode, decode_header)
from dledger.errors import (DISK_ERROR, DISK_FULL, INCONSISTENT_STATE,
                            INCONSISTENT_TERM, INDEX_LESS_THAN_LOCAL_BEGIN, INDEX_OUT_OF_RANGE,
                            CorruptEntryError, CorruptStoreError, DLedgerError, EntryTooLargeError,
                            ReadOnlyStoreError, StoreClosedError)
from dledger.store import background_flush as bg_flush
from dledger.store.base import StoreBase
from dledger.store.follower_batch import plan_follower_batch
from dledger.store.checkpoint import Checkpoint, write_checkpoint
from dledger.store.mmap_file import MmapFile
from dledger.store.mmap_file_list import MmapFileList
from dledger.store.store_io import LOCAL_IO, StoreIO
from dledger.store.term_file import TermFile

log = logging.getLogger(__name__)

DEFAULT_DATA_FILE_SIZE = 1024 * 1024 * 1024
DEFAULT_INDEX_FILE_SIZE = INDEX_UNIT_SIZE * 5 * 1024 * 1024

PAGE_CACHE = "page_cache"
FSYNC = "fsync"
DURABILITY_MODES = (PAGE_CACHE, FSYNC)

_ZERO8 = bytes(MIN_BLANK_LEN)

AppendHook = Callable[[DLedgerEntry, memoryview, int], None]


def _record_matches_unit(unit: IndexUnit, magic: int, size: int, index: int, term: int, pos: int,
                         body_crc: int) -> bool:
    """Does a record's header agree with its index unit? The CRC covers only the body, so this
    is what catches a damaged header field. Java leaders write magic 1 into the index of NOOP
    entries (SPEC §1.2); records without a CRC (Java's) may hold another node's ``pos``."""
    return (index == unit.index and term == unit.term and size == unit.size
            and (magic == unit.magic or (unit.magic == MAGIC_NORMAL and magic == MAGIC_NOOP))
            and (not body_crc or pos == unit.pos))


@dataclass(slots=True)
class AppendBatchResult:
    """What a batch append wrote: indices ``first_index .. first_index+len(positions)-1``."""

    first_index: int
    term: int
    positions: list[int]

    @property
    def last_index(self) -> int:
        return self.first_index + len(self.positions) - 1


class DLedgerMmapFileStore(StoreBase):
    """The file store. Construct, then ``load()`` (or use ``open()``), then append and read."""

    def __init__(self, store_dir: str, *, data_file_size: int = DEFAULT_DATA_FILE_SIZE,
                 index_file_size: int = DEFAULT_INDEX_FILE_SIZE, durability: str = PAGE_CACHE,
                 max_entry_size: int = MAX_RECORD_SIZE, data_path: str | None = None,
                 read_only: bool = False, file_reserved_hours: float = 72,
                 delete_when: str = "04", disk_space_ratio_to_check_expired: float = 0.70,
                 disk_space_ratio_to_force_clean: float = 0.85, enable_disk_force_clean: bool = True,
                 disk_usage: Callable[[str], tuple] = shutil.disk_usage,
                 flush_interval_ms: int = 10, checkpoint_interval_ms: int = 1000,
                 background_flush: bool = False, store_io: StoreIO = LOCAL_IO) -> None:
        if durability not in DURABILITY_MODES:
            raise ValueError(f"durability must be one of {DURABILITY_MODES}, got {durability!r}")
        if index_file_size % INDEX_UNIT_SIZE:
            raise ValueError(f"index_file_size must be a multiple of {INDEX_UNIT_SIZE}, "
                             f"got {index_file_size}")
        if max_entry_size < BODY_OFFSET:
            raise ValueError(f"max_entry_size must be at least {BODY_OFFSET}, got {max_entry_size}")
        self.store_dir = store_dir
        self.durability = durability
        self.read_only = read_only
        self.max_entry_size = min(max_entry_size, data_file_size - MIN_BLANK_LEN)
        self.data_path = data_path or os.path.join(store_dir, "data")
        self.index_path = os.path.join(store_dir, "index")
        self.data_list = MmapFileList(self.data_path, data_file_size, read_only=read_only, io=store_io)
        self.index_list = MmapFileList(self.index_path, index_file_size, read_only=read_only, io=store_io)
        self.term_file = TermFile(store_dir, read_only=read_only)
        self.file_reserved_hours = max(1.0, file_reserved_hours)
        self.delete_when = {int(h) for h in delete_when.split(";") if h.strip()}
        self.ratio_check_expired = disk_space_ratio_to_check_expired
        self.ratio_force_clean = disk_space_ratio_to_force_clean
        self.disk_full_ratio = min(disk_space_ratio_to_force_clean + 0.05, 0.95)
        self.enable_disk_force_clean = enable_disk_force_clean
        self._disk_usage = disk_usage
        self.flush_interval_ms = flush_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self._last_flush_ms: float | None = None
        #: page_cache mode: periodic msyncs run on the flush thread (see background_flush.py)
        self.background_flush = background_flush and durability == PAGE_CACHE and bg_flush.supported
        self._flush_job: bg_flush.FlushJob | None = None
        #: moves on every cut (truncate, reset, segment deletion): stale flush jobs are dropped
        self._cut_epoch = 0
        self._last_checkpoint_ms: float | None = None

        self.ledger_before_begin_index = -1
        self.ledger_before_begin_term = -1
        self.ledger_end_index = -1
        self.ledger_end_term = -1
        self.committed_index = -1
        self.is_disk_full = False
        self.loaded = False
        self.closed = False
        self._hooks: list[AppendHook] = []
        self._encode_buf = bytearray()
        # read-only opens cannot rewrite a damaged index tail: the rebuilt units live here.
        self._index_overrides: dict[int, IndexUnit] = {}
        #: entries from this index on were written through this object since ``load`` (moves
        #: down on truncation); reading them back for a push skips the record checks
        self._written_from = 0
        self._checkpoint: Checkpoint | None = None

    @classmethod
    def open(cls, store_dir: str, **kwargs) -> "DLedgerMmapFileStore":
        store = cls(store_dir, **kwargs)
        store.load()
        return store

    # =====================================================================================
    # term and vote
    # =====================================================================================
    @property
    def current_term(self) -> int:
        return self.term_file.term

    @property
    def vote_for(self) -> str | None:
        return self.term_file.vote_for

    def persist_term(self, term: int, vote_for: str | None) -> None:
        """Make ``term``/``vote_for`` durable (returns only once they are)."""
        self._check_open()
        if term < self.term_file.term:
            raise DLedgerError(f"term may not go backwards ({self.term_file.term} -> {term})",
                               INCONSISTENT_TERM)
        self.term_file.save(term, vote_for)

    # =====================================================================================
    # hooks, committed index
    # =====================================================================================
    def add_append_hook(self, hook: AppendHook) -> None:
        """``hook(entry, record, body_offset)`` runs on the leader before a record is written.

        ``record`` is a writable view of the whole encoded record (index, term and pos already
        set); the hook may change body bytes in place. The CRC is computed afterwards, over the
        final body. The view is only valid during the call.
        """
        if hook not in self._hooks:
            self._hooks.append(hook)

    def update_committed_index(self, index: int) -> None:
        """Record the commit index (persisted with the next checkpoint). Never goes backwards."""
        if index > self.committed_index:
            self.committed_index = min(index, self.ledger_end_index)

    # =====================================================================================
    # appending
    # =====================================================================================
    def _check_open(self) -> None:
        if self.closed:
            raise StoreClosedError(f"store {self.store_dir} is closed")
        if not self.loaded:
            raise DLedgerError(f"store {self.store_dir} is not loaded; call load() first", INCONSISTENT_STATE)

    def _check_append(self) -> None:
        self._check_open()
        if self.read_only:
            raise ReadOnlyStoreError(f"store {self.store_dir} is opened read-only")
        if self.is_disk_full:
            raise DLedgerError(f"disk full: store {self.store_dir} refuses appends", DISK_FULL)
        expected = (self.ledger_end_index + 1) * INDEX_UNIT_SIZE
        if self.index_list.max_wrote_position() != expected and self.index_list.files:
            raise DLedgerError(f"index list at {self.index_list.max_wrote_position()}, expected "
                               f"{expected}", DISK_ERROR)

    def _ensure_index_start(self) -> None:
        if not self.index_list.files:
            self.index_list.rebuild_with_pos((self.ledger_end_index + 1) * INDEX_UNIT_SIZE)

    def append_as_leader(self, entry: DLedgerEntry) -> DLedgerEntry:
        """Append one entry as leader: index, term (the current term) and pos are assigned here.

        Returns the same entry with ``index``, ``term``, ``pos``, ``size``, ``body_crc`` set
        and ``body`` holding the bytes as written (after hooks).
        """
        self._append_leader((entry.body,), entry.magic, [entry])
        return entry

    def batch_append_as_leader(self, bodies: Sequence[bytes], magic: int = MAGIC_NORMAL) -> AppendBatchResult:
        """Append many bodies in one call (one fsync in ``fsync`` mode)."""
        return self._append_leader(bodies, magic, None)

    def _append_leader(self, bodies: Sequence[bytes], magic: int,
                       entries: list[DLedgerEntry] | None) -> AppendBatchResult:
        self._check_append()
        if magic not in VALID_MAGICS:
            raise ValueError(f"invalid magic {magic}")
        if not bodies:
            return AppendBatchResult(self.ledger_end_index + 1, self.term_file.term, [])
        limit = self.max_entry_size - BODY_OFFSET
        if max(map(len, bodies)) > limit:
            big = next(i for i, b in enumerate(bodies) if len(b) > limit)
            raise EntryTooLargeError(f"entry body of {len(bodies[big])} bytes exceeds the maximum "
                                     f"of {limit} bytes (max_entry_size {self.max_entry_size})")
        term = self.term_file.term
        if term < self.ledger_end_term:
            raise DLedgerError(f"current term {term} is below the last entry's term "
                               f"{self.ledger_end_term}", INCONSISTENT_TERM)
        self._ensure_index_start()
        first_index = index = self.ledger_end_index + 1
        data, idx = self.data_list, self.index_list
        start_pos = data.max_wrote_position()
        if not self._hooks and entries is None and len(bodies) > 1:
            result = self._append_leader_joined(bodies, magic, term, first_index, start_pos)
            if result is not None:
                return result
        positions: list[int] = []
        add = positions.append
        pack_rec = RECORD_PREFIX.pack_into
        pack_idx = INDEX_UNIT.pack_into
        hooks = self._hooks
        # The loop keeps each segment's state in locals and writes it back on segment switches
        # and at the end: attribute traffic was a third of the per-entry cost. It packs its own
        # index units rather than handing them to _write_index_units: that helper's list, zip
        # and join cost single appends a third of their rate (325K -> 221K/s at 128 B).
        df = data.files[-1] if data.files else None
        if df is None:
            df = data.reserve(BODY_OFFSET + len(bodies[0]))
        wp, dsize, base, mm, ready = df.wrote_position, df.file_size, df.file_from_offset, df.mm, df.populated_to
        xf = idx.files[-1]
        xw, xsize, xmm = xf.wrote_position, xf.file_size, xf.mm
        try:
            for body in bodies:
                n = len(body)
                size = BODY_OFFSET + n
                if wp + size + MIN_BLANK_LEN > dsize:
                    df.wrote_position = wp
                    df = data.reserve(size)
                    wp, dsize, base, mm, ready = (df.wrote_position, df.file_size, df.file_from_offset,
                                                  df.mm, df.populated_to)
                if wp + size > ready:
                    df.populate(wp, wp + size)
                    ready = df.populated_to
                pos = base + wp
                if hooks:
                    self._write_hooked(df, wp, body, magic, index, term, pos, entries, len(positions))
                else:
                    crc = crc32(body)
                    pack_rec(mm, wp, magic, size, index, term, pos, 0, 0, crc, n)
                    mm[wp + BODY_OFFSET:wp + size] = body
                    if entries is not None:
                        e = entries[len(positions)]
                        e.index, e.term, e.pos, e.size, e.body_crc, e.magic = index, term, pos, size, crc, magic
                wp += size
                if xw + INDEX_UNIT_SIZE > xsize:
                    xf.wrote_position = xw
                    xf = idx.reserve(INDEX_UNIT_SIZE, use_blank=False)
                    xw, xsize, xmm = xf.wrote_position, xf.file_size, xf.mm
                pack_idx(xmm, xw, magic, pos, size, index, term)
                xw += INDEX_UNIT_SIZE
                add(pos)
                index += 1
        finally:
            df.wrote_position = wp
            xf.wrote_position = xw
            if positions:
                self._end_append(df, first_index, first_index + len(positions) - 1, term, start_pos)
        return AppendBatchResult(first_index, term, positions)

    def _append_leader_joined(self, bodies: Sequence[bytes], magic: int, term: int, first_index: int,
                              start_pos: int) -> AppendBatchResult | None:
        """A batch of small bodies that fits the current segment: every record encoded by one
        ``map`` and one join, written with one copy, its index units likewise; no Python
        bytecode runs per entry. None when the batch crosses a segment end or its bodies
        average over 4 KiB (there the loop's single copy wins); the loop then writes it."""
        n = len(bodies)
        lens = list(map(len, bodies))
        total = sum(lens) + BODY_OFFSET * n
        files = self.data_list.files
        if total > n * 4096 or not files:
            return None
        df = files[-1]
        wp = df.wrote_position
        if wp + total + MIN_BLANK_LEN > df.file_size:
            return None
        sizes = list(map(add, lens, repeat(BODY_OFFSET, n)))
        positions = list(accumulate(sizes[:-1], initial=df.file_from_offset + wp))
        indexes = range(first_index, first_index + n)
        heads = map(RECORD_PREFIX.pack, repeat(magic, n), sizes, indexes, repeat(term, n), positions,
                    repeat(0, n), repeat(0, n), map(crc32, bodies), lens)
        if wp + total > df.populated_to:
            df.populate(wp, wp + total)
        df.mm[wp:wp + total] = b"".join(chain.from_iterable(zip(heads, bodies)))
        df.wrote_position = wp + total
        self._write_index_units(list(zip(repeat(magic, n), positions, sizes, indexes, repeat(term, n))), 0, n)
        self._end_append(df, first_index, first_index + n - 1, term, start_pos)
        return AppendBatchResult(first_index, term, positions)

    def _end_append(self, df: MmapFile | None, first_index: int, last_index: int, last_term: int,
                    start_pos: int) -> None:
        """After records ``first_index..last_index`` were written from data position
        ``start_pos`` on: move the log end, mark it, and sync in fsync mode."""
        self.ledger_end_index = last_index
        self.ledger_end_term = last_term
        self._mark_end(df)
        if self.durability == FSYNC:
            self._sync_range(self.data_list, start_pos)
            self._sync_range(self.index_list, first_index * INDEX_UNIT_SIZE)

    def _write_hooked(self, df: MmapFile, wp: int, body: bytes, magic: int, index: int, term: int,
                      pos: int, entries: list[DLedgerEntry] | None, k: int) -> None:
        size = BODY_OFFSET + len(body)
        buf = self._encode_buf
        if len(buf) < size:
            buf.extend(bytes(size - len(buf)))
        RECORD_PREFIX.pack_into(buf, 0, magic, size, index, term, pos, 0, 0, 0, len(body))
        buf[BODY_OFFSET:size] = body
        entry = entries[k] if entries is not None else DLedgerEntry(body=body, magic=magic)
        entry.index, entry.term, entry.pos, entry.size, entry.magic = index, term, pos, size, magic
        with memoryview(buf) as whole, whole[:size] as view:
            for hook in self._hooks:
                hook(entry, view, BODY_OFFSET)
        final_body = bytes(buf[BODY_OFFSET:size])
        crc = crc32(final_body)
        RECORD_PREFIX.pack_into(buf, 0, magic, size, index, term, pos, 0, 0, crc, len(body))
        df.mm[wp:wp + size] = buf[:size]
        entry.body, entry.body_crc = final_body, crc

    @staticmethod
    def _mark_end(f: MmapFile | None) -> None:
        """Zero the 8 bytes after the last record, so bytes left behind by an earlier truncation
        never read as a continuation of the log."""
        if f is not None and f.wrote_position + MIN_BLANK_LEN <= f.file_size:
            f.mm[f.wrote_position:f.wrote_position + MIN_BLANK_LEN] = _ZERO8

    @staticmethod
    def _sync_range(lst: MmapFileList, start: int) -> None:
        """msync everything in ``lst`` from global ``start`` to its end (fsync mode)."""
        for f in lst.files:
            if f.file_from_offset + f.file_size <= start:
                continue
            lo = max(start - f.file_from_offset, 0)
            f.flush_range(lo, f.wrote_position)

    def batch_append_as_follower(self, records, leader_term: int, leader_id: str | None = None) -> int:
        """Append encoded records exactly as they lie in the leader's data file.

        ``records`` is a bytes-like object of consecutive records (blank records in it are
        skipped: this store writes its own padding, at the same places). Everything is checked
        before anything is written; a bad batch changes nothing. Returns the new end index.
        """
        self._check_append()
        if leader_term != self.term_file.term:
            raise DLedgerError(f"leader term {leader_term} differs from local term "
                               f"{self.term_file.term}", INCONSISTENT_TERM)
        view = memoryview(records)
        data = self.data_list
        has_position = bool(data.files) or (self.ledger_end_index < 0 and self.ledger_before_begin_index < 0)
        plan = plan_follower_batch(view, expect_index=self.ledger_end_index + 1,
                                   last_term=self.ledger_end_term, leader_term=leader_term,
                                   next_pos=data.max_wrote_position() if has_position else None,
                                   file_size=data.mapped_file_size, max_entry_size=self.max_entry_size)
        units = plan.units
        if not units:
            return self.ledger_end_index
        if not data.files and units[0][1] != 0:
            data.rebuild_with_pos(units[0][1])
        self._ensure_index_start()
        start_pos = data.max_wrote_position()
        first_index = units[0][3]
        done = 0
        df = None
        try:
            for off, nbytes, k, end in plan.runs:
                # one copy per run: the plan put each run's records back to back in one segment
                df = data.reserve(nbytes)
                wp = df.wrote_position
                if df.file_from_offset + wp != units[k][1]:
                    raise DLedgerError(f"follower write of entry {units[k][3]} would land at "
                                       f"{df.file_from_offset + wp}, not {units[k][1]}", INCONSISTENT_STATE)
                if wp + nbytes > df.populated_to:
                    df.populate(wp, wp + nbytes)
                df.mm[wp:wp + nbytes] = view[off:off + nbytes]
                df.wrote_position = wp + nbytes
                self._write_index_units(units, k, end)
                done = end
        finally:
            if done:
                self._end_append(df, first_index, units[done - 1][3], units[done - 1][4], start_pos)
        return self.ledger_end_index

    def _write_index_units(self, units: list[tuple], k: int, end: int) -> None:
        """Append the index units ``units[k:end]`` (``(magic, pos, size, index, term)`` tuples),
        packed in one join per index segment."""
        idx = self.index_list
        xf = idx.files[-1]
        pack = INDEX_UNIT.pack
        while k < end:
            xw = xf.wrote_position
            room = (xf.file_size - xw) // INDEX_UNIT_SIZE
            if room <= 0:
                xf = idx.reserve(INDEX_UNIT_SIZE, use_blank=False)
                continue
            m = min(room, end - k)
            xf.mm[xw:xw + m * INDEX_UNIT_SIZE] = b"".join(starmap(pack, units[k:k + m]))
            xf.wrote_position = xw + m * INDEX_UNIT_SIZE
            k += m

    # =====================================================================================
    # reading
    # =====================================================================================
    def _index_unit(self, index: int) -> IndexUnit:
        unit = self._index_overrides.get(index) if self._index_overrides else None
        if unit is not None:
            return unit
        pos = index * INDEX_UNIT_SIZE
        f = self.index_list.find_file(pos)
        off = pos - f.file_from_offset if f is not None else -1
        if f is None or off + INDEX_UNIT_SIZE > f.wrote_position:
            raise CorruptStoreError(f"index unit {index} is missing", path=self.index_path,
                                    position=pos)
        unit = IndexUnit._make(INDEX_UNIT.unpack_from(f.mm, off))
        if unit.index != index or unit.size < BODY_OFFSET or unit.magic not in VALID_MAGICS:
            raise CorruptStoreError(f"index unit {index} is corrupt: {unit}", path=f.path, offset=off)
        return unit

    def _check_range(self, index: int) -> None:
        self._check_open()
        if index < 0 or index > self.ledger_end_index:
            raise DLedgerError(f"index {index} out of range (end {self.ledger_end_index})",
                               INDEX_OUT_OF_RANGE)
        if index <= self.ledger_before_begin_index:
            raise DLedgerError(f"index {index} is before the log's begin "
                               f"{self.ledger_before_begin_index + 1}", INDEX_LESS_THAN_LOCAL_BEGIN)

    def _locate(self, index: int) -> tuple[IndexUnit, MmapFile, int]:
        unit = self._index_unit(index)
        f = self.data_list.find_file(unit.pos)
        if f is None or unit.pos - f.file_from_offset + unit.size > f.wrote_position:
            raise CorruptStoreError(f"index unit {index} points outside the data ({unit.pos}, "
                                    f"{unit.size} bytes)", path=self.data_path, position=unit.pos)
        return unit, f, unit.pos - f.file_from_offset

    def get(self, index: int) -> DLedgerEntry:
        """The entry at ``index``; ``CorruptStoreError`` (file, offset) if its bytes fail a check."""
        self._check_range(index)
        unit, f, off = self._locate(index)
        try:
            entry = decode(f.mm, off, limit=f.wrote_position, path=f.path, base=f.file_from_offset)
        except CorruptEntryError as exc:
            raise CorruptStoreError(f"entry {index} is corrupt: {exc.args[0].split(' (')[0]}",
                                    path=f.path, offset=off, position=unit.pos) from None
        if not _record_matches_unit(unit, entry.magic, entry.size, entry.index, entry.term,
                                    entry.pos, entry.body_crc):
            raise CorruptStoreError(f"entry at the position of index {index} is (index "
                                    f"{entry.index}, term {entry.term}, size {entry.size}, magic "
                                    f"{entry.magic}, pos {entry.pos}), index unit says (term "
                                    f"{unit.term}, size {unit.size}, magic {unit.magic}, pos "
                                    f"{unit.pos})", path=f.path, offset=off, position=unit.pos)
        return entry

    def get_raw(self, index: int) -> bytes:
        """The encoded record of ``index`` exactly as stored (header checked, CRC checked)."""
        entry = self.get(index)
        unit = self._index_unit(index)
        return self.data_list.get_data(unit.pos, entry.size)

    def get_raw_range(self, begin_index: int, max_bytes: int, max_count: int = 1 << 30) -> tuple[bytes, int]:
        """Encoded records from ``begin_index`` on, up to ``max_bytes`` (at least one record).

        Returns ``(records, count)``; records never span a segment boundary within one call's
        contiguous copy, and blanks between segments are not included.
        """
        self._check_range(begin_index)
        end = min(self.ledger_end_index, begin_index + max_count - 1)
        first_unit, f, off = self._locate(begin_index)
        units = [first_unit]
        nbytes = first_unit.size
        if end > begin_index and not self._index_overrides:
            # Extend within the same data segment as far as the limits allow, from the
            # following index units read in one slice of their index segment.
            upos = (begin_index + 1) * INDEX_UNIT_SIZE
            xf = self.index_list.find_file(upos)
            if xf is not None:
                lo = upos - xf.file_from_offset
                most = min(end - begin_index, max(0, max_bytes - nbytes) // BODY_OFFSET)
                hi = min(xf.wrote_position, lo + most * INDEX_UNIT_SIZE)
                more = list(INDEX_UNIT.iter_unpack(xf.mm[lo:hi - (hi - lo) % INDEX_UNIT_SIZE]))
                if more:
                    _m, poss, sizes, _i, _t = zip(*more)
                    # ends[k]: where unit k must start to follow on; ends[k + 1] - pos: bytes through it
                    ends = list(accumulate(sizes, initial=first_unit.pos + nbytes))
                    take = max(0, bisect_right(ends, first_unit.pos + max_bytes) - 1)
                    if poss[:take] != tuple(ends[:take]):     # a segment ends inside: stop there
                        take = next(k for k in range(take) if poss[k] != ends[k])
                    units.extend(more[:take])
                    nbytes = ends[take] - first_unit.pos
        elif end > begin_index:
            expect_pos = first_unit.pos + nbytes
            while begin_index + len(units) <= end:
                unit = self._index_unit(begin_index + len(units))
                if unit.pos != expect_pos or nbytes + unit.size > max_bytes:
                    break
                units.append(unit)
                nbytes += unit.size
                expect_pos += unit.size
        chunk = f.read(off, nbytes)
        if begin_index < self._written_from:
            self._verify_chunk(chunk, begin_index, units, f.path, off)
        # else: written through this store object since it was opened (leader records encoded
        # here, follower records checked before they were written); the followers check every
        # pushed record again, CRC included, before writing it.
        return chunk, len(units)

    def _verify_chunk(self, chunk: bytes, first: int, units: list, path: str, base_off: int) -> None:
        """Every record of ``chunk`` agrees with its index unit (what the CRC does not cover)
        and with its CRC. ``units`` are ``(magic, pos, size, index, term)`` tuples."""
        unpack = RECORD_PREFIX.unpack_from
        view = memoryview(chunk)
        total = len(chunk)
        off = 0
        i = first
        for u_magic, u_pos, u_size, u_index, u_term in units:
            if off + BODY_OFFSET > total:
                raise CorruptStoreError(f"entry {i} is corrupt: record header truncated", path=path,
                                        offset=base_off + off)
            magic, size, index, term, pos, _ch, _cc, body_crc, body_size = unpack(chunk, off)
            if (index != i or u_index != i or size != u_size or term != u_term
                    or body_size != size - BODY_OFFSET or size < BODY_OFFSET
                    or magic not in VALID_MAGICS
                    or (magic != u_magic and not (u_magic == MAGIC_NORMAL and magic == MAGIC_NOOP))
                    or (body_crc and pos != u_pos)
                    or (body_crc and crc32(view[off + BODY_OFFSET:off + size]) != body_crc)):
                raise CorruptStoreError(f"entry {i} is corrupt", path=path, offset=base_off + off)
            off += size
            i += 1

    def get_entry_term(self, index: int) -> int:
        """Term of ``index`` (``ledger_before_begin_term`` for the before-begin index)."""
        if index == self.ledger_before_begin_index:
            return self.ledger_before_begin_term
        self._check_range(index)
        return self._index_unit(index).term

    def verify(self, progress: Callable[[int], None] | None = None) -> list[CorruptStoreError]:
        """Read and check every entry; returns the errors found (empty when the log is sound)."""
        errors: list[CorruptStoreError] = []
        for i in range(self.ledger_before_begin_index + 1, self.ledger_end_index + 1):
            try:
                self.get(i)
            except CorruptStoreError as exc:
                errors.append(exc)
            if progress is not None:
                progress(i)
        return errors

    # =====================================================================================
    # truncation and reset
    # =====================================================================================
    def _zero_header_at(self, pos: int) -> None:
        """Erase the record head at ``pos`` so that recovery cannot resurrect what follows."""
        f = self.data_list.find_file(pos)
        if f is None:
            return
        off = pos - f.file_from_offset
        if off + MIN_BLANK_LEN <= f.file_size:
            f.write_at(off, bytes(MIN_BLANK_LEN))
            f.mm.flush(off & ~4095, off - (off & ~4095) + MIN_BLANK_LEN)

    def _sync_before_cut(self) -> None:
        """Make the log durable before a truncation or reset makes its cut durable.

        The cut is synced at once (the page holding an erased header or a head blank). Were
        the pages before it still only in the page cache, a power loss could keep the cut and
        lose what precedes it: a hole that recovery would take for mid-log damage.
        """
        self._cut_epoch += 1
        self.data_list.flush(0)
        self.index_list.flush(0)

    def truncate(self, truncate_index: int) -> int:
        """Remove ``truncate_index`` and every later entry; returns the new end index.

        Refuses to remove a committed entry.
        """
        self._check_open()
        if self.read_only:
            raise ReadOnlyStoreError(f"store {self.store_dir} is opened read-only")
        if truncate_index > self.ledger_end_index:
            return self.ledger_end_index
        self._check_truncatable(truncate_index)
        unit = self._index_unit(truncate_index)
        self._written_from = min(self._written_from, truncate_index)
        # Crash-safe order: whatever step a crash interrupts, the next open finds either the
        # old log or the truncated one. The checkpoint stops vouching for the doomed entries
        # first (else it would trust a log whose record was already erased); the index units
        # go before the data header (else intact entries would follow an erased record, which
        # recovery must take for mid-log damage).
        self._sync_before_cut()
        if self._checkpoint is not None and self._checkpoint.end_index >= truncate_index:
            self._write_checkpoint(truncate_index - 1)
        self._truncate_index_to(truncate_index)
        self._zero_header_at(unit.pos)
        self.data_list.truncate_offset(unit.pos)
        if self.data_list.max_wrote_position() != unit.pos:
            self.data_list.rebuild_with_pos(unit.pos)
        if truncate_index - 1 == self.ledger_before_begin_index:
            self.ledger_end_index, self.ledger_end_term = truncate_index - 1, self.ledger_before_begin_term
        else:
            self.ledger_end_index = truncate_index - 1
            self.ledger_end_term = self._index_unit(truncate_index - 1).term
        return self.ledger_end_index

    def _truncate_index_to(self, index: int) -> None:
        pos = index * INDEX_UNIT_SIZE
        idx = self.index_list
        if idx.files and idx.min_offset() <= pos <= idx.max_wrote_position():
            # Erase the dropped units: stale units must not vouch for stale data after a crash.
            for f in idx.files:
                lo = max(pos - f.file_from_offset, f.start_position)
                if lo < f.wrote_position:
                    f.mm[lo:f.wrote_position] = bytes(f.wrote_position - lo)
                    f.flush_range(lo, f.wrote_position)
            idx.truncate_offset(pos)
        else:
            idx.rebuild_with_pos(pos)

    def truncate_to_entry(self, entry: DLedgerEntry, leader_term: int, leader_id: str | None = None) -> int:
        """Make ``entry`` the last entry, at ``entry.pos`` (legacy TRUNCATE of SPEC §2.3).

        Keeps a local copy equal to ``entry``; otherwise everything from ``entry.index`` on is
        dropped and ``entry`` is written. When ``entry.pos`` lies outside the local data, the
        store is rebuilt to start at ``entry`` (its before-begin index becomes ``index - 1``).
        """
        self._check_open()
        if leader_term != self.term_file.term:
            raise DLedgerError(f"leader term {leader_term} differs from local term "
                               f"{self.term_file.term}", INCONSISTENT_TERM)
        existed = False
        if self.ledger_before_begin_index < entry.index <= self.ledger_end_index:
            try:
                existed = self.get(entry.index) == entry
            except DLedgerError:
                existed = False
        if existed:
            if entry.index < self.ledger_end_index:
                self.truncate(entry.index + 1)
            return self.ledger_end_index
        if entry.index <= self.committed_index:
            raise DLedgerError(f"refusing to replace committed entry {entry.index}", INCONSISTENT_STATE)
        data = self.data_list
        inside = (self.ledger_before_begin_index < entry.index <= self.ledger_end_index + 1
                  and data.files and data.min_offset() <= entry.pos <= data.max_wrote_position())
        if inside:
            if entry.index <= self.ledger_end_index:
                self.truncate(entry.index)
        else:
            self._sync_before_cut()
            self._announce_begin(entry.index - 1, -1, self.committed_index)
            self._zero_header_at(entry.pos)
            data.rebuild_with_pos(entry.pos)
            self.index_list.rebuild_with_pos(entry.index * INDEX_UNIT_SIZE)
            self.ledger_before_begin_index = entry.index - 1
            self.ledger_before_begin_term = -1
            self.ledger_end_index, self.ledger_end_term = entry.index - 1, -1
        self.append_as_follower(entry, leader_term, leader_id)
        self._write_checkpoint(min(self._checkpoint.end_index if self._checkpoint else -1,
                                   self.ledger_end_index))
        return self.ledger_end_index

    def reset(self, before_begin_index: int, before_begin_term: int, next_pos: int | None = None) -> int:
        """Drop the log prefix up to and including ``before_begin_index`` (after a snapshot).

        When the whole log goes, the log restarts empty after ``before_begin_index``; the next
        entry lands at ``next_pos`` when given (a follower installing the leader's snapshot),
        else where the old data ended. Returns the new begin index.
        """
        self._check_open()
        if self.read_only:
            raise ReadOnlyStoreError(f"store {self.store_dir} is opened read-only")
        if before_begin_index <= self.ledger_before_begin_index:
            return self.ledger_before_begin_index + 1
        data = self.data_list
        self._sync_before_cut()
        self._announce_begin(before_begin_index, before_begin_term,
                             max(self.committed_index, min(before_begin_index, self.ledger_end_index)))
        if before_begin_index >= self.ledger_end_index:
            if next_pos is not None:
                data.rebuild_with_pos(next_pos)
            elif self.ledger_end_index > self.ledger_before_begin_index:
                unit = self._index_unit(self.ledger_end_index)
                data.reset_offset(unit.pos + unit.size)
            elif data.files:
                data.reset_offset(data.max_wrote_position())
            self.index_list.rebuild_with_pos((before_begin_index + 1) * INDEX_UNIT_SIZE)
            self.ledger_end_index, self.ledger_end_term = before_begin_index, before_begin_term
        else:
            unit = self._index_unit(before_begin_index + 1)
            data.reset_offset(unit.pos)
            self.index_list.reset_offset((before_begin_index + 1) * INDEX_UNIT_SIZE)
        self.ledger_before_begin_index = before_begin_index
        self.ledger_before_begin_term = before_begin_term
        self.committed_index = max(self.committed_index, min(before_begin_index, self.ledger_end_index))
        self._write_checkpoint(self.ledger_end_index if self._checkpoint is None
                               else min(max(self._checkpoint.end_index, before_begin_index),
                                        self.ledger_end_index))
        return before_begin_index + 1

    # =====================================================================================
    # durability
    # =====================================================================================
    def _announce_begin(self, before_begin_index: int, before_begin_term: int, committed: int) -> None:
        """Write the checkpoint with a new begin before any file changes: an open after a crash
        in the middle of the prefix removal finishes it (see ``load``)."""
        cp = self._checkpoint
        self._checkpoint = Checkpoint(cp.end_index if cp is not None else -1,
                                      min(committed, self.ledger_end_index),
                                      before_begin_index, before_begin_term)
        write_checkpoint(self.store_dir, self._checkpoint)

    def flush(self, *, checkpoint: bool = True) -> None:
        """Make every appended entry durable (msync data, then index), then write the checkpoint."""
        self._check_open()
        if self.read_only:
            return
        end = self.ledger_end_index
        self.data_list.flush(0)
        self.index_list.flush(0)
        if checkpoint and (self._checkpoint is None or self._checkpoint.end_index != end
                           or self._checkpoint.committed_index != self.committed_index):
            self._write_checkpoint(end)

    def flush_if_due(self, now_ms: float) -> bool:
        """The periodic flush of ``page_cache`` mode, driven by the caller's clock.

        msyncs every ``flush_interval_ms`` (Java's FlushDataService period, 10 ms) and writes the
        checkpoint every ``checkpoint_interval_ms``. With ``background_flush`` the msyncs run on
        the flush thread and their result is taken in on a later call. Returns True when it
        flushed or started a flush.
        """
        if self.read_only or self.closed:
            return False
        self._reap_flush_job()
        if self._last_flush_ms is not None and now_ms - self._last_flush_ms < self.flush_interval_ms:
            return False
        if self._flush_job is not None:  # the previous one is still syncing
            return False
        self._last_flush_ms = now_ms
        due = self._last_checkpoint_ms is None or now_ms - self._last_checkpoint_ms >= self.checkpoint_interval_ms
        if due:
            self._last_checkpoint_ms = now_ms
        if self.background_flush and self._start_flush_job(due):
            return True
        self.flush(checkpoint=due)
        return True

    def _start_flush_job(self, checkpoint: bool) -> bool:
        ranges = [(f, f.flushed_position, f.wrote_position)
                  for lst in (self.data_list, self.index_list) for f in lst.files
                  if f.flushed_position < f.wrote_position]
        if not all(bg_flush.can_sync(f) for f, _s, _e in ranges):
            return False
        if not ranges and not checkpoint:
            return True
        self._flush_job = bg_flush.FlushJob(ranges, self.ledger_end_index, self._cut_epoch, checkpoint)
        bg_flush.submit(self._flush_job)
        return True

    def _reap_flush_job(self, wait: bool = False) -> None:
        job = self._flush_job
        if job is None or not (job.done.is_set() or (wait and job.done.wait(60))):
            return
        self._flush_job = None
        if job.error is not None or job.epoch != self._cut_epoch:
            if job.error is not None and job.epoch == self._cut_epoch:
                log.error("store %s: background flush failed: %s", self.store_dir, job.error)
            return
        for f, _start, end in job.ranges:
            if f.mm is not None and f.flushed_position < end <= f.wrote_position:
                f.flushed_position = end
        self.data_list.update_flushed_where()
        self.index_list.update_flushed_where()
        cp = self._checkpoint
        if job.checkpoint and (cp is None or job.end_index > cp.end_index or (
                job.end_index == cp.end_index and cp.committed_index != min(self.committed_index, job.end_index))):
            self._write_checkpoint(job.end_index)

    def _write_checkpoint(self, end_index: int) -> None:
        if self.read_only:
            return
        cp = Checkpoint(end_index, min(self.committed_index, end_index),
                        self.ledger_before_begin_index, self.ledger_before_begin_term)
        write_checkpoint(self.store_dir, cp)
        self._checkpoint = cp

    def close(self) -> None:
        """Flush (unless read-only) and unmap everything. Idempotent."""
        if self.closed:
            return
        if self._flush_job is not None:
            self._reap_flush_job(wait=True)
        if self.loaded and not self.read_only:
            self.flush()
        self.data_list.close()
        self.index_list.close()
        self.closed = True

    shutdown = close

    def __enter__(self) -> "DLedgerMmapFileStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # =====================================================================================
    # cleaning and disk-full guard (SPEC §2.8), driven by the caller's clock
    # =====================================================================================
    def _disk_ratio(self, path: str) -> float:
        if not os.path.exists(path):
            return -1.0
        usage = self._disk_usage(path)
        used, free = usage[1], usage[2]
        entire = used + free
        if entire <= 0:
            return -1.0
        return -(-used * 100 // entire) / 100

    def clean(self, now: float | None = None) -> int:
        """One pass of expired-file cleaning; updates ``is_disk_full``. Returns files deleted.

        ``now`` is wall-clock seconds since the epoch (file ages are file modification times).
        A data segment is deleted only if it is not the last one, it is expired (or space is
        short and force cleaning is on), and every entry in it is committed.
        """
        self._check_open()
        if self.read_only:
            return 0
        now = time.time() if now is None else now
        base_ratio = self._disk_ratio(self.store_dir)
        data_ratio = self._disk_ratio(self.data_path)
        self.is_disk_full = base_ratio > self.disk_full_ratio or data_ratio > self.disk_full_ratio
        time_up = time.localtime(now).tm_hour in self.delete_when
        check_expired = max(base_ratio, data_ratio) > self.ratio_check_expired
        force = max(base_ratio, data_ratio) > self.ratio_force_clean and self.enable_disk_force_clean
        if not (time_up or check_expired):
            return 0
        deleted = 0
        while deleted < 10 and len(self.data_list.files) > 1:
            first, second = self.data_list.files[0], self.data_list.files[1]
            expired = os.path.getmtime(first.path) + self.file_reserved_hours * 3600 <= now
            if not (expired or force):
                break
            next_first = self._first_index_in(second)
            if next_first is None or next_first - 1 > self.committed_index:
                break
            self._announce_begin(next_first - 1, self.get_entry_term(next_first - 1), self.committed_index)
            self._cut_epoch += 1
            self.data_list.delete_first_file()
            deleted += 1
            log.info("deleted expired data segment %s", first.path)
        if deleted:
            self._revise_before_begin()
            self._write_checkpoint(self.ledger_end_index if self._checkpoint is None
                                   else self._checkpoint.end_index)
        return deleted

    def _first_index_in(self, f: MmapFile) -> int | None:
        off = f.start_position
        while off + BODY_OFFSET <= f.wrote_position:
            magic, size = MAGIC_SIZE.unpack_from(f.mm, off)
            if magic == MAGIC_BLANK and size >= MIN_BLANK_LEN:
                off += size
                continue
            try:
                return decode_header(f.mm, off, limit=f.wrote_position)[2]
            except CorruptEntryError:
                return None
        return None

    def _revise_before_begin(self) -> None:
        """Set the begin index from the first data record and blank the index before it."""
        self.data_list.check_first_file_all_blank()
        if not self.data_list.files:
            return
        first = self._first_index_in(self.data_list.files[0])
        if first is None:
            return
        if first - 1 != self.ledger_before_begin_index:
            self.ledger_before_begin_index = first - 1
            if self.ledger_before_begin_index >= 0 and self.ledger_end_index >= first - 1:
                self.ledger_before_begin_term = self._before_begin_term_hint(first - 1)
        if not self.read_only and self.index_list.files and \
                self.index_list.min_offset() < first * INDEX_UNIT_SIZE <= self.index_list.max_wrote_position():
            self.index_list.reset_offset(first * INDEX_UNIT_SIZE)

    def _before_begin_term_hint(self, before_begin: int) -> int:
        """Term of the before-begin index: from its index unit if still there, else the checkpoint."""
        try:
            pos = before_begin * INDEX_UNIT_SIZE
            f = self.index_list.find_file(pos)
            if f is not None and pos - f.file_from_offset >= f.start_position:
                unit = IndexUnit._make(INDEX_UNIT.unpack_from(f.mm, pos - f.file_from_offset))
                if unit.index == before_begin:
                    return unit.term
        except Exception:  # pragma: no cover - defensive: damaged unit
            pass
        cp = self._checkpoint
        if cp is not None and cp.before_begin_index == before_begin:
            return cp.before_begin_term
        return -1

    # =====================================================================================
    # recovery
    # =====================================================================================
    def load(self) -> "DLedgerMmapFileStore":
        """Open the directory and recover it (see the module docstring)."""
        if self.loaded:
            return self
        from dledger.store.recovery import recover  # one concept per module
        if not self.read_only:
            os.makedirs(self.store_dir, exist_ok=True)
        self.term_file.load()
        self.data_list.load()
        self.index_list.load()
        recover(self)
        self.loaded = True
        if (self._checkpoint is None and not self.read_only and not self.data_list.files
                and self.ledger_end_index < 0 and self.ledger_before_begin_index < 0):
            # A new store starts with a checkpoint: from then on a missing one means a store
            # of another origin (or a lost file), and recovery stays on the safe side.
            self._write_checkpoint(-1)
        cp = self._checkpoint
        if cp is not None and cp.before_begin_index > self.ledger_before_begin_index:
            # A reset was interrupted after announcing its new begin: finish it.
            log.warning("store %s: finishing an interrupted reset to %d", self.store_dir,
                        cp.before_begin_index)
            if self.read_only:
                self.ledger_before_begin_index = cp.before_begin_index
                self.ledger_before_begin_term = cp.before_begin_term
                if self.ledger_end_index < cp.before_begin_index:
                    self.ledger_end_index, self.ledger_end_term = cp.before_begin_index, cp.before_begin_term
            else:
                self.reset(cp.before_begin_index, cp.before_begin_term)
        if self.durability == FSYNC and not self.read_only:
            # Appends sync only their own bytes; what a crashed process left unsynced before
            # them must be durable first.
            self.data_list.flush(0)
            self.index_list.flush(0)
        if self.ledger_end_index >= 0 and self.term_file.term < self.ledger_end_term:
            if self.term_file.existed:
                log.warning("term file says term %d below the last entry's term %d; raising it",
                            self.term_file.term, self.ledger_end_term)
            if not self.read_only:
                self.term_file.save(self.ledger_end_term, None)
            else:
                self.term_file.term = self.ledger_end_term
        self._written_from = self.ledger_end_index + 1
        return self

    def __repr__(self) -> str:
        return (f"DLedgerMmapFileStore({self.store_dir!r}, begin={self.ledger_before_begin_index + 1}, "
                f"end={self.ledger_end_index}, term={self.ledger_end_term})")
