"""LogReader: the file store's reads (``get``, ``get_raw``, ``get_raw_range``, terms, ``verify``).

A part of ``DLedgerMmapFileStore`` (see ``mmap_file_store.py``): it holds the shared state
(``state.StoreState``), reads its ``data_list`` and ``index_list`` and, there, the bounds,
``index_overrides`` and ``written_from``; it changes nothing but the notes of damaged entries
(``damaged``). The façade's reads (``get``, ``get_raw``, ``get_raw_range``,
``get_entry_term``, ``verify``) are this part's methods, bound on the store when it is built
(no call layer between a caller and the read); the cut and repair parts find entries through
``index_unit`` and ``read_entry``.

Rules:
- an entry is found through its index unit, and its record must agree with that unit
  (``dledger.entry.matches_unit``) and with its CRC; a record with a CRC (written by dledger)
  must also hold 0 in the reserved ``channel`` and ``chain_crc`` fields, which nothing else
  covers; a record that fails a check raises
  ``CorruptStoreError`` (file, offset) and is never returned; it is noted in the store's
  damaged entries (``repair.py``) until repaired;
- the one exception: ``get_raw_range`` (the leader reading for a push) returns entries written
  through this store object since ``load`` unchecked, because every follower checks each
  pushed record, CRC included, before writing it;
- read-only opens may hold rebuilt index units in memory (``index_overrides``): they win.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate

from dledger.entry import (BODY_OFFSET, INDEX_UNIT, INDEX_UNIT_SIZE, MAGIC_CONFIG_CHANGE,
                           RECORD_PREFIX, VALID_MAGICS, DLedgerEntry, IndexUnit, crc32, crc_vouches, decode,
                           matches_unit)
from dledger.errors import (INDEX_LESS_THAN_LOCAL_BEGIN, INDEX_OUT_OF_RANGE, CorruptEntryError,
                            CorruptStoreError, DLedgerError)
from dledger.store.mmap_file import MmapFile
from dledger.store.state import StoreState


class LogReader:
    """Reading the file store (a part of ``DLedgerMmapFileStore``)."""

    def __init__(self, state: StoreState) -> None:
        self.state = state
        self.data_list = state.data_list
        self.index_list = state.index_list
        self.data_path = state.data_path
        self.index_path = state.index_path

    def index_unit(self, index: int) -> IndexUnit:
        """Entry ``index``'s index unit (a rebuilt one kept in memory wins), checked to name
        the entry; else ``CorruptStoreError``."""
        unit = self.state.index_overrides.get(index) if self.state.index_overrides else None
        if unit is not None:
            return unit
        pos = index * INDEX_UNIT_SIZE
        f = self.index_list.find_file(pos)
        off = pos - f.file_from_offset if f is not None else -1
        if f is None or off + INDEX_UNIT_SIZE > f.wrote_position:
            raise CorruptStoreError(f"index unit {index} is missing", path=self.index_path,
                                    position=pos)
        unit = IndexUnit._make(INDEX_UNIT.unpack_from(f.mm, off))
        if unit.index != index or unit.size < BODY_OFFSET or unit.magic not in VALID_MAGICS:
            raise CorruptStoreError(f"index unit {index} is corrupt: {unit}", path=f.path, offset=off)
        return unit

    def _check_range(self, index: int) -> None:
        self.state.check_open()
        if index < 0 or index > self.state.ledger_end_index:
            raise DLedgerError(f"index {index} out of range (end {self.state.ledger_end_index})",
                               INDEX_OUT_OF_RANGE)
        if index <= self.state.ledger_before_begin_index:
            raise DLedgerError(f"index {index} is before the log's begin "
                               f"{self.state.ledger_before_begin_index + 1}", INDEX_LESS_THAN_LOCAL_BEGIN)

    def _locate(self, index: int) -> tuple[IndexUnit, MmapFile, int]:
        unit = self.index_unit(index)
        f = self.data_list.find_file(unit.pos)
        if f is None or unit.pos - f.file_from_offset + unit.size > f.wrote_position:
            raise CorruptStoreError(f"index unit {index} points outside the data ({unit.pos}, "
                                    f"{unit.size} bytes)", path=self.data_path, position=unit.pos)
        return unit, f, unit.pos - f.file_from_offset

    def get(self, index: int) -> DLedgerEntry:
        """The entry at ``index``; ``CorruptStoreError`` (file, offset) if its bytes fail a check
        (the entry then joins ``damaged()`` until it is repaired)."""
        self._check_range(index)
        try:
            return self.read_entry(index)
        except CorruptStoreError as exc:
            self.state.note_damage(index, exc)
            raise

    def read_entry(self, index: int) -> DLedgerEntry:
        """Entry ``index`` read and checked (``CorruptStoreError`` when it fails a check), its
        range not checked and its damage not noted (the repair part reads with it)."""
        unit, f, off = self._locate(index)
        try:
            entry = decode(f.mm, off, limit=f.wrote_position, path=f.path, base=f.file_from_offset)
        except CorruptEntryError as exc:
            raise CorruptStoreError(f"entry {index} is corrupt: {exc.args[0].split(' (')[0]}",
                                    path=f.path, offset=off, position=unit.pos) from None
        if (entry.channel or entry.chain_crc) and crc_vouches(entry.body_crc, entry.size):
            raise CorruptStoreError(f"entry {index} is corrupt: reserved fields channel="
                                    f"{entry.channel} chain_crc={entry.chain_crc} are not 0",
                                    path=f.path, offset=off, position=unit.pos)
        if not matches_unit(unit, entry.magic, entry.size, entry.index, entry.term,
                                    entry.pos, entry.body_crc):
            raise CorruptStoreError(f"entry at the position of index {index} is (index "
                                    f"{entry.index}, term {entry.term}, size {entry.size}, magic "
                                    f"{entry.magic}, pos {entry.pos}), index unit says (term "
                                    f"{unit.term}, size {unit.size}, magic {unit.magic}, pos "
                                    f"{unit.pos})", path=f.path, offset=off, position=unit.pos)
        if not entry.body_crc and entry.pos != unit.pos and (entry.pos == 0 or self._has_crc(index - 1)):
            # a CRC-less record may carry a Java leader's pos, but not 0 nor right after one of
            # ours (recovery's rule, store/recovery_scan.py check_body): its header was torn
            raise CorruptStoreError(f"entry {index} is corrupt: pos field {entry.pos} differs from "
                                    f"its position {unit.pos} and it has no body CRC after a "
                                    f"record with one", path=f.path, offset=off, position=unit.pos)
        return entry

    def _has_crc(self, index: int) -> bool:
        """Does the record of ``index`` carry a body CRC? (False when it cannot be read.)"""
        if index <= self.state.ledger_before_begin_index:
            return False
        try:
            _unit, f, off = self._locate(index)
            return decode(f.mm, off, limit=f.wrote_position, path=f.path, base=f.file_from_offset).body_crc != 0
        except (CorruptEntryError, DLedgerError):
            return False

    def get_raw(self, index: int) -> bytes:
        """The encoded record of ``index`` exactly as stored (header checked, CRC checked)."""
        entry = self.get(index)
        unit = self.index_unit(index)
        return self.data_list.get_data(unit.pos, entry.size)

    def get_raw_range(self, begin_index: int, max_bytes: int, max_count: int = 1 << 30, *,
                      checked: bool = False) -> tuple[bytes, int]:
        """Encoded records from ``begin_index`` on, up to ``max_bytes`` (at least one record).

        Returns ``(records, count)``; records never span a segment boundary within one call's
        contiguous copy, and blanks between segments are not included. ``checked``: every
        record is checked against its index unit and its CRC even when this store object
        wrote it (a reader that hands the bodies on, rather than a leader pushing records the
        follower checks again); a record that fails is noted as damaged and raises
        ``CorruptStoreError``, as ``get`` does.
        """
        self._check_range(begin_index)
        end = min(self.state.ledger_end_index, begin_index + max_count - 1)
        try:
            first_unit, f, off = self._locate(begin_index)
        except CorruptStoreError as exc:
            self.state.note_damage(begin_index, exc)
            raise
        units = [first_unit]
        nbytes = first_unit.size
        if end > begin_index and not self.state.index_overrides:
            # Extend within the same data segment as far as the limits allow, from the
            # following index units read in one slice per index segment.
            upos = (begin_index + 1) * INDEX_UNIT_SIZE
            most = min(end - begin_index, max(0, max_bytes - nbytes) // BODY_OFFSET)
            more = self._units_within(upos, most, max_bytes - nbytes, first_unit.size)
            if more:
                _m, poss, sizes, _i, _t = zip(*more)
                # ends[k]: where unit k must start to follow on; ends[k + 1] - pos: bytes through it
                ends = list(accumulate(sizes, initial=first_unit.pos + nbytes))
                take = max(0, bisect_right(ends, first_unit.pos + max_bytes) - 1)
                if poss[:take] != tuple(ends[:take]):     # a segment ends inside: stop there
                    take = next(k for k in range(take) if poss[k] != ends[k])
                units.extend(more[:take])
                nbytes = ends[take] - first_unit.pos
        elif end > begin_index:
            expect_pos = first_unit.pos + nbytes
            while begin_index + len(units) <= end:
                unit = self.index_unit(begin_index + len(units))
                if unit.pos != expect_pos or nbytes + unit.size > max_bytes:
                    break
                units.append(unit)
                nbytes += unit.size
                expect_pos += unit.size
        chunk = f.read(off, nbytes)
        if checked or begin_index < self.state.written_from:
            self._verify_chunk(chunk, begin_index, units, f.path, off)
        # else: written through this store object since it was opened (leader records encoded
        # here, follower records checked before they were written); the followers check every
        # pushed record again, CRC included, before writing it.
        return chunk, len(units)

    def _units_within(self, upos: int, most: int, room: int, guess: int) -> list[tuple]:
        """Up to ``most`` index units from ``upos`` on, read in growing steps until their
        records pass ``room`` bytes: a follower far behind costs the units a push can take, not
        every unit up to the log's end (``guess``: a record's size, for the first step)."""
        step = min(most, room // max(guess, BODY_OFFSET) + 2)
        more = self._units_from(upos, step)
        if len(more) < step or len(more) >= most:
            return more
        size = sum(u[2] for u in more)
        while size <= room and len(more) < most:
            step = min(most - len(more), step * 4)
            got = self._units_from(upos + len(more) * INDEX_UNIT_SIZE, step)
            if not got:
                break
            more.extend(got)
            size += sum(u[2] for u in got)
            if len(got) < step:
                break
        return more

    def _units_from(self, upos: int, most: int) -> list[tuple]:
        """Up to ``most`` index units from index list position ``upos`` on, as tuples, read in
        one slice per index segment (a run may go on in the next segment)."""
        idx = self.index_list
        more: list[tuple] = []
        while most > 0:
            xf = idx.find_file(upos)
            if xf is None:
                break
            lo = upos - xf.file_from_offset
            hi = min(xf.wrote_position, lo + most * INDEX_UNIT_SIZE)
            got = list(INDEX_UNIT.iter_unpack(xf.mm[lo:hi - (hi - lo) % INDEX_UNIT_SIZE]))
            more.extend(got)
            if hi < xf.file_size or not got:
                break
            upos += len(got) * INDEX_UNIT_SIZE
            most -= len(got)
        return more

    def _verify_chunk(self, chunk: bytes, first: int, units: list, path: str, base_off: int) -> None:
        """Every record of ``chunk`` agrees with its index unit (what the CRC does not cover)
        and with its CRC. ``units`` are ``(magic, pos, size, index, term)`` tuples."""
        unpack = RECORD_PREFIX.unpack_from
        view = memoryview(chunk)
        total = len(chunk)
        off = 0
        i = first
        for unit in units:
            if off + BODY_OFFSET > total:
                raise CorruptStoreError(f"entry {i} is corrupt: record header truncated", path=path,
                                        offset=base_off + off)
            magic, size, index, term, pos, ch, cc, body_crc, body_size = unpack(chunk, off)
            # a header equal to its unit field by field agrees with it (``matches_unit``, asked
            # only otherwise, allows Java's differences)
            if (index != i or body_size != size - BODY_OFFSET or size < BODY_OFFSET
                    or ((ch or cc) and (body_crc or size == BODY_OFFSET))
                    or magic not in VALID_MAGICS
                    or ((magic, pos, size, index, term) != unit
                        and not matches_unit(IndexUnit._make(unit), magic, size, index, term, pos, body_crc))
                    or (body_crc and crc32(view[off + BODY_OFFSET:off + size]) != body_crc)):
                exc = CorruptStoreError(f"entry {i} is corrupt", path=path, offset=base_off + off)
                self.state.note_damage(i, exc)
                raise exc
            off += size
            i += 1

    def config_entries(self, first: int, last: int) -> list[int]:
        """The indexes in ``[first, last]`` (clipped to the log) whose index unit names a
        configuration entry (magic 3), found by striding over the units' low magic byte (a
        million units in a few milliseconds)."""
        state = self.state
        first = max(first, state.ledger_before_begin_index + 1)
        last = min(last, state.ledger_end_index)
        out: list[int] = []
        if first > last:
            return out
        overrides = state.index_overrides
        idx = self.index_list
        upos, end = first * INDEX_UNIT_SIZE, (last + 1) * INDEX_UNIT_SIZE
        while upos < end:
            f = idx.find_file(upos)
            if f is None:
                break
            lo = upos - f.file_from_offset
            hi = min(f.wrote_position, lo + (end - upos))
            if hi <= lo:
                break
            low_bytes = f.mm[lo + 3:hi:INDEX_UNIT_SIZE]           # byte 3: the magic's low byte
            k = low_bytes.find(MAGIC_CONFIG_CHANGE)
            while k >= 0:
                if f.mm[lo + k * INDEX_UNIT_SIZE:lo + k * INDEX_UNIT_SIZE + 3] == b"\0\0\0":
                    out.append((upos + k * INDEX_UNIT_SIZE) // INDEX_UNIT_SIZE)
                k = low_bytes.find(MAGIC_CONFIG_CHANGE, k + 1)
            upos += hi - lo
        if overrides:
            found = set(out)
            for i, unit in overrides.items():
                if first <= i <= last and (unit.magic == MAGIC_CONFIG_CHANGE) != (i in found):
                    found.symmetric_difference_update((i,))
            out = sorted(found)
        return out

    def get_entry_term(self, index: int) -> int:
        """Term of ``index`` (``ledger_before_begin_term`` for the before-begin index)."""
        if index == self.state.ledger_before_begin_index:
            return self.state.ledger_before_begin_term
        self._check_range(index)
        return self.index_unit(index).term

    def verify(self, progress: Callable[[int], None] | None = None) -> list[CorruptStoreError]:
        """Read and check every entry; returns the errors found (empty when the log is sound)."""
        errors: list[CorruptStoreError] = []
        for i in range(self.state.ledger_before_begin_index + 1, self.state.ledger_end_index + 1):
            try:
                self.get(i)
            except CorruptStoreError as exc:
                errors.append(exc)
            if progress is not None:
                progress(i)
        return errors

