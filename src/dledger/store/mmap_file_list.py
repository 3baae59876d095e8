"""MmapFileList: a directory of equally sized segments addressed as one linear byte space.

Rules (docs/format.md):
- Segment names are their global start offsets (20 digits); consecutive segments differ by
  exactly ``mapped_file_size``. ``load`` refuses (``StoreLayoutError`` naming the file) a name
  that is not 20 digits, a file of the wrong size, an offset that is not a multiple of the size,
  or a gap between segments.
- ``pre_append(n, use_blank=True)``: a record goes into the last segment only if
  ``n + 8 <= remaining``; otherwise the rest of that segment is filled with one blank record and the record starts a new segment. Data files
  always end with a blank of >= 8 bytes. Index lists use ``use_blank=False``: a unit must fit.
- ``reset_offset(off)`` removes everything before ``off`` logically: segments wholly before it
  are deleted and the segment holding it gets a head blank of ``off % size`` bytes (when that
  is > 8). The head blank is how the start survives a restart.
- ``truncate_offset(off)`` removes everything from ``off`` on: later segments are deleted.
"""

from __future__ import annotations

import logging
import mmap
import os

from dledger.entry import (INDEX_UNIT, INDEX_UNIT_SIZE, MAGIC_BLANK, MAGIC_SIZE, MIN_BLANK_LEN,
                           IndexUnit, encode_blank, is_segment_name, iter_segment_records,
                           segment_name)
from dledger.errors import DISK_ERROR, DLedgerError, ReadOnlyStoreError, StoreLayoutError
from dledger.store.mmap_file import MmapFile, fsync_dir
from dledger.store.store_io import LOCAL_IO, StoreIO

log = logging.getLogger(__name__)

_ZERO_UNIT = bytes(INDEX_UNIT_SIZE)


class MmapFileList:
    """Segments of one list (data or index) in ``store_path``."""

    def __init__(self, store_path: str, mapped_file_size: int, *, read_only: bool = False,
                 io: StoreIO = LOCAL_IO) -> None:
        if mapped_file_size < 64:
            raise ValueError(f"mapped_file_size must be at least 64 bytes, got {mapped_file_size}")
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.read_only = read_only
        self.io = io
        self.files: list[MmapFile] = []
        self.flushed_where = 0
        self.committed_where = 0
        #: pages below this position were handed to the flush thread to page out
        #: (``background_flush.release_ranges``)
        self.released_where = 0

    # -- loading ---------------------------------------------------------------------------
    def load(self) -> None:
        """Map every segment of the directory (created later, with the first segment)."""
        if not os.path.isdir(self.store_path):
            if os.path.lexists(self.store_path):
                raise StoreLayoutError(f"{self.store_path} is not a directory")
            return
        names = sorted(os.listdir(self.store_path))
        for name in names:
            path = os.path.join(self.store_path, name)
            if not is_segment_name(name):
                raise StoreLayoutError(f"unexpected file {path}: segment names are 20-digit offsets")
            if not os.path.isfile(path):
                raise StoreLayoutError(f"unexpected entry {path}: not a regular file")
            size = os.path.getsize(path)
            if size != self.mapped_file_size:
                raise StoreLayoutError(f"segment {path} has {size} bytes, expected "
                                       f"{self.mapped_file_size} (mapped file size)")
            offset = int(name)
            if offset % self.mapped_file_size:
                raise StoreLayoutError(f"segment {path} starts at {offset}, not a multiple of the "
                                       f"mapped file size {self.mapped_file_size}")
        for name in names:
            self.files.append(MmapFile(os.path.join(self.store_path, name), int(name),
                                       self.mapped_file_size, read_only=self.read_only, io=self.io))
        self.check_self()
        if self.files:
            first = self.files[0]
            head_magic, head_size = MAGIC_SIZE.unpack_from(first.mm, 0)
            if head_magic == MAGIC_BLANK and MIN_BLANK_LEN < head_size < self.mapped_file_size:
                first.start_position = head_size

    def check_self(self) -> None:
        """Consecutive segments must be exactly one file size apart."""
        for prev, cur in zip(self.files, self.files[1:]):
            if cur.file_from_offset - prev.file_from_offset != self.mapped_file_size:
                raise StoreLayoutError(
                    f"gap in segments: {cur.path} follows {prev.path} "
                    f"(expected offset {prev.file_from_offset + self.mapped_file_size})")

    # -- addressing ------------------------------------------------------------------------
    def min_offset(self) -> int:
        if not self.files:
            return 0
        first = self.files[0]
        return first.file_from_offset + first.start_position

    def max_wrote_position(self) -> int:
        if not self.files:
            return 0
        last = self.files[-1]
        return last.file_from_offset + last.wrote_position

    max_read_position = max_wrote_position

    def find_file(self, pos: int) -> MmapFile | None:
        """The segment containing global position ``pos`` (None if outside the list)."""
        files = self.files
        if not files:
            return None
        first = files[0].file_from_offset
        if pos < first:
            return None
        i = (pos - first) // self.mapped_file_size
        if i >= len(files):
            return None
        return files[i]

    def get_data(self, pos: int, size: int) -> bytes | None:
        """``size`` bytes at global ``pos`` (never across segments); None if not all written."""
        f = self.find_file(pos)
        if f is None:
            return None
        off = pos - f.file_from_offset
        if off + size > f.wrote_position or off < f.start_position:
            return None
        return f.read(off, size)

    # -- appending -------------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStoreError(f"{self.store_path} is opened read-only")

    def _new_file(self, offset: int) -> MmapFile:
        self._check_writable()
        os.makedirs(self.store_path, exist_ok=True)
        f = MmapFile(os.path.join(self.store_path, segment_name(offset)), offset,
                     self.mapped_file_size, create=True, io=self.io)
        try:
            fsync_dir(self.store_path)
        except BaseException:
            f.close()       # not part of the list; the file (all zeros) holds nothing to lose
            raise
        self.files.append(f)
        return f

    def last_file_for_append(self, start_offset: int = 0) -> MmapFile:
        """The last segment, creating the first (or next, when full) one if needed."""
        if not self.files:
            return self._new_file(start_offset - start_offset % self.mapped_file_size)
        last = self.files[-1]
        if last.is_full():
            return self._new_file(last.file_from_offset + self.mapped_file_size)
        return last

    def reserve(self, length: int, use_blank: bool = True) -> MmapFile:
        """Make room for a record of ``length`` bytes; returns the segment it will go into.

        Writes the end-of-segment blank and creates the next segment when needed.
        """
        need = length + MIN_BLANK_LEN if use_blank else length
        if need > self.mapped_file_size:
            raise DLedgerError(f"a record of {length} bytes cannot fit in a segment of "
                               f"{self.mapped_file_size} bytes", DISK_ERROR)
        f = self.last_file_for_append()
        if need > f.remaining():
            if use_blank:
                rest = f.remaining()
                f.write_at(f.wrote_position, encode_blank(rest))
                f.wrote_position = f.file_size
            else:
                if f.remaining():
                    raise DLedgerError(f"{self.store_path}: record of {length} bytes does not fit "
                                       f"the {f.remaining()} bytes left in {f.path}", DISK_ERROR)
            f = self._new_file(f.file_from_offset + self.mapped_file_size)
        return f

    def pre_append(self, length: int, use_blank: bool = True) -> int:
        """The global position a record of ``length`` bytes will be written at."""
        f = self.reserve(length, use_blank)
        return f.file_from_offset + f.wrote_position

    def append(self, data, use_blank: bool = True) -> int:
        """Append ``data`` as one record (never split across segments); returns its position."""
        f = self.reserve(len(data), use_blank)
        pos = f.file_from_offset + f.wrote_position
        f.append_message(data)
        return pos

    # -- removing --------------------------------------------------------------------------
    def truncate_offset(self, offset: int) -> None:
        """Drop everything at and after global ``offset`` (``-1`` drops everything).

        On a read-only list this only changes the in-memory view (files are closed, not deleted).
        """
        keep: list[MmapFile] = []
        for f in self.files:
            if f.file_from_offset + f.file_size > offset:
                if offset >= f.file_from_offset:
                    f.set_positions(offset - f.file_from_offset)
                    keep.append(f)
                elif self.read_only:
                    f.close()
                else:
                    f.destroy()
            else:
                keep.append(f)
        removed = len(keep) != len(self.files)
        self.files = keep
        if removed and not self.read_only:
            fsync_dir(self.store_path)
        mw = self.max_wrote_position()
        self.flushed_where = min(self.flushed_where, mw)
        self.committed_where = min(self.committed_where, mw)

    def reset_offset(self, offset: int) -> None:
        """Drop everything before global ``offset``; the segment holding it gets a head blank."""
        self._check_writable()
        keep: list[MmapFile] = []
        for f in self.files:
            if f.file_from_offset + f.file_size <= offset:
                f.destroy()
                continue
            if f.file_from_offset <= offset:
                start = offset - f.file_from_offset
                f.start_position = start
                if start > MIN_BLANK_LEN:
                    f.write_at(0, encode_blank(start))
                    f.flush_range(0, start)
                f.wrote_position = max(f.wrote_position, start)
                f.committed_position = max(f.committed_position, start)
                f.flushed_position = max(f.flushed_position, start)
            keep.append(f)
        if len(keep) != len(self.files):
            fsync_dir(self.store_path)
        self.files = keep
        self.flushed_where = max(self.flushed_where, self.min_offset())
        self.committed_where = max(self.committed_where, self.min_offset())

    def rebuild_with_pos(self, pos: int) -> None:
        """Discard every segment and start afresh with ``pos`` as both start and end."""
        self.truncate_offset(-1)
        f = self._new_file(pos - pos % self.mapped_file_size)
        f.set_positions(pos - f.file_from_offset)
        f.flushed_position = f.wrote_position
        self.reset_offset(pos)
        self.flushed_where = self.committed_where = pos
        if not (self.max_wrote_position() == pos == self.min_offset()):
            raise DLedgerError(f"{self.store_path}: rebuild at {pos} failed", DISK_ERROR)

    def delete_first_file(self) -> MmapFile | None:
        """Remove the first segment (retention); never the last one."""
        self._check_writable()
        if len(self.files) < 2:
            return None
        f = self.files.pop(0)
        f.destroy()
        fsync_dir(self.store_path)
        return f

    def check_first_file_all_blank(self) -> bool:
        """Delete the first segment when it holds nothing but blank records; True if deleted."""
        if not self.files or len(self.files) < 2 or self.read_only:
            return False
        f = self.files[0]
        off = 0
        while off + MIN_BLANK_LEN <= f.file_size:
            magic, size = MAGIC_SIZE.unpack_from(f.mm, off)
            if magic != MAGIC_BLANK or size < MIN_BLANK_LEN:
                return False
            off += size
        if off != f.file_size:
            return False
        self.delete_first_file()
        return True

    # -- durability ------------------------------------------------------------------------
    def sync_from(self, start: int) -> None:
        """msync everything from global ``start`` to the end (an fsync-mode append); unlike
        ``flush`` it leaves the flushed positions alone."""
        for f in self.files:
            if f.file_from_offset + f.file_size <= start:
                continue
            lo = max(start - f.file_from_offset, 0)
            f.flush_range(lo, f.wrote_position)

    def flush(self, least_pages: int = 0) -> bool:
        """msync every segment with unflushed bytes; True when something was flushed."""
        did = False
        for f in self.files:
            if f.flushed_position < f.wrote_position:
                before = f.flushed_position
                f.flush(least_pages)
                did = did or f.flushed_position != before
        self.update_flushed_where()
        self.committed_where = self.max_wrote_position()
        return did

    def update_flushed_where(self) -> None:
        """``flushed_where``: the first position not yet known durable."""
        if self.files:
            where = self.min_offset()
            for f in self.files:
                where = f.file_from_offset + f.flushed_position
                if f.flushed_position < f.wrote_position:
                    break
            self.flushed_where = where

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []

    def destroy(self) -> None:
        for f in self.files:
            f.destroy()
        self.files = []


# -- segment-level helpers (shared by the store, its recovery and retention) -----------------
def read_index_unit(lst: MmapFileList, k: int) -> IndexUnit | None:
    """Index unit ``k`` of an index list as it lies there, unchecked; None when not written."""
    pos = k * INDEX_UNIT_SIZE
    if not lst.files or pos < lst.min_offset() or pos + INDEX_UNIT_SIZE > lst.max_wrote_position():
        return None
    f = lst.find_file(pos)
    return IndexUnit._make(INDEX_UNIT.unpack_from(f.mm, pos - f.file_from_offset))


def first_index_in(f: MmapFile) -> int | None:
    """Index of the first record of data segment ``f`` (past its head blank); None when it holds
    no record or the first one is damaged."""
    for item in iter_segment_records(f.mm, f.start_position, f.wrote_position):
        return item.header.index if item.header is not None else None
    return None


def zero_header_at(lst: MmapFileList, pos: int) -> None:
    """Erase (and sync) the record head at global ``pos``, so that recovery cannot resurrect
    what follows it."""
    f = lst.find_file(pos)
    if f is None:
        return
    off = pos - f.file_from_offset
    if off + MIN_BLANK_LEN <= f.file_size:
        f.write_at(off, bytes(MIN_BLANK_LEN))
        f.mm.flush(off & ~4095, off - (off & ~4095) + MIN_BLANK_LEN)


def erase_units_after_end(lst: MmapFileList) -> int:
    """Zero the index units left after the end of index list ``lst`` by a cut tail (as
    ``truncate`` does), so that they cannot vouch for stale data after a later crash; returns
    how many. Stops at the first zero unit: a clean list has none, so this reads one unit."""
    if not lst.files:
        return 0
    f = lst.files[-1]
    lo = hi = f.wrote_position
    while hi + INDEX_UNIT_SIZE <= f.file_size and f.mm[hi:hi + INDEX_UNIT_SIZE] != _ZERO_UNIT:
        hi += INDEX_UNIT_SIZE
    if hi > lo:
        lst.flush(0)  # the live units become durable before their erased tail
        f.mm[lo:hi] = bytes(hi - lo)
        aligned = lo - lo % mmap.ALLOCATIONGRANULARITY
        f.mm.flush(aligned, hi - aligned)
    return (hi - lo) // INDEX_UNIT_SIZE


def last_segment_with_data(files: list[MmapFile], pos: int) -> int:
    """Start of the last segment after ``pos`` that holds anything (a record or blank starts
    every used segment at byte 0); ``pos`` when none does. Pre-sized segments that were never
    written (all zeros) hold nothing to lose."""
    for f in reversed(files):
        if f.file_from_offset <= pos:
            break
        if f.mm[0:MIN_BLANK_LEN] != bytes(MIN_BLANK_LEN):
            return f.file_from_offset
    return pos
