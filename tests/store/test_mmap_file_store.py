"""DLedgerMmapFileStore: Java DLedger's DLedgerMappedFileStoreTest scenarios, durability, cleaning, files."""

import hashlib
import os
import struct

import pytest

from dledger.entry import MAGIC_BLANK, DLedgerEntry
from dledger.errors import DISK_FULL, DLedgerError, ReadOnlyStoreError
from dledger.store import DLedgerMemoryStore, open_store


def body(i, n=1024):
    return (f"entry-{i}-".encode() * n)[:n]


def data_files(store):
    return sorted(os.listdir(store.data_path))


def test_normal_recovery_reopens_every_entry(open_file_store):
    store = open_file_store()
    for i in range(10):
        store.append_as_leader(DLedgerEntry(body=body(i, 100)))
    store.close()
    again = open_file_store()
    assert (again.ledger_before_begin_index, again.ledger_end_index) == (-1, 9)
    assert [e.body for e in again.iter_entries()] == [body(i, 100) for i in range(10)]


def test_abnormal_recovery_after_losing_the_last_segments(open_file_store):
    kw = dict(data_file_size=10 * 1024 + 8, index_file_size=10 * 32)
    store = open_file_store(**kw)
    for i in range(100):
        store.append_as_leader(DLedgerEntry(body=body(i)))  # 1072-byte records, 9 per segment
    assert len(data_files(store)) == 12
    store.close()
    for name in data_files(store)[-2:]:
        os.unlink(os.path.join(store.data_path, name))
    again = open_file_store(**kw)
    assert len(data_files(again)) == 10
    assert (again.ledger_before_begin_index, again.ledger_end_index) == (-1, 89)
    assert all(again.get(i).body == body(i) for i in range(89))
    again.close()
    for name in data_files(again):
        os.unlink(os.path.join(again.data_path, name))
    empty = open_file_store(**kw)
    assert (empty.ledger_before_begin_index, empty.ledger_end_index) == (-1, -1)
    assert empty.append_as_leader(DLedgerEntry(body=b"x")).index == 0


def test_follower_truncation_on_shared_files_including_a_jump_beyond_them(open_file_store):
    kw = dict(data_file_size=8 * 1024 + 8, index_file_size=8 * 32)
    leader = open_file_store(name="leader", **kw)
    for i in range(10):
        leader.append_as_leader(DLedgerEntry(body=body(i)))  # 7 per segment -> 2 segments
    follower = open_file_store(name="follower", **kw)
    follower.batch_append_as_follower(b"".join(leader.get_raw(i) for i in range(10)), 0, "n0")
    assert len(data_files(follower)) == 2

    e5 = leader.get(5)
    assert follower.truncate_to_entry(e5, 0, "n0") == 5
    assert follower.data_list.max_wrote_position() == e5.pos + e5.size
    assert follower.index_list.max_wrote_position() == 6 * 32
    assert follower.truncate_to_entry(leader.get(6), 0, "n0") == 6
    assert len(data_files(follower)) == 1
    e9 = leader.get(9)  # lies in the segment the follower no longer has
    assert follower.truncate_to_entry(e9, 0, "n0") == 9
    assert follower.ledger_before_begin_index == 8
    assert follower.get(9) == e9 and follower.get(9).pos == e9.pos
    follower.close()
    again = open_file_store(name="follower", **kw)
    assert (again.ledger_before_begin_index, again.ledger_end_index) == (8, 9)


def test_reset_offset_of_the_data_list_then_restart_keeps_the_rest(open_file_store):
    kw = dict(data_file_size=1024, index_file_size=1024)
    store = open_file_store(**kw)
    for i in range(10):
        store.append_as_leader(DLedgerEntry(body=body(i, 512)))  # 560-byte records, 1 per segment
    e8 = store.get(8)
    store.data_list.reset_offset(e8.pos + e8.size)
    assert len(store.data_list.files) == 2
    first = store.data_list.files[0]
    assert (first.start_position, first.wrote_position) == (560, 1024)
    assert struct.unpack_from(">ii", first.mm, 0) == (MAGIC_BLANK, 560)
    store.close()
    again = open_file_store(**kw)
    assert len(again.data_list.files) == 1
    assert (again.ledger_before_begin_index, again.ledger_end_index) == (8, 9)
    assert again.get(9).body == body(9, 512)


def test_reset_offset_past_everything_then_restart_gives_an_empty_log(open_file_store):
    kw = dict(data_file_size=1024, index_file_size=1024)
    store = open_file_store(**kw)
    for i in range(10):
        store.append_as_leader(DLedgerEntry(body=body(i, 512)))
    e9 = store.get(9)
    store.data_list.reset_offset(e9.pos + e9.size)
    first = store.data_list.files[0]
    assert len(store.data_list.files) == 1 and first.start_position == first.wrote_position == 560
    store.close()
    again = open_file_store(**kw)
    assert len(again.data_list.files) == 1
    assert (again.ledger_before_begin_index, again.ledger_end_index) == (-1, -1)


def test_reset_offset_inside_a_segment_with_a_following_entry(open_file_store):
    kw = dict(data_file_size=1024, index_file_size=1024)
    store = open_file_store(**kw)
    for i in range(10):
        store.append_as_leader(DLedgerEntry(body=body(i, 452)))  # 500-byte records, 2 per segment
    e8 = store.get(8)
    store.data_list.reset_offset(e8.pos + e8.size)
    first = store.data_list.files[0]
    assert len(store.data_list.files) == 1
    assert (first.start_position, first.wrote_position) == (500, 1000)
    assert struct.unpack_from(">ii", first.mm, 0) == (MAGIC_BLANK, 500)
    store.close()
    again = open_file_store(**kw)
    assert (again.ledger_before_begin_index, again.ledger_end_index) == (8, 9)


def test_store_reset_survives_restart_with_its_begin_index_and_term(open_file_store):
    kw = dict(data_file_size=1024, index_file_size=320)
    store = open_file_store(**kw)
    store.persist_term(4, None)
    store.batch_append_as_leader([bytes(300)] * 10)
    store.reset(5, 4)
    store.close()
    again = open_file_store(**kw)
    assert (again.ledger_before_begin_index, again.ledger_before_begin_term) == (5, 4)
    assert again.ledger_end_index == 9 and again.get(6).index == 6
    again.reset(9, 4)
    again.close()
    empty = open_file_store(**kw)
    assert (empty.ledger_before_begin_index, empty.ledger_end_index, empty.ledger_end_term) == (9, 9, 4)
    assert empty.append_as_leader(DLedgerEntry(body=b"z")).index == 10


def test_losing_the_first_segments_moves_the_begin_and_truncate_still_works(open_file_store):
    kw = dict(data_file_size=8 * 1024 + 8, index_file_size=8 * 32)
    store = open_file_store(**kw)
    for i in range(20):
        store.append_as_leader(DLedgerEntry(body=body(i)))  # 3 segments: 0-6, 7-13, 14-19
    store.close()
    for name in data_files(store)[:2]:
        os.unlink(os.path.join(store.data_path, name))
    again = open_file_store(**kw)
    assert (again.ledger_before_begin_index, again.ledger_end_index) == (13, 19)
    e15 = again.get(15)
    assert again.truncate_to_entry(e15, 0, "n0") == 15
    assert again.data_list.flushed_where >= again.data_list.files[0].file_from_offset
    assert again.data_list.max_wrote_position() == e15.pos + e15.size


def test_truncation_lowers_flushed_positions_to_the_new_ends(open_file_store):
    store = open_file_store()
    for i in range(7):
        store.append_as_leader(DLedgerEntry(body=body(i)))
    store.flush()
    store.truncate_to_entry(store.get(5), 0, "n0")
    assert store.data_list.flushed_where == store.data_list.max_wrote_position()
    assert store.index_list.flushed_where == store.index_list.max_wrote_position() == 6 * 32


@pytest.mark.parametrize("durability", ["page_cache", "fsync"])
def test_both_durability_modes_store_and_reopen_batches(open_file_store, durability):
    store = open_file_store(durability=durability, data_file_size=4096)
    res = store.batch_append_as_leader([body(i, 300) for i in range(30)])
    assert res.last_index == 29
    if durability == "fsync":
        assert all(f.flushed_position == f.wrote_position for f in store.data_list.files)
        assert all(f.flushed_position == f.wrote_position for f in store.index_list.files)
    store.close()
    again = open_file_store(durability=durability, data_file_size=4096)
    assert again.ledger_end_index == 29 and again.get(17).body == body(17, 300)


def test_unknown_durability_is_a_clear_error(tmp_path):
    from dledger.store import DLedgerMmapFileStore
    with pytest.raises(ValueError, match="durability"):
        DLedgerMmapFileStore(str(tmp_path), durability="sometimes")


def test_flush_writes_a_java_compatible_checkpoint_and_term_file(open_file_store):
    store = open_file_store()
    store.persist_term(3, "n1")
    store.batch_append_as_leader([b"a"] * 5)
    store.update_committed_index(3)
    store.flush()
    text = open(os.path.join(store.store_dir, "checkpoint")).read()
    assert "endIndex=4\n" in text and "committedIndex=3\n" in text
    term_text = open(os.path.join(store.store_dir, "currterm")).read()
    # Java's two keys, then the crc line Java's Properties reader ignores
    assert term_text.startswith("voteLeader=n1\ncurrTerm=3\ncrc=")
    assert term_text.endswith("\n") and term_text.count("\n") == 3
    store.close()
    again = open_file_store()
    assert (again.current_term, again.vote_for, again.committed_index) == (3, "n1", 3)


class FakeDisk:
    def __init__(self, used_ratio):
        self.used_ratio = used_ratio

    def __call__(self, path):
        total = 1000
        used = int(total * self.used_ratio)
        return (total, used, total - used)


def test_the_disk_full_guard_refuses_appends_until_space_returns(open_file_store):
    disk = FakeDisk(0.5)
    store = open_file_store(disk_usage=disk)
    store.append_as_leader(DLedgerEntry(body=b"before"))
    disk.used_ratio = 0.95
    store.clean(now=0)
    assert store.is_disk_full
    with pytest.raises(DLedgerError) as err:
        store.append_as_leader(DLedgerEntry(body=b"refused"))
    assert err.value.code == DISK_FULL
    assert store.get(0).body == b"before"  # reads still served
    disk.used_ratio = 0.5
    store.clean(now=0)
    assert not store.is_disk_full and store.append_as_leader(DLedgerEntry(body=b"after")).index == 1


def test_cleaning_deletes_expired_committed_segments_but_never_the_last_or_uncommitted(open_file_store):
    disk = FakeDisk(0.75)  # above the 0.70 check-expired ratio
    store = open_file_store(data_file_size=1024, index_file_size=320, disk_usage=disk,
                            file_reserved_hours=1)
    store.batch_append_as_leader([bytes(400)] * 10)  # 2 per segment -> 5 segments
    long_ago = 1_000_000.0
    for f in store.data_list.files:
        os.utime(f.path, (long_ago, long_ago))
    now = long_ago + 2 * 3600
    store.update_committed_index(3)  # entries 0-3 committed: segments 0 and 1 may go
    assert store.clean(now=now) == 2
    assert store.ledger_before_begin_index == 3 and store.get(4).index == 4
    store.update_committed_index(9)
    assert store.clean(now=now) == 2  # the last segment stays
    assert len(store.data_list.files) == 1 and store.ledger_before_begin_index == 7
    store.close()
    again = open_file_store(data_file_size=1024, index_file_size=320)
    assert (again.ledger_before_begin_index, again.ledger_end_index) == (7, 9)


def test_cleaning_keeps_young_segments_when_space_is_fine(open_file_store):
    store = open_file_store(data_file_size=1024, index_file_size=320, disk_usage=FakeDisk(0.75))
    store.batch_append_as_leader([bytes(400)] * 10)
    store.update_committed_index(9)
    import time
    assert store.clean(now=time.time()) == 0


def tree_digest(path):
    h = hashlib.sha256()
    for root, _dirs, files in sorted(os.walk(path)):
        for name in sorted(files):
            full = os.path.join(root, name)
            h.update(full.encode())
            h.update(open(full, "rb").read())
    return h.hexdigest()


def test_a_read_only_open_changes_nothing_even_with_a_torn_tail(open_file_store, tmp_path):
    store = open_file_store(data_file_size=4096, index_file_size=320)
    store.batch_append_as_leader([body(i, 200) for i in range(20)])
    store.flush()
    last = store.get(19)
    store.close()
    seg = os.path.join(store.data_path, f"{last.pos - last.pos % 4096:020d}")
    with open(seg, "r+b") as fh:
        fh.seek(last.pos % 4096 + 100)
        fh.write(b"\xff" * 20)  # damage the last record's body
    # the checkpoint covers 19: make it say 18 so the damage is in the unconfirmed tail
    with open(os.path.join(store.store_dir, "checkpoint"), "w") as fh:
        fh.write("endIndex=18\ncommittedIndex=-1\n")
    before = tree_digest(tmp_path)
    ro = open_store(str(tmp_path / "dledger-n0"))
    assert ro.ledger_end_index == 18 and ro.get(18).body == body(18, 200)
    with pytest.raises(ReadOnlyStoreError):
        ro.append_as_leader(DLedgerEntry(body=b"no"))
    ro.close()
    assert tree_digest(tmp_path) == before


def test_open_store_finds_the_node_directory_and_reads_segment_sizes_off_the_files(open_file_store, tmp_path):
    store = open_file_store(data_file_size=2048, index_file_size=640)
    store.batch_append_as_leader([b"abc"] * 50)
    store.close()
    ro = open_store(str(tmp_path))  # the base dir holding dledger-n0
    assert ro.data_list.mapped_file_size == 2048 and ro.index_list.mapped_file_size == 640
    assert [e.body for e in ro] == [b"abc"] * 50


def test_a_memory_and_a_file_store_agree_on_positions_across_segments(open_file_store):
    f = open_file_store(data_file_size=1024, index_file_size=320)
    m = DLedgerMemoryStore(data_file_size=1024)
    bodies = [bytes((i * 97) % 700) for i in range(60)]
    assert f.batch_append_as_leader(bodies).positions == m.batch_append_as_leader(bodies).positions


def test_periodic_flush_follows_the_callers_clock(open_file_store):
    store = open_file_store(flush_interval_ms=10, checkpoint_interval_ms=1000)
    store.batch_append_as_leader([b"a"] * 3)
    assert store.flush_if_due(0)
    cp = os.path.join(store.store_dir, "checkpoint")
    assert "endIndex=2" in open(cp).read()
    store.append_as_leader(DLedgerEntry(body=b"b"))
    assert not store.flush_if_due(5)  # within the flush interval
    assert store.flush_if_due(20)
    assert all(f.flushed_position == f.wrote_position for f in store.data_list.files)
    assert "endIndex=2" in open(cp).read()  # checkpoint only every second
    assert store.flush_if_due(1000)
    assert "endIndex=3" in open(cp).read()


def test_background_flush_syncs_off_thread_and_checkpoints_only_what_it_synced(open_file_store):
    from dledger.store import background_flush
    store = open_file_store(flush_interval_ms=10, checkpoint_interval_ms=0, background_flush=True)
    assert store.background_flush == background_flush.supported
    store.batch_append_as_leader([b"a"] * 5)
    assert store.flush_if_due(0)
    job = store._flusher.flush_job
    if background_flush.supported:
        assert job is not None and job.end_index == 4
        assert job.wait(10)
        store.append_as_leader(DLedgerEntry(body=b"later"))  # not covered by the job
        store._flusher.reap_flush_job()
    cp = os.path.join(store.store_dir, "checkpoint")
    assert "endIndex=4\n" in open(cp).read()
    assert store.data_list.files[0].flushed_position < store.data_list.files[0].wrote_position
    assert store.flush_if_due(20)
    if background_flush.supported:
        assert store._flusher.flush_job.wait(10)
        store._flusher.reap_flush_job()
    assert "endIndex=5\n" in open(cp).read()


def test_a_flush_job_overtaken_by_a_truncation_is_discarded(open_file_store):
    from dledger.store import background_flush
    store = open_file_store(flush_interval_ms=10, checkpoint_interval_ms=0, background_flush=True)
    if not background_flush.supported:
        return  # nothing runs in the background here; the synchronous path is tested above
    store.batch_append_as_leader([b"x"] * 10)
    store.flush()  # checkpoint at 9
    store.batch_append_as_leader([b"y"] * 5)
    assert store.flush_if_due(0)
    job = store._flusher.flush_job
    assert job.end_index == 14 and job.wait(10)
    store.truncate(12)  # a cut overtakes the finished job before it is reaped
    store.batch_append_as_leader([b"z"] * 3)  # indices 12-14 again, other bytes, not synced
    store._flusher.reap_flush_job()
    cp = open(os.path.join(store.store_dir, "checkpoint")).read()
    assert "endIndex=9\n" in cp  # the flush before; the stale job did not vouch for 14
