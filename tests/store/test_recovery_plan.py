"""``recover`` plans and writes nothing; the store applies the plan.

The recovery rules themselves are tested through opens in test_recovery.py, test_checkpoint.py
and test_corruption.py; these tests look at the plan as a value.
"""

from __future__ import annotations

import os

import pytest

from dledger.entry import INDEX_UNIT_SIZE
from dledger.errors import CorruptStoreError
from dledger.sim.disk import crash_store
from dledger.store import PAGE_CACHE, Durability
from dledger.store.mmap_file_list import MmapFileList
from dledger.store.recovery import RecoveredLog, recover
from helpers.small_store import DATA_FILE_SIZE, INDEX_FILE_SIZE, append_bodies, body, open_small
from helpers.store_files import flip_bit, index_unit_location, record_location, zero


def files_of(d):
    out = {}
    for root, _dirs, names in os.walk(d):
        for n in names:
            with open(os.path.join(root, n), "rb") as fh:
                out[os.path.relpath(os.path.join(root, n), d)] = fh.read()
    return out


def plan(d, durability=PAGE_CACHE) -> RecoveredLog:
    data = MmapFileList(os.path.join(d, "data"), DATA_FILE_SIZE, read_only=True)
    index = MmapFileList(os.path.join(d, "index"), INDEX_FILE_SIZE, read_only=True)
    data.load()
    index.load()
    try:
        return recover(data, index, store_dir=d, data_path=os.path.join(d, "data"),
                       durability=Durability(durability), read_only=False)
    finally:
        data.close()
        index.close()


def crashed_store(d, n=6, flushed=3):
    s = open_small(d)
    s.persist_term(1, "n0")
    entries = append_bodies(s, [body(i) for i in range(flushed)])
    s.update_committed_index(1)
    s.flush()
    entries += append_bodies(s, [body(i) for i in range(flushed, n)])
    crash_store(s)
    return entries


def test_a_clean_log_plans_no_repair(tmp_path):
    d = str(tmp_path / "s")
    entries = crashed_store(d)
    found = plan(d)
    assert (found.before_begin_index, found.end_index, found.end_term) == (-1, 5, 1)
    assert found.committed_index == 1 and found.checkpoint.end_index == 2
    assert found.data_end == entries[-1].pos + entries[-1].size
    assert not found.torn_tail and found.rebuilt_units == () and found.warnings == ()
    assert found.index_end == 6 * INDEX_UNIT_SIZE


def test_a_torn_tail_is_planned_and_nothing_is_written_until_the_store_applies_it(tmp_path):
    d = str(tmp_path / "s")
    entries = crashed_store(d)
    loc = record_location(d, 5, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    zero(loc.path, loc.offset + 20, 8)                  # the last record's term: a torn header
    before = files_of(d)
    found = plan(d)
    assert files_of(d) == before              # planning wrote nothing
    assert found.torn_tail and found.end_index == 4 and found.data_end == entries[5].pos
    assert any("torn tail" in w for w in found.warnings)
    s = open_small(d)                         # the store applies it
    try:
        assert s.ledger_end_index == 4
    finally:
        s.close()


def test_rebuilt_index_units_are_planned_from_the_data(tmp_path):
    d = str(tmp_path / "s")
    entries = crashed_store(d)
    loc = index_unit_location(d, 4, INDEX_FILE_SIZE)
    zero(loc.path, loc.offset, 2 * INDEX_UNIT_SIZE)      # units 4 and 5 lost
    found = plan(d)
    assert [(u.index, u.pos, u.size, u.term) for u in found.rebuilt_units] == \
        [(e.index, e.pos, e.size, e.term) for e in entries[4:]]
    assert found.end_index == 5 and not found.torn_tail


def test_a_refused_open_changes_nothing(tmp_path):
    d = str(tmp_path / "s")
    crashed_store(d, n=12, flushed=11)
    loc = record_location(d, 2, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    flip_bit(loc.path, loc.offset + 50)                  # a body bit of entry 2, inside the trusted prefix
    unit = index_unit_location(d, 2, INDEX_FILE_SIZE)
    flip_bit(unit.path, unit.offset + 27)                # and its index unit's term,
    nxt = index_unit_location(d, 3, INDEX_FILE_SIZE)
    flip_bit(nxt.path, nxt.offset + 23)                  # and the next unit's index: nothing locates it
    os.unlink(os.path.join(d, "checkpoint"))  # no trusted prefix: the scan meets it mid-log
    before = files_of(d)
    with pytest.raises(CorruptStoreError):
        open_small(d, "fsync")
    assert files_of(d) == before
