"""Repair: damaged entries of the file store, found and rewritten in place (a part of the façade).

A part of ``DLedgerMmapFileStore`` (see ``mmap_file_store.py``): it holds the shared state
(``state.StoreState``): its segment lists, bounds and ``damaged`` (entry index ->
``CorruptStoreError``), which recovery (an open that skipped a damaged record) and every read
that refused an entry fill in (``StoreState.note_damage``). It reads entries through the
store's own reads (``store``: ``get``, ``get_raw``) and its record reader (``read_entry``).

- ``damaged()``: the entries found damaged and not repaired yet, within the log's current
  range, each with the error naming the file and offset. They stay refused by every read
  (``get``, ``get_raw``, ``get_raw_range``) until repaired: never returned to a client, never
  pushed to a follower.
- ``repair(index)``: a damaged **index unit** over an intact record is rebuilt from the data
  alone. The record is found where its neighbours say it lies (right after entry
  ``index - 1``, or at the start of the next segment; the log's first entry opens the data),
  must be intact (header, CRC, reserved
  fields 0, ``pos`` its own position), carry ``index``, a term between its neighbours' and not
  above the node's current term (the term field is not under the CRC, and nothing after the
  last entry bounds it), and end where entry ``index + 1`` begins.
- ``repair(index, record)``: a damaged **data record** is rewritten, byte for byte, from a
  peer's copy. Raft's log matching makes an entry fully determined by its index and term,
  and replicas are byte-identical (a follower stores the leader's record at the leader's
  position), so the copy is accepted only when it is complete and intact (size, CRC — a copy
  without a CRC cannot be checked and is refused —, reserved fields 0) and agrees with the
  local index unit in every field (magic, index, term, pos, size), and that unit agrees with
  its neighbours (positions chain, terms do not decrease). Anything else raises
  ``RepairRefusedError`` and changes nothing. An accepted copy is written in place and synced
  (in either durability mode) before ``repair`` returns; then the entry reads again. An I/O
  error while writing or syncing fails the store (``store_io.writes_to_disk``: ``DISK_ERROR``,
  the node halts), and a failed store repairs nothing.

A record and its index unit that differ only in the magic, both valid, are repaired only from a
peer's copy (``repair(index)`` refuses: the record's magic is not under its CRC, so the unit
rebuilt from it could be the flipped one): the copy must agree with the local record in index,
term, pos, size and CRC and carry one of the two magics; record and unit are rewritten from it.
A unit that does not fit its neighbours is rebuilt from the local record (when intact) before a
copy is checked: a copy is never judged by a damaged unit. Nor is a unit judged by the unit of a
neighbour whose entry is damaged itself (its unit may be damaged as well).

A record and its index unit both damaged are repaired from a peer's copy that fits between
the entry's neighbours (it begins where entry ``index - 1`` ends and ends where entry
``index + 1`` begins, its term between theirs), when the entry's term is thereby known (its
neighbours have the same term) or the peer's record of ``index + 1``, sent with the copy, is
byte-identical to the local one (log matching: the two logs agree up to there). Else the entry
stays refused and ``damaged()`` keeps naming it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from dledger.entry import (BODY_OFFSET, INDEX_UNIT, INDEX_UNIT_SIZE, VALID_MAGICS, DLedgerEntry, IndexUnit,
                           crc_vouches, decode, matches_unit)
from dledger.errors import INDEX_OUT_OF_RANGE, CorruptEntryError, CorruptStoreError, DLedgerError
from dledger.store.log_store import RepairRefusedError
from dledger.store.mmap_file_list import read_index_unit
from dledger.store.state import StoreState

log = logging.getLogger(__name__)


class Repair:
    """Repairing the file store (a part of ``DLedgerMmapFileStore``)."""

    def __init__(self, state: StoreState, store, read_entry: Callable[[int], DLedgerEntry]) -> None:
        self.state = state
        #: the store: its reads (``get``, ``get_raw``)
        self.store = store
        #: entry ``i`` read and checked, without noting damage (the store's reader)
        self.read_entry = read_entry

    def damaged(self) -> dict[int, CorruptStoreError]:
        """Entries found damaged and not repaired yet (index -> the error naming file and
        offset), within the log's current range."""
        st = self.state
        lo, hi = st.ledger_before_begin_index, st.ledger_end_index
        for i in list(st.damaged):
            if not lo < i <= hi:
                del st.damaged[i]        # cut away or dropped by retention
                continue
            try:
                self.read_entry(i)         # replaced since (a truncation, then an append)?
            except CorruptStoreError:
                continue
            del st.damaged[i]
        return dict(sorted(st.damaged.items()))

    # -- locating -------------------------------------------------------------------------
    def _plain_unit(self, k: int) -> IndexUnit | None:
        """Index unit ``k`` if it is written and names entry ``k`` with sane fields."""
        st = self.state
        if k <= st.ledger_before_begin_index or k > st.ledger_end_index:
            return None
        unit = read_index_unit(st.index_list, k)
        if unit is None or unit.index != k or unit.magic not in VALID_MAGICS \
                or unit.size < BODY_OFFSET or unit.pos < 0:
            return None
        return unit

    def _follows(self, prev: IndexUnit, pos: int) -> bool:
        """Does a record at ``pos`` follow ``prev``'s record (right after, or at the start of a
        later segment)?"""
        end = prev.pos + prev.size
        return pos == end or (pos > end and pos % self.state.data_list.mapped_file_size == 0)

    def _unit_fits(self, unit: IndexUnit) -> bool:
        """Does ``unit`` (entry k) agree with its neighbours' units, where they are readable and
        their entries are not damaged themselves? A damaged neighbour's unit may be damaged too,
        and then it judges nothing (swarm seed 1830038: two damaged records in a row, the first
        one's unit with its size flipped, the second one's unit intact)."""
        damaged = self.state.damaged
        prev, nxt = (None if k in damaged else self._plain_unit(k) for k in (unit.index - 1, unit.index + 1))
        if prev is not None and (prev.term > unit.term or not self._follows(prev, unit.pos)):
            return False
        if nxt is not None and (nxt.term < unit.term or not self._follows(unit, nxt.pos)):
            return False
        return True

    def _record_slot(self, pos: int, size: int):
        f = self.state.data_list.find_file(pos)
        if f is None or pos - f.file_from_offset + size > f.wrote_position:
            return None, -1
        return f, pos - f.file_from_offset

    def _check_writable(self, index: int) -> None:
        st = self.state
        st.check_open()
        if st.read_only:
            raise RepairRefusedError(f"store {st.store_dir} is read-only: entry {index} not repaired")
        if not st.ledger_before_begin_index < index <= st.ledger_end_index:
            raise DLedgerError(f"entry {index} is not in the log ({st.ledger_before_begin_index + 1}"
                               f"..{st.ledger_end_index})", INDEX_OUT_OF_RANGE)

    # -- repairing ------------------------------------------------------------------------
    def repair(self, index: int, record: bytes | None = None, following: bytes | None = None) -> None:
        """Repair entry ``index``: its index unit from the local data (``record`` None), or its
        record from a peer's copy (see the module docstring); ``following`` is the same peer's
        record of entry ``index + 1``, read with it, a proof needed only when the local record
        and unit are both damaged. Raises ``RepairRefusedError`` and changes nothing when the
        repair cannot be proven right."""
        self._check_writable(index)
        if record is None:
            self._rebuild_unit(index)
        else:
            self._rewrite_record(index, bytes(record), None if following is None else bytes(following))
        self.state.damaged.pop(index, None)
        self.store.get(index)      # reads back: a repair that does not read is not one

    def _rewrite_record(self, index: int, record: bytes, following: bytes | None) -> None:
        unit = self._plain_unit(index)
        if unit is None or not self._unit_fits(unit):
            # the unit may be the damaged one over an intact record: rebuilt from the record
            # first, never used to judge a copy while damaged
            try:
                self._rebuild_unit(index)
            except RepairRefusedError:
                pass
            unit = self._plain_unit(index)
        cand = self._intact_copy(index, record)
        if unit is None or not self._unit_fits(unit):
            unit = self._unit_between_neighbours(index, cand, record, following)
            self._write_record(index, unit, record)
            self._write_unit(index, unit)
            return
        mine = self._magic_in_doubt(unit)
        if mine is not None and cand.magic in (mine.magic, unit.magic) and (
                cand.pos, cand.size, cand.index, cand.term, cand.body_crc) == (
                unit.pos, unit.size, unit.index, unit.term, mine.body_crc):
            # the record and its unit disagree only in the magic: the copy of the same entry
            # (index and term) decides, and the unit is rewritten from it too
            unit = IndexUnit(cand.magic, unit.pos, unit.size, index, unit.term)
            self._write_unit(index, unit)
        if not (cand.pos == unit.pos and matches_unit(unit, cand.magic, cand.size, cand.index,
                                                      cand.term, cand.pos, cand.body_crc)):
            if not self._record_intact(unit):
                # a unit over a damaged record may be damaged itself while still fitting its
                # neighbours (a term flipped to a value between theirs): the neighbours judge
                try:
                    unit = self._unit_between_neighbours(index, cand, record, following)
                except RepairRefusedError:
                    pass
                else:
                    self._write_record(index, unit, record)
                    self._write_unit(index, unit)
                    return
            raise RepairRefusedError(
                f"entry {index}: the copy is (index {cand.index}, term {cand.term}, pos "
                f"{cand.pos}, size {cand.size}, magic {cand.magic}), the index unit says (term "
                f"{unit.term}, pos {unit.pos}, size {unit.size}, magic {unit.magic})")
        self._write_record(index, unit, record)

    def _record_intact(self, unit: IndexUnit) -> bool:
        """Does an intact record (its CRC holds) lie where ``unit`` points, naming its entry?"""
        f, off = self._record_slot(unit.pos, BODY_OFFSET)
        if f is None:
            return False
        try:
            e = decode(f.mm, off, limit=f.wrote_position)
        except CorruptEntryError:
            return False
        return e.index == unit.index and e.pos == unit.pos and crc_vouches(e.body_crc, e.size)

    @staticmethod
    def _intact_copy(index: int, record: bytes):
        """The header of a peer's copy that is one whole, intact record with a CRC."""
        try:
            cand = decode(record, 0, limit=len(record))
        except CorruptEntryError as exc:
            raise RepairRefusedError(f"entry {index}: the copy is damaged: {exc}") from None
        if cand.size != len(record) or not crc_vouches(cand.body_crc, cand.size) or cand.channel \
                or cand.chain_crc:
            raise RepairRefusedError(f"entry {index}: the copy has no CRC or is not one whole "
                                     f"record ({len(record)} bytes)")
        return cand

    def _write_record(self, index: int, unit: IndexUnit, record: bytes) -> None:
        f, off = self._record_slot(unit.pos, unit.size)
        if f is None:
            raise RepairRefusedError(f"entry {index}: its position {unit.pos} is outside the data")
        if f.mm[off:off + unit.size] != record:
            f.write_at(off, record)
            f.flush_range(off, off + unit.size)
            log.warning("store %s: entry %d repaired from a peer's copy in %s at offset %d",
                        self.state.store_dir, index, f.path, off)

    def _unit_between_neighbours(self, index: int, cand, record: bytes,
                                 following: bytes | None) -> IndexUnit:
        """The record and the index unit of entry ``index`` are both damaged: the unit a peer's
        copy (header ``cand``) gets, if its neighbours prove it is the entry that was here.
        Entry ``index + 1`` must read intact; the copy must lie where entry ``index - 1`` ends
        (or open the next segment; or open the data for the log's first entry) and end where
        entry ``index + 1`` begins (or its segment ends). Its term must lie between the
        neighbours' terms; when those differ the term is not known locally, and the peer's
        record of ``index + 1`` (``following``, read with the copy) must be byte-identical to
        the local one: by Raft's log matching, equal entries at ``index + 1`` mean equal logs
        up to there, so the peer's entry ``index`` is this log's."""
        st = self.state
        refused = f"entry {index}: its index unit is damaged too"
        nxt = self._plain_unit(index + 1)
        try:
            local_next = bytes(self.store.get_raw(index + 1)) if nxt is not None else None
        except DLedgerError:
            local_next = None
        if local_next is None:
            raise RepairRefusedError(f"{refused}, and no intact entry after it locates the copy")
        prev = self._plain_unit(index - 1)
        fsize = st.data_list.mapped_file_size
        if prev is not None:
            end = prev.pos + prev.size
            places, low = (end, end - end % fsize + fsize), prev.term
        elif index == st.ledger_before_begin_index + 1 and st.data_list.files:
            places, low = (st.data_list.min_offset(),), max(st.ledger_before_begin_term, 0)
        else:
            raise RepairRefusedError(f"{refused}, and no intact index unit before it locates the copy")
        unit = IndexUnit(cand.magic, cand.pos, cand.size, cand.index, cand.term)
        if (cand.index != index or cand.pos not in places or cand.magic not in VALID_MAGICS
                or cand.pos % fsize + cand.size > fsize or not self._follows(unit, nxt.pos)):
            raise RepairRefusedError(
                f"{refused}; the copy (index {cand.index}, pos {cand.pos}, size {cand.size}) does "
                f"not fit between its neighbours (begins at one of {list(places)}, the next "
                f"entry at {nxt.pos})")
        if not low <= cand.term <= nxt.term:
            raise RepairRefusedError(f"{refused}; the copy's term {cand.term} is not between its "
                                     f"neighbours' terms {low} and {nxt.term}")
        if low != nxt.term and following != local_next:
            raise RepairRefusedError(
                f"{refused}, and its term (between {low} and {nxt.term}) is not known here: the "
                f"peer's entry {index + 1} " + ("was not sent with the copy" if following is None
                                                 else "differs from this log's") + ", so its copy "
                f"may come from another log")
        return unit

    def _rebuild_unit(self, index: int) -> None:
        st = self.state
        prev = self._plain_unit(index - 1)
        nxt = self._plain_unit(index + 1)
        if prev is not None:
            fsize = st.data_list.mapped_file_size
            end = prev.pos + prev.size
            places, low_term = (end, end - end % fsize + fsize), prev.term
        elif index == st.ledger_before_begin_index + 1 and st.data_list.files:
            # the log's first entry: its record opens the data
            places, low_term = (st.data_list.min_offset(),), max(st.ledger_before_begin_term, 0)
        else:
            raise RepairRefusedError(f"entry {index}: no intact index unit before it locates "
                                     f"its record")
        for pos in places:
            f, off = self._record_slot(pos, BODY_OFFSET)
            if f is None:
                continue
            try:
                e = decode(f.mm, off, limit=f.wrote_position)
            except CorruptEntryError:
                continue
            unit = IndexUnit(e.magic, pos, e.size, e.index, e.term)
            if (e.index != index or not crc_vouches(e.body_crc, e.size) or e.channel or e.chain_crc or e.pos != pos
                    or e.term < low_term or (nxt is not None and (nxt.term < e.term
                                                                   or not self._follows(unit, nxt.pos)))
                    or e.term > st.term_file.term):  # no entry is written above the node's term
                continue
            if self._magic_in_doubt(read_index_unit(st.index_list, index)) is not None:
                raise RepairRefusedError(
                    f"entry {index}: its record and its index unit disagree only in the magic "
                    f"({e.magic} and the unit's): which is right is not known here; a peer's "
                    f"copy decides")
            if not self._write_unit(index, unit):
                break
            log.warning("store %s: index unit %d rebuilt from its record in %s at offset %d",
                        st.store_dir, index, f.path, off)
            return
        raise RepairRefusedError(f"entry {index}: no intact record where its neighbours place it")

    def _write_unit(self, index: int, unit: IndexUnit) -> bool:
        upos = index * INDEX_UNIT_SIZE
        xf = self.state.index_list.find_file(upos)
        if xf is None:
            return False
        uoff = upos - xf.file_from_offset
        xf.write_at(uoff, INDEX_UNIT.pack(*unit))
        xf.flush_range(uoff, uoff + INDEX_UNIT_SIZE)
        return True

    def _magic_in_doubt(self, unit: IndexUnit | None):
        """The intact local record of ``unit`` when the two agree in everything but the magic
        and both magics are valid (the record's magic is not covered by its CRC: which one
        flipped is not known locally), else None."""
        if unit is None or unit.magic not in VALID_MAGICS or unit.size < BODY_OFFSET:
            return None
        f, off = self._record_slot(unit.pos, unit.size)
        if f is None:
            return None
        try:
            e = decode(f.mm, off, limit=f.wrote_position)
        except CorruptEntryError:
            return None
        if (e.magic != unit.magic and e.magic in VALID_MAGICS and crc_vouches(e.body_crc, e.size)
                and e.pos == unit.pos
                and (e.index, e.term, e.size) == (unit.index, unit.term, unit.size)
                and not matches_unit(unit, e.magic, e.size, e.index, e.term, e.pos, e.body_crc)):
            return e
        return None
