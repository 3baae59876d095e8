"""Recovery of a DLedgerMmapFileStore on open: find the valid log, cut the torn tail, fix the index.

The rules (see also ``docs/format.md``):

1. **Trusted prefix.** The checkpoint's ``endIndex`` was flushed (data, then index) before the
   checkpoint was written. If index unit ``endIndex`` and the record it points at agree (header,
   CRC), everything up to it is trusted without reading it: restart time is bounded by what
   was appended since the last checkpoint, not by the size of the log.
2. **Tail scan.** From there, records are read one by one: blank padding is skipped; each
   record must have a valid header, continue the index chain, not lower the term, and match
   its CRC. Its index unit is compared; from the first disagreement on, index units are
   rewritten from the data (a torn or lost index is rebuilt, SPEC §2.6).
3. **Where the scan stops.** The first record that fails (or a zero header) ends the log.
   - If intact entries follow the bad record (their index units agree with them, CRC and
     term check out), the damage is in the middle of the log: the open stops with
     ``CorruptStoreError`` naming the file and offset instead of cutting away good data.
     In ``fsync`` mode this holds after a trusted prefix too: every append was synced before
     it was acknowledged, and the checkpoint lags behind. The store syncs in log order
     (data, then index; the log before any cut), so a crash alone leaves no such hole.
   - In ``page_cache`` mode, after a checkpoint that checks out (or one written while the log
     was empty), the rest was never promised durable and a power loss may have written parts
     of it out of order: the first bad record ends the log whatever follows.
   - Otherwise the bad record is the torn tail and is cut (logged with file, offset and
     entry index).
   - Without a trusted prefix (no checkpoint, or one that does not check out: "ahead of the
     log"), the scan starts at most three segments from the end, as Java DLedger does, and
     refuses when more than a segment of written data would be discarded.
4. **Begin index.** The first data record gives the before-begin index; the checkpoint keeps
   its term. An empty log after a full ``reset`` keeps its begin from the index list.

A read-only open follows the same rules but changes nothing on disk: rebuilt index units are
kept in memory and the tail is ignored rather than cut.
"""

from __future__ import annotations

import logging
import mmap
from typing import TYPE_CHECKING

from dledger.entry import (BODY_OFFSET, INDEX_UNIT, INDEX_UNIT_SIZE, MAGIC_BLANK, MAGIC_NOOP,
                           MAGIC_NORMAL, MAGIC_SIZE, MIN_BLANK_LEN, IndexUnit, crc32, decode_header)
from dledger.errors import CorruptEntryError, CorruptStoreError
from dledger.store.checkpoint import read_checkpoint

if TYPE_CHECKING:
    from dledger.store.mmap_file_store import DLedgerMmapFileStore

log = logging.getLogger(__name__)

#: How many following index units the mid-log corruption check looks at.
LOOKAHEAD_UNITS = 64

_ZERO_UNIT = bytes(INDEX_UNIT_SIZE)


def _read_record(f, off: int):
    """Validated header fields of the record at file offset ``off`` (CRC checked), or raise."""
    fields = decode_header(f.mm, off, limit=f.file_size, path=f.path, base=f.file_from_offset)
    body_crc = fields[7]
    if body_crc and crc32(f.mm[off + BODY_OFFSET:off + fields[1]]) != body_crc:
        raise CorruptEntryError(f"body CRC mismatch for index {fields[2]}", path=f.path, offset=off)
    # Records we write (non-zero CRC) carry their own position; the CRC does not cover it.
    if body_crc and fields[4] != f.file_from_offset + off:
        raise CorruptEntryError(f"pos field {fields[4]} of index {fields[2]} differs from its "
                                f"position {f.file_from_offset + off}", path=f.path, offset=off)
    return fields


def _unit_matches(unit: IndexUnit, magic: int, pos: int, size: int, index: int, term: int) -> bool:
    # Java leaders write magic 1 into the index for every entry (SPEC §1.2 quirk): accept it.
    magic_ok = unit.magic == magic or (unit.magic == MAGIC_NORMAL and magic == MAGIC_NOOP)
    return magic_ok and unit.pos == pos and unit.size == size and unit.index == index and unit.term == term


def _last_segment_with_data(files, pos: int) -> int:
    """Start of the last segment after ``pos`` that holds anything (a record or blank starts
    every used segment at byte 0); ``pos`` when none does. Pre-sized segments that were never
    written (all zeros) hold nothing to lose."""
    for f in reversed(files):
        if f.file_from_offset <= pos:
            break
        if f.mm[0:MIN_BLANK_LEN] != bytes(MIN_BLANK_LEN):
            return f.file_from_offset
    return pos


def _torn_unit(unit: IndexUnit, magic: int, pos: int, size: int, index: int, term: int) -> bool:
    """Is ``unit`` the right unit with a zeroed tail (its write interrupted by a crash)?"""
    return INDEX_UNIT.pack(magic, pos, size, index, term).startswith(INDEX_UNIT.pack(*unit).rstrip(b"\0"))


class _Recovery:
    def __init__(self, store: "DLedgerMmapFileStore") -> None:
        self.store = store
        self.data = store.data_list
        self.index = store.index_list
        self.read_only = store.read_only
        self.index_trusted = True
        self.rewritten = 0

    # -- index units -----------------------------------------------------------------------
    def unit_at(self, k: int) -> IndexUnit | None:
        pos = k * INDEX_UNIT_SIZE
        idx = self.index
        if not idx.files or pos < idx.min_offset() or pos + INDEX_UNIT_SIZE > idx.max_wrote_position():
            return None
        f = idx.find_file(pos)
        return IndexUnit._make(INDEX_UNIT.unpack_from(f.mm, pos - f.file_from_offset))

    def record_for_unit(self, unit: IndexUnit):
        """Header fields of the record a unit points at, if it is intact and agrees; else None."""
        f = self.data.find_file(unit.pos)
        if f is None:
            return None
        off = unit.pos - f.file_from_offset
        try:
            fields = _read_record(f, off)
        except CorruptEntryError:
            return None
        if not _unit_matches(unit, fields[0], unit.pos, fields[1], fields[2], fields[3]):
            return None
        return fields

    def put_unit(self, magic: int, pos: int, size: int, k: int, term: int) -> None:
        """Index unit ``k`` after the index stopped agreeing with the data: rewrite it."""
        unit_bytes = INDEX_UNIT.pack(magic, pos, size, k, term)
        self.rewritten += 1
        if self.read_only:
            self.index_trusted = False
            self.store._index_overrides[k] = IndexUnit(magic, pos, size, k, term)
            return
        if self.index_trusted:
            self.index_trusted = False
            target = k * INDEX_UNIT_SIZE
            idx = self.index
            if idx.files and idx.min_offset() <= target <= idx.max_wrote_position():
                idx.truncate_offset(target)
            else:
                idx.rebuild_with_pos(target)
        self.index.append(unit_bytes, use_blank=False)

    def erase_stale_units(self) -> None:
        """Zero the units left after the log's end by a cut tail (as ``truncate`` does), so
        that they cannot vouch for stale data after a later crash. Stops at the first zero
        unit: a clean log has none, so this reads one unit."""
        if self.read_only or not self.index.files:
            return
        f = self.index.files[-1]
        lo = hi = f.wrote_position
        while hi + INDEX_UNIT_SIZE <= f.file_size and f.mm[hi:hi + INDEX_UNIT_SIZE] != _ZERO_UNIT:
            hi += INDEX_UNIT_SIZE
        if hi > lo:
            self.index.flush(0)  # the live units become durable before their erased tail
            f.mm[lo:hi] = bytes(hi - lo)
            aligned = lo - lo % mmap.ALLOCATIONGRANULARITY
            f.mm.flush(aligned, hi - aligned)
            log.warning("store %s: erased %d index units after the log's end",
                        self.store.store_dir, (hi - lo) // INDEX_UNIT_SIZE)

    # -- start -----------------------------------------------------------------------------
    def trusted_start(self, end_index: int):
        unit = self.unit_at(end_index)
        if unit is None or unit.index != end_index:
            return None
        fields = self.record_for_unit(unit)
        if fields is None or fields[2] != end_index:
            return None
        return unit.pos + unit.size, end_index, unit.term

    def fallback_start(self):
        files = self.data.files
        for i in range(max(0, len(files) - 3), -1, -1):
            f = files[i]
            off = f.start_position if i == 0 else 0
            magic, _ = MAGIC_SIZE.unpack_from(f.mm, off)
            if magic == MAGIC_BLANK:
                continue
            try:
                fields = _read_record(f, off)
            except CorruptEntryError:
                continue
            unit = self.unit_at(fields[2])
            if unit is not None and _unit_matches(unit, fields[0], f.file_from_offset + off,
                                                  fields[1], fields[2], fields[3]):
                return f.file_from_offset + off, fields[2] - 1, -1, i == 0
        first = files[0]
        return first.file_from_offset + first.start_position, None, -1, True

    # -- deciding about a bad record -------------------------------------------------------
    def intact_entries_after(self, k: int, bad_pos: int, last_term: int) -> bool:
        """Do intact entries with index > k lie beyond ``bad_pos``? (mid-log corruption test)"""
        idx = self.index
        if not idx.files:
            return False
        last_k = idx.max_wrote_position() // INDEX_UNIT_SIZE - 1
        candidates = list(range(k + 1, min(k + 1 + LOOKAHEAD_UNITS, last_k + 1)))
        if last_k > k + LOOKAHEAD_UNITS:
            candidates.append(last_k)
        for j in candidates:
            unit = self.unit_at(j)
            if unit is None or unit.index != j or unit.pos <= bad_pos:
                continue
            fields = self.record_for_unit(unit)
            if fields is not None and fields[2] == j and fields[3] >= last_term:
                return True
        return False

    # -- the scan --------------------------------------------------------------------------
    def run(self) -> None:
        store, data = self.store, self.data
        if not self.read_only:
            data.check_first_file_all_blank()
        cp = read_checkpoint(store.store_dir)
        store._checkpoint = cp
        start = None
        if cp is not None and cp.end_index >= 0 and cp.end_index > cp.before_begin_index and data.files:
            start = self.trusted_start(cp.end_index)
            if start is None:
                log.warning("checkpoint of %s says entry %d is flushed, but it is not in the log "
                            "(checkpoint ahead of the log); scanning the last segments",
                            store.store_dir, cp.end_index)
        trusted = start is not None
        # Where the last durable point is known (a checkpoint that checks out, or one written
        # while the log was empty) and appends are not synced one by one (page-cache mode),
        # what follows it was never promised durable: parts of it may reach the disk out of
        # order, so it is cut at its first bad record even if intact entries follow.
        from dledger.store.mmap_file_store import PAGE_CACHE
        cp_empty = cp is not None and cp.end_index <= cp.before_begin_index
        unconfirmed_tail = (trusted or cp_empty) and store.durability == PAGE_CACHE
        last_index, last_term = -1, -1
        expect = None
        if not data.files:
            pos = 0
        elif trusted:
            pos, last_index, last_term = start
            expect = last_index + 1
        elif unconfirmed_tail:
            # Nothing was confirmed durable since the log was empty: every segment is tail.
            first = data.files[0]
            pos = first.file_from_offset + first.start_position
        else:
            pos, before, last_term, _ = self.fallback_start()
            if before is not None:
                last_index, expect = before, before + 1
        first_scanned = None
        fsize = data.mapped_file_size
        files = data.files
        fi = 0
        if files:
            fi = max(0, min((pos - files[0].file_from_offset) // fsize, len(files) - 1))
        stop_reason = None
        while fi < len(files):
            f = files[fi]
            off = pos - f.file_from_offset
            if off >= fsize:
                fi += 1
                continue
            magic, size = MAGIC_SIZE.unpack_from(f.mm, off)
            if magic == MAGIC_BLANK:
                if size >= MIN_BLANK_LEN and off + size <= fsize and (off + size == fsize or off == 0):
                    pos += size
                    if off + size == fsize:
                        fi += 1
                    continue
                stop_reason = f"bad blank record of {size} bytes"
                break
            if magic == 0 and size == 0:
                stop_reason = "end of data"
                break
            try:
                fields = _read_record(f, off)
            except CorruptEntryError as exc:
                stop_reason = str(exc)
                break
            k, term = fields[2], fields[3]
            if expect is not None and k != expect:
                stop_reason = f"entry index {k} where {expect} was expected"
                break
            if term < last_term:
                stop_reason = f"entry {k} has term {term} below the previous term {last_term}"
                break
            if first_scanned is None:
                first_scanned = k
            if self.index_trusted:
                unit = self.unit_at(k)
                if (unit is not None and (unit.index, unit.pos, unit.size) == (k, pos, fields[1])
                        and not _unit_matches(unit, fields[0], pos, fields[1], k, term)
                        and not _torn_unit(unit, fields[0], pos, fields[1], k, term)):
                    # Same entry, same place, but another term or type, and not a unit torn by
                    # a crash: a header field (not covered by the CRC) or the unit is damaged.
                    # Stale units are erased on truncation, so this is not a leftover.
                    stop_reason = (f"entry {k} (term {term}, magic {fields[0]}) disagrees with its "
                                   f"index unit (term {unit.term}, magic {unit.magic})")
                    break
                if unit is None or not _unit_matches(unit, fields[0], pos, fields[1], k, term):
                    self.put_unit(fields[0], pos, fields[1], k, term)
            else:
                self.put_unit(fields[0], pos, fields[1], k, term)
            last_index, last_term, expect = k, term, k + 1
            pos += fields[1]
        else:
            if files and pos > files[-1].file_from_offset + fsize:  # pragma: no cover - defensive
                pos = files[-1].file_from_offset + fsize

        bad = stop_reason is not None and stop_reason != "end of data"
        if stop_reason is not None:
            k = expect if expect is not None else last_index + 1
            bad_file = data.find_file(pos)
            where = (bad_file.path, pos - bad_file.file_from_offset) if bad_file else (store.data_path, pos)
            if not unconfirmed_tail and self.intact_entries_after(last_index, pos, last_term):
                raise CorruptStoreError(
                    f"entry {k} is damaged ({stop_reason}) but later entries are intact; "
                    f"refusing to cut durable data", path=where[0], offset=where[1], position=pos)
            if (not trusted and not unconfirmed_tail and files
                    and _last_segment_with_data(files, pos) - pos > fsize):
                raise CorruptStoreError(
                    f"log ends early ({stop_reason}); more than one segment of data would be "
                    f"discarded", path=where[0], offset=where[1], position=pos)
            tail = data.max_wrote_position() - pos
            if bad:
                log.warning("store %s: torn tail cut at entry %d (%s) in %s at offset %d",
                            store.store_dir, k, stop_reason, where[0], where[1])
            elif tail > 0 and files and pos < files[-1].file_from_offset:
                log.info("store %s: log ends at %s offset %d", store.store_dir, where[0], where[1])
        self.finish(pos, last_index, last_term, bad, cp)

    def finish(self, pos: int, last_index: int, last_term: int, bad: bool, cp) -> None:
        store, data, idx = self.store, self.data, self.index
        # Nothing read back is known durable: after a process crash the page cache may still
        # hold what the dead process wrote and never synced. Every segment counts as unflushed,
        # so the next flush() syncs it in full before a checkpoint vouches for it.
        for f in data.files + idx.files:
            f.flushed_position = 0
        if data.files:
            if bad and not self.read_only:
                data.flush(0)  # what precedes the cut must be durable before the cut is
                store._zero_header_at(pos)
            data.truncate_offset(pos)
        data.committed_where = data.max_wrote_position()
        data.flushed_where = data.min_offset()
        if last_index >= 0:
            store.ledger_end_index, store.ledger_end_term = last_index, last_term
            if cp is not None and cp.before_begin_index >= 0:
                store.ledger_before_begin_index = cp.before_begin_index
                store.ledger_before_begin_term = cp.before_begin_term
            store._revise_before_begin()
        else:
            bbi = idx.min_offset() // INDEX_UNIT_SIZE - 1 if idx.files else -1
            bbt = cp.before_begin_term if cp is not None and cp.before_begin_index == bbi else -1
            store.ledger_before_begin_index = store.ledger_end_index = bbi
            store.ledger_before_begin_term = store.ledger_end_term = bbt
        end_units = (store.ledger_end_index + 1) * INDEX_UNIT_SIZE
        if idx.files:
            if idx.min_offset() <= end_units <= idx.max_wrote_position():
                idx.truncate_offset(end_units)
            elif not self.read_only:
                idx.rebuild_with_pos(end_units)
        self.erase_stale_units()
        idx.committed_where = idx.max_wrote_position()
        idx.flushed_where = idx.min_offset()
        if cp is not None:
            if cp.committed_index > store.ledger_end_index:
                log.warning("store %s: checkpoint committed index %d is ahead of the log end %d; "
                            "clamped", store.store_dir, cp.committed_index, store.ledger_end_index)
            store.committed_index = min(cp.committed_index, store.ledger_end_index)
        if self.rewritten:
            log.warning("store %s: rebuilt %d index units from the data", store.store_dir, self.rewritten)


def recover(store: "DLedgerMmapFileStore") -> None:
    _Recovery(store).run()
