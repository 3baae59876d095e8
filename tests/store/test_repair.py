"""Repairing a damaged entry in place: only with a copy proven to be the same entry.

A store of 20 entries over two data segments (and two index segments) is built, copied
pristine, closed or crashed, then one bit of one of its files is flipped:

- a bit of a committed record (any byte of its header or body): the open keeps the log whole,
  the entry is refused by every read and listed by ``damaged()`` with file and offset, and
  ``repair(index, copy)`` with the pristine replica's record restores files byte-identical to
  the replica's;
- a wrong copy (another entry, the same index of another term, a copy with a flipped bit, a
  copy without a CRC, a truncated copy) is refused with ``RepairRefusedError`` and changes
  nothing on disk;
- a bit of an index unit over an intact record: ``repair(index)`` rebuilds it from the record
  (or the open already did), files byte-identical to the replica's.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dledger.entry import BODY_OFFSET, INDEX_UNIT_SIZE, DLedgerEntry, encode
from dledger.errors import DISK_ERROR, CorruptStoreError, DLedgerError
from dledger.sim.disk import PowerLoss, crash_store
from dledger.store import DLedgerMemoryStore
from dledger.store.log_store import RepairRefusedError
from helpers.small_store import DATA_FILE_SIZE, INDEX_FILE_SIZE, append_bodies, body, open_small
from helpers.store_files import copy_store, flip_bit, index_unit_location, read_at, record_location, segment_bytes

N = 20
BODY = 32
SHAPES = ("closed", "crashed-fsync")


def _build(d: str, shape: str) -> str:
    durability = "fsync" if shape == "crashed-fsync" else "page_cache"
    s = open_small(d, durability)
    s.persist_term(2, None)
    append_bodies(s, [body(i, BODY) for i in range(N // 2)])
    s.persist_term(3, None)
    append_bodies(s, [body(i, BODY) for i in range(N // 2, N)])
    s.update_committed_index(N - 1)
    if shape == "crashed-fsync":
        s.flush()
        append_bodies(s, [body(i, BODY) for i in range(N, N + 4)])   # scanned on the next open
        crash_store(s)
    else:
        s.close()
    return durability


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("repair")
    out = {}
    for shape in SHAPES:
        d = str(root / shape)
        out[shape] = (d, _build(d, shape))
    return out


def _replica(pristine, tmp, shape):
    src, durability = pristine[shape]
    a = copy_store(src, os.path.join(tmp, "a"))
    b = copy_store(src, os.path.join(tmp, "b"))
    return a, b, durability


def _records(d: str, n: int) -> dict[int, bytes]:
    """Every record as its bytes on disk (read by location, independently of the store)."""
    out = {}
    for i in range(n):
        loc = record_location(d, i, INDEX_FILE_SIZE, DATA_FILE_SIZE)
        out[i] = read_at(loc.path, loc.offset, loc.size)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(SHAPES), victim=st.integers(0, N - 1), at=st.integers(0, 1 << 30),
       bit=st.integers(0, 7))
def test_any_flipped_bit_of_a_committed_record_is_refused_then_repaired_byte_identical(
        pristine, tmp_path_factory, shape, victim, at, bit):
    tmp = str(tmp_path_factory.mktemp("flip"))
    a, b, durability = _replica(pristine, tmp, shape)
    loc = record_location(a, victim, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    copies = _records(b, N)
    flip_bit(loc.path, loc.offset + at % loc.size, bit)
    s = open_small(a, durability)
    try:
        s.clear_suspect()
        end = s.ledger_end_index
        assert end >= N - 1, "a committed entry was cut"
        with pytest.raises(CorruptStoreError) as info:
            s.get(victim)
        assert info.value.path == loc.path and info.value.offset == loc.offset
        assert list(s.damaged()) == [victim]
        with pytest.raises(CorruptStoreError):
            s.get_raw_range(victim, 1 << 20)
        s.repair(victim, copies[victim])
        assert s.damaged() == {} and s.get_raw(victim) == copies[victim]
    finally:
        s.close()
    pb = open_small(b, durability)
    pb.close()
    assert segment_bytes(a) == segment_bytes(b)


WRONG = {
    "another entry": lambda copies, v: copies[(v + 1) % N],
    "same index, another term": lambda copies, v: _retermed(copies[v]),
    "a flipped bit": lambda copies, v: copies[v][:BODY_OFFSET + 3] + bytes([copies[v][BODY_OFFSET + 3] ^ 4])
    + copies[v][BODY_OFFSET + 4:],
    "no CRC": lambda copies, v: copies[v][:40] + bytes(4) + copies[v][44:],
    "truncated": lambda copies, v: copies[v][:-1],
    "another position": lambda copies, v: _repositioned(copies[v]),
}


def _decoded(raw: bytes) -> DLedgerEntry:
    from dledger.entry import decode
    return decode(raw)


def _retermed(raw: bytes) -> bytes:
    e = _decoded(raw)
    return encode(DLedgerEntry(body=e.body, magic=e.magic, index=e.index, term=e.term + 1, pos=e.pos))


def _repositioned(raw: bytes) -> bytes:
    e = _decoded(raw)
    return encode(DLedgerEntry(body=e.body, magic=e.magic, index=e.index, term=e.term, pos=e.pos + 8))


@pytest.mark.parametrize("wrong", sorted(WRONG))
@pytest.mark.parametrize("shape", SHAPES)
def test_a_wrong_copy_is_refused_and_changes_nothing(pristine, tmp_path, shape, wrong):
    a, b, durability = _replica(pristine, str(tmp_path), shape)
    victim = 7
    copies = _records(b, N)
    loc = record_location(a, victim, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    flip_bit(loc.path, loc.offset + BODY_OFFSET + 1, 2)
    s = open_small(a, durability)
    try:
        with pytest.raises(CorruptStoreError):
            s.get(victim)
        before = segment_bytes(a)
        with pytest.raises(RepairRefusedError):
            s.repair(victim, WRONG[wrong](copies, victim))
        assert segment_bytes(a) == before
        assert list(s.damaged()) == [victim]
        with pytest.raises(CorruptStoreError):
            s.get(victim)
        s.repair(victim, copies[victim])          # the right copy still repairs it
        assert s.get_raw(victim) == copies[victim]
    finally:
        s.close()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("field_offset", range(0, INDEX_UNIT_SIZE, 3))
@pytest.mark.parametrize("victim", [0, 8])      # 0: the log's first entry has no unit before it
def test_a_damaged_index_unit_over_an_intact_record_is_rebuilt_from_it(pristine, tmp_path, shape,
                                                                      field_offset, victim):
    a, b, durability = _replica(pristine, str(tmp_path), shape)
    unit = index_unit_location(a, victim, INDEX_FILE_SIZE)
    flip_bit(unit.path, unit.offset + field_offset, 5)
    s = open_small(a, durability)
    try:
        copy = _records(b, N)[victim]
        try:
            got = s.get_raw(victim)
            assert got == copy                      # the open rebuilt it, or it reads right
        except CorruptStoreError:
            assert victim in s.damaged()
            s.repair(victim)                        # from the local record, nothing asked
            assert s.get_raw(victim) == copy
        assert s.damaged() == {}
    finally:
        s.close()
    open_small(b, durability).close()
    assert segment_bytes(a) == segment_bytes(b)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("unit_field", [31, 23])      # the unit's term, its index
def test_a_record_and_its_index_unit_both_damaged_are_kept_and_repaired_from_a_copy_its_neighbours_prove(
        pristine, tmp_path, shape, unit_field):
    """Entry 7 (its neighbours 6 and 8 both of term 2): the entry's term is known, the copy
    alone is enough. Entry 9 (neighbours of terms 2 and 3): the peer's record of entry 10 must
    come with the copy and equal the local one (log matching); without it, or with another one,
    the copy is refused and nothing changes."""
    a, b, durability = _replica(pristine, str(tmp_path), shape)
    copies = _records(b, N)
    for victim in (7, 9):
        loc = record_location(a, victim, INDEX_FILE_SIZE, DATA_FILE_SIZE)
        unit = index_unit_location(a, victim, INDEX_FILE_SIZE)
        flip_bit(loc.path, loc.offset + BODY_OFFSET, 0)
        flip_bit(unit.path, unit.offset + unit_field, 0)
    s = open_small(a, durability)                        # kept: nothing cut, nothing refused
    try:
        assert s.ledger_end_index == (N + 3 if shape == "crashed-fsync" else N - 1)
        assert set(s.damaged()) == {7, 9}
        for victim in (7, 9):
            with pytest.raises(CorruptStoreError):
                s.get(victim)
            with pytest.raises(RepairRefusedError):
                s.repair(victim)                         # nothing local to rebuild from
        for wrong in (copies[8], _retermed(copies[7])):  # another entry; another term
            with pytest.raises(RepairRefusedError):
                s.repair(7, wrong)
        before = segment_bytes(a)
        for following in (None, copies[11], _retermed(copies[10])):
            with pytest.raises(RepairRefusedError):
                s.repair(9, copies[9], following)        # the term of entry 9 is not proven
        assert segment_bytes(a) == before
        s.repair(7, copies[7])
        s.repair(9, copies[9], copies[10])
        assert s.damaged() == {}
        assert s.get_raw(7) == copies[7] and s.get_raw(9) == copies[9]
    finally:
        s.close()
    open_small(b, durability).close()
    assert segment_bytes(a) == segment_bytes(b)


def _damage_records_and_a_unit(d: str, victims, at: int, bit: int) -> None:
    """Flip a bit of each victim's body, then bit ``bit`` of byte ``at`` of the first one's unit."""
    for victim in victims:
        loc = record_location(d, victim, INDEX_FILE_SIZE, DATA_FILE_SIZE)
        flip_bit(loc.path, loc.offset + BODY_OFFSET, 0)
    unit = index_unit_location(d, victims[0], INDEX_FILE_SIZE)
    flip_bit(unit.path, unit.offset + at, bit)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("unit_field", [15, 23])      # the unit's size, its index
def test_two_damaged_records_in_a_row_the_first_with_its_unit_are_kept_and_repaired_in_turn(
        pristine, tmp_path, shape, unit_field):
    """Swarm seed 1830038: the records of entries 4 and 5 are damaged, and so is the index unit
    of entry 4. Entry 5 cannot place entry 4 by its record; its own unit places it, as entry
    6's unit follows it. The open keeps both entries (it used to refuse to start, the node
    staying down), each refused by reads; entry 5 is repaired from its copy first, then entry 4
    from its copy, which entry 5, intact again, proves."""
    a, b, durability = _replica(pristine, str(tmp_path), shape)
    copies = _records(b, N)
    _damage_records_and_a_unit(a, (4, 5), unit_field, 3)
    s = open_small(a, durability)
    try:
        assert s.ledger_end_index == (N + 3 if shape == "crashed-fsync" else N - 1)
        assert set(s.damaged()) == {4, 5}
        for victim in (4, 5):
            with pytest.raises(CorruptStoreError):
                s.get(victim)
        assert s.get_raw(6) == copies[6]
        with pytest.raises(RepairRefusedError):
            s.repair(4, copies[4])                       # entry 5 does not read yet: nothing proves it
        s.repair(5, copies[5])
        s.repair(4, copies[4])
        assert s.damaged() == {}
        assert s.get_raw(4) == copies[4] and s.get_raw(5) == copies[5]
    finally:
        s.close()
    open_small(b, durability).close()
    assert segment_bytes(a) == segment_bytes(b)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(SHAPES), first=st.integers(0, N - 3), two=st.booleans(),
       at=st.integers(0, INDEX_UNIT_SIZE - 1), bit=st.integers(0, 7))
def test_a_damaged_record_or_two_in_a_row_with_any_bit_of_the_first_unit_flipped_open_and_are_repaired(
        pristine, tmp_path_factory, shape, first, two, at, bit):
    """The open never refuses nor cuts: the damaged entries are refused by reads, every other
    entry reads as the replica's, and repairs from the copies, the last entry first, each with
    the record after it, give files byte-identical to the replica's. (A flip of the unit's term
    above the term file's used to refuse the open even with one damaged record: the next entry
    now places it.)"""
    a, b, durability = _replica(pristine, str(tmp_path_factory.mktemp("flip")), shape)
    copies = _records(b, N)
    victims = [first, first + 1] if two else [first]
    _damage_records_and_a_unit(a, victims, at, bit)
    s = open_small(a, durability)
    try:
        assert s.ledger_end_index >= N - 1, "a committed entry was cut"
        for k in range(N):
            if k in victims:
                with pytest.raises(CorruptStoreError):
                    s.get(k)
            else:
                assert s.get_raw(k) == copies[k]
        for victim in reversed(victims):
            s.repair(victim, copies[victim], copies[victim + 1])
        assert s.damaged() == {}
    finally:
        s.close()
    open_small(b, durability).close()
    assert segment_bytes(a) == segment_bytes(b)


def test_repair_of_an_intact_entry_changes_nothing_and_a_read_only_store_refuses(pristine, tmp_path):
    a, b, durability = _replica(pristine, str(tmp_path), "closed")
    copies = _records(b, N)
    s = open_small(a, durability)
    try:
        before = segment_bytes(a)
        s.repair(3, copies[3])
        assert segment_bytes(a) == before
        with pytest.raises(DLedgerError):
            s.repair(N + 5, copies[3])
    finally:
        s.close()
    r = open_small(b, durability, read_only=True)
    try:
        with pytest.raises(RepairRefusedError):
            r.repair(3, copies[3])
    finally:
        r.close()


def test_the_memory_store_has_nothing_damaged_and_accepts_only_its_own_copy():
    m = DLedgerMemoryStore()
    m.persist_term(1, None)
    append_bodies(m, [body(i) for i in range(3)])
    assert m.damaged() == {}
    m.repair(1, m.get_raw(1))
    m.repair(1)
    with pytest.raises(RepairRefusedError):
        m.repair(1, m.get_raw(2))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("bit", [0, 3, 7])
def test_a_flipped_index_field_in_the_first_record_does_not_move_the_logs_begin(pristine, tmp_path,
                                                                               shape, bit):
    """Bug: the open took the log's begin from the first record's index field, which its CRC
    does not cover: one flipped bit there moved the begin to 2**56 and hid the whole log."""
    a, b, durability = _replica(pristine, str(tmp_path), shape)
    copies = _records(b, N)
    loc = record_location(a, 0, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    flip_bit(loc.path, loc.offset + 8, bit)                   # the top byte of entry 0's index
    s = open_small(a, durability)
    try:
        assert s.ledger_before_begin_index == -1 and s.ledger_end_index >= N - 1
        with pytest.raises(CorruptStoreError):
            s.get(0)
        assert [s.get_raw(i) for i in range(1, N)] == [copies[i] for i in range(1, N)]
        s.repair(0, copies[0])
        assert s.get_raw(0) == copies[0]
    finally:
        s.close()


@pytest.mark.parametrize("durability", ["page_cache", "fsync"])
@pytest.mark.parametrize("bit", [0, 6])
def test_a_flipped_term_over_an_index_unit_of_term_0_never_raises_the_logs_term(tmp_path, durability,
                                                                               bit):
    """Bug (found by the five-node repair scenario, seed 3): a record's term field flipped high
    over an index unit of term 0 passed for a unit torn by a crash (its zero term bytes looked
    unwritten); the open rebuilt the unit from the record, raised the term file to 2**46 and
    the replica, missing committed entries after it, won the next election. A term above the
    term file's or above the next entry's is damage, not a torn unit."""
    d = str(tmp_path / "s")
    s = open_small(d, durability)
    append_bodies(s, [body(i, BODY) for i in range(10)])          # term 0
    s.update_committed_index(9)
    s.flush()
    append_bodies(s, [body(i, BODY) for i in range(10, 16)])      # scanned on the next open
    if durability == "fsync":
        s.flush(checkpoint=False)
    crash_store(s)
    loc = record_location(d, 12, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    flip_bit(loc.path, loc.offset + 16 + 1, bit)                  # a high byte of entry 12's term
    s = open_small(d, durability)
    try:
        assert s.ledger_end_term == 0 and s.current_term == 0
        assert all(e.term == 0 for e in s.iter_entries(0, 11))
        if durability == "fsync":                                 # kept, refused until repaired
            assert s.ledger_end_index == 15 and list(s.damaged()) == [12]
        else:                                                     # the unsynced tail ends there
            assert s.ledger_end_index == 11
    finally:
        s.close()


@pytest.mark.parametrize("field_offset,bit", [(0, 1), (0, 7), (24, 0), (24, 5), (31, 3)],
                         ids=["magic-1", "magic-7", "term-high", "term-mid", "term-low"])
def test_a_damaged_index_unit_in_the_scanned_tail_is_rebuilt_not_a_refused_open(pristine, tmp_path,
                                                                              field_offset, bit):
    """Entry 21 lies after the checkpoint (fsync mode): the open scans it and finds its intact
    record disagreeing with its unit in magic or term. The record fits the log (its term between
    its neighbours' and not above the term file's) while the unit does not: the unit is rebuilt
    from the data (the open refused here before)."""
    a, b, durability = _replica(pristine, str(tmp_path), "crashed-fsync")
    unit = index_unit_location(a, 21, INDEX_FILE_SIZE)
    flip_bit(unit.path, unit.offset + field_offset, bit)
    copies = _records(b, N + 4)
    s = open_small(a, durability)
    try:
        assert s.ledger_end_index == N + 3 and s.damaged() == {}
        assert [s.get_raw(i) for i in range(N + 4)] == [copies[i] for i in range(N + 4)]
    finally:
        s.close()
    open_small(b, durability).close()
    assert segment_bytes(a) == segment_bytes(b)


@pytest.mark.parametrize("durability", ["page_cache", "fsync"])
@pytest.mark.parametrize("byte", [23, 35, 36])       # its term; channel and chain CRC (reserved, 0)
def test_a_damaged_empty_record_a_no_op_is_repaired_from_a_copy_its_crc_is_0_and_vouches_for_nothing_missing(
        tmp_path, durability, byte):
    """An entry with an empty body (a leader's no-op) has CRC 0, the CRC-32 of nothing: a copy of
    it is all header, and every header field is checked against the index unit (swarm seed
    6051: such a copy was refused as CRC-less for ever, and the replica never converged); its
    reserved fields must be 0 as in a record with a CRC (swarm seed 6100: a flipped bit of its
    chain CRC was read as a Java record's and served, bytes unlike every other replica's)."""
    dirs = []
    for name in ("a", "b"):
        d = str(tmp_path / name)
        s = open_small(d, durability)
        s.persist_term(1, None)
        append_bodies(s, [body(0, BODY), b"", body(2, BODY)])
        s.update_committed_index(2)
        s.close()
        dirs.append(d)
    a, b = dirs
    copy = _records(b, 3)[1]
    assert len(copy) == BODY_OFFSET
    loc = record_location(a, 1, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    flip_bit(loc.path, loc.offset + byte, 0)
    s = open_small(a, durability)
    try:
        with pytest.raises(CorruptStoreError):
            s.get(1)
        assert 1 in s.damaged()
        s.repair(1, copy)
        assert s.get_raw(1) == copy and s.damaged() == {}
    finally:
        s.close()
    assert segment_bytes(a) == segment_bytes(b)


def test_a_repair_whose_msync_fails_fails_the_store(pristine, tmp_path):
    # seed 91046 (3 nodes, fsync, --safety-ms 20000): the raw OSError of the msync escaped
    # ``repair`` and crashed the node's event loop instead of failing the store (fail-stop)
    a, b, durability = _replica(pristine, str(tmp_path), "closed")
    copies = _records(b, N)
    loc = record_location(a, 5, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    flip_bit(loc.path, loc.offset + BODY_OFFSET + 1, 2)
    disk = PowerLoss()
    s = open_small(a, durability, store_io=disk.io)
    try:
        with pytest.raises(CorruptStoreError):
            s.get(5)
        disk.fail_syncs(1)
        with pytest.raises(DLedgerError) as info:
            s.repair(5, copies[5])
        assert info.value.code == DISK_ERROR and "repair failed" in (s.failed or "") and "msync" in s.failed
        with pytest.raises(DLedgerError) as again:
            s.repair(5, copies[5])      # a failed store repairs nothing more until reopened
        assert again.value.code == DISK_ERROR and "reopen it" in str(again.value)
        with pytest.raises(DLedgerError):
            append_bodies(s, [body(99, BODY)])
    finally:
        crash_store(s)
