"""DLedgerMmapFileStore: the Raft log on disk (data + index segment lists, term file, checkpoint).

Layout of a store directory (docs/format.md)::

    <dir>/data/<20-digit offset>   data segments (entries, blank padding)
    <dir>/index/<20-digit offset>  index segments (32-byte units, unit k at byte k*32)
    <dir>/currterm                 term and vote (TermFile)
    <dir>/checkpoint               endIndex / committedIndex (+ beforeBegin*) (Checkpoint)
    <dir>/membership               the configuration at the log's start (MembershipFile)

This module is the façade: it builds the store's shared state (``state.StoreState``: the two
segment lists, the term file, the bounds, the checkpoint, the failed flag) from its settings
(``options.StoreOptions``), then the parts that hold that state; it owns ``load`` (which
applies what ``recovery.recover`` planned), ``close`` and the term and suspect state. Its
public bounds (``ledger_end_index``, ``failed``, ...) are views of the shared state. The
behaviour is split by concern into parts, one module each, each holding that one state:

- ``log_writer.LogWriter``: leader and follower appends, the append hooks;
- ``log_reader.LogReader``: ``get``, ``get_raw``, ``get_raw_range``, terms, ``verify``;
- ``flusher.Flusher``: ``flush``, ``flush_if_due``, the checkpoint;
- ``retention.Retention``: ``clean`` (expired segments, the disk-full guard);
- ``cut.Cut``: ``truncate``, ``truncate_to_entry``, ``reset``;
- ``repair.Repair``: ``damaged``, ``repair`` (damaged entries, rewritten in place once proven).

The façade's write entry points carry the write gate (``store_io.writes_to_disk``) and
delegate to the parts. The per-entry hot paths gain no call layer: a gated append method calls
the writer's ``append_leader`` / ``append_follower`` (the loops themselves), and the reads are
the reader's own methods, bound on the store when it is built (``store.get`` is the bound
``LogReader.get``), not methods that forward to them.

Invariants kept by every mutation:
- entries ``ledger_before_begin_index < i <= ledger_end_index`` are contiguous, their terms do
  not decrease, index unit ``i`` names entry ``i``'s local position and size;
- an entry's ``pos`` field equals its local position: leaders stamp it, followers refuse a
  record whose ``pos`` differs from where it would land (replicas are byte-identical);
- ``body_crc`` is the CRC-32 of the final body (after append hooks) and is checked on every
  read; a record that fails a check is never returned. The one exception: ``get_raw_range``
  (the leader reading for a push) returns entries written through this object since ``load``
  unchecked, because every follower checks each pushed record, CRC included, before writing.

Recovery (``load``; the rules are in ``recovery.py`` and docs/format.md):
- the log up to the checkpoint's ``endIndex`` (flushed before the checkpoint was written) is
  trusted after one spot check, so restart time does not grow with the log;
- what follows is scanned record by record (header, chain of index/term, CRC, index unit);
  the first bad record there ends the log: a torn tail is truncated, never served;
- a bad record that is followed by intact entries is mid-log corruption, never truncated
  away: when its index unit locates it, the entry is kept and refused by reads until
  ``repair`` rewrites it from a peer's copy (``damaged()`` names it, with file and offset);
  otherwise the open stops with ``CorruptStoreError`` naming the file and offset
  (except in ``page_cache`` mode after a checkpoint: that tail was never promised durable; and
  in ``fsync`` mode when it shows bytes that never reached the disk: the append in flight at a
  power cut);
- the checkpoint is checked against the files (end entry's term and position, the chain of
  index units before it) and ignored when another writer changed the log;
- without a usable checkpoint the scan starts three segments from the end (as Java), or further
  back at a segment whose first record its index unit vouches for;
- damage inside the trusted prefix is found by ``get`` (and by ``verify``) and reported the
  same way, never served; the entry joins ``damaged()`` until repaired.

One writer per directory: a writable ``load`` takes ``store/lock.py``'s lock (released by
``close``, a refused open, or the holder's death). ``suspect`` / ``clear_suspect``: the durable
suspect state (``store/suspect.py``), decided in ``load`` before recovery changes anything.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from operator import attrgetter

from dledger.entry import INDEX_UNIT, INDEX_UNIT_SIZE, MAGIC_NORMAL, MAX_TERM, DLedgerEntry, decode_header
from dledger.errors import DISK_ERROR, DISK_FULL, INCONSISTENT_STATE, INCONSISTENT_TERM, CorruptStoreError, DLedgerError
from dledger.store.base import StoreBase
from dledger.store.checkpoint import CHECKPOINT_FILE_NAME
from dledger.store.cut import Cut
from dledger.store.durability import DURABILITY_MODES, FSYNC, PAGE_CACHE
from dledger.store.flusher import Flusher
from dledger.store.log_reader import LogReader
from dledger.store.membership_file import MembershipFile
from dledger.store.log_store import (DEFAULT_DATA_FILE_SIZE, DEFAULT_INDEX_FILE_SIZE,
                                     AppendBatchResult, AppendHook)
from dledger.store.log_writer import LogWriter
from dledger.store.lock import StoreLock
from dledger.store.mmap_file_list import (MmapFileList, erase_units_after_end,
                                          zero_header_at)
from dledger.store.options import StoreOptions
from dledger.store.recovery import RecoveredLog, recover
from dledger.store.repair import Repair
from dledger.store.retention import Retention
from dledger.store.state import StoreState
from dledger.store.store_io import LOCAL_IO, StoreIO, writes_to_disk
from dledger.store.suspect import (CLEAN_SHUTDOWN_FILE_NAME, SUSPECT_FILE_NAME, SuspectReason,
                                   clean_marker_exists, read_boot, read_suspect, remove_file_durably,
                                   write_boot, write_clean_marker, write_suspect)
from dledger.store.term_file import TermFile, disk_error_code

__all__ = ["AppendBatchResult", "AppendHook", "DEFAULT_DATA_FILE_SIZE", "DEFAULT_INDEX_FILE_SIZE",
           "DURABILITY_MODES", "DLedgerMmapFileStore", "FSYNC", "PAGE_CACHE", "StoreOptions"]

log = logging.getLogger(__name__)

def _shared(name: str, doc: str) -> property:
    """A field of the store's shared state (``StoreState``), seen as the store's own: read
    through a C-level getter (no Python frame: the core reads these often), set through it."""

    def put(self, value) -> None:
        setattr(self._state, name, value)

    return property(attrgetter(f"_state.{name}"), put, doc=doc)


class DLedgerMmapFileStore(StoreBase):
    """The file store. Construct, then ``load()`` (or use ``open()``), then append and read."""

    def __init__(self, store_dir: str, options: StoreOptions | None = None, *,
                 disk_usage: Callable[[str], tuple] = shutil.disk_usage, store_io: StoreIO = LOCAL_IO,
                 **settings) -> None:
        """``options``: the store's settings (``StoreOptions``); or give them as keywords
        (``data_file_size=...``, the fields of ``StoreOptions``), not both. ``disk_usage`` and
        ``store_io`` are the store's collaborators: how it measures the disk, how it maps
        and allocates segments."""
        if options is None:
            options = StoreOptions(**settings)
        elif settings:
            raise TypeError(f"give the store's settings as options or as keywords, not both "
                            f"(got options and {sorted(settings)})")
        elif not isinstance(options, StoreOptions):
            raise TypeError(f"options must be a StoreOptions, got {type(options).__name__}")
        o = self.options = options
        read_only = o.read_only
        self.store_dir = store_dir
        self.durability = o.durability
        self.read_only = read_only
        self.max_entry_size = o.entry_size_limit
        self.data_path = o.data_path or os.path.join(store_dir, "data")
        self.index_path = os.path.join(store_dir, "index")
        self.data_list = MmapFileList(self.data_path, o.data_file_size, read_only=read_only, io=store_io)
        self.index_list = MmapFileList(self.index_path, o.index_file_size, read_only=read_only, io=store_io)
        self._store_io = store_io
        self.term_file = TermFile(store_dir, read_only=read_only)
        #: the state every part shares (bounds, files, lifecycle): see state.py
        st = self._state = StoreState(store_dir, read_only=read_only, data_path=self.data_path,
                                      index_path=self.index_path, data_list=self.data_list,
                                      index_list=self.index_list, term_file=self.term_file)
        self._flusher = Flusher(st, o)
        reader = self._reader = LogReader(st)
        self._retention = Retention(st, self._flusher, o, disk_usage, reader.get_entry_term)
        self._cut = Cut(st, self._flusher, self, reader.index_unit)
        self._repair = Repair(st, self, reader.read_entry)
        self._writer = LogWriter(st, o, self._cut.truncate_index_to)
        # The reads are the reader's own methods, bound here: a read costs no call layer more
        # than a method of the store (a method forwarding to them would: docs/benchmarks.md).
        self.get = reader.get
        self.get_raw = reader.get_raw
        self.get_raw_range = reader.get_raw_range
        self.get_entry_term = reader.get_entry_term
        self.verify = reader.verify
        self.config_entries = reader.config_entries
        #: the configuration at the log's start (core.membership)
        self.membership = MembershipFile(store_dir)
        self._lock = StoreLock(store_dir, lambda: st.closed)
        self._suspect: SuspectReason | None = None

    ledger_before_begin_index = _shared("ledger_before_begin_index", "The index before the log's first entry.")
    ledger_before_begin_term = _shared("ledger_before_begin_term", "The term of ``ledger_before_begin_index``.")
    ledger_end_index = _shared("ledger_end_index", "The index of the log's last entry.")
    ledger_end_term = _shared("ledger_end_term", "The term of the log's last entry.")
    committed_index = _shared("committed_index", "The commit index (persisted with the checkpoint).")
    failed = _shared("failed", "None while every sync succeeded; else why the store failed (flusher.py).")
    is_disk_full = _shared("is_disk_full", "Appends are refused (``DISK_FULL``): set by ``clean``.")
    loaded = _shared("loaded", "``load`` completed.")
    closed = _shared("closed", "``close`` completed.")

    # -- reads: the reader part's own methods (log_reader.py), bound in __init__ ------------
    #: ``get(index)``: the entry at ``index``; ``CorruptStoreError`` (file, offset) if its
    #: bytes fail a check (the entry then joins ``damaged()`` until it is repaired)
    get: Callable[[int], DLedgerEntry]
    #: ``get_raw(index)``: the encoded record of ``index`` exactly as stored, checked
    get_raw: Callable[[int], bytes]
    #: ``get_raw_range(begin_index, max_bytes, max_count=1 << 30, *, checked=False)``: encoded
    #: records from ``begin_index`` on, up to ``max_bytes`` (at least one): ``(records, count)``
    get_raw_range: Callable[..., tuple[bytes, int]]
    #: ``get_entry_term(index)``: the term of ``index`` (``ledger_before_begin_term`` for the
    #: before-begin index)
    get_entry_term: Callable[[int], int]
    #: ``verify(progress=None)``: read and check every entry; the errors found
    verify: Callable[..., list[CorruptStoreError]]
    #: ``config_entries(first, last)``: the indexes of configuration entries in that range
    config_entries: Callable[[int, int], list[int]]

    @classmethod
    def open(cls, store_dir: str, options: StoreOptions | None = None, **kwargs) -> "DLedgerMmapFileStore":
        """Construct (same arguments as the constructor) and ``load()``."""
        store = cls(store_dir, options, **kwargs)
        store.load()
        return store

    # =====================================================================================
    # appends (the LogWriter part: log_writer.py)
    # =====================================================================================
    def add_append_hook(self, hook: AppendHook) -> None:
        """``hook(entry, record, body_offset)`` runs on the leader before a record is written.

        ``record`` is a writable view of the whole encoded record (index, term and pos already
        set); the hook may change body bytes in place. The CRC is computed afterwards, over the
        final body. The view is only valid during the call.
        """
        self._writer.add_append_hook(hook)

    @writes_to_disk("leader append")
    def append_as_leader(self, entry: DLedgerEntry) -> DLedgerEntry:
        """Append one entry as leader: index, term (the current term) and pos are assigned here.

        Returns the same entry with ``index``, ``term``, ``pos``, ``size``, ``body_crc`` set
        and ``body`` holding the bytes as written (after hooks).
        """
        self._writer.append_leader((entry.body,), entry.magic, [entry])
        return entry

    @writes_to_disk("leader append")
    def batch_append_as_leader(self, bodies: Sequence[bytes], magic: int = MAGIC_NORMAL) -> AppendBatchResult:
        """Append many bodies in one call (one fsync in ``fsync`` mode)."""
        return self._writer.append_leader(bodies, magic, None)

    @writes_to_disk("follower append")
    def batch_append_as_follower(self, records, leader_term: int, leader_id: str | None = None) -> int:
        """Append encoded records exactly as they lie in the leader's data file.

        ``records`` is a bytes-like object of consecutive records (blank records in it are
        skipped: this store writes its own padding, at the same places). Everything is checked
        before anything is written; a bad batch changes nothing. Returns the new end index.
        """
        try:
            return self._writer.append_follower(records, leader_term)
        except DLedgerError as exc:     # a stale pad, or an empty log placed elsewhere (Cut)
            if exc.code != INCONSISTENT_STATE or not records:
                raise
            first = decode_header(records)
            if not (self._cut.drop_trailing_pad(first.pos) or self._cut.place_empty_log(first.index, first.pos)):
                raise
        return self._writer.append_follower(records, leader_term)

    # =====================================================================================
    # term and vote
    # =====================================================================================
    @property
    def current_term(self) -> int:
        return self.term_file.term

    @property
    def vote_for(self) -> str | None:
        return self.term_file.vote_for

    @writes_to_disk("term file write")
    def persist_term(self, term: int, vote_for: str | None) -> None:
        """Make ``term``/``vote_for`` durable (returns only once they are)."""
        self._check_open()
        if term > MAX_TERM:
            raise DLedgerError(f"term {term} is beyond the largest term {MAX_TERM}", INCONSISTENT_TERM)
        if term < self.term_file.term:
            raise DLedgerError(f"term may not go backwards ({self.term_file.term} -> {term})",
                               INCONSISTENT_TERM)
        try:
            self.term_file.save(term, vote_for)
        except DLedgerError as exc:
            if exc.code == DISK_ERROR:          # not a full disk: what it holds is unknown
                self._state.fail(f"term file write failed: {exc}")
            raise

    # =====================================================================================
    # suspect state (see suspect.py)
    # =====================================================================================
    @property
    def suspect(self) -> SuspectReason | None:
        """Why this replica may have lost acknowledged entries or a vote (None: it has not)."""
        return self._suspect

    @writes_to_disk("suspect marker removal")
    def clear_suspect(self) -> None:
        """The replica caught up from a leader of the current term: drop the suspect state
        (durably: the marker file is removed and the directory fsynced). Idempotent."""
        self._check_open()
        if not self.read_only:
            remove_file_durably(self.store_dir, SUSPECT_FILE_NAME)
        self._suspect = None

    def _detect_suspect(self, found: RecoveredLog, *, had_clean: bool, had_checkpoint: bool,
                        had_data: bool, same_boot: bool = False) -> SuspectReason | None:
        tf = self.term_file
        if tf.damaged or (not tf.existed and (had_data or had_checkpoint)):
            return SuspectReason.TERM_LOST
        if found.lost_tail:
            return SuspectReason.LOST_TAIL
        if self.durability is PAGE_CACHE and not had_clean and not same_boot and (had_data or had_checkpoint):
            return SuspectReason.UNCLEAN_SHUTDOWN
        if not had_data and not had_checkpoint and not tf.existed and not self.index_list.files:
            return SuspectReason.FRESH
        return None

    def update_committed_index(self, index: int) -> None:
        """Record the commit index (persisted with the next checkpoint). Never goes backwards."""
        if index > self.committed_index:
            self.committed_index = min(index, self.ledger_end_index)

    # =====================================================================================
    # lifecycle
    # =====================================================================================
    def _check_open(self) -> None:
        self._state.check_open()

    # -- the failed state (StoreState; the write gate, store_io.writes_to_disk, calls these) --
    def _fail(self, reason: str) -> None:
        self._state.fail(reason)

    def _check_not_failed(self) -> None:
        self._state.check_not_failed()

    # =====================================================================================
    # flushing (the Flusher part: flusher.py)
    # =====================================================================================
    @writes_to_disk("flush")
    def flush(self, *, checkpoint: bool = True) -> None:
        """Make every appended entry durable (msync data, then index), then write the checkpoint."""
        self._flusher.flush(checkpoint=checkpoint)

    @writes_to_disk("flush")
    def flush_if_due(self, now_ms: float) -> bool:
        """The periodic flush of ``page_cache`` mode, driven by the caller's clock (msyncs every
        ``flush_interval_ms``, a checkpoint every ``checkpoint_interval_ms``; with
        ``background_flush`` on the flush thread). True when it flushed or started a flush."""
        return self._flusher.flush_if_due(now_ms)

    # =====================================================================================
    # cuts (the Cut part: cut.py)
    # =====================================================================================
    @writes_to_disk("truncate")
    def truncate(self, truncate_index: int) -> int:
        """Remove ``truncate_index`` and every later entry; returns the new end index.

        Refuses to remove a committed entry.
        """
        return self._cut.truncate(truncate_index)

    @writes_to_disk("truncate to entry")
    def truncate_to_entry(self, entry: DLedgerEntry, leader_term: int, leader_id: str | None = None) -> int:
        """Make ``entry`` the last entry, at ``entry.pos`` (the legacy TRUNCATE request of Java DLedger).

        Keeps a local copy equal to ``entry``; otherwise everything from ``entry.index`` on is
        dropped and ``entry`` is written. When ``entry.pos`` lies outside the local data, the
        store is rebuilt to start at ``entry`` (its before-begin index becomes ``index - 1``).
        """
        return self._cut.truncate_to_entry(entry, leader_term, leader_id)

    @writes_to_disk("reset")
    def reset(self, before_begin_index: int, before_begin_term: int, next_pos: int | None = None) -> int:
        """Drop the log prefix up to and including ``before_begin_index`` (after a snapshot).

        When the whole log goes, the log restarts empty after ``before_begin_index``; the next
        entry lands at ``next_pos`` when given (a follower installing the leader's snapshot),
        else where the old data ended. Returns the new begin index.
        """
        return self._cut.reset(before_begin_index, before_begin_term, next_pos)

    # =====================================================================================
    # damaged entries (the Repair part: repair.py)
    # =====================================================================================
    def damaged(self) -> dict[int, CorruptStoreError]:
        """Entries found damaged and not repaired yet (index -> the error naming file and
        offset), within the log's current range."""
        return self._repair.damaged()

    @writes_to_disk("repair")
    def repair(self, index: int, record: bytes | None = None, following: bytes | None = None) -> None:
        """Repair entry ``index``: its index unit from the local data (``record`` None), or its
        record from a peer's copy (see ``repair.py``); ``following`` is the same peer's record
        of entry ``index + 1``, read with it, a proof needed only when the local record and
        unit are both damaged. Raises ``RepairRefusedError`` and changes nothing when the
        repair cannot be proven right."""
        self._repair.repair(index, record, following)

    # =====================================================================================
    # retention (the Retention part: retention.py)
    # =====================================================================================
    @writes_to_disk("clean")
    def clean(self, now: float | None = None) -> int:
        """One pass of expired-file cleaning; updates ``is_disk_full``. Returns files deleted.

        ``now`` is wall-clock seconds since the epoch (file ages are file modification times).
        A data segment is deleted only if it is not the last one, it is expired (or space is
        short and force cleaning is on), and every entry in it is committed.
        """
        return self._retention.clean(now)

    @writes_to_disk("remove_prefix")
    def remove_prefix(self, upto: int) -> int:
        """Delete the head data segments whose entries are all committed and at or below
        ``upto`` (a snapshot covers them); never the last segment. Returns segments deleted."""
        return self._retention.remove_prefix(upto)

    @property
    def file_reserved_hours(self) -> float:
        return self._retention.file_reserved_hours

    @property
    def delete_when(self) -> set[int]:
        return self._retention.delete_when

    @property
    def background_flush(self) -> bool:
        """Do the periodic msyncs run on the flush thread?"""
        return self._flusher.background_flush

    @property
    def flush_interval_ms(self) -> int:
        return self._flusher.flush_interval_ms

    @property
    def checkpoint_interval_ms(self) -> int:
        return self._flusher.checkpoint_interval_ms

    def close(self) -> None:
        """Flush (unless read-only or failed) and unmap everything. Idempotent. It never raises
        for the disk: a flush or a clean-shutdown marker write that fails with an I/O error
        fails the store (logged; no marker, so the next open is suspect) and the close
        completes; a full disk only leaves the marker (or the last checkpoint) unwritten."""
        if self.closed:
            return
        if self._flusher.flush_job is not None:
            self._flusher.reap_flush_job(wait=True)
        try:
            # a failed store (a sync failed) can prove nothing durable: it closes without a
            # flush and without the clean-shutdown marker, so its next open is suspect
            if self.loaded and not self.read_only and self.failed is None:
                try:
                    self.flush()
                except DLedgerError as exc:
                    # a checkpoint the full disk refused (the data is synced, the previous
                    # checkpoint stays) or a failed msync (the store failed): close anyway
                    if exc.code != DISK_FULL and self.failed is None:
                        raise
                if self.failed is None:
                    self._write_clean_marker()
            self.data_list.close()
            self.index_list.close()
            self.closed = True
        finally:
            if self.closed:
                self._lock.release()

    shutdown = close

    def _write_clean_marker(self) -> None:
        try:
            write_clean_marker(self.store_dir)
        except OSError as exc:
            if disk_error_code(exc) == DISK_ERROR:
                self._state.fail(f"clean-shutdown marker write failed: {exc}")
            else:
                log.warning("store %s: no clean-shutdown marker, the disk is full: %s", self.store_dir, exc)

    def __enter__(self) -> "DLedgerMmapFileStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def load(self) -> "DLedgerMmapFileStore":
        """Open the directory and recover it (see the module docstring)."""
        if self.loaded:
            return self
        if not self.read_only:
            os.makedirs(self.store_dir, exist_ok=True)
            self._lock.acquire()
        try:
            return self._load()
        except BaseException as exc:
            # a refused open (or a process dying inside it) holds no lock and no mapping
            self.data_list.close()
            self.index_list.close()
            if not self.read_only:
                self._lock.release(undo=True)
            if isinstance(exc, OSError):
                # the disk failed under recovery (an msync, a term or checkpoint write): the
                # store refuses to open, as for damage; what it holds is read again next time
                raise DLedgerError(f"store {self.store_dir} cannot be opened, the disk failed: {exc}",
                                   DISK_FULL if exc.errno in (errno.ENOSPC, errno.EDQUOT) else DISK_ERROR) from exc
            raise

    def _load(self) -> "DLedgerMmapFileStore":
        d = self.store_dir
        had_clean = clean_marker_exists(d)
        boot_now = self._store_io.boot_id()
        boot_before = read_boot(d)
        # the last process died in this same boot: the page cache kept whatever it wrote
        same_boot = boot_now is not None and boot_before == boot_now
        had_checkpoint = os.path.exists(os.path.join(d, CHECKPOINT_FILE_NAME))
        self._suspect = read_suspect(d)
        self.term_file.load()
        self.data_list.load()
        self.index_list.load()
        had_data = bool(self.data_list.files)
        if not self.read_only:
            self.data_list.check_first_file_all_blank()
        tf = self.term_file
        found = recover(self.data_list, self.index_list, store_dir=d, data_path=self.data_path,
                        durability=self.durability, read_only=self.read_only,
                        current_term=tf.term if tf.existed and not tf.damaged else None,
                        page_cache_kept=same_boot and not had_clean)
        if self._suspect is None:
            self._suspect = self._detect_suspect(found, had_clean=had_clean, had_data=had_data,
                                                 had_checkpoint=had_checkpoint, same_boot=same_boot)
            if self._suspect is not None:
                # a new store is FRESH: expected, not worth a warning
                (log.info if self._suspect is SuspectReason.FRESH else log.warning)(
                    "store %s is suspect: %s", d, self._suspect.value)
                if not self.read_only:  # durable before recovery changes anything
                    write_suspect(d, self._suspect)
        if not self.read_only and boot_before != boot_now:
            write_boot(d, boot_now)             # after the suspect marker: it vouches from now on
        if had_clean and not self.read_only:
            remove_file_durably(d, CLEAN_SHUTDOWN_FILE_NAME)
        self._apply(found)
        self.loaded = True
        if (self._state.checkpoint is None and not self.read_only and not self.data_list.files
                and self.ledger_end_index < 0 and self.ledger_before_begin_index < 0):
            # A new store starts with a checkpoint: from then on a missing one means a store
            # of another origin (or a lost file), and recovery stays on the safe side. And with
            # a term file: from then on a missing one means a lost term (TERM_LOST).
            self._flusher.write_checkpoint(-1)
            if not self.term_file.existed and not self.term_file.damaged:
                self.term_file.save(0, None)
        cp = self._state.checkpoint
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
        if self.durability is FSYNC and not self.read_only:
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
        self._state.written_from = self.ledger_end_index + 1
        return self

    def _apply(self, found: RecoveredLog) -> None:
        """Make the store what recovery found, in a crash-safe order: rebuilt index units, the
        data cut (its head erased after a sync when torn), the begin, the index cut."""
        data, idx, read_only = self.data_list, self.index_list, self.read_only
        self._state.checkpoint = found.checkpoint
        self._state.damaged = dict(found.damaged)
        units = found.rebuilt_units
        if units and read_only:
            self._state.index_overrides.update((u.index, u) for u in units)
        elif units:
            target = units[0].index * INDEX_UNIT_SIZE
            if idx.files and idx.min_offset() <= target <= idx.max_wrote_position():
                idx.truncate_offset(target)
            else:
                idx.rebuild_with_pos(target)
            for u in units:
                idx.append(INDEX_UNIT.pack(*u), use_blank=False)
        # Nothing read back is known durable: after a process crash the page cache may still
        # hold what the dead process wrote and never synced. Every segment counts as unflushed,
        # so the next flush() syncs it in full before a checkpoint vouches for it.
        for f in data.files + idx.files:
            f.flushed_position = 0
        if data.files:
            if found.torn_tail and not read_only:
                data.flush(0)  # what precedes the cut must be durable before the cut is
                zero_header_at(data, found.data_end)
            data.truncate_offset(found.data_end)
        data.committed_where = data.max_wrote_position()
        data.flushed_where = data.min_offset()
        self.ledger_before_begin_index = found.before_begin_index
        self.ledger_before_begin_term = found.before_begin_term
        self.ledger_end_index, self.ledger_end_term = found.end_index, found.end_term
        begin = found.index_begin
        if begin is not None and not read_only and idx.files and \
                idx.min_offset() < begin <= idx.max_wrote_position():
            idx.reset_offset(begin)
        end_units = found.index_end
        if idx.files:
            if idx.min_offset() <= end_units <= idx.max_wrote_position():
                idx.truncate_offset(end_units)
            elif not read_only:
                idx.rebuild_with_pos(end_units)
        if not read_only:
            erased = erase_units_after_end(idx)
            if erased:
                log.warning("store %s: erased %d index units after the log's end", self.store_dir, erased)
        idx.committed_where = idx.max_wrote_position()
        idx.flushed_where = idx.min_offset()
        self.committed_index = found.committed_index

    def __repr__(self) -> str:
        return (f"DLedgerMmapFileStore({self.store_dir!r}, begin={self.ledger_before_begin_index + 1}, "
                f"end={self.ledger_end_index}, term={self.ledger_end_term})")
