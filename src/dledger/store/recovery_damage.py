"""DamageJudge: how recovery tells a damaged record from a damaged index unit (a part of the
recovery planner, ``recovery._Planner``, holding the scan's shared state, ``recovery_scan.RecoveryScan``).

The planner's scan meets a record that fails a check or disagrees with its index unit. These
methods decide, from the unit, its neighbours and the term file, which of the two is damaged:

- ``term_implausible``: a term above the term file's, or above the next entry's, cannot be an
  entry's (terms do not decrease along the log, and no entry is written above the current
  term); the scan takes such a term, where no agreeing unit vouches for it, for a damaged
  record, never for a torn tail after it;
- ``unit_damaged``: an intact record that disagrees with its unit in term or magic, where the
  record fits the log and the unit does not: the unit is rebuilt from the data;
- ``self_consistent_record``: a record intact over its own size, naming its entry and fitting
  the log (the next entry begins where it ends, or nothing follows it), whatever its unit
  says: a unit that disagrees with it in size or magic is damaged and rebuilt from it, and the
  scan steps by the record's own size, never the unit's (a flipped size bit in a unit must not
  cut the intact entries after it as a torn tail);
- ``skip_damaged``: the unit of a damaged record, when it locates the record beyond doubt, so
  the scan steps over it and the entry is kept as damaged (``note_damaged``), refused by reads
  until it is repaired from a peer (``store/repair.py``); what follows it is unit ``k + 1``
  or, where that one is damaged or missing, the intact record of entry ``k + 1`` at its end
  (``record_follows``; ``located_by_next_record`` also counts it as intact entries after the
  damage); when the record's unit is damaged too, the next entry places it
  (``placed_by_next``): intact, or damaged itself but located by its own unit
  (``_located_by_own_unit``: a run of two damaged records whose first unit is damaged too).

- ``magic_ambiguous``: an intact record and its unit that differ only in the magic, both
  valid: the record's magic is not under its CRC, so which one flipped is not known; the entry
  is kept as damaged and only a peer's copy repairs it (record and unit).
- ``index_vouched``: a record's index field (not under its CRC) read where no earlier entry
  says which index comes next (the first record of a scan without a trusted start, the first
  record of the data for ``first_index``, the log's begin): taken only when its own unit or
  the entry after it agrees with it, else the record is damaged (``begin_unit_at`` names the
  entry the index places there). A flipped bit there must never become the log's end or begin
  (swarm seed 100109: 2**43).

The scan state (``self.scan``) provides ``unit_at(k)``, ``read_record(f, off)`` (a validated
header, CRC checked), ``data`` and ``index`` (the data and index segment lists), ``current_term``
(the term file's term when it was read intact, else None), ``damaged`` (the list it fills),
``store_dir`` and ``warn``.
"""

from __future__ import annotations

from dledger.entry import (BODY_OFFSET, INDEX_UNIT_SIZE, VALID_MAGICS, IndexUnit, RecordHeader, crc_vouches,
                           iter_segment_records)
from dledger.errors import CorruptEntryError, CorruptStoreError
from dledger.store.recovery_scan import RecoveryScan


class DamageJudge:
    """Judges damage met by recovery's scan (a part of the planner; see the module docstring)."""

    def __init__(self, scan: RecoveryScan) -> None:
        self.scan = scan

    def term_implausible(self, k: int, term: int, end: int) -> bool:
        """Is ``term`` (of the record of entry ``k`` ending at ``end``) above what the log
        allows: above the term file's term, or above the term of entry ``k + 1`` whose unit
        follows it? Then a record that disagrees with a unit looking torn (its term's low bytes
        zero: term 0 in particular) has a damaged term field, and the unit is right."""
        if self.scan.current_term is not None and term > self.scan.current_term:
            return True
        nxt = self.scan.unit_at(k + 1)
        return (nxt is not None and nxt.index == k + 1 and nxt.term < term
                and (nxt.pos == end or (nxt.pos > end and nxt.pos % self.scan.data.mapped_file_size == 0)))

    def unit_damaged(self, unit: IndexUnit, h: RecordHeader, last_term: int, end: int) -> bool:
        """Does an intact record that disagrees with its index unit in term or magic prove the
        unit damaged? Its own term fits the log (not below the previous entry's, not above the
        next one's nor the term file's) while the unit's does not, or the unit's magic is not a
        valid one. Then the unit is rebuilt from the data, as a torn one would be."""
        if self.term_implausible(h.index, h.term, end):
            return False
        if unit.magic not in VALID_MAGICS:
            return True
        return unit.term != h.term and (unit.term < last_term
                                        or self.term_implausible(h.index, unit.term, end))

    def self_consistent_record(self, k: int, pos: int) -> RecordHeader | None:
        """The record at ``pos`` if it proves itself entry ``k`` whatever its index unit says:
        intact over its own size (header, CRC, reserved fields 0, ``pos`` its own position),
        index ``k``, and it fits the log: unit ``k + 1`` or an intact record ``k + 1`` begins
        where it ends (or at the start of the next segment), or nothing is written after it.
        Then a unit that disagrees with it in size or magic is the damaged one. Else None."""
        f = self.scan.data.find_file(pos)
        if f is None:
            return None
        try:
            h = self.scan.read_record(f, pos - f.file_from_offset)
        except CorruptEntryError:
            return None
        if h.index != k or not crc_vouches(h.body_crc, h.size) or h.pos != pos:
            return None
        end = pos + h.size
        if self.next_entry_at(k, end, h.term, unit_term=False):
            return h
        # the last record: only zeros after it in its segment, and no later segment
        last = self.scan.data.files[-1]
        if f is last and not f.mm[end - f.file_from_offset:f.file_size].strip(b"\0"):
            return h
        return None

    def rebuild_start_unit(self, unit: IndexUnit, cp_term: int | None) -> bool:
        """The checkpoint's unit ``unit`` does not agree with its record: is the record intact
        at the unit's position, naming the entry and fitting the log, in the term the unit and
        the checkpoint recorded? Then the unit (its size or magic) is the damaged one: it is
        rebuilt from the record (``start_unit``) and the scan goes on after the record."""
        own = self.self_consistent_record(unit.index, unit.pos)
        if own is None or own.term != unit.term or (cp_term is not None and own.term != cp_term):
            return False
        if self.magic_ambiguous(unit, own):
            self.scan.start_unit = unit   # kept as it is: a peer's copy decides
            return True
        self.scan.start_unit = IndexUnit(own.magic, unit.pos, own.size, unit.index, own.term)
        self.scan.warn("store %s: index unit %d disagrees with its intact record (unit size %d, "
                  "magic %d; record size %d, magic %d); rebuilt from the record",
                  self.scan.store_dir, unit.index, unit.size, unit.magic, own.size, own.magic)
        return True

    def magic_ambiguous(self, unit: IndexUnit, h: RecordHeader) -> bool:
        """An intact record and its unit agree in everything but the magic, and both magics are
        valid: the record's magic is not covered by its CRC, so which one flipped cannot be
        told locally. The entry is kept as damaged (reads refuse it) with its unit as it is, and
        only a peer's copy (the entry is fixed by its index and term) repairs it, record and
        unit (``store/repair.py``). Noted here when so."""
        if (unit.magic not in VALID_MAGICS or unit.magic == h.magic or unit.size != h.size
                or unit.term != h.term or unit.index != h.index):
            return False
        f = self.scan.data.find_file(unit.pos)
        self.note_damaged(unit.index, CorruptStoreError(
            f"entry {unit.index}: its record says magic {h.magic}, its index unit {unit.magic}",
            path=f.path, offset=unit.pos - f.file_from_offset, position=unit.pos))
        return True

    # -- the first record's index (the scan's, the log's begin) --------------------------
    def index_vouched(self, h: RecordHeader, pos: int) -> bool:
        """Is the index field of the record at ``pos`` (``h``, intact) vouched for by the
        structure, with no earlier entry to say which index comes next? Its own unit (slot
        ``h.index``) names it (its index and position; the scan then compares the rest), or
        entry ``h.index + 1`` follows it: its unit names it where this record ends (or at the
        start of the next segment), or the record there reads intact with that index and a
        term not below."""
        k, end = h.index, pos + h.size
        unit = self.scan.unit_at(k)
        if unit is not None and unit.index == k and unit.pos == pos:
            return True
        return self.next_entry_at(k, end, h.term, unit_term=True)

    def next_entry_at(self, k: int, end: int, term: int, *, unit_term: bool) -> bool:
        """Does entry ``k + 1`` begin where entry ``k`` (of ``term``) ends at ``end``, or at the
        start of the next segment? Its index unit says so (with a term not below ``term`` when
        ``unit_term``), or an intact record there has index ``k + 1`` and a term not below."""
        fsize = self.scan.data.mapped_file_size
        nxt = self.scan.unit_at(k + 1)
        if nxt is not None and nxt.index == k + 1 and (not unit_term or nxt.term >= term) and (
                nxt.pos == end or (nxt.pos > end and nxt.pos % fsize == 0)):
            return True
        return any(n.index == k + 1 and n.term >= term for _at, n in self.records_at(end))

    def records_at(self, end: int):
        """``(position, header)`` of the intact record that begins at ``end``, and of the one
        that opens the next segment (where a record that did not fit begins instead)."""
        fsize = self.scan.data.mapped_file_size
        for at in dict.fromkeys((end, end + (-end) % fsize)):
            g = self.scan.data.find_file(at)
            if g is None:
                continue
            try:
                yield at, self.scan.read_record(g, at - g.file_from_offset)
            except CorruptEntryError:
                continue

    def first_index(self, data_end: int) -> int | None:
        """Index of the first record of the first data segment, once the data is cut at
        ``data_end``."""
        if not self.scan.data.files:
            return None
        f = self.scan.data.files[0]
        end = f.wrote_position
        if f.file_from_offset <= data_end < f.file_from_offset + f.file_size:
            end = data_end - f.file_from_offset
        for item in iter_segment_records(f.mm, f.start_position, end):
            h = item.header
            if h is None:
                return None
            pos = f.file_from_offset + item.offset
            unit = self.scan.unit_at(h.index)
            if unit is not None and unit.index == h.index and unit.pos == pos:
                return h.index
            # the record's index field may be damaged (its CRC does not cover it): the index
            # unit that names this position tells the begin instead, else the entry after it
            # must vouch for it (a flipped bit is never the begin)
            j = self.begin_unit_at(pos)
            if j is not None:
                return j
            return h.index if self.index_vouched(h, pos) else None
        return None

    def begin_unit_at(self, pos: int) -> int | None:
        """The entry the index list's first unit (or the one after it) places at ``pos``: its
        slot, its index field and its position agree. Else None."""
        if not self.scan.index.files:
            return None
        k = self.scan.index.min_offset() // INDEX_UNIT_SIZE
        for j in (k, k + 1):
            u = self.scan.unit_at(j)
            if u is not None and u.index == j and u.pos == pos:
                return j
        return None

    # -- damaged records kept in the log ------------------------------------------------
    def just_damaged(self, k: int) -> bool:
        return bool(self.scan.damaged) and self.scan.damaged[-1][0] == k

    def note_damaged(self, k: int, exc: CorruptStoreError) -> None:
        self.scan.warn("store %s: %s; kept, refused until repaired from a peer", self.scan.store_dir, exc)
        self.scan.damaged.append((k, exc))

    def skip_damaged(self, k: int, pos: int, last_term: int) -> IndexUnit | None:
        """The index unit of a damaged record at ``pos`` (entry ``k``) if it locates it beyond
        doubt, so the scan can step over it and keep the entries after it: the unit names
        ``k`` at ``pos`` with a sane size inside the segment, a term not below the previous
        entry's nor above the term file's, and entry ``k + 1`` follows it: its unit (position
        and term), or its intact record (``record_follows``); without a readable unit
        ``k + 1`` the term file's term must be known to bound the unit's. Else None, or the
        place ``placed_by_next`` finds when the unit is damaged too (it does not name ``k`` at
        ``pos`` with a sane size, its term is above the term file's, or it disagrees with
        entry ``k + 1``)."""
        unit = self.scan.unit_at(k)
        f = self.scan.data.find_file(pos)
        if f is None:
            return None
        if not self.names_damaged(unit, k, pos, last_term):
            return self.placed_by_next(k, pos, last_term, f)
        if self.scan.current_term is not None and unit.term > self.scan.current_term:
            # a damaged term (no entry is written above the current term): the unit is damaged
            # too, and only the next entry can place the record
            return self.placed_by_next(k, pos, last_term, f)
        nxt = self.scan.unit_at(k + 1)
        if nxt is not None and nxt.index == k + 1:
            end = pos + unit.size
            if nxt.term < unit.term or not (nxt.pos == end or (
                    nxt.pos > end and nxt.pos % self.scan.data.mapped_file_size == 0)):
                if self.record_follows(unit):
                    return unit  # unit k + 1 is damaged, record k + 1 places entry k
                return self.placed_by_next(k, pos, last_term, f)
        elif self.scan.current_term is None and not self.record_follows(unit):
            return None          # nothing bounds the unit's term: it is not trusted
        return unit

    def record_follows(self, unit: IndexUnit) -> bool:
        """Does an intact record of entry ``unit.index + 1`` (header, CRC, reserved fields 0,
        ``pos`` its own position) begin where ``unit`` says its entry ends, or open the next
        segment, with a term not below the unit's nor above the term file's? Then the data
        confirms the unit's place and size, and bounds its term, where unit ``k + 1`` cannot
        (it is damaged too, or was never written)."""
        for at, n in self.records_at(unit.pos + unit.size):
            if (n.index == unit.index + 1 and n.pos == at and crc_vouches(n.body_crc, n.size)
                    and unit.term <= n.term
                    and (self.scan.current_term is None or n.term <= self.scan.current_term)):
                return True
        return False

    def names_damaged(self, unit: IndexUnit | None, k: int, pos: int, last_term: int) -> bool:
        """Does ``unit`` name entry ``k`` at ``pos`` with a valid magic, a sane size inside its
        data segment, and a term not below ``last_term`` (the previous entry's)?"""
        f = self.scan.data.find_file(pos)
        return (f is not None and unit is not None and unit.index == k and unit.pos == pos
                and unit.magic in VALID_MAGICS and unit.size >= BODY_OFFSET
                and pos - f.file_from_offset + unit.size <= f.file_size and unit.term >= last_term)

    def located_by_next_record(self, k: int, pos: int, last_term: int) -> bool:
        """Intact entries follow a damaged record at ``pos`` (entry ``k``) even where no index
        unit after it agrees with its record: unit ``k`` names the record (``names_damaged``)
        and the intact record of entry ``k + 1`` begins where it ends (``record_follows``)."""
        unit = self.scan.unit_at(k)
        return self.names_damaged(unit, k, pos, last_term) and self.record_follows(unit)

    def placed_by_next(self, k: int, pos: int, last_term: int, f) -> IndexUnit | None:
        """The damaged record at ``pos`` (entry ``k``) whose index unit is damaged too: placed
        by entry ``k + 1`` when that one is intact (its unit names it, its record reads intact
        and names it, its term is not below ``last_term``) and begins later in the same
        segment or opens the next one. Then entry ``k`` spans ``pos`` up to it (or to its
        segment's end); its term is not known (``last_term`` stands for it: a lower bound, so
        the order of terms stays checked). The unit on disk is left as it is: reads refuse the
        entry until a peer's copy, proven by these neighbours, repairs record and unit."""
        nxt = self.scan.unit_at(k + 1)
        if nxt is None or nxt.index != k + 1 or nxt.term < last_term:
            return None
        seg_end = f.file_from_offset + self.scan.data.mapped_file_size
        if not (pos + BODY_OFFSET <= nxt.pos < seg_end or nxt.pos == seg_end):
            return None
        h = self.scan.record_for_unit(nxt)
        if (h is None or h.index != k + 1 or h.pos != nxt.pos) and not self._located_by_own_unit(nxt, last_term):
            return None
        self.scan.warn("store %s: the record and the index unit of entry %d are both damaged; entry "
                  "%d locates it", self.scan.store_dir, k, k + 1)
        return IndexUnit(0, pos, nxt.pos - pos, k, last_term)

    def _located_by_own_unit(self, unit: IndexUnit, last_term: int) -> bool:
        """Is the record of entry ``unit.index``, damaged, placed beyond doubt by its own unit:
        the unit names it (``names_damaged``) and entry ``unit.index + 1`` begins where it ends,
        by its unit (position, and a term not below) or by its intact record (``record_follows``)?
        This is ``skip_damaged``'s test without its fallback to ``placed_by_next``, so a run of
        damaged records is placed one entry ahead at most (swarm seed 1830038)."""
        k = unit.index
        if not self.names_damaged(unit, k, unit.pos, last_term):
            return False
        if self.scan.current_term is not None and unit.term > self.scan.current_term:
            return False
        nxt = self.scan.unit_at(k + 1)
        end = unit.pos + unit.size
        if nxt is not None and nxt.index == k + 1 and nxt.term >= unit.term and (
                nxt.pos == end or (nxt.pos > end and nxt.pos % self.scan.data.mapped_file_size == 0)):
            return True
        return self.record_follows(unit)
