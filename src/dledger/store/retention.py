"""Retention: deleting expired data segments, and the disk-full guard (``clean(now)``).

Part of ``DLedgerMmapFileStore`` (see ``mmap_file_store.py``), as a mixin over the store's
state: it deletes head segments of ``data_list``, moves the begin (``ledger_before_begin_*``),
``is_disk_full`` and ``_cut_epoch``, and writes the checkpoint through ``Flusher``. Java
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

from dledger.entry import INDEX_UNIT_SIZE
from dledger.store.mmap_file_list import first_index_in, read_index_unit
from dledger.store.store_io import writes_to_disk

log = logging.getLogger(__name__)


class Retention:
    """Cleaning of the file store (mixin of ``DLedgerMmapFileStore``)."""

    def _disk_ratio(self, path: str) -> float:
        if not os.path.exists(path):
            return -1.0
        usage = self._disk_usage(path)   # shutil.disk_usage's (total, used, free)
        used, free = usage[1], usage[2]
        entire = used + free
        if entire <= 0:
            return -1.0
        return -(-used * 100 // entire) / 100

    @writes_to_disk("clean")
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
            next_first = first_index_in(second)
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

    def _revise_before_begin(self) -> None:
        """Set the begin index from the first data record and blank the index before it."""
        self.data_list.check_first_file_all_blank()
        if not self.data_list.files:
            return
        first = first_index_in(self.data_list.files[0])
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
        unit = read_index_unit(self.index_list, before_begin)
        if unit is not None and unit.index == before_begin:
            return unit.term
        cp = self._checkpoint
        if cp is not None and cp.before_begin_index == before_begin:
            return cp.before_begin_term
        return -1
