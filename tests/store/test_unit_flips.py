"""Every bit of every field of a mid-log index unit flipped: nothing is cut, the unit is rebuilt.

A store of 24 entries over several data segments is built: a checkpoint vouches for entries
0..19, entries 20..23 are appended after it (crashed: a process crash in ``page_cache`` mode,
the page cache intact, or ``fsync`` mode; or closed). One bit of one field (magic, pos, size,
index, term: ``dledger.sim.corruption.UNIT_FIELDS``) of the index unit of an entry with intact
records after it is flipped: inside the trusted prefix (8), the checkpoint's own entry (19),
or the scanned tail (21). The rule under test (``store.recovery``, ``recovery_damage``): the
record is intact, so the unit is the damaged one. The open never cuts the log (its end is
unchanged), never steps by the unit's size, every other entry reads as written, and the victim
reads right (the open rebuilt its unit) or is refused until ``repair(index)`` rebuilds the unit
from the local record, or (the record and unit differ only in the magic, both valid: the
record's magic is not covered by its CRC) a peer's copy repairs both. Afterwards
the files are byte-identical to an untouched replica's.
"""

from __future__ import annotations

import os

import pytest

from dledger.entry import MAGIC_NOOP
from dledger.errors import CorruptStoreError
from dledger.sim.corruption import UNIT_FIELDS
from dledger.sim.disk import crash_store
from dledger.store.log_store import RepairRefusedError
from helpers.small_store import DATA_FILE_SIZE, INDEX_FILE_SIZE, append_bodies, body, open_small
from helpers.store_files import copy_store, flip_bit, index_unit_location, record_location, segment_bytes

BODY = 32
SHAPES = ("crashed-page_cache", "crashed-fsync", "closed")
VICTIMS = (8, 19, 21)
LAST = 23


def _build(d: str, shape: str) -> str:
    durability = "fsync" if shape == "crashed-fsync" else "page_cache"
    s = open_small(d, durability)
    s.clear_suspect()
    s.persist_term(2, None)
    append_bodies(s, [body(i, BODY) for i in range(10)])
    s.persist_term(3, None)
    append_bodies(s, [body(i, BODY) for i in range(10, 20)])
    s.update_committed_index(19)
    s.flush()                                                   # the checkpoint: entry 19
    append_bodies(s, [body(i, BODY) for i in range(20, LAST + 1)])
    if shape == "closed":
        s.close()
    else:
        crash_store(s)
    return durability


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("unitflips")
    out = {}
    for shape in SHAPES:
        d = str(root / shape)
        durability = _build(d, shape)
        ref = copy_store(d, str(root / f"{shape}-ref"))
        s = open_small(ref, durability)                         # the untouched replica, reopened
        copies = {i: s.get_raw(i) for i in range(LAST + 1)}
        s.close()
        out[shape] = (d, durability, copies, segment_bytes(ref))
    return out


@pytest.mark.parametrize("victim", VICTIMS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name,offset,width", UNIT_FIELDS, ids=[f[0] for f in UNIT_FIELDS])
def test_a_flipped_bit_of_a_mid_log_index_unit_never_cuts_the_log_and_is_rebuilt(
        pristine, tmp_path, name, offset, width, shape, victim):
    src, durability, copies, ref_files = pristine[shape]
    for bit in range(width * 8):
        a = copy_store(src, str(tmp_path / f"{bit}"))
        unit = index_unit_location(a, victim, INDEX_FILE_SIZE)
        flip_bit(unit.path, unit.offset + offset + bit // 8, bit % 8)
        where = f"{name} bit {bit} of unit {victim}"
        s = open_small(a, durability)
        try:
            if (shape == "crashed-page_cache" and victim > 19 and name == "magic"
                    and s.ledger_end_index == victim - 1):
                # the one exception: page_cache mode, after the checkpoint (never promised
                # durable, the store is UNCLEAN_SHUTDOWN), a unit and its intact record that
                # differ only in a valid magic cannot tell which flipped (the record's magic is
                # not under its CRC): as a flipped record there, the tail is cut before it
                assert s.suspect is not None, where
                assert [s.get_raw(i) for i in range(victim)] == [copies[i] for i in range(victim)]
                continue
            assert s.ledger_end_index == LAST, f"{where}: the log was cut"
            for i in range(LAST + 1):
                if i != victim:
                    assert s.get_raw(i) == copies[i], f"{where}: entry {i}"
            try:
                assert s.get_raw(victim) == copies[victim], where
            except CorruptStoreError:
                assert victim in s.damaged(), where
                try:
                    s.repair(victim)                # from the local record, nothing asked
                except RepairRefusedError:
                    # record and unit differ only in the magic, both valid: the record's magic
                    # is not covered by its CRC, so a peer's copy decides
                    assert name == "magic", where
                    s.repair(victim, copies[victim])
                assert s.get_raw(victim) == copies[victim], where
            assert s.damaged() == {}, where
        finally:
            s.close()
        assert segment_bytes(a) == ref_files, f"{where}: the files differ from the replica's"


@pytest.mark.parametrize("shape", SHAPES)
def test_a_peers_copy_is_never_checked_against_a_damaged_unit(pristine, tmp_path, shape):
    """The size of unit 8 (in the trusted prefix) is flipped: the record is intact. A repairer
    that offers a peer's copy at once gets it accepted: the unit is rebuilt from the local
    record first, and the right copy is never refused for disagreeing with the damaged unit."""
    src, durability, copies, ref_files = pristine[shape]
    a = copy_store(src, str(tmp_path / "a"))
    unit = index_unit_location(a, 8, INDEX_FILE_SIZE)
    flip_bit(unit.path, unit.offset + 15, 0)                     # size's lowest bit
    s = open_small(a, durability)
    try:
        assert s.ledger_end_index == LAST
        with pytest.raises(CorruptStoreError):
            s.get_raw(8)
        s.repair(8, copies[8])
        assert [s.get_raw(i) for i in range(LAST + 1)] == [copies[i] for i in range(LAST + 1)]
        assert s.damaged() == {}
    finally:
        s.close()
    assert segment_bytes(a) == ref_files


@pytest.mark.parametrize("victim", [8, 19])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_record_whose_magic_flipped_to_another_valid_one_is_never_rebuilt_into_its_unit(
        pristine, tmp_path, shape, victim):
    """The record's magic (not under its CRC) flips from NORMAL to CONFIG_CHANGE: the record is
    otherwise intact and fits the log. Nothing local tells whether the record or the unit
    flipped, so the local repair refuses (it would make the unit agree with a flipped record,
    serving a normal entry as a config change), and a peer's copy repairs it."""
    src, durability, copies, ref_files = pristine[shape]
    a = copy_store(src, str(tmp_path / "a"))
    loc = record_location(a, victim, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    flip_bit(loc.path, loc.offset + 3, 1)                         # magic 1 -> 3
    s = open_small(a, durability)
    try:
        assert s.ledger_end_index == LAST
        with pytest.raises(CorruptStoreError):
            s.get_raw(victim)
        with pytest.raises(RepairRefusedError):
            s.repair(victim)
        assert victim in s.damaged()
        s.repair(victim, copies[victim])
        assert [s.get_raw(i) for i in range(LAST + 1)] == [copies[i] for i in range(LAST + 1)]
    finally:
        s.close()
    assert segment_bytes(a) == ref_files


@pytest.mark.parametrize("durability", ["page_cache", "fsync"])
def test_a_no_op_whose_magic_flipped_to_a_config_change_is_never_rebuilt_into_its_unit(
        tmp_path, durability):
    """Swarm seed 248914: the record of a no-op (empty body, so its CRC is 0, the CRC-32 of
    nothing) flips its magic from NOOP to CONFIG_CHANGE. The open keeps it refused, but the
    local repair rebuilt the unit from the record: a record with CRC 0 was not taken as intact
    when judging whether only the magic differs, so the doubt was missed and the node then
    served and committed a configuration entry where every peer holds a no-op. The local
    repair must refuse; a peer's copy repairs record and unit."""
    d = str(tmp_path / "a")
    s = open_small(d, durability)
    s.clear_suspect()
    s.persist_term(1, None)
    append_bodies(s, [body(0, BODY)])
    s.batch_append_as_leader([b""], MAGIC_NOOP)                   # entry 1: a no-op
    append_bodies(s, [body(i, BODY) for i in range(2, 6)])
    s.update_committed_index(5)
    s.flush()
    copies = {i: s.get_raw(i) for i in range(6)}
    s.close()
    ref_files = segment_bytes(d)
    loc = record_location(d, 1, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    flip_bit(loc.path, loc.offset + 3, 0)                         # magic 2 -> 3
    s = open_small(d, durability)
    try:
        with pytest.raises(CorruptStoreError):
            s.get_raw(1)
        with pytest.raises(RepairRefusedError, match="only in the magic"):
            s.repair(1)
        with pytest.raises(CorruptStoreError):
            s.get_raw(1)                                          # still refused, unit untouched
        assert 1 in s.damaged()
        s.repair(1, copies[1])
        assert [s.get_raw(i) for i in range(6)] == [copies[i] for i in range(6)]
    finally:
        s.close()
    assert segment_bytes(d) == ref_files
