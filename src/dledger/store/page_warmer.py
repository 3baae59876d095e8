"""Faulting in the pages of new segments ahead of the writer, off the event loop's thread.

Writing into a freshly allocated mapping takes a page fault per 4 KiB, and Python's
``mmap.madvise`` holds the GIL while the kernel does that work (measured: another thread
advanced 81 thousand loop steps during a 0.5 s ``mmap.madvise``, 8.6 million during the same
call through ctypes). So ``madvise(MADV_POPULATE_WRITE)`` is called through ctypes, which lets
the GIL go, and the window *after* the one being written is handed to one worker thread (a
``ThreadPoolExecutor`` of one, so requests run in the order they were made).

Rules:
- Populating never changes file content: it only maps pages in. The writer never waits for
  the warmer; if it gets ahead, it takes ordinary page faults. So nothing here can lose or
  reorder data, and the simulator's determinism (which concerns content and order) holds.
- A request for a segment that was closed meanwhile is dropped; a call that races a close
  gets ENOMEM from the kernel, which is ignored.
- One worker thread, as a ``ThreadPoolExecutor(max_workers=1)``. Measured here: a ``submit``
  costs the writer about 8 us of CPU against 0.1 us for the hand-rolled thread's queue ``put``,
  but it happens once per 16 MiB window (4,096 entries of 4 KiB, 256 of 64 KiB), so well under
  0.1 % of an append; the 4 KiB and 64 KiB rows of ``bench_store_append.py`` did not move
  beyond the machine's noise either way.
- Without Linux, ctypes or a kernel that knows ``MADV_POPULATE_WRITE`` (5.14+), everything
  here is a no-op and writes take plain page faults.
"""

from __future__ import annotations

import ctypes
import logging
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor

log = logging.getLogger(__name__)

MADV_POPULATE_WRITE = 23

libc = None  # the C library through ctypes (shared with background_flush)
if sys.platform.startswith("linux"):
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.madvise.restype = ctypes.c_int
    except (OSError, AttributeError):  # pragma: no cover - unusual libc
        libc = None

supported = libc is not None
_executor: ThreadPoolExecutor | None = None
_lock = threading.Lock()
_warmed = 0  # bytes the warmer thread has faulted in so far


def base_address(mm) -> int | None:
    """The address of a writable mapping (None where it cannot be had)."""
    if not supported:
        return None
    try:
        view = ctypes.c_char.from_buffer(mm)
    except (TypeError, ValueError):
        return None
    addr = ctypes.addressof(view)
    del view  # release the buffer export at once, so the mapping can be closed
    return addr


def populate(addr: int, start: int, length: int) -> bool:
    """Fault in ``length`` bytes at ``addr + start`` now (the GIL is released meanwhile)."""
    global supported
    if not supported or length <= 0:
        return False
    if libc.madvise(addr + start, length, MADV_POPULATE_WRITE) != 0:
        err = ctypes.get_errno()
        if err in (22, 95):  # EINVAL / EOPNOTSUPP: the kernel does not know the advice
            supported = False
        return False
    return True


def _warm(owner, start: int, length: int) -> None:
    """On the warmer thread: one window of ``owner``'s mapping."""
    global _warmed
    if getattr(owner, "mm", None) is None:  # closed since the request
        return
    if populate(owner._addr, start, length):
        _warmed += length


def warmed_bytes() -> int:
    """How many bytes the warmer thread has faulted in since the process started."""
    return _warmed


def _submit(fn, *args) -> Future:
    global _executor
    if _executor is None:
        with _lock:
            if _executor is None:
                _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dledger-page-warmer")
    return _executor.submit(fn, *args)


def drain(timeout: float | None = None) -> bool:
    """Wait until every request made so far was handled (for tests and benchmarks)."""
    if _executor is None:
        return True
    try:
        _submit(int).result(timeout)  # one worker: this runs after every earlier request
    except TimeoutError:
        return False
    return True


def populate_later(owner, start: int, length: int) -> None:
    """Ask the warmer thread to fault in ``[start, start+length)`` of ``owner``'s mapping."""
    if not supported or owner._addr is None or length <= 0:
        return
    _submit(_warm, owner, start, length)
