"""DamageJudge: how recovery tells a damaged record from a damaged index unit (a mixin of the
recovery planner, ``recovery._Planner``).

The planner's scan meets a record that fails a check or disagrees with its index unit. These
methods decide, from the unit, its neighbours and the term file, which of the two is damaged:

- ``term_implausible``: a term above the term file's, or above the next entry's, cannot be an
  entry's (terms do not decrease along the log, and no entry is written above the current
  term);
- ``unit_damaged``: an intact record that disagrees with its unit in term or magic, where the
  record fits the log and the unit does not: the unit is rebuilt from the data;
- ``skip_damaged``: the unit of a damaged record, when it locates the record beyond doubt, so
  the scan steps over it and the entry is kept as damaged (``note_damaged``), refused by reads
  until it is repaired from a peer (``store/repair.py``).

The planner provides ``unit_at(k)``, ``data`` (the data segment list), ``current_term`` (the
term file's term when it was read intact, else None), ``damaged`` (the list it fills) and
``warn``.
"""

from __future__ import annotations

from dledger.entry import BODY_OFFSET, VALID_MAGICS, IndexUnit, RecordHeader
from dledger.errors import CorruptStoreError


class DamageJudge:
    def term_implausible(self, k: int, term: int, end: int) -> bool:
        """Is ``term`` (of the record of entry ``k`` ending at ``end``) above what the log
        allows: above the term file's term, or above the term of entry ``k + 1`` whose unit
        follows it? Then a record that disagrees with a unit looking torn (its term's low bytes
        zero: term 0 in particular) has a damaged term field, and the unit is right."""
        if self.current_term is not None and term > self.current_term:
            return True
        nxt = self.unit_at(k + 1)
        return (nxt is not None and nxt.index == k + 1 and nxt.term < term
                and (nxt.pos == end or (nxt.pos > end and nxt.pos % self.data.mapped_file_size == 0)))

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

    # -- damaged records kept in the log ------------------------------------------------
    def note_damaged(self, k: int, exc: CorruptStoreError) -> None:
        self.warn("store %s: %s; kept, refused until repaired from a peer", self.store_dir, exc)
        self.damaged.append((k, exc))

    def skip_damaged(self, k: int, pos: int, last_term: int) -> IndexUnit | None:
        """The index unit of a damaged record at ``pos`` (entry ``k``) if it locates it beyond
        doubt, so the scan can step over it and keep the entries after it: the unit names
        ``k`` at ``pos`` with a sane size inside the segment, a term not below the previous
        entry's, and unit ``k + 1`` (when written) follows it (position and term). Else None."""
        unit = self.unit_at(k)
        f = self.data.find_file(pos)
        if (unit is None or f is None or unit.index != k or unit.pos != pos
                or unit.magic not in VALID_MAGICS or unit.size < BODY_OFFSET
                or pos - f.file_from_offset + unit.size > f.file_size or unit.term < last_term):
            return None
        nxt = self.unit_at(k + 1)
        if nxt is not None and nxt.index == k + 1:
            end = pos + unit.size
            if nxt.term < unit.term or not (nxt.pos == end or (
                    nxt.pos > end and nxt.pos % self.data.mapped_file_size == 0)):
                return None
        return unit
