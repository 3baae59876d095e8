"""A flipped term field of a mid-log record is damage, never a torn tail nor a higher term.

A record's ``term`` is not covered by its CRC (the CRC covers the body only). The rule under
test (``store.recovery``, ``recovery_damage``): recovery trusts a record's term only when its
index unit agrees with it; otherwise the term must fit what else the store knows: not above
the term file's term (no entry is written above it), nor above the term of the next entry
whose unit agrees with it. A record that fails this is damaged, located by its unit (or by the
intact record of the next entry where the unit ends), kept and refused until a peer's copy
repairs it. The intact entries after it are never cut as a torn tail, and neither the log's
end term nor the current term is ever raised from the flipped field. This holds while the
index is being rebuilt from the data too (from a unit that disagrees with its record on,
here a neighbouring unit with a flipped bit).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from dledger.errors import CorruptStoreError
from dledger.sim.disk import crash_store
from dledger.store.log_store import RepairRefusedError
from helpers.small_store import DATA_FILE_SIZE, INDEX_FILE_SIZE, append_bodies, body, open_small
from helpers.store_files import (copy_store, flip_bit, index_unit_location, record_location, segment_bytes,
                                 write_at)

TERM_OFFSET = 16          # of the term field in a record header (8 bytes, big-endian)


# -- the flips found in the five-node repair scenario (ST-12, seed 5, fsync) ----------------------
SIM_DATA, SIM_INDEX = 1 << 20, 32 * 8192


def _sim_like(d: str) -> None:
    """A follower of a five-node fsync cluster: 40 entries of term 0 (75-byte records), no
    checkpoint past the empty log's, crashed."""
    s = open_small(d, "fsync", data_file_size=SIM_DATA, index_file_size=SIM_INDEX)
    s.clear_suspect()
    s.persist_term(0, "n4")
    append_bodies(s, [b"entry-%03d" % k * 3 for k in range(40)])
    crash_store(s)


def test_a_flipped_term_behind_a_flipped_index_unit_is_kept_as_damage_not_a_torn_tail(tmp_path):
    """Bit 2 of data byte 1895 (entry 25's term: 0 -> 67108864) and bit 2 of index byte 679
    (unit 21's pos). Unit 21 disagrees with its intact record, so the units are rebuilt from
    the data from there on; entry 25's term was then taken from its header, entry 26 (term 0)
    below it was taken for a torn tail, and the store reopened with its log ending at 25 and
    its term at 67108864 (elected with it, it made followers cut committed entries)."""
    src = str(tmp_path / "src")
    _sim_like(src)
    ref = copy_store(src, str(tmp_path / "ref"))
    s = open_small(ref, "fsync", data_file_size=SIM_DATA, index_file_size=SIM_INDEX)
    copies = [s.get_raw(i) for i in range(40)]
    s.close()
    a = copy_store(src, str(tmp_path / "a"))
    rec = record_location(a, 25, SIM_INDEX, SIM_DATA)
    unit = index_unit_location(a, 21, SIM_INDEX)
    assert (rec.offset + TERM_OFFSET + 4, unit.offset + 7) == (1895, 679)   # the found bytes
    flip_bit(rec.path, 1895, 2)
    flip_bit(unit.path, 679, 2)
    s = open_small(a, "fsync", data_file_size=SIM_DATA, index_file_size=SIM_INDEX)
    try:
        assert (s.ledger_end_index, s.ledger_end_term, s.current_term) == (39, 0, 0)
        assert s.suspect is None
        assert list(s.damaged()) == [25]
        with pytest.raises(CorruptStoreError):
            s.get_raw(25)
        assert [s.get_raw(i) for i in range(40) if i != 25] == [c for i, c in enumerate(copies) if i != 25]
        s.repair(25, copies[25])
        assert [s.get_raw(i) for i in range(40)] == copies
        assert s.damaged() == {}
    finally:
        s.close()
    assert segment_bytes(a) == segment_bytes(ref)


# -- any bit of a mid-log record's term, alone or with a bit of a neighbouring unit ---------------
TERMS = [1] * 6 + [2] * 6 + [4] * 6 + [5] * 6     # entries 0..23
CURRENT_TERM = 6
LAST = len(TERMS) - 1
SHAPES = {"checkpoint-7": 7, "no-checkpoint": -1}   # the entry the checkpoint vouches for


def _build(d: str, checkpoint: int) -> None:
    """Entries in terms 1, 2, 4 and 5 over three data segments, the term file at 6, a checkpoint
    (or none past the empty log's), crashed in fsync mode: every entry after the checkpoint is
    scanned on open."""
    s = open_small(d, "fsync")
    s.clear_suspect()
    for i, term in enumerate(TERMS):
        if s.current_term != term:
            s.persist_term(term, None)
        append_bodies(s, [body(i, 40)])
        if i == checkpoint:
            s.update_committed_index(i)
            s.flush()
    s.persist_term(CURRENT_TERM, None)
    crash_store(s)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("termflips")
    out = {}
    for shape, checkpoint in SHAPES.items():
        d = str(root / shape)
        _build(d, checkpoint)
        ref = copy_store(d, str(root / f"{shape}-ref"))
        s = open_small(ref, "fsync")
        out[shape] = (d, [s.get_raw(i) for i in range(LAST + 1)])
        s.close()
    return out


def _check_open(a: str, copies, victim: int, neighbour: int | None, where: str) -> None:
    s = open_small(a, "fsync")
    try:
        assert s.ledger_end_index == LAST, f"{where}: the log was cut at {s.ledger_end_index}"
        assert s.ledger_end_term == TERMS[LAST], f"{where}: end term {s.ledger_end_term}"
        assert s.current_term == CURRENT_TERM, f"{where}: term {s.current_term}"
        for i in range(LAST + 1):
            try:
                assert s.get_raw(i) == copies[i], f"{where}: entry {i} served wrong"
            except CorruptStoreError:
                assert i in (victim, neighbour), f"{where}: entry {i} refused"
        if victim in s.damaged():
            s.repair(victim, copies[victim])
            assert s.get_raw(victim) == copies[victim], where
    finally:
        s.close()


def _flip_term(a: str, victim: int, bit: int) -> None:
    rec = record_location(a, victim, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    flip_bit(rec.path, rec.offset + TERM_OFFSET + 7 - bit // 8, bit % 8)


@pytest.mark.parametrize("victim", [8, 11, 17, 22])   # first scanned, last of terms 2 and 4, last but one
@pytest.mark.parametrize("shape", SHAPES)
def test_every_bit_of_a_mid_log_term_field_is_damage_never_a_cut(pristine, tmp_path, shape, victim):
    src, copies = pristine[shape]
    for bit in range(64):
        a = copy_store(src, str(tmp_path / f"{bit}"))
        _flip_term(a, victim, bit)
        _check_open(a, copies, victim, None, f"term bit {bit} of entry {victim}")


@settings(max_examples=150, deadline=None)
@given(shape=st.sampled_from(sorted(SHAPES)), data=st.data(), bit=st.integers(0, 63),
       side=st.sampled_from([-1, 1]), unit_byte=st.integers(0, 31), unit_bit=st.integers(0, 7))
def test_a_flipped_term_with_a_flipped_neighbouring_unit_never_cuts_nor_raises_the_term(
        pristine, tmp_path_factory, shape, data, bit, side, unit_byte, unit_bit):
    src, copies = pristine[shape]
    victim = data.draw(st.integers(max(SHAPES[shape] + 1, 1), LAST - 1), label="victim")
    neighbour = victim + side
    a = copy_store(src, str(tmp_path_factory.mktemp("a") / "s"))
    _flip_term(a, victim, bit)
    unit = index_unit_location(a, neighbour, INDEX_FILE_SIZE)
    flip_bit(unit.path, unit.offset + unit_byte, unit_bit)
    _check_open(a, copies, victim, neighbour,
                f"term bit {bit} of entry {victim}, bit {unit_bit} of byte {unit_byte} of unit {neighbour}")


@pytest.mark.parametrize("unit_damage", ["lost", "pos"])
@pytest.mark.parametrize("bit", [3, 26, 40, 61])
def test_a_term_above_the_term_files_is_damage_where_no_unit_vouches_for_it(pristine, tmp_path, unit_damage,
                                                                            bit):
    """Entry 14's own unit is lost (zeros, a write that never reached the disk) or its pos
    flipped, so no unit vouches for the record and the units are rebuilt from the data from
    there on; its term, flipped above the term file's, is still damage: the next entry places
    the record, which is kept and refused until a peer's copy (with the next entry's, the
    proof for a record and unit both damaged) repairs it."""
    src, copies = pristine["checkpoint-7"]
    victim = 14
    a = copy_store(src, str(tmp_path / "a"))
    _flip_term(a, victim, bit)
    unit = index_unit_location(a, victim, INDEX_FILE_SIZE)
    if unit_damage == "lost":
        write_at(unit.path, unit.offset, bytes(unit.size))
    else:
        flip_bit(unit.path, unit.offset + 11, 3)
    s = open_small(a, "fsync")
    try:
        assert (s.ledger_end_index, s.ledger_end_term, s.current_term) == (LAST, TERMS[LAST], CURRENT_TERM)
        assert list(s.damaged()) == [victim]
        with pytest.raises(CorruptStoreError):
            s.get_raw(victim)
        assert all(s.get_raw(i) == copies[i] for i in range(LAST + 1) if i != victim)
        s.repair(victim, copies[victim], copies[victim + 1])
        assert [s.get_raw(i) for i in range(LAST + 1)] == copies
    finally:
        s.close()


@pytest.mark.parametrize("durability", ["page_cache", "fsync"])
def test_a_local_repair_never_takes_a_term_above_the_nodes_from_a_record(tmp_path, durability):
    """The last entry, which the checkpoint vouches for, has its record's term flipped above the
    term file's: the open keeps it as damaged (its unit agrees with the checkpoint). The local
    repair, which rebuilds a unit from its intact record, must not take the record's term:
    nothing after the entry bounds it, but no entry is written above the node's term (swarm seed
    200137: the unit was rebuilt with term 2**27 and the entry committed so on one replica)."""
    d = str(tmp_path / "s")
    s = open_small(d, durability)
    s.clear_suspect()
    s.persist_term(3, None)
    append_bodies(s, [body(i, 40) for i in range(6)])
    copies = [s.get_raw(i) for i in range(6)]
    s.close()
    _flip_term(d, 5, 27)
    s = open_small(d, durability)
    try:
        assert (s.ledger_end_index, s.ledger_end_term, s.current_term) == (5, 3, 3)
        assert list(s.damaged()) == [5]
        with pytest.raises(RepairRefusedError):
            s.repair(5)
        with pytest.raises(CorruptStoreError):
            s.get_raw(5)
        s.repair(5, copies[5])
        assert [s.get_raw(i) for i in range(6)] == copies
    finally:
        s.close()
