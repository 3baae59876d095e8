"""Flusher: making the file store durable: ``flush``, the periodic ``flush_if_due``, the checkpoint.

Part of ``DLedgerMmapFileStore`` (see ``mmap_file_store.py``), as a mixin over the store's state:
it syncs ``data_list`` and ``index_list``, and owns ``_checkpoint``, ``_flush_job`` and the
flush clocks (``_last_flush_ms``, ``_last_checkpoint_ms``).

Rules:
- ``flush`` msyncs data, then index, and only then writes the checkpoint: the checkpoint's
  ``endIndex`` never names an entry whose bytes were not synced;
- ``flush_if_due(now_ms)`` is driven by the caller's clock (Java's FlushDataService period);
  with ``background_flush`` the msyncs run on the flush thread (``background_flush.py``) and
  their result is taken in on a later call, on the store's own thread; a job overtaken by a
  cut (the cut epoch moved) is dropped;
- ``_announce_begin`` writes a new begin to the checkpoint before a prefix removal touches
  any file.

Fail-stop on a failed sync: when an msync fails (``OSError``, e.g. ``EIO``: in ``flush``, in
``flush_if_due``, in the flush thread's job, or in the sync of an ``fsync``-mode append),
what is on disk is unknown from then on: the kernel may have dropped the dirty pages, so a
later msync that succeeds proves nothing. The store is then *failed*: ``failed`` names the
first failure, and every later append, ``flush`` and ``flush_if_due`` raises
``DLedgerError(DISK_ERROR)`` naming it; no checkpoint is written any more. Reads go on. Only
a new store object (the process restarts; recovery reads what the disk really holds) clears
it. A sync is never retried into a false success. Every msync of a cut (the index erase, the
zeroed header) follows the same rule (``cut.py``), and so does any other I/O error on a write
path (a repair's rewrite, cleaning, a segment's creation): every write entry point goes through
``store_io.writes_to_disk``, which fails the store on whatever the handlers here do not catch
and refuses every write of a failed store at the door.

A checkpoint write the disk refuses (``write_checkpoint`` raised ``OSError``; the previous
checkpoint file is still in place, since the write is tmp + fsync + rename):
- a full disk (``ENOSPC``/``EDQUOT``) is harmless: the checkpoint on disk names fewer
  entries than it could, which recovery validates from there. The in-memory ``_checkpoint``
  stays the one on disk, so the next due write retries it, and the caller gets
  ``DLedgerError(DISK_FULL)``. A cut whose crash safety needs the checkpoint written first
  (``truncate``: stop vouching for the doomed entries; ``_announce_begin``: a new begin) is
  then refused before it touches any file;
- anything else (``EIO``) fails the store like a failed msync (``DISK_ERROR``).
"""

from __future__ import annotations

import logging

from dledger.errors import DISK_ERROR, DLedgerError
from dledger.store import background_flush as bg_flush
from dledger.store.checkpoint import Checkpoint, write_checkpoint
from dledger.store.mmap_file_list import read_index_unit
from dledger.store.suspect import BOOT_FILE_NAME, remove_file_durably
from dledger.store.store_io import writes_to_disk
from dledger.store.term_file import disk_error_code

log = logging.getLogger(__name__)


class Flusher:
    """Flushing and checkpointing of the file store (mixin of ``DLedgerMmapFileStore``)."""

    #: None while every sync succeeded; else why the store failed (see the module docstring)
    failed: str | None = None

    def _fail(self, reason: str) -> None:
        """Mark the store failed (the first reason is kept)."""
        if self.failed is None:
            self.failed = reason
            log.error("store %s failed, it acknowledges nothing more until reopened: %s",
                      self.store_dir, reason)
            if not self.read_only:
                # the kernel may drop the pages a failed sync did not write: this boot's page
                # cache vouches for nothing more (the next open is suspect unless clean)
                try:
                    remove_file_durably(self.store_dir, BOOT_FILE_NAME)
                except OSError as exc:
                    log.error("store %s: cannot remove the boot marker after the failure: %s", self.store_dir, exc)

    def _check_not_failed(self) -> None:
        if self.failed is not None:
            raise DLedgerError(f"store {self.store_dir} failed ({self.failed}); reopen it", DISK_ERROR)

    def _sync_failed(self, what: str, exc: OSError) -> DLedgerError:
        """An msync raised: fail the store; the error to raise to the caller."""
        self._fail(f"{what} failed: {exc}")
        return DLedgerError(f"store {self.store_dir} failed ({self.failed}); reopen it", DISK_ERROR)

    def _announce_begin(self, before_begin_index: int, before_begin_term: int, committed: int) -> None:
        """Write the checkpoint with a new begin before any file changes: an open after a crash
        in the middle of the prefix removal finishes it (see ``load``)."""
        cp = self._checkpoint
        self._store_checkpoint(Checkpoint(cp.end_index if cp is not None else -1,
                                          min(committed, self.ledger_end_index),
                                          before_begin_index, before_begin_term))

    def _put_checkpoint(self, cp: Checkpoint) -> None:
        """Write ``cp`` to the checkpoint file (the one place that does; raises ``OSError``)."""
        write_checkpoint(self.store_dir, cp)

    def _store_checkpoint(self, cp: Checkpoint) -> None:
        """Write ``cp`` and make it the store's checkpoint; a refused write raises
        ``DLedgerError`` (see the module docstring) and leaves ``_checkpoint`` as it was."""
        try:
            self._put_checkpoint(cp)
        except OSError as exc:
            code = disk_error_code(exc)
            if code == DISK_ERROR:
                raise self._sync_failed("checkpoint write", exc) from exc
            log.warning("store %s: checkpoint (endIndex %d) not written, the previous one stays: %s",
                        self.store_dir, cp.end_index, exc)
            raise DLedgerError(f"store {self.store_dir}: checkpoint not written: {exc}", code) from exc
        self._checkpoint = cp

    @writes_to_disk("flush")
    def flush(self, *, checkpoint: bool = True) -> None:
        """Make every appended entry durable (msync data, then index), then write the checkpoint."""
        self._check_open()
        if self.read_only:
            return
        self._check_not_failed()
        end = self.ledger_end_index
        try:
            self.data_list.flush(0)
            self.index_list.flush(0)
        except OSError as exc:
            raise self._sync_failed("msync", exc) from exc
        if checkpoint and (self._checkpoint is None or self._checkpoint.end_index != end
                           or self._checkpoint.committed_index != self.committed_index):
            self._write_checkpoint(end)

    @writes_to_disk("flush")
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
        self._check_not_failed()
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
        if job is None or not (job.finished() or (wait and job.wait(60))):
            return
        self._flush_job = None
        error = job.failure()
        if error is not None:
            # Even a job a cut overtook: the pages it failed to write may hold entries the
            # cut kept, and nothing tells which.
            self._fail(f"background flush failed: {error}")
            return
        if job.stale or job.epoch != self._cut_epoch:
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
        """The checkpoint, with the term and position of entry ``end_index`` so that recovery
        can check it against the files (see checkpoint.py). A failed store writes none: it
        can vouch for nothing."""
        if self.read_only or self.failed is not None:
            return
        end_term = end_pos = None
        if end_index > self.ledger_before_begin_index:
            unit = self._index_overrides.get(end_index) or read_index_unit(self.index_list, end_index)
            if unit is not None and unit.index == end_index:
                end_term, end_pos = unit.term, unit.pos
        self._store_checkpoint(Checkpoint(end_index, min(self.committed_index, end_index),
                                          self.ledger_before_begin_index, self.ledger_before_begin_term,
                                          end_term, end_pos))

