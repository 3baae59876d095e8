"""RecoveryScan: the state recovery's planner and its judge of damage share, and the record checks they read with.

Recovery (``recovery.py``) scans the log; when a record fails a check, the judge
(``recovery_damage.DamageJudge``) decides which of record and index unit is damaged. The
planner and the judge are two parts that each hold this one state, never each other's fields:

- the two segment lists (``data``, ``index``), ``store_dir``, ``data_path``, ``durability``,
  ``read_only``;
- what the scan has learnt: ``current_term`` (the term file's term when it was read intact,
  else None: no entry is written above it), ``page_cache_kept`` (the machine did not restart
  since the last writer), ``start_unit`` (the checkpoint's unit, rebuilt from its intact
  record), ``cp_rejected``, ``lost_tail``;
- what the plan collects: ``rebuilt`` (index units rebuilt from intact records), ``damaged``
  (``(index, CorruptStoreError)`` pairs), ``warnings``;
- ``unit_at(k)`` (index unit ``k`` as it lies on disk), ``read_record(f, off)`` (a validated
  header, CRC checked), ``record_for_unit(unit)``, ``warn``.

The checks of one record live here too (``read_record``, ``check_body``, ``unit_matches``;
``torn_unit``: a unit whose write a crash cut short; ``never_written``: a record showing bytes
that never reached the disk): the planner and the judge read records the same way.
"""

from __future__ import annotations

import logging

from dledger.entry import (BODY_OFFSET, INDEX_UNIT, MAGIC_SIZE, RECORD_PREFIX, IndexUnit, RecordHeader, crc32,
                           crc_vouches, decode_header, matches_unit)
from dledger.errors import CorruptEntryError, CorruptStoreError
from dledger.store.durability import Durability
from dledger.store.mmap_file import MmapFile
from dledger.store.mmap_file_list import MmapFileList, read_index_unit

#: the warnings of a recovery keep the logger they always had (recovery.py's)
log = logging.getLogger("dledger.store.recovery")

#: The disk's write unit: a power cut loses or keeps each 512-byte sector as a whole.
SECTOR = 512


def read_record(f: MmapFile, off: int) -> RecordHeader:
    """Validated header of the record at file offset ``off`` (CRC checked), or raise."""
    h = decode_header(f.mm, off, limit=f.file_size, path=f.path, base=f.file_from_offset)
    check_body(f, off, h)
    return h


def check_body(f: MmapFile, off: int, h: RecordHeader, *, after_crc: bool = False) -> None:
    """What a valid header does not tell: the body's CRC, and (for records we write, with a
    CRC) that the record's ``pos`` is its own position, which the CRC does not cover.

    Java's records carry no CRC and may carry the leader's ``pos``, so a CRC-less record is
    checked less; but right ``after_crc`` (the record before it has a CRC: a log dledger
    writes) its ``pos`` must be its own too, and so must a ``pos`` of 0: a power cut that
    loses the sector holding the end of a header zeroes its ``pos`` (and ``bodyCrc``), and an
    empty body's CRC is 0 anyway (swarm seed 2186: a no-op record torn so). A Java follower's
    ``pos`` is the leader's, which is 0 only for the leader's first record; Java assumes equal
    layouts on every replica, so its records after ours carry their own position."""
    if h.body_crc and crc32(f.mm[off + BODY_OFFSET:off + h.size]) != h.body_crc:
        raise CorruptEntryError(f"body CRC mismatch for index {h.index}", path=f.path, offset=off)
    if (h.channel or h.chain_crc) and crc_vouches(h.body_crc, h.size):
        raise CorruptEntryError(f"reserved fields of index {h.index} are not 0 (channel "
                                f"{h.channel}, chain_crc {h.chain_crc})", path=f.path, offset=off)
    if (h.body_crc or after_crc or h.pos == 0) and h.pos != f.file_from_offset + off:
        raise CorruptEntryError(f"pos field {h.pos} of index {h.index} differs from its "
                                f"position {f.file_from_offset + off}", path=f.path, offset=off)


def unit_matches(unit: IndexUnit, h: RecordHeader, pos: int) -> bool:
    """The unit names this record at ``pos``: the shared rule, with the position always compared
    (recovery checks the pos of CRC-less records too: it looks for the unit of *this* copy)."""
    return unit.pos == pos and matches_unit(unit, h.magic, h.size, h.index, h.term, pos, 0)


def torn_unit(unit: IndexUnit, h: RecordHeader, pos: int) -> bool:
    """Is ``unit`` the right unit with a zeroed tail (its write interrupted by a crash)?"""
    return INDEX_UNIT.pack(h.magic, pos, h.size, h.index, h.term).startswith(
        INDEX_UNIT.pack(*unit).rstrip(b"\0"))


def never_written(f: MmapFile, off: int) -> bool:
    """Does the record at file offset ``off`` show the trace of bytes that never reached the
    disk?

    - A sector lost by a power cut: a 512-byte disk sector that reads all zeros from where the
      record enters it (its start, or the record's head) to the sector's end, past the record's
      end if it ends inside: everything written after the last completed append was lost or
      kept sector by sector, and what a lost sector held before was zeros. (When the record's
      head is what enters it, 4 bytes at least: a magic is never 0, and its first 3 bytes
      always are.) A record damaged in place is followed, in its sector, by the next record's
      header, which is never zero.
    - A body never written: 8 bytes or more, all zeros, under a CRC that is not the zeros' (the
      writer stores a record's header, then its body: a process that died in between left the
      header).

    A bit flip leaves neither, unless the record holds such a run itself (see docs/format.md)."""
    mm, size = f.mm, f.file_size
    end = min(size, off + BODY_OFFSET)
    if off + BODY_OFFSET <= size:
        rec = MAGIC_SIZE.unpack_from(mm, off)[1]
        if BODY_OFFSET <= rec <= size - off:
            end = off + rec
            body = mm[off + BODY_OFFSET:end]
            crc = RECORD_PREFIX.unpack_from(mm, off)[7]
            if len(body) >= 8 and not body.strip(b"\0") and crc and crc != crc32(body):
                return True
    a = off - off % SECTOR
    while a < end:
        lo, hi = max(a, off), min(a + SECTOR, size)
        if (lo > off or hi - lo >= 4) and not mm[lo:hi].strip(b"\0"):
            return True
        a += SECTOR
    return False


class RecoveryScan:
    """The shared state of one recovery (see the module docstring)."""

    def __init__(self, data: MmapFileList, index: MmapFileList, *, store_dir: str,
                 data_path: str, durability: Durability, read_only: bool) -> None:
        self.data = data
        self.index = index
        self.store_dir = store_dir
        self.data_path = data_path
        self.durability = durability
        self.read_only = read_only
        self.rebuilt: list[IndexUnit] = []
        #: the machine did not restart since the last writer: nothing it wrote was lost
        self.page_cache_kept = False
        self.warnings: list[str] = []
        self.damaged: list[tuple[int, CorruptStoreError]] = []
        #: the term file's term, when read intact: no entry was written above it
        self.current_term: int | None = None
        self.cp_rejected: str | None = None
        #: entries that may have been acknowledged were cut (or a flushed one is missing)
        self.lost_tail = False
        #: the checkpoint's unit, rebuilt from its intact record (the unit was damaged)
        self.start_unit: IndexUnit | None = None

    def warn(self, msg: str, *args) -> None:
        log.warning(msg, *args)
        self.warnings.append(msg % args)

    def read_record(self, f: MmapFile, off: int) -> RecordHeader:
        return read_record(f, off)

    def unit_at(self, k: int) -> IndexUnit | None:
        """Index unit ``k`` as it lies on disk (the plan's rebuilt units are not written yet)."""
        return read_index_unit(self.index, k)

    def record_for_unit(self, unit: IndexUnit) -> RecordHeader | None:
        """Header of the record a unit points at, if it is intact and agrees; else None."""
        f = self.data.find_file(unit.pos)
        if f is None:
            return None
        try:
            h = read_record(f, unit.pos - f.file_from_offset)
        except CorruptEntryError:
            return None
        return h if unit_matches(unit, h, unit.pos) else None
