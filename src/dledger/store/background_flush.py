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

Releasing pages (``FlushJob.release``): once every msync of a job succeeded, the thread pages
out (``madvise(MADV_PAGEOUT)``) the ranges the store named, which lie behind its lists' ends by
``StoreOptions.release_pages_behind`` and were synced by this job or an earlier one. Without it
the page cache grows by every byte appended, and every new page is memory the kernel has not
handed out for a while: on a virtual machine that returns free memory to its host (free page
reporting), the first touch of such a page costs a host fault, measured here at 1.2-1.9 s of
system time per GiB populated against 0.12-0.16 s when the pages reuse memory just freed
(docs/benchmarks.md). Paging out never changes content: a page still dirty is written back
first, and a later read faults it in from the file; on a mapping that was closed meanwhile (its
address reused) the call can only push memory out, never discard it. A kernel without
``MADV_PAGEOUT`` (before 5.4) refuses it once and releasing stops.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from dledger.store import page_warmer
from dledger.store.mmap_file import PAGE_MASK

log = logging.getLogger(__name__)

MS_SYNC = 4
MADV_PAGEOUT = 21
#: pages are released in steps of at least this many bytes (one madvise per step and segment)
RELEASE_STEP = 4 * 1024 * 1024
#: ranges end on this boundary: the kernel caches a file in folios of up to 2 MiB, and one that
#: straddles a range's end is not paged out
RELEASE_ALIGN = 2 * 1024 * 1024

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
    #: (MmapFile, start, end) synced ranges to page out once the msyncs succeeded
    release: list = field(default_factory=list)

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
    global release_supported
    for f, start, end in job.release:
        if not release_supported:
            return
        if f.mm is None:
            continue
        if _libc.madvise(f._addr + start, end - start, MADV_PAGEOUT) != 0 and ctypes.get_errno() == 22:
            release_supported = False   # EINVAL: the kernel does not know the advice


release_supported = supported


def release_ranges(lst, behind: int, out: list) -> None:
    """Add to ``out`` the ranges of ``lst``'s segments from where the last call stopped
    (``lst.released_where``) to ``behind`` bytes before the list's end, page-aligned, once that
    is at least ``RELEASE_STEP``; on the store's thread, when a job is made."""
    if not release_supported or behind <= 0 or not lst.files:
        return
    top = lst.max_wrote_position()
    if lst.released_where > top:            # truncated below it: start again from the end
        lst.released_where = top
    target = (top - behind) & ~(RELEASE_ALIGN - 1)
    start = max(lst.released_where, lst.min_offset() & PAGE_MASK)
    if target - start < RELEASE_STEP:
        return
    for f in reversed(lst.files):
        lo = f.file_from_offset
        if lo + f.file_size <= start:
            break
        a, b = max(start, lo) - lo, min(target, lo + f.file_size) - lo
        if b > a and can_sync(f):
            out.append((f, a, b))
    lst.released_where = target


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
