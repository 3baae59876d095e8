"""FileSnapshotStore: Java DLedger's layout, streamed and checked, crash-safe, resumable installs."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import zlib

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from dledger.errors import CorruptSnapshotError
from dledger.snapshot import FileSnapshotStore, InstallOffsetError, SnapshotMeta
from dledger.snapshot.file_snapshot_store import DATA_FILE_NAME, INSTALL_TMP_DIR_NAME, TMP_DIR_NAME
from dledger.snapshot.meta import META_FILE_NAME


def _save(store: FileSnapshotStore, index: int, term: int, data: bytes, chunk: int = 7919) -> SnapshotMeta:
    pending = store.begin_save(index, term)
    for i in range(0, len(data), chunk):
        pending.writer.write(data[i:i + chunk])
    return pending.commit()


def _read(store: FileSnapshotStore, meta: SnapshotMeta) -> bytes:
    with store.open_reader(meta) as r:
        return r.read()


# -- the meta ---------------------------------------------------------------------------------
@given(st.integers(-1, 2**62), st.integers(-1, 2**31), st.integers(0, 2**40), st.integers(0, 2**32 - 1))
def test_meta_round_trips(index, term, size, crc):
    meta = SnapshotMeta(index, term, size, crc)
    assert SnapshotMeta.decode(meta.encode()) == meta


def test_a_meta_java_wrote_reads_unchecked():
    meta = SnapshotMeta.decode(b'{"lastIncludedIndex":41,"lastIncludedTerm":3}')
    assert meta == SnapshotMeta(41, 3) and not meta.checked
    assert json.loads(meta.encode()) == {"lastIncludedIndex": 41, "lastIncludedTerm": 3}


def test_our_meta_keeps_javas_two_fields_first():
    fields = json.loads(SnapshotMeta(41, 3, 10, 99).encode())
    assert list(fields)[:2] == ["lastIncludedIndex", "lastIncludedTerm"]


@settings(max_examples=300)
@given(st.integers(0, 10**12), st.integers(0, 10**6), st.integers(0, 2**40), st.integers(0, 2**32 - 1),
       st.data())
def test_any_flipped_bit_in_a_meta_is_found(index, term, size, crc, data):
    raw = bytearray(SnapshotMeta(index, term, size, crc).encode())
    bit = data.draw(st.integers(0, len(raw) * 8 - 1))
    raw[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(CorruptSnapshotError):
        SnapshotMeta.decode(bytes(raw), "m")


@pytest.mark.parametrize("raw, what", [
    (b"", "not JSON"), (b"[1,2]", "not a JSON object"), (b'{"lastIncludedTerm":3}', "lastIncludedIndex"),
    (b'{"lastIncludedIndex":"7","lastIncludedTerm":3}', "not a number"),
    (b'{"lastIncludedIndex":7,"lastIncludedTerm":3,"dataSize":4}', "not all"),
    (b'{"lastIncludedIndex":-5,"lastIncludedTerm":3}', "index -5"),
])
def test_a_bad_meta_is_named(raw, what):
    with pytest.raises(CorruptSnapshotError, match=what) as info:
        SnapshotMeta.decode(raw, "/x/snapshot_meta")
    assert "/x/snapshot_meta" in str(info.value)


# -- saving and reading -----------------------------------------------------------------------
def test_a_snapshot_is_laid_out_as_java_dledger_lays_it_out(tmp_path):
    store = FileSnapshotStore(str(tmp_path))
    meta = _save(store, 100, 4, b"state" * 1000)
    d = tmp_path / "snapshot" / "snapshot_100"
    assert sorted(os.listdir(d)) == [DATA_FILE_NAME, META_FILE_NAME]
    assert (d / "data").read_bytes() == b"state" * 1000
    fields = json.loads((d / "snapshot_meta").read_bytes())
    assert fields["lastIncludedIndex"] == 100 and fields["lastIncludedTerm"] == 4
    assert fields["dataCrc"] == zlib.crc32(b"state" * 1000) and fields["dataSize"] == 5000
    assert meta == SnapshotMeta(100, 4, 5000, zlib.crc32(b"state" * 1000))
    assert not (tmp_path / "snapshot" / TMP_DIR_NAME).exists()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=3 * 2**20 + 17), st.integers(1, 2**20))
def test_streamed_writes_read_back_byte_for_byte(tmp_path, data, chunk):
    # a directory of its own per example: two examples of the same size and chunk would
    # otherwise meet the first one's snapshot 9, which a commit keeps
    store = FileSnapshotStore(tempfile.mkdtemp(dir=tmp_path))
    meta = _save(store, 9, 1, data, chunk)
    assert store.newest() == meta and _read(store, meta) == data


def test_a_java_snapshot_is_read(tmp_path):
    d = tmp_path / "snapshot" / "snapshot_12"
    d.mkdir(parents=True)
    (d / "snapshot_meta").write_bytes(b'{"lastIncludedIndex":12,"lastIncludedTerm":2}')
    (d / "data").write_bytes(b"java state")
    store = FileSnapshotStore(str(tmp_path))
    meta = store.newest()
    assert meta == SnapshotMeta(12, 2) and _read(store, meta) == b"java state"


def test_only_the_newest_max_reserve_snapshots_are_kept(tmp_path):
    store = FileSnapshotStore(str(tmp_path), max_reserve=2)
    for i in (10, 20, 30, 40):
        _save(store, i, 1, str(i).encode())
    assert store.indexes() == [40, 30]


def test_a_snapshot_taken_twice_at_one_index_keeps_the_first(tmp_path):
    store = FileSnapshotStore(str(tmp_path))
    first = _save(store, 10, 1, b"first")
    assert _save(store, 10, 1, b"second") == first
    assert _read(store, store.newest()) == b"first"


def test_an_aborted_snapshot_leaves_nothing(tmp_path):
    store = FileSnapshotStore(str(tmp_path))
    kept = _save(store, 5, 1, b"kept")
    pending = store.begin_save(9, 1)
    pending.writer.write(b"half")
    pending.abort()
    assert store.indexes() == [5] and store.newest() == kept
    with pytest.raises(ValueError, match="closed"):
        pending.writer.write(b"more")


def test_a_crash_while_taking_a_snapshot_leaves_the_older_ones_and_tmp_goes_at_the_next_open(tmp_path):
    store = FileSnapshotStore(str(tmp_path))
    kept = _save(store, 5, 1, b"kept")
    pending = store.begin_save(9, 1)
    pending.writer.write(b"x" * 100_000)
    pending.writer.flush()                      # the process dies here: no commit
    store = FileSnapshotStore(str(tmp_path))
    assert not (tmp_path / "snapshot" / TMP_DIR_NAME).exists()
    assert store.newest() == kept


# -- damage -----------------------------------------------------------------------------------
def _flip(path, offset=0):
    b = bytearray(path.read_bytes())
    b[offset] ^= 1
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("damage, what", [
    (lambda d: _flip(d / "data", 3), "fails its CRC"),
    (lambda d: (d / "data").write_bytes((d / "data").read_bytes()[:-1]), "bytes, its meta says"),
    (lambda d: (d / "data").unlink(), "data file is missing"),
    (lambda d: (d / "snapshot_meta").unlink(), "meta is missing"),
    (lambda d: _flip(d / "snapshot_meta", 22), "snapshot meta"),
])
def test_a_damaged_newest_snapshot_falls_back_to_the_previous_one_in_one_log_line(tmp_path, caplog, damage, what):
    store = FileSnapshotStore(str(tmp_path))
    older = _save(store, 10, 1, b"older" * 100)
    _save(store, 20, 2, b"newer" * 100)
    damage(tmp_path / "snapshot" / "snapshot_20")
    with caplog.at_level(logging.WARNING, logger="dledger.snapshot"):
        assert store.newest() == older
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "snapshot_20 is damaged" in lines[0] and what in lines[0]
    assert "trying snapshot_10" in lines[0]
    assert store.indexes() == [10]


def test_a_meta_naming_another_index_than_its_directory_is_damage(tmp_path):
    store = FileSnapshotStore(str(tmp_path))
    _save(store, 10, 1, b"a")
    os.rename(tmp_path / "snapshot" / "snapshot_10", tmp_path / "snapshot" / "snapshot_11")
    with pytest.raises(CorruptSnapshotError, match="names index 10, its directory 11"):
        store.check(11)
    assert store.newest() is None


# -- installs ---------------------------------------------------------------------------------
def test_an_install_in_chunks_becomes_a_snapshot(tmp_path):
    data = os.urandom(300_000)
    meta = SnapshotMeta(50, 3, len(data), zlib.crc32(data))
    store = FileSnapshotStore(str(tmp_path / "f"))
    target = store.begin_install(meta)
    for off in range(0, len(data), 65536):
        chunk = data[off:off + 65536]
        assert target.write_chunk(off, chunk, zlib.crc32(chunk)) == off + len(chunk)
    assert target.complete
    assert target.finish() == meta
    assert store.newest() == meta and _read(store, meta) == data
    assert not (tmp_path / "f" / "snapshot" / INSTALL_TMP_DIR_NAME).exists()


def test_a_broken_install_resumes_where_the_durable_bytes_end_even_after_a_restart(tmp_path):
    data = os.urandom(200_000)
    meta = SnapshotMeta(50, 3, len(data), zlib.crc32(data))
    store = FileSnapshotStore(str(tmp_path))
    target = store.begin_install(meta)
    target.write_chunk(0, data[:70_000])
    store = FileSnapshotStore(str(tmp_path))           # the follower restarted
    target = store.begin_install(meta)
    assert target.received == 70_000
    with pytest.raises(InstallOffsetError) as info:
        target.write_chunk(0, data[:1000])              # the leader starts over: told where to go on
    assert info.value.expected == 70_000
    target.write_chunk(70_000, data[70_000:])
    assert target.finish() == meta and _read(store, meta) == data


def test_a_snapshot_received_whole_before_a_crash_is_put_in_place_at_the_next_open(tmp_path):
    data = os.urandom(100_000)
    meta = SnapshotMeta(50, 3, len(data), zlib.crc32(data))
    store = FileSnapshotStore(str(tmp_path))
    target = store.begin_install(meta)
    target.write_chunk(0, data)
    target.verify()                                     # then the node died before ``finish``
    store = FileSnapshotStore(str(tmp_path))
    assert store.finish_received_install() == meta
    assert store.newest() == meta and _read(store, meta) == data
    assert store.finish_received_install() is None      # nothing left to finish


def test_a_partial_or_damaged_received_snapshot_is_not_put_in_place(tmp_path):
    data = os.urandom(100_000)
    meta = SnapshotMeta(50, 3, len(data), zlib.crc32(data))
    store = FileSnapshotStore(str(tmp_path))
    store.begin_install(meta).write_chunk(0, data[:40_000])
    assert FileSnapshotStore(str(tmp_path)).finish_received_install() is None
    assert store.begin_install(meta).received == 40_000  # still resumable
    other = SnapshotMeta(60, 3, 10, zlib.crc32(b"0123456789"))
    store.begin_install(other).write_chunk(0, b"0123456780")     # the last byte differs
    assert FileSnapshotStore(str(tmp_path)).finish_received_install() is None
    assert store.newest() is None


def test_another_snapshot_restarts_the_install(tmp_path):
    store = FileSnapshotStore(str(tmp_path))
    target = store.begin_install(SnapshotMeta(50, 3, 10, zlib.crc32(b"0123456789")))
    target.write_chunk(0, b"01234")
    target = store.begin_install(SnapshotMeta(60, 3, 4, zlib.crc32(b"abcd")))
    assert target.received == 0


def test_a_chunk_that_fails_its_crc_or_overruns_is_refused_and_changes_nothing(tmp_path):
    store = FileSnapshotStore(str(tmp_path))
    target = store.begin_install(SnapshotMeta(50, 3, 10, zlib.crc32(b"0123456789")))
    with pytest.raises(CorruptSnapshotError, match="fails its CRC"):
        target.write_chunk(0, b"01234", zlib.crc32(b"01235"))
    with pytest.raises(CorruptSnapshotError, match="beyond the snapshot's 10 bytes"):
        target.write_chunk(0, b"0123456789X")
    assert target.received == 0


def test_received_bytes_that_do_not_match_the_leaders_crc_are_discarded(tmp_path):
    store = FileSnapshotStore(str(tmp_path))
    meta = SnapshotMeta(50, 3, 10, zlib.crc32(b"0123456789"))
    target = store.begin_install(meta)
    target.write_chunk(0, b"0123456788")
    with pytest.raises(CorruptSnapshotError, match="the leader's has 10 bytes"):
        target.finish()
    assert store.indexes() == [] and store.begin_install(meta).received == 0
