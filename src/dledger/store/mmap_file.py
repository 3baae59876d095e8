"""MmapFile: one fixed-size segment file of a ``MmapFileList``, memory-mapped whole.

Rules:
- The file name is the segment's global start offset as 20 zero-padded decimal digits
  (``dledger.entry.segment_name``).
- A new segment is pre-sized to its full length before it is mapped (``StoreIO.allocate``:
  ``posix_fallocate`` where the file system supports it, else ``ftruncate``), so a full disk
  fails here, at creation, with ``DISK_FULL``, never later with SIGBUS on a write to a hole.
- ``flush``/``flush_range`` msync through the mapping; an ``OSError`` from the msync goes to the
  caller with the flushed position unchanged, and ``StoreIO.synced`` hears of each msync that
  succeeded.
- Positions (bytes inside this file): ``start_position`` <= data < ``wrote_position``;
  ``flushed_position`` <= ``wrote_position`` is what ``flush`` has made durable.
- Writers call ``populate(wp, end)`` before writing past ``populated_to``: pages are faulted in
  a window at a time (``MADV_POPULATE_WRITE``), which more than doubles the copy rate of large
  entries compared with taking one page fault per 4 KiB (measured in docs/benchmarks.md); the
  next window is faulted in by the page warmer thread (``page_warmer``), off the GIL.
- Reads return ``bytes`` copies, so no view outlives the mapping (``close`` never fails with
  exported buffers).
"""

from __future__ import annotations

import errno
import mmap
import os
import sys

from dledger.errors import DISK_FULL, DISK_ERROR, DLedgerError
from dledger.store import page_warmer
from dledger.store.store_io import LOCAL_IO, StoreIO

OS_PAGE_SIZE = 4096
#: rounds a position down to the start of its msync-able page
PAGE_MASK = ~(mmap.ALLOCATIONGRANULARITY - 1)

#: Linux 5.14+: fault in (writable) a range of pages with one call instead of one trap per page.
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
#: How far ahead of the write position pages are faulted in, in one call.
POPULATE_WINDOW = 16 * 1024 * 1024
_populate_ok = sys.platform.startswith("linux") and hasattr(mmap.mmap, "madvise")


def fsync_dir(path: str) -> None:
    """fsync a directory so that a create, rename or unlink in it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MmapFile:
    """One mapped segment. ``mm`` is the mapping; the list and the store write into it directly."""

    __slots__ = ("path", "file_from_offset", "file_size", "start_position", "wrote_position",
                 "committed_position", "flushed_position", "mm", "read_only", "_fd", "populated_to",
                 "_addr", "_warmed_to", "io")

    def __init__(self, path: str, file_from_offset: int, file_size: int, *, create: bool = False,
                 read_only: bool = False, io: StoreIO = LOCAL_IO) -> None:
        self.path = path
        self.io = io
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        self.read_only = read_only
        self.start_position = 0
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self._fd = -1
        self.populated_to = 0
        self._warmed_to = 0
        self._addr: int | None = None
        self.mm: mmap.mmap | None = None
        if create:
            self._create()
        else:
            self._open()

    # -- opening ---------------------------------------------------------------------------
    def _create(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            self._disk_full(exc)
            raise
        try:
            try:
                self.io.allocate(fd, self.file_size)
            except OSError as exc:
                self._disk_full(exc)
                raise
            self.mm = self.io.map(fd, self.file_size, writable=True)
            self._addr = page_warmer.base_address(self.mm)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(self.path)
            except OSError:
                pass
            raise
        self._fd = fd

    def _disk_full(self, exc: OSError) -> None:
        """A full disk (no space, no inode, quota) at the creation: ``DISK_FULL``, nothing made."""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DLedgerError(f"disk full while creating segment {self.path} "
                               f"({self.file_size} bytes)", DISK_FULL) from exc

    def _open(self) -> None:
        flags = os.O_RDONLY if self.read_only else os.O_RDWR
        fd = os.open(self.path, flags)
        try:
            size = os.fstat(fd).st_size
            if size != self.file_size:
                raise DLedgerError(f"segment {self.path} has {size} bytes, expected {self.file_size}",
                                   DISK_ERROR)
            self.mm = self.io.map(fd, self.file_size, writable=not self.read_only)
            if not self.read_only:
                self._addr = page_warmer.base_address(self.mm)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        # Loaded files count as full until recovery sets the real positions (as in Java).
        self.wrote_position = self.committed_position = self.flushed_position = self.file_size

    # -- positions -------------------------------------------------------------------------
    @property
    def file_name(self) -> str:
        return os.path.basename(self.path)

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def set_positions(self, pos: int) -> None:
        """Set wrote/committed/flushed to ``pos`` (used by truncation and recovery)."""
        self.wrote_position = self.committed_position = pos
        if self.flushed_position > pos:
            self.flushed_position = pos

    # -- data ------------------------------------------------------------------------------
    def append_message(self, data) -> bool:
        """Copy ``data`` at ``wrote_position``; False (nothing written) when it does not fit."""
        n = len(data)
        wp = self.wrote_position
        if wp + n > self.file_size:
            return False
        self.mm[wp:wp + n] = data
        self.wrote_position = wp + n
        return True

    def populate(self, wp: int, end: int) -> None:
        """Fault in pages from the write position ``wp`` to at least ``end`` (a window), and
        ask the page warmer for the window after it, so the next call finds it done."""
        global _populate_ok
        start = max(self.populated_to, wp & PAGE_MASK)
        stop = min(self.file_size, max(end, start + POPULATE_WINDOW))
        if stop > start and self._warmed_to < stop:
            if self._addr is not None and page_warmer.supported:
                page_warmer.populate(self._addr, start, stop - start)
            elif _populate_ok:
                try:
                    self.mm.madvise(MADV_POPULATE_WRITE, start, stop - start)
                except (OSError, ValueError):
                    _populate_ok = False  # older kernel: plain page faults then
        ahead = min(self.file_size, stop + POPULATE_WINDOW)
        if self._addr is not None and ahead > max(stop, self._warmed_to):
            begin = max(stop, self._warmed_to)
            page_warmer.populate_later(self, begin, ahead - begin)
            self._warmed_to = ahead
        self.populated_to = stop

    def write_at(self, offset: int, data) -> None:
        self.mm[offset:offset + len(data)] = data

    def read(self, offset: int, size: int) -> bytes:
        """``size`` bytes at file-relative ``offset``; shorter if the file ends first."""
        return self.mm[offset:offset + size]

    def flush(self, least_pages: int = 0) -> int:
        """msync what was written since the last flush; returns the new flushed position.

        With ``least_pages > 0`` nothing happens until that many 4 KiB pages are dirty, unless
        the file is full.
        """
        wp = self.wrote_position
        fp = self.flushed_position
        if wp <= fp:
            return fp
        if least_pages > 0 and not self.is_full() and (wp // OS_PAGE_SIZE - fp // OS_PAGE_SIZE) < least_pages:
            return fp
        start = fp & PAGE_MASK
        self.mm.flush(start, wp - start)
        self.flushed_position = wp
        self.io.synced(wp - start)
        return wp

    def flush_range(self, start: int, end: int) -> None:
        """msync bytes ``[start, end)`` of this file (fsync durability mode)."""
        if end > start:
            aligned = start & PAGE_MASK
            self.mm.flush(aligned, end - aligned)
            if end > self.flushed_position and start <= self.flushed_position:
                self.flushed_position = end
            self.io.synced(end - aligned)

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def destroy(self) -> None:
        """Unmap, close and delete the file."""
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return
        self.io.deleted(self.path)

    def __repr__(self) -> str:
        return (f"MmapFile({self.file_name}, start={self.start_position}, "
                f"wrote={self.wrote_position}, flushed={self.flushed_position})")
