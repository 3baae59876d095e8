"""Retention: deleting expired data segments, and the disk-full guard (``clean(now)``).

A part of ``DLedgerMmapFileStore`` (see ``mmap_file_store.py``): it holds the shared state
(``state.StoreState``), deletes head segments of its ``data_list``, moves the begin
(``ledger_before_begin_*``), ``is_disk_full`` and ``cut_epoch`` there, and writes the
checkpoint through the flusher part. Its settings come from ``StoreOptions``; ``disk_usage``
measures a disk (``shutil.disk_usage``'s ``(total, used, free)``; a test replaces it). Java
DLedger's CleanSpaceService, driven by the caller's clock.

Rules:
- a data segment is deleted only if it is not the last one, it is expired (or space is short
  and force cleaning is on), and every entry in it is committed;
- the new begin is announced in the checkpoint before the segment goes, and the cut epoch
  moves (a pending background flush job is dropped);
- an I/O error deleting a segment or writing the checkpoint fails the store
  (``store_io.writes_to_disk``);
- ``is_disk_full`` is set when either the store's or the data directory's disk passes
  ``disk_full_ratio``; appends then refuse with ``DISK_FULL``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from dledger.entry import INDEX_UNIT_SIZE
from dledger.store.flusher import Flusher
from dledger.store.mmap_file_list import first_index_in, read_index_unit
from dledger.store.options import StoreOptions
from dledger.store.state import StoreState

log = logging.getLogger(__name__)


class Retention:
    """Cleaning of the file store (a part of ``DLedgerMmapFileStore``)."""

    def __init__(self, state: StoreState, flusher: Flusher, options: StoreOptions,
                 disk_usage: Callable[[str], tuple], entry_term: Callable[[int], int]) -> None:
        self.state = state
        self.flusher = flusher
        self.disk_usage = disk_usage
        #: the term of an entry of the log (the store's ``get_entry_term``)
        self.entry_term = entry_term
        self.file_reserved_hours = options.reserved_hours
        self.delete_when = options.delete_hours
        self.ratio_check_expired = options.disk_space_ratio_to_check_expired
        self.ratio_force_clean = options.disk_space_ratio_to_force_clean
        self.disk_full_ratio = options.disk_full_ratio
        self.enable_disk_force_clean = options.enable_disk_force_clean

    def _disk_ratio(self, path: str) -> float:
        if not os.path.exists(path):
            return -1.0
        usage = self.disk_usage(path)   # shutil.disk_usage's (total, used, free)
        used, free = usage[1], usage[2]
        entire = used + free
        if entire <= 0:
            return -1.0
        return -(-used * 100 // entire) / 100

    def clean(self, now: float | None = None) -> int:
        """One pass of expired-file cleaning; updates ``is_disk_full``. Returns files deleted
        (see ``DLedgerMmapFileStore.clean``)."""
        st = self.state
        st.check_open()
        if st.read_only:
            return 0
        now = time.time() if now is None else now
        base_ratio = self._disk_ratio(st.store_dir)
        data_ratio = self._disk_ratio(st.data_path)
        st.is_disk_full = base_ratio > self.disk_full_ratio or data_ratio > self.disk_full_ratio
        time_up = time.localtime(now).tm_hour in self.delete_when
        check_expired = max(base_ratio, data_ratio) > self.ratio_check_expired
        force = max(base_ratio, data_ratio) > self.ratio_force_clean and self.enable_disk_force_clean
        if not (time_up or check_expired):
            return 0
        return self._delete_head(lambda first: force or
                                 os.path.getmtime(first.path) + self.file_reserved_hours * 3600 <= now,
                                 st.committed_index, "expired", limit=10)

    def remove_prefix(self, upto: int) -> int:
        """Delete the head segments whose entries are all at or below ``upto`` (and committed):
        a snapshot covers them. Returns the number of segments deleted; the begin moves to the
        first entry left (``upto`` or below: a segment holding an entry above it stays whole)."""
        st = self.state
        st.check_open()
        if st.read_only:
            return 0
        return self._delete_head(lambda first: True, min(upto, st.committed_index), "covered by a snapshot")

    def _delete_head(self, may_go, upto: int, why: str, limit: int | None = None) -> int:
        """Delete head data segments (never the last one) while ``may_go(segment)`` holds and
        every entry in the segment is at or below ``upto``."""
        st = self.state
        deleted = 0
        data = st.data_list
        while (limit is None or deleted < limit) and len(data.files) > 1:
            first, second = data.files[0], data.files[1]
            if not may_go(first):
                break
            next_first = first_index_in(second)
            if next_first is None or next_first - 1 > upto:
                break
            self.flusher.announce_begin(next_first - 1, self.entry_term(next_first - 1), st.committed_index)
            st.cut_epoch += 1
            data.delete_first_file()
            deleted += 1
            log.info("deleted data segment %s (%s)", first.path, why)
        if deleted:
            self._revise_before_begin()
            self.flusher.write_checkpoint(st.ledger_end_index if st.checkpoint is None
                                          else st.checkpoint.end_index)
        return deleted

    def _revise_before_begin(self) -> None:
        """Set the begin index from the first data record and blank the index before it."""
        st = self.state
        data, idx = st.data_list, st.index_list
        data.check_first_file_all_blank()
        if not data.files:
            return
        first = first_index_in(data.files[0])
        if first is None:
            return
        if first - 1 != st.ledger_before_begin_index:
            st.ledger_before_begin_index = first - 1
            if st.ledger_before_begin_index >= 0 and st.ledger_end_index >= first - 1:
                st.ledger_before_begin_term = self._before_begin_term_hint(first - 1)
        if not st.read_only and idx.files and \
                idx.min_offset() < first * INDEX_UNIT_SIZE <= idx.max_wrote_position():
            idx.reset_offset(first * INDEX_UNIT_SIZE)

    def _before_begin_term_hint(self, before_begin: int) -> int:
        """Term of the before-begin index: from its index unit if still there, else the checkpoint."""
        st = self.state
        unit = read_index_unit(st.index_list, before_begin)
        if unit is not None and unit.index == before_begin:
            return unit.term
        cp = st.checkpoint
        if cp is not None and cp.before_begin_index == before_begin:
            return cp.before_begin_term
        return -1
