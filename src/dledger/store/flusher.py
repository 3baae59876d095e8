"""Flusher: making the file store durable: ``flush``, the periodic ``flush_if_due``, the checkpoint.

A part of ``DLedgerMmapFileStore`` (see ``mmap_file_store.py``): it holds the store's shared
state (``state.StoreState``), syncs its ``data_list`` and ``index_list`` and writes its
``checkpoint``; it owns the background flush job and the flush clocks. ``put_checkpoint`` is
the one place the checkpoint file is written (a simulated disk replaces it to refuse writes).

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
first failure (``StoreState.fail``), and every later append, ``flush`` and ``flush_if_due`` raises
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
  entries than it could, which recovery validates from there. The in-memory ``checkpoint``
  stays the one on disk, so the next due write retries it, and the caller gets
  ``DLedgerError(DISK_FULL)``. A cut whose crash safety needs the checkpoint written first
  (``truncate``: stop vouching for the doomed entries; ``announce_begin``: a new begin) is
  then refused before it touches any file;
- anything else (``EIO``) fails the store like a failed msync (``DISK_ERROR``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from dledger.errors import DISK_ERROR, DLedgerError
from dledger.store import background_flush as bg_flush
from dledger.store.checkpoint import Checkpoint, write_checkpoint
from dledger.store.durability import PAGE_CACHE
from dledger.store.mmap_file_list import read_index_unit
from dledger.store.options import StoreOptions
from dledger.store.state import StoreState
from dledger.store.term_file import disk_error_code

log = logging.getLogger(__name__)


class Flusher:
    """Flushing and checkpointing of the file store (a part of ``DLedgerMmapFileStore``)."""

    def __init__(self, state: StoreState, options: StoreOptions) -> None:
        self.state = state
        self.flush_interval_ms = options.flush_interval_ms
        self.checkpoint_interval_ms = options.checkpoint_interval_ms
        #: page_cache mode: periodic msyncs run on the flush thread (see background_flush.py)
        self.background_flush = (options.background_flush and options.durability is PAGE_CACHE
                                 and bg_flush.supported)
        self.flush_job: bg_flush.FlushJob | None = None
        #: page out synced pages this far behind each list's end (see ``background_flush.py``)
        self.release_pages_behind = options.release_pages_behind
        self.last_flush_ms: float | None = None
        self.last_checkpoint_ms: float | None = None
        #: writes a checkpoint to the checkpoint file (raises ``OSError``); the one place that
        #: does. A simulated disk wraps it; ``write_checkpoint_file`` is the plain writer.
        self.put_checkpoint: Callable[[Checkpoint], None] = self.write_checkpoint_file

    def write_checkpoint_file(self, cp: Checkpoint) -> None:
        """Write ``cp`` to the checkpoint file (tmp + fsync + rename; raises ``OSError``)."""
        write_checkpoint(self.state.store_dir, cp)

    def announce_begin(self, before_begin_index: int, before_begin_term: int, committed: int) -> None:
        """Write the checkpoint with a new begin before any file changes: an open after a crash
        in the middle of the prefix removal finishes it (see ``load``)."""
        cp = self.state.checkpoint
        self.store_checkpoint(Checkpoint(cp.end_index if cp is not None else -1,
                                         min(committed, self.state.ledger_end_index),
                                         before_begin_index, before_begin_term))

    def store_checkpoint(self, cp: Checkpoint) -> None:
        """Write ``cp`` and make it the store's checkpoint; a refused write raises
        ``DLedgerError`` (see the module docstring) and leaves ``checkpoint`` as it was."""
        st = self.state
        try:
            self.put_checkpoint(cp)
        except OSError as exc:
            code = disk_error_code(exc)
            if code == DISK_ERROR:
                raise st.sync_failed("checkpoint write", exc) from exc
            log.warning("store %s: checkpoint (endIndex %d) not written, the previous one stays: %s",
                        st.store_dir, cp.end_index, exc)
            raise DLedgerError(f"store {st.store_dir}: checkpoint not written: {exc}", code) from exc
        st.checkpoint = cp

    def flush(self, *, checkpoint: bool = True) -> None:
        """Make every appended entry durable (msync data, then index), then write the checkpoint."""
        st = self.state
        st.check_open()
        if st.read_only:
            return
        st.check_not_failed()
        end = st.ledger_end_index
        try:
            st.data_list.flush(0)
            st.index_list.flush(0)
        except OSError as exc:
            raise st.sync_failed("msync", exc) from exc
        cp = st.checkpoint
        if checkpoint and (cp is None or cp.end_index != end or cp.committed_index != st.committed_index):
            self.write_checkpoint(end)

    def flush_if_due(self, now_ms: float) -> bool:
        """The periodic flush of ``page_cache`` mode, driven by the caller's clock.

        msyncs every ``flush_interval_ms`` (Java's FlushDataService period, 10 ms) and writes the
        checkpoint every ``checkpoint_interval_ms``. With ``background_flush`` the msyncs run on
        the flush thread and their result is taken in on a later call. Returns True when it
        flushed or started a flush.
        """
        st = self.state
        if st.read_only or st.closed:
            return False
        self.reap_flush_job()
        st.check_not_failed()
        if self.last_flush_ms is not None and now_ms - self.last_flush_ms < self.flush_interval_ms:
            return False
        if self.flush_job is not None:  # the previous one is still syncing
            return False
        self.last_flush_ms = now_ms
        due = self.last_checkpoint_ms is None or now_ms - self.last_checkpoint_ms >= self.checkpoint_interval_ms
        if due:
            self.last_checkpoint_ms = now_ms
        if self.background_flush and self._start_flush_job(due):
            return True
        self.flush(checkpoint=due)
        return True

    def _start_flush_job(self, checkpoint: bool) -> bool:
        st = self.state
        ranges = [(f, f.flushed_position, f.wrote_position)
                  for lst in (st.data_list, st.index_list) for f in lst.files
                  if f.flushed_position < f.wrote_position]
        if not all(bg_flush.can_sync(f) for f, _s, _e in ranges):
            return False
        if not ranges and not checkpoint:
            return True
        self.flush_job = bg_flush.FlushJob(ranges, st.ledger_end_index, st.cut_epoch, checkpoint)
        for lst in (st.data_list, st.index_list):
            bg_flush.release_ranges(lst, self.release_pages_behind, self.flush_job.release)
        bg_flush.submit(self.flush_job)
        return True

    def reap_flush_job(self, wait: bool = False) -> None:
        """Take in the background flush job's result once it finished (``wait``: wait for it)."""
        job = self.flush_job
        if job is None or not (job.finished() or (wait and job.wait(60))):
            return
        self.flush_job = None
        st = self.state
        error = job.failure()
        if error is not None:
            # Even a job a cut overtook: the pages it failed to write may hold entries the
            # cut kept, and nothing tells which.
            st.fail(f"background flush failed: {error}")
            return
        if job.stale or job.epoch != st.cut_epoch:
            return
        for f, _start, end in job.ranges:
            if f.mm is not None and f.flushed_position < end <= f.wrote_position:
                f.flushed_position = end
        st.data_list.update_flushed_where()
        st.index_list.update_flushed_where()
        cp = st.checkpoint
        if job.checkpoint and (cp is None or job.end_index > cp.end_index or (
                job.end_index == cp.end_index and cp.committed_index != min(st.committed_index, job.end_index))):
            self.write_checkpoint(job.end_index)

    def write_checkpoint(self, end_index: int) -> None:
        """The checkpoint, with the term and position of entry ``end_index`` so that recovery
        can check it against the files (see checkpoint.py). A failed store writes none: it
        can vouch for nothing."""
        st = self.state
        if st.read_only or st.failed is not None:
            return
        end_term = end_pos = None
        if end_index > st.ledger_before_begin_index:
            unit = st.index_overrides.get(end_index) or read_index_unit(st.index_list, end_index)
            if unit is not None and unit.index == end_index:
                end_term, end_pos = unit.term, unit.pos
        self.store_checkpoint(Checkpoint(end_index, min(st.committed_index, end_index),
                                         st.ledger_before_begin_index, st.ledger_before_begin_term,
                                         end_term, end_pos))
