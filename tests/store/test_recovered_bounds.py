"""A flipped bit never becomes the log's end or begin: what recovery sets them from is vouched for.

A record's index field is not covered by its CRC. Where no trusted prefix says which index
comes first (no checkpoint, one written while the log was empty, or after a reset), the scan
starts at the first record of the data and nothing before it tells its index: the rule under
test (``store.recovery``, ``recovery_damage.index_vouched``) takes that index only when its own
index unit or the entry after it vouches for it; otherwise the record is damage (kept and
refused until repaired, or cut as a torn tail where it was never promised durable), never a
log ending at 2**43 (swarm seed 100109).

The stores: 12 entries over two data segments and two index segments, crashed, in both
durability modes and four shapes (checkpoint written with the empty log, no checkpoint, a log
that begins at 1000 after a reset, a checkpoint vouching for part of the log). One bit is
flipped in a record header's index field, an index unit, or the checkpoint, and the store is
opened twice. Either the open refuses naming the store, or: the log's bounds stay within the
written ones (the end never beyond the last entry written), every entry served is the one
written, and the second open finds the same bounds.
"""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dledger.errors import CorruptStoreError, DLedgerError
from dledger.sim.disk import crash_store
from dledger.store.suspect import SuspectReason
from helpers.small_store import DATA_FILE_SIZE, append_bodies, body, open_small
from helpers.store_files import copy_store, flip_bit, index_unit_location, record_location

N = 12
BODY = 48
INDEX_FILE_SIZE = 32 * 8
SHAPES = [(mode, shape) for mode in ("page_cache", "fsync")
          for shape in ("empty-checkpoint", "no-checkpoint", "reset", "trusted")]


def _build(d: str, mode: str, shape: str):
    s = open_small(d, mode, index_file_size=INDEX_FILE_SIZE)   # a new store: checkpoint -1
    s.clear_suspect()
    s.persist_term(2, None)
    if shape == "reset":
        s.reset(999, 1)                                          # the log begins at 1000
    append_bodies(s, [body(i, BODY) for i in range(N)])
    if shape == "trusted":
        s.update_committed_index(s.ledger_before_begin_index + 6)
        s.flush()                                                # vouches for the first 12
        append_bodies(s, [body(i, BODY) for i in range(N, N + 3)])
    raws = {i: s.get_raw(i) for i in range(s.ledger_before_begin_index + 1, s.ledger_end_index + 1)}
    bounds = (s.ledger_before_begin_index, s.ledger_end_index)
    crash_store(s)
    if shape == "no-checkpoint":
        os.remove(os.path.join(d, "checkpoint"))
    return raws, bounds


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("bounds")
    return {key: (str(root / "-".join(key)), *_build(str(root / "-".join(key)), *key)) for key in SHAPES}


def _target(d: str, raws: dict, kind: str, which: int, bit: int) -> tuple[str, int, int]:
    """(path, offset, bit) of the bit to flip."""
    indexes = sorted(raws)
    k = indexes[0] if kind == "first record's index" else indexes[which % len(indexes)]
    if kind in ("first record's index", "a record's index"):
        loc = record_location(d, k, INDEX_FILE_SIZE, DATA_FILE_SIZE)
        return loc.path, loc.offset + 8 + bit % 64 // 8, bit % 8
    if kind == "index unit":
        loc = index_unit_location(d, k, INDEX_FILE_SIZE)
        return loc.path, loc.offset + bit % 256 // 8, bit % 8
    path = os.path.join(d, "checkpoint")
    return path, bit // 8 % os.path.getsize(path), bit % 8


def _open(d: str, mode: str):
    try:
        return open_small(d, mode, index_file_size=INDEX_FILE_SIZE)
    except DLedgerError as exc:
        assert d in str(exc), f"the refusal does not name the store: {exc}"
        return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(SHAPES),
       kind=st.sampled_from(["first record's index", "a record's index", "index unit", "checkpoint"]),
       which=st.integers(0, 1 << 20), bit=st.integers(0, 1 << 20))
def test_a_flipped_bit_never_sets_the_logs_end_or_begin(pristine, tmp_path_factory, key, kind, which, bit):
    src, raws, (begin0, end0) = pristine[key]
    if kind == "checkpoint" and key[1] == "no-checkpoint":
        kind = "index unit"
    d = copy_store(src, str(tmp_path_factory.mktemp("flip") / "s"))
    path, offset, b = _target(d, raws, kind, which, bit)
    flip_bit(path, offset, b)
    where = f"{key}: {kind}, {os.path.relpath(path, d)} offset {offset} bit {b}"
    s = _open(d, key[0])
    if s is None:
        return
    try:
        bounds = (s.ledger_before_begin_index, s.ledger_end_index)
        assert begin0 <= bounds[0] <= bounds[1] <= end0, f"{where}: bounds {bounds}, written {(begin0, end0)}"
        for i in range(bounds[0] + 1, bounds[1] + 1):
            try:
                assert s.get_raw(i) == raws[i], f"{where}: entry {i} served changed"
            except CorruptStoreError as exc:
                assert d in str(exc), where
    finally:
        s.close()
    s = _open(d, key[0])
    if s is not None:
        try:
            assert (s.ledger_before_begin_index, s.ledger_end_index) == bounds, f"{where}: reopened"
        finally:
            s.close()
    shutil.rmtree(d)


@pytest.mark.parametrize("mode", ["page_cache", "fsync"])
def test_the_first_records_index_flipped_to_2_pow_43_is_damage_not_the_end(tmp_path, mode):
    """Swarm seed 100109: a checkpoint written while the log was empty, entries appended, a
    crash, then bit 3 of the index field's third byte of entry 0's record flips (0 -> 2**43)."""
    d = str(tmp_path / "s")
    raws, (begin0, end0) = _build(d, mode, "empty-checkpoint")
    ref = copy_store(d, str(tmp_path / "ref"))
    loc = record_location(d, 0, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    flip_bit(loc.path, loc.offset + 10, 3)
    s = open_small(d, mode, index_file_size=INDEX_FILE_SIZE)
    try:
        if mode == "page_cache":
            # nothing was promised durable since the log was empty: a torn tail, cut at entry 0;
            # the machine did not restart since (the page cache kept every write), so the cut
            # of entries written whole may lose acknowledged ones: the store says so
            assert (s.ledger_before_begin_index, s.ledger_end_index) == (-1, -1)
            assert s.suspect is SuspectReason.LOST_TAIL
            return
        # fsync mode: entry 0 is kept, refused until a peer's copy repairs it
        assert (s.ledger_before_begin_index, s.ledger_end_index) == (begin0, end0)
        assert list(s.damaged()) == [0]
        with pytest.raises(CorruptStoreError) as info:
            s.get(0)
        assert info.value.path == loc.path and info.value.offset == loc.offset
        s.repair(0, raws[0])
        assert [s.get_raw(i) for i in range(N)] == [raws[i] for i in range(N)]
    finally:
        s.close()
    r = open_small(ref, mode, index_file_size=INDEX_FILE_SIZE)
    r.close()
    with open(loc.path, "rb") as a, open(os.path.join(ref, os.path.relpath(loc.path, d)), "rb") as b:
        assert a.read() == b.read()


def test_the_begin_is_never_set_from_an_unvouched_index(tmp_path):
    """A checkpoint vouches for a long log (its chain check looks at the last 1024 units only);
    entry 0's record index field flips (0 -> 2**43) and so does the position field of its index
    unit. Neither that unit nor the index list's first one names the record, and entry 1 does
    not follow 2**43: the begin stays the checkpoint's, entry 0 is refused, never a begin at
    2**43 - 1 above the log's end."""
    d = str(tmp_path / "s")
    s = open_small(d, "page_cache", index_file_size=INDEX_FILE_SIZE)
    s.persist_term(2, None)
    n = 1100
    append_bodies(s, [body(i) for i in range(n)])
    s.update_committed_index(n - 1)
    s.close()
    loc = record_location(d, 0, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    unit = index_unit_location(d, 0, INDEX_FILE_SIZE)
    flip_bit(loc.path, loc.offset + 10, 3)
    flip_bit(unit.path, unit.offset + 11, 6)                     # pos 0 -> 64: entry 1's
    s = open_small(d, "page_cache", index_file_size=INDEX_FILE_SIZE)
    try:
        assert (s.ledger_before_begin_index, s.ledger_end_index) == (-1, n - 1)
        with pytest.raises(CorruptStoreError):
            s.get(0)
        assert s.get(1).body == body(1)
    finally:
        s.close()
