"""The periodic msync of ``page_cache`` mode, on a background thread and off the GIL.

Python's ``mmap.flush`` holds the GIL while the kernel writes the pages to disk (17-20 % of the
event loop's time in the in-process cluster benchmark). Java DLedger flushes on its own
``FlushDataService`` thread; this module is that thread (a ``ThreadPoolExecutor`` of one
worker; each job's future tells the store when it is through). The store hands it a *job*: the
ranges to sync, in log order (data segments, then index segments), and the end index they
cover. The thread calls ``msync`` through ctypes, which releases the GIL.

Rules that keep the checkpoint's promise (everything up to ``endIndex`` was synced):
- the store's bookkeeping (flushed positions, the checkpoint) is updated only on the store's
  own thread, when it reaps a finished job (``DLedgerMmapFileStore.flush_if_due``);
- a job that a truncation, a reset or a segment deletion overtook (the store's *cut epoch*
  moved) is discarded: its ranges may no longer hold what the end index says;
- a job whose msync failed (or whose thread raised) fails the store, overtaken or not: what
  the disk holds is unknown from then on (``flusher.py``);
- only plain ``mmap.mmap`` mappings are synced here; anything else (an instrumented mapping in
  tests) is synced through its own ``flush`` on the store's thread, as before.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from dledger.store import page_warmer
from dledger.store.mmap_file import PAGE_MASK

log = logging.getLogger(__name__)

MS_SYNC = 4

supported = False
_libc = page_warmer.libc
if _libc is not None:
    try:
        _libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _libc.msync.restype = ctypes.c_int
        supported = True
    except AttributeError:  # pragma: no cover - unusual libc
        supported = False


@dataclass(slots=True)
class FlushJob:
    ranges: list          # (MmapFile, start, end), data segments first, then index segments
    end_index: int        # every entry up to here lies in the ranges (or was synced before)
    epoch: int            # the store's cut epoch when the job was made
    checkpoint: bool      # write the checkpoint when reaped
    future: Future | None = None   # set by ``submit``; done when the flush thread is through
    error: str | None = None       # an msync failed: the store fails (see ``flusher.py``)
    stale: bool = False            # a segment was closed under the job: it is dropped

    def finished(self) -> bool:
        return self.future is not None and self.future.done()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the flush thread to finish the job; False on timeout."""
        try:
            self.future.exception(timeout)
        except TimeoutError:
            return False
        return True

    def failure(self) -> str | None:
        """Why the job did not sync everything (None: it did). Only once ``finished``."""
        exc = self.future.exception()
        return self.error if exc is None else f"flush thread failed: {exc!r}"


def can_sync(f) -> bool:
    return supported and f._addr is not None and type(f.mm) is mmap.mmap


def _run(job: FlushJob) -> None:
    for f, start, end in job.ranges:
        if f.mm is None:  # closed meanwhile: the job is stale anyway
            job.stale = True
            return
        aligned = start & PAGE_MASK
        if _libc.msync(f._addr + aligned, end - aligned, MS_SYNC) != 0:
            job.error = f"msync of {f.path} failed: errno {ctypes.get_errno()}"
            return


_executor: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def submit(job: FlushJob) -> None:
    """Hand ``job`` to the flush thread (one worker: jobs run in the order submitted)."""
    global _executor
    if _executor is None:
        with _lock:
            if _executor is None:
                _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dledger-flush")
    job.future = _executor.submit(_run, job)
