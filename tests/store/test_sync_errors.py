"""A failed msync makes the file store fail-stop; a full disk at segment creation refuses
appends and nothing else.

After an msync fails (EIO) what the disk holds is unknown: the kernel may have dropped the dirty
pages, so a later msync that succeeds proves nothing. The store must then acknowledge nothing
more (``failed`` names the first failure; every append and flush raises DISK_ERROR) until it
is reopened, and reopening recovers what the disk really holds. The faults come from the
simulated disk (``dledger.sim.disk.PowerLoss``) under the production store.
"""

import errno

import pytest

from dledger.errors import DISK_ERROR, DISK_FULL, DLedgerError
from dledger.sim.disk import FaultyStore, PowerLoss
from dledger.store import DLedgerMmapFileStore
from dledger.store import background_flush as bg_flush


def _open(tmp_path, pl, **kw):
    kw.setdefault("data_file_size", 64 * 1024)
    kw.setdefault("index_file_size", 32 * 64)
    return DLedgerMmapFileStore.open(str(tmp_path / "s"), store_io=pl.io, **kw)


def _refuses_everything(store):
    with pytest.raises(DLedgerError) as e1:
        store.batch_append_as_leader([b"after"])
    with pytest.raises(DLedgerError) as e2:
        store.flush()
    with pytest.raises(DLedgerError) as e3:
        store.flush_if_due(10 ** 9)
    for e in (e1, e2, e3):
        assert e.value.code == DISK_ERROR
        assert store.failed in str(e.value)


def test_fsync_append_whose_msync_fails_is_refused_and_not_counted(tmp_path):
    pl = PowerLoss()
    store = _open(tmp_path, pl, durability="fsync")
    store.persist_term(1, None)
    store.batch_append_as_leader([b"a", b"b"])
    assert store.failed is None
    pl.fail_syncs(1)                                  # one EIO, the next msync would succeed
    with pytest.raises(DLedgerError) as exc:
        store.batch_append_as_leader([b"c", b"d"])
    assert exc.value.code == DISK_ERROR
    assert "msync" in store.failed and "entries 2..3" in store.failed
    assert store.ledger_end_index == 1                # the refused entries are not counted
    assert [e.body for e in store] == [b"a", b"b"]    # reads go on
    _refuses_everything(store)                        # no retry into a false success
    assert store.ledger_end_index == 1
    pl.power_loss(store)
    again = _open(tmp_path, pl, durability="fsync")
    assert again.failed is None
    assert [e.body for e in again] == [b"a", b"b"]
    again.batch_append_as_leader([b"e"])
    assert again.ledger_end_index == 2
    again.close()


def test_follower_append_whose_msync_fails_is_refused(tmp_path):
    pl = PowerLoss()
    leader = DLedgerMmapFileStore.open(str(tmp_path / "l"), data_file_size=64 * 1024, index_file_size=32 * 64)
    leader.persist_term(1, None)
    leader.batch_append_as_leader([b"x%d" % i for i in range(4)])
    follower = _open(tmp_path, pl, durability="fsync")
    follower.persist_term(1, None)
    raw, count = leader.get_raw_range(0, 1 << 20)
    pl.fail_syncs(None)
    with pytest.raises(DLedgerError) as exc:
        follower.batch_append_as_follower(raw, 1)
    assert exc.value.code == DISK_ERROR and follower.failed
    assert follower.ledger_end_index == -1
    pl.heal_syncs()                                   # the disk works again: the store stays failed
    with pytest.raises(DLedgerError):
        follower.batch_append_as_follower(raw, 1)
    assert follower.ledger_end_index == -1
    leader.close()


def test_page_cache_flush_whose_msync_fails_fails_the_store_and_writes_no_checkpoint(tmp_path):
    pl = PowerLoss()
    store = _open(tmp_path, pl, durability="page_cache")
    store.persist_term(1, None)
    store.batch_append_as_leader([b"a"])
    store.flush()
    cp = store._state.checkpoint
    store.batch_append_as_leader([b"b"])              # acknowledged from the page cache
    pl.fail_syncs(1)
    with pytest.raises(DLedgerError) as exc:
        store.flush_if_due(10 ** 6)
    assert exc.value.code == DISK_ERROR and store.failed
    assert store._state.checkpoint == cp                    # nothing vouches for entry 1
    _refuses_everything(store)
    assert pl.injected == 1
    pl.power_loss(store)
    again = _open(tmp_path, pl)
    assert [e.body for e in again] == [b"a"]          # only what an msync covered
    again.close()


def test_a_failed_background_flush_fails_the_store(tmp_path, monkeypatch):
    if not bg_flush.supported:
        pytest.skip("no libc msync here")  # pragma: no cover

    class FailingLibc:
        @staticmethod
        def msync(addr, length, flags):
            return -1

    store = DLedgerMmapFileStore.open(str(tmp_path / "s"), data_file_size=64 * 1024, index_file_size=32 * 64,
                                      background_flush=True)
    store.persist_term(1, None)
    store.batch_append_as_leader([b"a"])
    monkeypatch.setattr(bg_flush, "_libc", FailingLibc)
    assert store.flush_if_due(0)                      # hands the job to the flush thread
    store._flusher.flush_job.wait(10)
    with pytest.raises(DLedgerError) as exc:
        store.flush_if_due(10 ** 6)                   # takes the failed job in
    assert exc.value.code == DISK_ERROR
    assert "background flush failed" in store.failed and "msync" in store.failed
    monkeypatch.undo()
    _refuses_everything(store)
    store.data_list.close()
    store.index_list.close()


def test_enospc_at_segment_creation_refuses_appends_keeps_reads_and_recovers(tmp_path):
    pl = PowerLoss()
    store = _open(tmp_path, pl, durability="fsync", data_file_size=4096)
    store.persist_term(1, None)
    body = b"z" * 1000
    while len(store.data_list.files) < 2:
        store.batch_append_as_leader([body])
    end = store.ledger_end_index
    pl.no_space = True
    with pytest.raises(DLedgerError) as exc:
        for _ in range(8):                            # fills the segment, then needs a new one
            store.batch_append_as_leader([body])
            end = store.ledger_end_index
    assert exc.value.code == DISK_FULL
    assert pl.injected >= 1 and store.failed is None  # a full disk is not a failed sync
    assert store.ledger_end_index == end
    assert store.get(end).body == body and store.get(0).body == body
    assert len(store.data_list.files) == 2                                  # no half-made segment
    pl.no_space = False
    store.batch_append_as_leader([body])
    assert store.ledger_end_index == end + 1 and store.get(end + 1).body == body
    store.close()


def test_allocate_is_the_seam_of_segment_creation(tmp_path):
    pl = PowerLoss()
    pl.no_space = True
    store = _open(tmp_path, pl)
    store.persist_term(1, None)
    with pytest.raises(DLedgerError) as exc:
        store.batch_append_as_leader([b"first"])
    assert exc.value.code == DISK_FULL
    segments = [p for d in ("data", "index") if (tmp_path / "s" / d).exists() for p in (tmp_path / "s" / d).iterdir()]
    assert segments == []                                        # no half-made segment is left
    pl.no_space = False
    store.batch_append_as_leader([b"first"])
    assert store.get(0).body == b"first"
    store.close()


def test_slow_syncs_report_their_size_after_each_msync(tmp_path):
    pl = PowerLoss()
    seen = []
    pl.on_sync = seen.append
    store = _open(tmp_path, pl, durability="fsync")
    store.persist_term(1, None)
    store.batch_append_as_leader([b"q" * 100])
    assert seen and all(n > 0 for n in seen)
    pl.fail_syncs(1)
    before = len(seen)
    with pytest.raises(DLedgerError):
        store.batch_append_as_leader([b"r"])
    assert len(seen) == before                        # a failed msync costs no pause here


def test_injected_checkpoint_write_failure_surfaces_from_flush(tmp_path):
    store = FaultyStore(DLedgerMmapFileStore.open(str(tmp_path / "s"), data_file_size=64 * 1024,
                                                  index_file_size=32 * 64))
    store.persist_term(1, None)
    store.batch_append_as_leader([b"a"])
    store.fail_checkpoint(DISK_FULL)
    with pytest.raises(DLedgerError) as exc:
        store.flush()
    assert exc.value.code == DISK_FULL and store.injected == 1
    assert store.failed is None
    store.flush()                                     # the next write goes through
    assert store.inner._state.checkpoint.end_index == 0
    store.fail("persist_term", DISK_FULL)
    with pytest.raises(DLedgerError) as exc:
        store.persist_term(2, "n1")
    assert exc.value.code == DISK_FULL and store.current_term == 1
    store.close()


def test_eio_is_an_oserror_with_the_errno():
    pl = PowerLoss()
    pl.fail_syncs(1)
    err = pl._sync_error("/x")
    assert isinstance(err, OSError) and err.errno == errno.EIO
    assert pl._sync_error("/x") is None


@pytest.mark.parametrize("bodies", [[b"d", b"e"], [b"d" * 5000, b"e"]], ids=["joined", "loop"])
def test_enospc_at_index_segment_creation_leaves_a_consistent_log(tmp_path, bodies):
    pl = PowerLoss()
    store = _open(tmp_path, pl, durability="fsync", index_file_size=32 * 4)
    store.persist_term(1, None)
    store.batch_append_as_leader([b"a", b"b", b"c"])              # 3 of the 4 units of segment 0
    pl.no_space = True
    with pytest.raises(DLedgerError) as exc:
        store.batch_append_as_leader(bodies)                      # "e" needs a new index segment
    assert exc.value.code == DISK_FULL
    end = store.ledger_end_index
    assert [e.body for e in store] == ([b"a", b"b", b"c"] + bodies)[:end + 1]
    pl.no_space = False
    store.batch_append_as_leader([b"f"])
    expect = ([b"a", b"b", b"c"] + bodies)[:end + 1] + [b"f"]
    assert [e.body for e in store] == expect
    pl.power_loss(store)
    again = _open(tmp_path, pl, durability="fsync", index_file_size=32 * 4)
    assert [e.body for e in again] == expect
    again.close()


def test_enospc_at_index_segment_creation_in_a_follower_batch_leaves_a_consistent_log(tmp_path):
    leader = DLedgerMmapFileStore.open(str(tmp_path / "l"), data_file_size=64 * 1024, index_file_size=32 * 64)
    leader.persist_term(1, None)
    leader.batch_append_as_leader([b"x%d" % i for i in range(6)])
    pl = PowerLoss()
    follower = _open(tmp_path, pl, durability="fsync", index_file_size=32 * 4)
    follower.persist_term(1, None)
    raw, count = leader.get_raw_range(0, 1 << 20, 3)
    follower.batch_append_as_follower(raw, 1)
    raw, count = leader.get_raw_range(3, 1 << 20)
    pl.no_space = True
    with pytest.raises(DLedgerError) as exc:
        follower.batch_append_as_follower(raw, 1)
    assert exc.value.code == DISK_FULL
    end = follower.ledger_end_index
    pl.no_space = False
    raw, count = leader.get_raw_range(end + 1, 1 << 20)
    follower.batch_append_as_follower(raw, 1)
    assert [e.body for e in follower] == [b"x%d" % i for i in range(6)]
    for i in range(6):
        assert follower.get_raw(i) == leader.get_raw(i)
    leader.close()
    follower.close()


def test_a_failed_store_closes_without_flushing_and_reopens_suspect(tmp_path):
    """Shutting down a node whose disk failed a sync must not raise, and must not mark the
    store as cleanly closed: what it held was never proved durable."""
    from dledger.store.suspect import SuspectReason
    pl = PowerLoss()
    store = _open(tmp_path, pl, durability="page_cache")
    store.clear_suspect()
    store.persist_term(1, None)
    store.batch_append_as_leader([b"a"])
    pl.fail_syncs(1)
    with pytest.raises(DLedgerError):
        store.flush()
    store.close()                                     # no exception, no flush, no marker
    assert store.closed
    again = _open(tmp_path, pl)
    assert again.failed is None
    assert again.suspect is SuspectReason.UNCLEAN_SHUTDOWN
    again.close()


# -- term and checkpoint writes the disk refuses; msyncs inside a cut ----------------------

def test_a_full_disk_at_a_term_write_is_disk_full_and_changes_nothing(tmp_path):
    pl = PowerLoss()
    store = _open(tmp_path, pl)
    pl.attach(store)                                               # term and checkpoint writes on this disk
    store.persist_term(3, "n1")
    pl.no_space = True
    with pytest.raises(DLedgerError) as exc:
        store.persist_term(4, "n2")
    assert exc.value.code == DISK_FULL
    assert (store.current_term, store.vote_for) == (3, "n1")       # no vote was taken in memory
    assert store.failed is None                                    # a full disk is not a failed disk
    pl.no_space = False
    store.persist_term(4, "n2")                                    # space came back: retried
    assert (store.current_term, store.vote_for) == (4, "n2")
    store.close()
    again = _open(tmp_path, pl)
    assert (again.current_term, again.vote_for) == (4, "n2")
    again.close()


def test_an_eio_at_a_term_write_fails_the_store(tmp_path):
    pl = PowerLoss()
    store = _open(tmp_path, pl)
    pl.attach(store)
    store.persist_term(3, None)
    pl.fail_syncs(1)                                               # the term file's fsync fails
    with pytest.raises(DLedgerError) as exc:
        store.persist_term(4, "n2")
    assert exc.value.code == DISK_ERROR and store.current_term == 3
    assert "term file write failed" in store.failed
    _refuses_everything(store)
    store.close()


def test_a_full_disk_at_a_checkpoint_write_through_the_simulated_disk(tmp_path):
    pl = PowerLoss()
    store = _open(tmp_path, pl)
    pl.attach(store)
    store.persist_term(1, None)
    store.batch_append_as_leader([b"a"])
    before = store._state.checkpoint                                     # the one the open wrote
    pl.no_space = True
    with pytest.raises(DLedgerError) as exc:
        store.flush()
    assert exc.value.code == DISK_FULL and store.failed is None and store._state.checkpoint == before
    pl.no_space = False
    store.flush()
    assert store._state.checkpoint.end_index == 0
    store.close()


def test_a_checkpoint_the_full_disk_refuses_keeps_the_previous_one_and_is_retried(tmp_path):
    store = FaultyStore(_open(tmp_path, PowerLoss()))
    inner = store.inner
    store.persist_term(1, None)
    store.batch_append_as_leader([b"a"])
    store.flush()
    before = inner._state.checkpoint
    store.batch_append_as_leader([b"b"])
    store.fail_checkpoint(DISK_FULL)
    with pytest.raises(DLedgerError) as exc:
        store.flush()
    assert exc.value.code == DISK_FULL and inner.failed is None
    assert inner._state.checkpoint == before                             # what is on disk, not what was wanted
    from dledger.store.checkpoint import read_checkpoint
    assert read_checkpoint(inner.store_dir) == before
    store.flush()                                                  # retried
    assert inner._state.checkpoint.end_index == 1
    store.close()


def test_a_checkpoint_write_failing_with_eio_fails_the_store(tmp_path):
    store = FaultyStore(_open(tmp_path, PowerLoss()))
    store.persist_term(1, None)
    store.batch_append_as_leader([b"a"])
    store.fail_checkpoint(DISK_ERROR)
    with pytest.raises(DLedgerError) as exc:
        store.flush()
    assert exc.value.code == DISK_ERROR and "checkpoint write" in store.inner.failed
    _refuses_everything(store.inner)
    store.close()                                                  # a failed store still closes


def test_a_truncation_whose_first_checkpoint_the_full_disk_refuses_changes_nothing(tmp_path):
    store = FaultyStore(_open(tmp_path, PowerLoss()))
    store.persist_term(1, None)
    store.batch_append_as_leader([b"a", b"b", b"c", b"d"])
    store.flush()                                                  # the checkpoint vouches for 0..3
    store.fail_checkpoint(DISK_FULL)
    with pytest.raises(DLedgerError) as exc:
        store.truncate(2)
    assert exc.value.code == DISK_FULL
    assert [e.body for e in store.inner] == [b"a", b"b", b"c", b"d"]   # refused before any file changed
    assert store.truncate(2) == 1                                  # space back: the cut goes through
    assert [e.body for e in store.inner] == [b"a", b"b"]
    store.close()


def test_a_close_whose_checkpoint_the_full_disk_refuses_still_closes(tmp_path):
    pl = PowerLoss()
    store = FaultyStore(_open(tmp_path, pl))
    store.persist_term(1, None)
    store.batch_append_as_leader([b"a", b"b"])
    store.fail_checkpoint(DISK_FULL)
    store.close()
    assert store.inner.closed
    again = _open(tmp_path, pl)
    assert [e.body for e in again] == [b"a", b"b"]
    again.close()


@pytest.mark.parametrize("where", ["index erase", "header zeroing"])
def test_a_failed_msync_inside_a_truncation_fails_the_store_cleanly(tmp_path, where):
    pl = PowerLoss()
    store = _open(tmp_path, pl, durability="fsync")
    store.persist_term(1, None)
    store.batch_append_as_leader([b"a", b"b", b"c", b"d"])
    store.flush()
    ops = pl.ops
    pl.fail_syncs(1, after=0 if where == "index erase" else 1)     # the cut's first or second msync
    store_msync_error = None
    try:
        store.truncate(2)
    except DLedgerError as exc:
        store_msync_error = exc
    assert store_msync_error is not None and store_msync_error.code == DISK_ERROR
    assert "msync inside the truncation at 2" in store.failed and pl.ops > ops
    _refuses_everything(store)
    pl.power_loss(store)
    again = _open(tmp_path, pl, durability="fsync")                # recovery: the old log or the cut one
    assert [e.body for e in again] in ([b"a", b"b", b"c", b"d"], [b"a", b"b"])
    again.close()


def test_an_open_whose_recovery_msync_fails_is_refused_cleanly_and_holds_no_lock(tmp_path):
    """Found by the swarm (seed 2113, 3 nodes, fsync, file stores): a restart whose recovery
    msync failed raised a raw OSError out of the open."""
    pl = PowerLoss()
    store = _open(tmp_path, pl, durability="page_cache")
    store.persist_term(1, None)
    store.batch_append_as_leader([b"a", b"b"])                     # in the page cache only
    from dledger.sim.disk import crash_store
    crash_store(store)
    pl.fail_syncs(1)                                               # the fsync-mode open syncs the tail first
    with pytest.raises(DLedgerError) as exc:
        _open(tmp_path, pl, durability="fsync")
    assert exc.value.code == DISK_ERROR and "cannot be opened, the disk failed" in str(exc.value)
    again = _open(tmp_path, pl, durability="fsync")                # no lock left behind: it opens
    assert [e.body for e in again] == [b"a", b"b"]
    again.close()


def test_a_checkpoint_after_a_cut_that_the_full_disk_refuses_is_only_logged(tmp_path):
    """A reset announces its new begin in the checkpoint, changes the files, then writes the
    checkpoint again: when only that last write finds the disk full, the reset stands (the
    announced checkpoint keeps an open right) and a reopen sees the cut log."""
    pl = PowerLoss()
    store = _open(tmp_path, pl, durability="fsync")
    store.persist_term(1, None)
    store.batch_append_as_leader([b"a", b"b", b"c", b"d"])
    store.committed_index = 3
    store.flush()
    real, calls = store._flusher.put_checkpoint, []

    def second_write_full(cp):
        calls.append(cp)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "injected", store.store_dir)
        real(cp)

    store._flusher.put_checkpoint = second_write_full
    assert store.reset(1, 1) == 2                                  # no error: the cut happened
    assert len(calls) == 2 and store.failed is None
    assert store.ledger_before_begin_index == 1 and [e.body for e in store] == [b"c", b"d"]
    store.close()
    again = _open(tmp_path, pl, durability="fsync")
    assert again.ledger_before_begin_index == 1 and [e.body for e in again] == [b"c", b"d"]
    again.close()
