"""Recovery of a DLedgerMmapFileStore on open: where the valid log ends, and what to repair.

``recover(data_list, index_list, ...)`` is a planner: it reads the segments and the checkpoint
and returns a ``RecoveredLog`` (the log's bounds, where to cut the data and the index, the
index units to rebuild, the checkpoint found, warnings), or raises ``CorruptStoreError``. It
writes nothing; the store applies the plan (``DLedgerMmapFileStore.load``), so a refused open
changes nothing on disk.

The rules (see also ``docs/format.md``):

1. **Trusted prefix.** The checkpoint's ``endIndex`` was flushed (data, then index) before the
   checkpoint was written. It is checked against the files: index unit ``endIndex`` must carry
   the term and position the checkpoint recorded, the units before it must form a chain
   (``chain_breaks``; another writer such as Java DLedger leaves stale units after its own when
   it truncates), else the checkpoint is ignored and ``lost_tail`` set; the record it names
   must agree with it, else that entry is kept as damaged (flushed, then damaged in place:
   reads refuse it until it is repaired). Then everything up to it is
   trusted without reading it: restart time is bounded by what was appended since the last
   checkpoint, not by the size of the log.
2. **Tail scan.** From there, records are read one by one: blank padding is skipped; each
   record must have a valid header, continue the index chain, not lower the term, and match
   its CRC. Its index unit is compared; from the first disagreement on, index units are
   rewritten from the data (a torn or lost index is rebuilt), though still compared. A term
   (not under the CRC) no agreeing unit vouches for must not be above the term file's or the
   next unit's (``term_implausible``): else that record is the damaged one, not the next.
   Where no trusted prefix says which index comes first, the first record's index (not covered
   by its CRC) must be vouched for by its index unit or by the entry after it
   (``index_vouched``), else that record is bad: a flipped bit there is damage, never the log's
   end (swarm seed 100109: 2**43).
3. **Where the scan stops.** The first record that fails (or a zero header) ends the log.
   - If intact entries follow the bad record (their index units agree with them, CRC and
     term check out; or its unit names it and the next entry's intact record begins where it
     ends), the damage is in the middle of the log. When the record's index unit locates it
     beyond doubt (``skip_damaged``: it names the entry at that position, with a sane size, a
     term not below the previous entry's, and the next unit, or the next intact record,
     follows it), the entry is kept and listed in ``damaged`` (reads refuse it until it is
     repaired from a peer, see ``store/repair.py``) and the scan goes on after it (while the
     index is rebuilt, its unit is kept as it is on disk). Otherwise the open stops
     with ``CorruptStoreError`` naming the file and offset instead of cutting away good data.
     In ``fsync`` mode this holds after a trusted prefix too: every append was synced before
     it was acknowledged, and the checkpoint lags behind. One exception: a bad record that
     shows bytes that never reached the disk (``never_written``) is the append in flight at a
     power cut; it and the records after it (same unfinished append) are cut.
   - In ``fsync`` mode a bad last record without that trace may be an acknowledged entry
     damaged in place: it is cut and ``lost_tail`` is set (the store reports ``LOST_TAIL``).
     With that trace, it is the interrupted append, unless its index unit is on disk and
     names it (units are written after their record's sync: a lost write took part of a
     synced record; seed 800301): ``lost_tail`` is set too.
   - A zero header is the log's clean end, unless the index unit of the entry that would
     begin there is on disk and names that very place (``lost_write_at_end``): units are
     written after their record (in ``fsync`` mode after its sync), so the record was there
     and a lost write took it: ``lost_tail`` is set (``fsync`` mode, or a page cache the
     machine kept; seed 564518).
   - In ``page_cache`` mode, after a checkpoint that checks out (or one written while the log
     was empty), the rest was never promised durable and a power loss may have written parts
     of it out of order: the first bad record ends the log whatever follows. When the machine
     did not restart since the last writer ran (``page_cache_kept``: no power loss, every write
     is in the page cache), such a cut, and a bad last record without the trace of a write
     cut short, lose entries that may have been acknowledged: ``lost_tail`` is set, as in
     ``fsync`` mode.
   - Otherwise the bad record is the torn tail and is cut (logged with file, offset and
     entry index).
   - Without a trusted prefix (no checkpoint, or one that does not check out: "ahead of the
     log"), the scan starts at the third segment from the end, as Java DLedger does, or
     further back: at the last segment from there whose first record its index unit vouches
     for (the first segment when none does). It refuses when the cut lies more than one
     segment before the start of the last segment holding data (so up to two segments of
     written data, less a record, may be cut without a refusal).
4. **Begin index.** The first data record gives the before-begin index (its index as its
   unit, the index list's first unit or the entry after it vouches for; else the checkpoint's
   stays); the checkpoint keeps its term. An empty log after a full ``reset`` keeps its begin
   from the index list.

A read-only open follows the same rules but the store changes nothing on disk when it applies
them: rebuilt index units are kept in memory and the tail is ignored rather than cut.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from dledger.entry import INDEX_UNIT, INDEX_UNIT_SIZE, MAGIC_BLANK, MAGIC_SIZE, IndexUnit, iter_segment_records
from dledger.errors import CorruptEntryError, CorruptStoreError
from dledger.store.checkpoint import Checkpoint, read_checkpoint
from dledger.store.durability import FSYNC, PAGE_CACHE, Durability
from dledger.store.mmap_file_list import MmapFileList, last_segment_with_data, read_index_unit
from dledger.store.recovery_damage import DamageJudge
from dledger.store.recovery_scan import RecoveryScan, never_written
from dledger.store.recovery_scan import check_body as _check_body
from dledger.store.recovery_scan import read_record as _read_record
from dledger.store.recovery_scan import torn_unit as _torn_unit
from dledger.store.recovery_scan import unit_matches as _unit_matches

log = logging.getLogger(__name__)

#: How many following index units the mid-log corruption check looks at.
LOOKAHEAD_UNITS = 64
#: How many index units before the checkpoint's end are checked to form a chain.
CHAIN_WINDOW = 1024

_END_OF_DATA = "end of data"


class RecoveredLog(NamedTuple):
    """What recovery found, for the store to apply (in this order: ``rebuilt_units``, the data
    cut, the begin, the index cut)."""

    #: the checkpoint file as read (None: missing or unreadable)
    checkpoint: Checkpoint | None
    before_begin_index: int
    before_begin_term: int
    end_index: int
    end_term: int
    #: the committed index to start from (the checkpoint's, clamped to the end; -1 without one)
    committed_index: int
    #: global data position where the log ends: everything from here on is cut
    data_end: int
    #: the record at ``data_end`` is bad (a torn tail): its head is erased, after a sync
    torn_tail: bool
    #: index units rewritten from the data, in order (from the first that disagreed on)
    rebuilt_units: tuple[IndexUnit, ...]
    #: index list position before which units are dropped (the begin moved), or None
    index_begin: int | None
    #: index list position where the units end: ``(end_index + 1) * 32``
    index_end: int
    #: what was found wrong and repaired (also logged)
    warnings: tuple[str, ...]
    #: entries that may have been acknowledged are gone: a checkpoint vouched for an entry
    #: that is not in the files as recorded (``SuspectReason.LOST_TAIL``)
    lost_tail: bool = False
    #: entries whose record is damaged mid-log but located by an intact index unit: kept in
    #: the log, refused by reads until repaired (``(index, CorruptStoreError)`` pairs)
    damaged: tuple = ()


class _Planner:
    """The scan in progress. It holds the scan's state (``RecoveryScan``: the segment lists,
    what the scan learnt, what the plan collects) and the judge of damage (``DamageJudge``,
    holding that same state); it reads and fills the state, never the judge's fields."""

    def __init__(self, scan: RecoveryScan) -> None:
        self.scan = scan
        self.judge = DamageJudge(scan)

    # -- start -----------------------------------------------------------------------------
    def trusted_start(self, cp: Checkpoint):
        """Where the trusted prefix ends, if the checkpoint checks out against the files: index
        unit ``endIndex`` carries the term and position the checkpoint recorded, the index
        units before it form a chain (``chain_breaks``), and the record it names agrees with
        it (header, CRC). None (with the reason in the scan's ``cp_rejected``) when the index does not
        match the checkpoint: another writer changed the log since (the checkpoint is then
        ignored). When the index matches but the record is damaged, the open stops with
        ``CorruptStoreError``: that record was flushed before the checkpoint was written."""
        scan = self.scan
        end_index = cp.end_index
        unit = scan.unit_at(end_index)
        if unit is None or unit.index != end_index:
            scan.cp_rejected = f"index unit {end_index} is not in the index"
            return None
        if (cp.end_term is not None and cp.end_term != unit.term) or (
                cp.end_pos is not None and cp.end_pos != unit.pos):
            scan.cp_rejected = (f"entry {end_index} is (term {unit.term}, pos {unit.pos}), the "
                                f"checkpoint recorded (term {cp.end_term}, pos {cp.end_pos})")
            return None
        broken = self.chain_breaks(end_index, cp.before_begin_index)
        if broken is not None:
            scan.cp_rejected = broken
            return None
        h = scan.record_for_unit(unit)
        if h is None and self.judge.rebuild_start_unit(unit, cp.end_term):
            u = scan.start_unit  # the unit was damaged: step by its record's own size
            if u is unit:        # or which magic is right is not known: kept, refused
                scan.start_unit = None
            return u.pos + u.size, end_index, u.term
        if h is None or h.index != end_index:
            f = scan.data.find_file(unit.pos)
            off = unit.pos - f.file_from_offset if f is not None else -1
            if (cp.end_term is not None and cp.end_pos is not None and f is not None
                    and f.start_position <= off and off + unit.size <= f.file_size
                    and f.mm[off:off + unit.size].strip(b"\0")):
                # the record is there, but not as flushed: damage, not a removed segment. The
                # unit agrees with the checkpoint: the entry is kept, refused until repaired.
                self.judge.note_damaged(end_index, CorruptStoreError(
                    f"entry {end_index}, flushed before the checkpoint was written, is damaged",
                    path=f.path, offset=off, position=unit.pos))
                return unit.pos + unit.size, end_index, unit.term
            scan.cp_rejected = f"the record index unit {end_index} names is missing or damaged"
            return None
        return unit.pos + unit.size, end_index, unit.term

    def chain_breaks(self, end_index: int, before_begin: int) -> str | None:
        """Do the ``CHAIN_WINDOW`` index units before ``end_index`` fail to form a log (indexes
        in order, terms not decreasing, each record right after the one before or at the start
        of a later segment)? Another writer that truncated the log and appended less than it
        removed leaves stale units after its own, which break this chain (a truncation by
        dledger erases them). Returns the reason, or None."""
        lo = max(end_index - CHAIN_WINDOW, before_begin + 1, 0)
        idx = self.scan.index
        if not idx.files:
            return None
        lo = max(lo, -(-idx.min_offset() // INDEX_UNIT_SIZE))
        units: list[tuple] = []
        upos, hi = lo * INDEX_UNIT_SIZE, (end_index + 1) * INDEX_UNIT_SIZE
        while upos < hi:  # one slice per index segment
            f = idx.find_file(upos)
            if f is None:
                return None
            stop = min(hi - f.file_from_offset, f.wrote_position)
            start = upos - f.file_from_offset
            if stop <= start:
                return None
            units.extend(INDEX_UNIT.iter_unpack(f.mm[start:stop - (stop - start) % INDEX_UNIT_SIZE]))
            upos = f.file_from_offset + stop
        fsize = self.scan.data.mapped_file_size
        for j in range(1, len(units)):
            pm, ppos, psize, pidx, pterm = units[j - 1]
            _m, pos, _s, index, term = units[j]
            end = ppos + psize
            if (index != lo + j or pidx != lo + j - 1 or term < pterm
                    or not (pos == end or (pos > end and pos % fsize == 0))) \
                    and not self.records_chain(units[j - 1], units[j], lo + j - 1):
                return (f"index units {lo + j - 1} and {lo + j} do not form a log (term {pterm} -> "
                        f"{term}, pos {ppos}+{psize} -> {pos})")
        return None

    def records_chain(self, u1: tuple, u2: tuple, k: int) -> bool:
        """Do the records at the positions of units ``k`` and ``k + 1`` form a log (intact,
        indexes ``k`` and ``k + 1``, the second right after the first or at the start of a
        later segment, terms not decreasing)? Then a unit that breaks the chain is damaged in
        place (a read of its entry refuses it), not a sign of another writer."""
        heads = []
        for unit in (u1, u2):
            f = self.scan.data.find_file(unit[1])
            if f is None:
                return False
            try:
                heads.append(_read_record(f, unit[1] - f.file_from_offset))
            except CorruptEntryError:
                return False
        h1, h2 = heads
        end = u1[1] + h1.size
        return (h1.index == k and h2.index == k + 1 and h2.term >= h1.term
                and (u2[1] == end or (u2[1] > end and u2[1] % self.scan.data.mapped_file_size == 0)))

    def fallback_start(self):
        files = self.scan.data.files
        for i in range(max(0, len(files) - 3), -1, -1):
            f = files[i]
            off = f.start_position if i == 0 else 0
            magic, _ = MAGIC_SIZE.unpack_from(f.mm, off)
            if magic == MAGIC_BLANK:
                continue
            try:
                h = _read_record(f, off)
            except CorruptEntryError:
                continue
            unit = self.scan.unit_at(h.index)
            if unit is not None and _unit_matches(unit, h, f.file_from_offset + off):
                return f.file_from_offset + off, h.index - 1, -1, i == 0
        first = files[0]
        return first.file_from_offset + first.start_position, None, -1, True

    # -- deciding about a bad record -------------------------------------------------------
    def intact_entries_after(self, k: int, bad_pos: int, last_term: int) -> bool:
        """Do intact entries with index > k lie beyond ``bad_pos``? (mid-log corruption test)"""
        scan = self.scan
        idx = scan.index
        if not idx.files:
            return False
        last_k = idx.max_wrote_position() // INDEX_UNIT_SIZE - 1
        candidates = list(range(k + 1, min(k + 1 + LOOKAHEAD_UNITS, last_k + 1)))
        if last_k > k + LOOKAHEAD_UNITS:
            candidates.append(last_k)
        for j in candidates:
            unit = scan.unit_at(j)
            if unit is None or unit.index != j or unit.pos <= bad_pos:
                continue
            h = scan.record_for_unit(unit)
            if h is not None and h.index == j and h.term >= last_term:
                return True
        return False

    def lost_write_at_end(self, k: int, pos: int, last_term: int) -> bool:
        """Where the log ends cleanly at ``pos``, did entry ``k`` stand there, vouched for by
        its index unit? Appends write the record before its unit, and in ``fsync`` mode sync
        it first too, so a unit naming entry ``k`` at the end's very place (a term not below
        the last entry's) means its record was written and then lost. Only where that order
        reached the disk: ``fsync`` mode, or a page cache the machine kept."""
        scan = self.scan
        if scan.durability is not FSYNC and not scan.page_cache_kept:
            return False
        unit = scan.unit_at(k)
        return (unit is not None and unit.size > 0 and unit.index == k and unit.pos == pos
                and unit.term >= last_term)

    # -- the scan --------------------------------------------------------------------------
    def run(self) -> RecoveredLog:
        scan = self.scan
        data = scan.data
        cp = read_checkpoint(scan.store_dir)
        start = None
        if cp is not None and cp.end_index >= 0 and cp.end_index > cp.before_begin_index and data.files:
            start = self.trusted_start(cp)
            if start is None:
                scan.warn("checkpoint of %s says entry %d is flushed, but it does not match the "
                          "files (%s); ignoring it and scanning the last segments",
                          scan.store_dir, cp.end_index, scan.cp_rejected)
                # a flushed entry is not there as it was: what was acknowledged may be lost
                scan.lost_tail = True
        trusted = start is not None
        # Where the last durable point is known (a checkpoint that checks out, or one written
        # while the log was empty) and appends are not synced one by one (page-cache mode),
        # what follows it was never promised durable: parts of it may reach the disk out of
        # order, so it is cut at its first bad record even if intact entries follow.
        cp_empty = cp is not None and cp.end_index <= cp.before_begin_index
        unconfirmed_tail = (trusted or cp_empty) and scan.durability is PAGE_CACHE
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
        fsize = data.mapped_file_size
        files = data.files
        fi = 0
        if files:
            fi = max(0, min((pos - files[0].file_from_offset) // fsize, len(files) - 1))
        stop_reason = None
        unvouched = False  # the scan stopped at an intact first record whose index is not vouched for
        # from the first unit that disagrees with its record on, every unit is rewritten from
        # the data; the units on disk are still compared (and looked at to judge damage)
        rebuilding = scan.start_unit is not None
        # the record before the scan carries a CRC (see _check_body)
        unit0 = scan.start_unit or (scan.unit_at(last_index) if last_index >= 0 else None)
        h0 = scan.record_for_unit(unit0) if unit0 is not None else None
        after_crc = h0 is not None and h0.body_crc != 0
        rebuild = scan.rebuilt.append
        if scan.start_unit is not None:
            rebuild(scan.start_unit)
        while True:  # the scan; it resumes after a damaged record it can step over
            while fi < len(files):
                f = files[fi]
                base = f.file_from_offset
                if pos - base >= fsize:
                    fi += 1
                    continue
                for item in iter_segment_records(f.mm, pos - base, fsize, path=f.path, base=base):
                    pos = base + item.offset
                    h = item.header
                    if h is None:
                        stop_reason = item.error or _END_OF_DATA
                        break
                    try:
                        _check_body(f, item.offset, h, after_crc=after_crc)
                    except CorruptEntryError as exc:
                        stop_reason = str(exc)
                        break
                    after_crc = h.body_crc != 0
                    k, term = h.index, h.term
                    if expect is not None and k != expect:
                        stop_reason = f"entry index {k} where {expect} was expected"
                        break
                    if expect is None and not self.judge.index_vouched(h, pos):
                        # nothing before it says which index comes next: its index field (not
                        # under the CRC) must be vouched for, else it is damage, never the end
                        expect = self.judge.begin_unit_at(pos)
                        stop_reason = (f"entry index {k} is vouched for by neither its index unit "
                                       f"nor the entry after it")
                        unvouched = True
                        break
                    if term < last_term:
                        stop_reason = f"entry {k} has term {term} below the previous term {last_term}"
                        break
                    unit = scan.unit_at(k)
                    agrees = unit is not None and _unit_matches(unit, h, pos)
                    if (unit is not None and (unit.index, unit.pos, unit.size) == (k, pos, h.size)
                            and not agrees and not (_torn_unit(unit, h, pos)
                                                    and not self.judge.term_implausible(k, term, pos + h.size))
                            and not self.judge.unit_damaged(unit, h, last_term, pos + h.size)
                            and not (not unconfirmed_tail  # there: a torn tail
                                     and self.judge.self_consistent_record(k, pos) is not None
                                     and self.judge.magic_ambiguous(unit, h))):
                        # Same entry, same place, but another term or type, and not a unit torn
                        # by a crash: a header field (not covered by the CRC) or the unit is
                        # damaged. Stale units are erased on truncation, so this is not a leftover.
                        stop_reason = (f"entry {k} (term {term}, magic {h.magic}) disagrees with "
                                       f"its index unit (term {unit.term}, magic {unit.magic})")
                        break
                    kept = self.judge.just_damaged(k)  # its unit is kept as it is: a peer's copy decides
                    if not agrees and not kept and self.judge.term_implausible(k, term, pos + h.size):
                        # no unit vouches for the record's term (not covered by its CRC), and it
                        # is above the term file's or the next entry's: its term field is damaged
                        stop_reason = (f"entry {k} has term {term}, above the term file's "
                                       f"({scan.current_term}) or the next index unit's")
                        break
                    if not agrees and not kept:
                        rebuilding = True  # from here on every unit is rewritten
                    if rebuilding:
                        rebuild(unit if kept else IndexUnit(h.magic, pos, h.size, k, term))
                    last_index, last_term, expect = k, term, k + 1
                    pos += h.size
                else:  # the walk reached the segment's end
                    pos = base + fsize
                    fi += 1
                    continue
                break
            else:
                if files and pos > files[-1].file_from_offset + fsize:  # pragma: no cover - defensive
                    pos = files[-1].file_from_offset + fsize
            # a zero header followed by intact entries is a lost write in the middle of the log
            if stop_reason is None or unconfirmed_tail:
                break
            k = expect if expect is not None else last_index + 1
            bad_file = data.find_file(pos)
            if bad_file is None or not (self.intact_entries_after(last_index, pos, last_term)
                                        or self.judge.located_by_next_record(k, pos, last_term)) or (
                    scan.durability is FSYNC and never_written(bad_file, pos - bad_file.file_from_offset)):
                break
            unit = self.judge.skip_damaged(k, pos, last_term)
            on_disk = scan.unit_at(k)
            if unit is None or (rebuilding and on_disk is None):
                break
            # mid-log damage with intact entries after it, located by its index unit: the entry
            # stays in the log, refused by reads until repaired; the scan goes on after it
            self.judge.note_damaged(k, CorruptStoreError(
                f"entry {k} is damaged ({stop_reason.split(' (file ')[0]})", path=bad_file.path,
                offset=pos - bad_file.file_from_offset, position=pos))
            if rebuilding:
                rebuild(on_disk)  # its unit stays as it is on disk (a repair proves it)
            last_index, last_term, expect = k, unit.term, k + 1
            pos += unit.size
            stop_reason, unvouched = None, False
            fi = max(0, min((pos - files[0].file_from_offset) // fsize, len(files) - 1))

        bad = stop_reason is not None and stop_reason != _END_OF_DATA
        if stop_reason is not None:
            k = expect if expect is not None else last_index + 1
            bad_file = data.find_file(pos)
            where = (bad_file.path, pos - bad_file.file_from_offset) if bad_file else (scan.data_path, pos)
            if not unconfirmed_tail and self.intact_entries_after(last_index, pos, last_term):
                if not (scan.durability is FSYNC and bad_file is not None
                        and never_written(bad_file, pos - bad_file.file_from_offset)):
                    raise CorruptStoreError(
                        f"entry {k} is damaged ({stop_reason}) but later entries are intact; "
                        f"refusing to cut durable data", path=where[0], offset=where[1],
                        position=pos)
                # fsync mode: the record shows bytes that never reached the disk (a lost
                # sector, or a body never written), the trace of a power cut in
                # the middle of an append that never returned (each append syncs its data, then
                # its index, before it returns); the entries after it were written by the same
                # unfinished append, out of order, and were never acknowledged. A lost write of
                # a synced sector looks the same, and then the entries cut were acknowledged
                # (seed 200010): the store reports a lost tail, so that the replica votes and
                # counts only once a leader gave them back.
                scan.lost_tail = True
                scan.warn("store %s: unsynced append cut at entry %d (%s: bytes that never "
                          "reached the disk) in %s at offset %d", scan.store_dir, k,
                          stop_reason, where[0], where[1])
            if (not trusted and not unconfirmed_tail and files
                    and last_segment_with_data(files, pos) - pos > fsize):
                raise CorruptStoreError(
                    f"log ends early ({stop_reason}); more than one segment of data would be "
                    f"discarded", path=where[0], offset=where[1], position=pos)
            tail = data.max_wrote_position() - pos
            if not bad and not scan.lost_tail and self.lost_write_at_end(k, pos, last_term):
                # a clean end (a zero header), yet the next entry's index unit is on disk and
                # names this very place: the unit was written after its record (synced first,
                # in fsync mode), so the record was there and a lost write took it (seed 564518)
                scan.lost_tail = True
                scan.warn("store %s: entry %d is gone from %s at offset %d, yet its index unit "
                          "is on disk (a lost write of synced data): entries from %d on may "
                          "have been acknowledged", scan.store_dir, k, where[0], where[1], k)
            if (bad and scan.durability is FSYNC and (last_index >= 0 or unvouched or self.unit_names(k, pos))
                    and bad_file is not None
                    and not never_written(bad_file, pos - bad_file.file_from_offset)):
                # fsync mode, a bad last record without the trace of unwritten bytes (or an
                # intact first one whose index nothing vouches for, or a first one whose index
                # unit is on disk and names it: units are written after their record's sync,
                # seed 2300248): it may be an acknowledged entry damaged in place. It is cut
                # (the node must reopen) and the store reports that acknowledged entries may
                # be lost.
                scan.lost_tail = True
            if (bad and scan.durability is FSYNC and not scan.lost_tail
                    and self.lost_write_at_end(k, pos, last_term)):
                # fsync mode: the bad last record shows bytes that never reached the disk, as
                # an append a power cut interrupted leaves, yet its index unit is on disk naming
                # it: units are written after their record's sync, so the record was whole and
                # a lost write of synced data took part of it (seed 800301)
                scan.lost_tail = True
                scan.warn("store %s: entry %d in %s at offset %d shows bytes that never reached "
                          "the disk, yet its index unit is on disk (a lost write of synced data): "
                          "entries from %d on may have been acknowledged", scan.store_dir, k,
                          where[0], where[1], k)
            if scan.page_cache_kept and scan.durability is PAGE_CACHE and bad_file is not None and (
                    (bad and (last_index >= 0 or unvouched) and not never_written(bad_file, pos - bad_file.file_from_offset))
                    or (unconfirmed_tail and self.intact_entries_after(last_index, pos, last_term))):
                # page_cache mode, but the machine did not restart since the last process wrote
                # (the page cache kept every write): a bad record without the trace of a write
                # cut short, or intact entries cut after it, were written whole and may have
                # been acknowledged; the store must report the loss (as in fsync mode)
                scan.lost_tail = True
            if bad:
                scan.warn("store %s: torn tail cut at entry %d (%s) in %s at offset %d",
                          scan.store_dir, k, stop_reason, where[0], where[1])
            elif tail > 0 and files and pos < files[-1].file_from_offset:
                log.info("store %s: log ends at %s offset %d", scan.store_dir, where[0], where[1])
        if scan.rebuilt:
            scan.warn("store %s: rebuilt %d index units from the data", scan.store_dir, len(scan.rebuilt))
        return self.plan(pos, last_index, last_term, bad, cp)

    def unit_names(self, k: int, pos: int) -> bool:
        """Is entry ``k``'s index unit on disk, naming an entry ``k`` at position ``pos``?"""
        unit = self.scan.unit_at(k) if k >= 0 else None
        return unit is not None and unit.index == k and unit.pos == pos and unit.size > 0

    # -- the plan --------------------------------------------------------------------------
    def rebuild_keeps_head(self) -> bool:
        """Do the rebuilt units go after the index's surviving head (cut it at the first rebuilt
        unit), rather than replace the whole index (it does not reach that far)?"""
        idx, target = self.scan.index, self.scan.rebuilt[0].index * INDEX_UNIT_SIZE
        return bool(idx.files) and idx.min_offset() <= target <= idx.max_wrote_position()

    def before_begin_term(self, before_begin: int, cp: Checkpoint | None) -> int:
        """Term of the before-begin index: from its index unit if it survives the rebuild, else
        the checkpoint."""
        scan = self.scan
        unit = None
        if not scan.rebuilt or scan.read_only or self.rebuild_keeps_head():
            unit = read_index_unit(scan.index, before_begin)
        if unit is not None and unit.index == before_begin:
            return unit.term
        if cp is not None and cp.before_begin_index == before_begin:
            return cp.before_begin_term
        return -1

    def plan(self, pos: int, last_index: int, last_term: int, bad: bool,
             cp: Checkpoint | None) -> RecoveredLog:
        scan = self.scan
        idx = scan.index
        index_begin = None
        if last_index >= 0:
            end_index, end_term = last_index, last_term
            bbi, bbt = -1, -1
            if cp is not None and cp.before_begin_index >= 0:
                bbi, bbt = cp.before_begin_index, cp.before_begin_term
            # The begin comes from the first data record (segments before it were deleted)
            first = self.judge.first_index(pos)
            if first is not None:
                if first - 1 != bbi:
                    bbi = first - 1
                    if bbi >= 0 and end_index >= first - 1:
                        bbt = self.before_begin_term(first - 1, cp)
                index_begin = first * INDEX_UNIT_SIZE
        else:  # an empty log (after a full reset it keeps its begin in the index list)
            bbi = idx.min_offset() // INDEX_UNIT_SIZE - 1 if idx.files else -1
            bbt = cp.before_begin_term if cp is not None and cp.before_begin_index == bbi else -1
            end_index, end_term = bbi, bbt
        committed = -1
        if cp is not None:
            if cp.committed_index > end_index:
                scan.warn("store %s: checkpoint committed index %d is ahead of the log end %d; "
                          "clamped", scan.store_dir, cp.committed_index, end_index)
            committed = min(cp.committed_index, end_index)
        return RecoveredLog(cp, bbi, bbt, end_index, end_term, committed, pos, bad,
                            tuple(scan.rebuilt), index_begin, (end_index + 1) * INDEX_UNIT_SIZE,
                            tuple(scan.warnings), scan.lost_tail,
                            tuple((k, e) for k, e in scan.damaged if k <= end_index))


def recover(data: MmapFileList, index: MmapFileList, *, store_dir: str, data_path: str,
            durability: Durability, read_only: bool, current_term: int | None = None,
            page_cache_kept: bool = False) -> RecoveredLog:
    """Plan the recovery of a store whose lists are loaded (see the module docstring).
    ``current_term``: the term file's term when it was read intact (no entry is above it).
    ``page_cache_kept``: the machine did not restart since the last writer ran (``store/suspect.py``)."""
    scan = RecoveryScan(data, index, store_dir=store_dir, data_path=data_path, durability=durability,
                        read_only=read_only)
    scan.current_term = current_term
    scan.page_cache_kept = page_cache_kept
    return _Planner(scan).run()
