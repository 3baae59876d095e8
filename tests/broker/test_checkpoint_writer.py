"""The dispatch checkpoint's syncs and writes off the runtime thread (``checkpoint_writer``):
a job syncs before it writes and stops at its first failure; the checkpoint thread runs one job
at a time; on a real runtime, puts are answered while a checkpoint's sync is stuck, a failed
checkpoint is logged and made again with every file it synced, and the last checkpoint of
``close`` goes after the one in flight, never under it."""

import errno
import logging
import os
import threading

import pytest

from dledger import DLedgerConfig, DLedgerServer
from dledger.broker import DLedgerCommitLog, checkpoint_writer, dispatch_checkpoint
from dledger.broker.checkpoint_writer import CheckpointJob, CheckpointWriter, write_atomic
from dledger.runtime.asyncio_runtime import AsyncioRuntime
from dledger.transport.inproc import Hub
from helpers.polling import followed_leader, poll

PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"


def path_of(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


class Marked:
    def __init__(self) -> None:
        self.unsynced = 0

    def mark_unsynced(self) -> None:
        self.unsynced += 1


# -- the job ----------------------------------------------------------------------------------
def test_a_job_syncs_every_descriptor_then_writes_its_files_in_order_and_closes_what_it_owns(tmp_path):
    files = [tmp_path / f"f{k}" for k in range(3)]
    for f in files:
        f.write_bytes(b"x")
    fds = [os.open(f, os.O_RDONLY) for f in files]
    calls = []

    def fsync(fd):
        calls.append(path_of(fd))
        os.fsync(fd)

    job = CheckpointJob(fds=list(fds), writes=[(str(tmp_path / "a"), b"first"), (str(tmp_path / "b"), b"second")])
    job.run(fsync)
    assert job.error is None
    assert calls == [str(f) for f in files] + [str(tmp_path / "a.tmp"), str(tmp_path),
                                                str(tmp_path / "b.tmp"), str(tmp_path)]
    assert (tmp_path / "a").read_bytes() == b"first" and (tmp_path / "b").read_bytes() == b"second"
    assert not (tmp_path / "a.tmp").exists()
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
    assert job.fds == []


def test_a_failed_sync_writes_nothing_after_it_and_marks_what_the_job_synced(tmp_path):
    (tmp_path / "q").write_bytes(b"units")
    fds = [os.open(tmp_path / "q", os.O_RDONLY), os.open(tmp_path / "q", os.O_RDONLY)]
    seen = []

    def fsync(fd):
        seen.append(fd)
        if len(seen) == 2:
            raise OSError(errno.EIO, "Input/output error")
        os.fsync(fd)

    queue, index = Marked(), Marked()
    job = CheckpointJob(fds=list(fds), writes=[(str(tmp_path / "cp"), b"vouches")], synced=[queue, index])
    job.run(fsync)
    assert job.error == "Input/output error (a file being synced)"
    assert not (tmp_path / "cp").exists() and not (tmp_path / "cp.tmp").exists()
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
    job.mark_unsynced()
    assert (queue.unsynced, index.unsynced) == (1, 1)


def test_write_atomic_replaces_the_file_whole(tmp_path):
    path = str(tmp_path / "t")
    write_atomic(path, b"old")
    write_atomic(path, b"new and longer" * 1000)
    assert (tmp_path / "t").read_bytes() == b"new and longer" * 1000
    assert sorted(os.listdir(tmp_path)) == ["t"]


# -- the writer -------------------------------------------------------------------------------
def test_the_checkpoint_thread_runs_a_job_while_the_caller_goes_on_and_hands_it_back_once(tmp_path):
    release = threading.Event()
    ran = []

    def fsync(fd):
        ran.append(threading.current_thread().name)
        assert release.wait(20)
        os.fsync(fd)

    writer = CheckpointWriter(background=True, fsync=fsync)
    (tmp_path / "q").write_bytes(b"u")
    job = CheckpointJob(fds=[os.open(tmp_path / "q", os.O_RDONLY)], writes=[(str(tmp_path / "cp"), b"1")])
    writer.submit(job)
    assert writer.busy() and writer.reap() is None
    with pytest.raises(RuntimeError, match="still to be reaped"):
        writer.submit(CheckpointJob())
    assert not (tmp_path / "cp").exists()
    release.set()
    assert writer.reap(wait=True) is job and job.error is None
    assert not writer.busy() and writer.reap() is None
    assert (tmp_path / "cp").read_bytes() == b"1"
    assert ran and ran[0].startswith("dledger-checkpoint")


def test_without_a_background_thread_a_job_runs_at_once_on_the_caller(tmp_path):
    ran = []
    writer = CheckpointWriter(background=False, fsync=lambda fd: (ran.append(threading.current_thread()),
                                                                     os.fsync(fd)))
    job = CheckpointJob(writes=[(str(tmp_path / "cp"), b"now")])
    writer.submit(job)
    assert (tmp_path / "cp").read_bytes() == b"now" and not writer.busy()
    assert set(ran) == {threading.current_thread()}
    assert writer.reap() is job


def test_a_job_that_raises_on_the_callers_thread_is_reaped_as_failed(tmp_path):
    def fsync(fd):
        raise RuntimeError("a bug in the sync")

    writer = CheckpointWriter(background=False, fsync=fsync)
    (tmp_path / "q").write_bytes(b"u")
    queue = Marked()
    job = CheckpointJob(fds=[os.open(tmp_path / "q", os.O_RDONLY)], writes=[(str(tmp_path / "cp"), b"1")],
                        synced=[queue])
    with pytest.raises(RuntimeError, match="a bug in the sync"):
        writer.submit(job)
    assert writer.reap() is job and job.error == "checkpoint failed: RuntimeError('a bug in the sync')"
    assert not (tmp_path / "cp").exists()


def test_a_job_the_checkpoint_thread_cannot_take_is_reaped_as_failed_and_its_descriptors_closed(
        tmp_path, monkeypatch):
    class ShutDown:
        def submit(self, *_args):
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    monkeypatch.setattr(checkpoint_writer, "_thread", ShutDown)
    writer = CheckpointWriter(background=True)
    (tmp_path / "q").write_bytes(b"u")
    before = set(os.listdir("/proc/self/fd"))
    fd = os.open(tmp_path / "q", os.O_RDONLY)
    job = CheckpointJob(fds=[fd], writes=[(str(tmp_path / "cp"), b"1")])
    with pytest.raises(RuntimeError, match="interpreter shutdown"):
        writer.submit(job)
    assert set(os.listdir("/proc/self/fd")) == before
    assert not writer.busy()
    assert writer.reap() is job and job.error.startswith("checkpoint failed: RuntimeError")
    assert not (tmp_path / "cp").exists()


# -- on a real runtime --------------------------------------------------------------------------
class Group:
    """Three broker replicas on one asyncio runtime (in-process transport), checkpoints every
    ``interval_ms``, each writer syncing through ``fsync`` (a test's hook)."""

    def __init__(self, tmp_path, fsync, interval_ms=20) -> None:
        self.runtime, hub = AsyncioRuntime(), Hub()
        self.logs = []
        for node_id in ("n0", "n1", "n2"):
            cfg = DLedgerConfig(group="c", self_id=node_id, peers=PEERS, store_base_dir=str(tmp_path),
                                mapped_file_size_for_entry_data=1 << 22,
                                mapped_file_size_for_entry_index=32 * 65536, heart_beat_time_interval_ms=500)
            log = DLedgerCommitLog(DLedgerServer(cfg, runtime=self.runtime, hub=hub),
                                   checkpoint_interval_ms=interval_ms)
            log.checkpoints.fsync = fsync
            log.server.startup()
            self.logs.append(log)
        # a master the others have not all heard of yet may still lose its term to a competing
        # candidate (a put then answers EXPIRED_TERM): wait until every replica follows it
        def followed() -> bool:
            self.master = self._followed_master()
            return self.master is not None
        poll(followed, what="a master every replica follows")

    def _followed_master(self):
        lead = followed_leader([log.server for log in self.logs])
        return next((log for log in self.logs if log.server is lead and log.roles.writable), None)

    def put(self, k: int):
        r = self.master.put_message("CP", k % 4, b"body-%d" % k, timeout=10, keys=[f"k{k}"])
        assert r.ok, r
        return r

    def close(self) -> None:
        for log in self.logs:
            log.server.shutdown()
            log.close()
        self.runtime.close()


def test_puts_are_answered_and_dispatched_while_a_checkpoints_sync_is_stuck(tmp_path, caplog):
    stuck, release = threading.Event(), threading.Event()

    def fsync(fd):
        if "consumequeue" in path_of(fd):
            stuck.set()
            assert release.wait(30)
        os.fsync(fd)

    with caplog.at_level(logging.ERROR):
        group = Group(tmp_path, fsync)
        try:
            group.put(0)
            assert stuck.wait(20)
            assert any(log.checkpoints.busy() for log in group.logs)
            for k in range(1, 21):              # each answered while the sync has not returned
                group.put(k)
            # and dispatched on every replica, checkpoints falling due meanwhile waiting their turn
            for log in group.logs:
                poll(lambda: log.max_queue_offset("CP", 0) == 6)
            assert not release.is_set() and any(log.checkpoints.busy() for log in group.logs)
        finally:
            release.set()
            group.close()
    assert [r.getMessage() for r in caplog.records] == []


@pytest.mark.parametrize("kind", ["consumequeue", "keyindex"])
def test_a_failed_checkpoint_is_logged_and_made_again_with_every_file_it_synced(tmp_path, caplog, kind):
    failed, synced = [], []

    def fsync(fd):
        path = path_of(fd)
        if f"/{kind}/" in path and not failed:
            failed.append(path)
            raise OSError(errno.EIO, "Input/output error")
        synced.append(path)
        os.fsync(fd)

    with caplog.at_level(logging.ERROR, logger="dledger.broker.commit_log"):
        group = Group(tmp_path, fsync)
        try:
            group.put(0)
            poll(lambda: failed)
            # nothing more is put: the replica whose job failed syncs the file that failed again, then vouches for it
            poll(lambda: failed[0] in synced)
            log = next(log for log in group.logs if failed[0].startswith(log.root))
            poll(lambda: (dispatch_checkpoint.read(log.root).queues or {}).get(("CP", 0)) == 1)
        finally:
            group.close()
    assert any("the dispatch checkpoint failed, to be tried again: Input/output error" in r.getMessage()
               for r in caplog.records)


def test_the_last_checkpoint_of_close_goes_after_the_one_in_flight(tmp_path):
    hold, stuck, release = threading.Event(), threading.Event(), threading.Event()

    def fsync(fd):
        if hold.is_set() and "consumequeue" in path_of(fd):
            stuck.set()
            assert release.wait(30)
        os.fsync(fd)

    group = Group(tmp_path, fsync)
    try:
        group.put(0)
        hold.set()
        for k in range(1, 5):
            group.put(k)
        assert stuck.wait(20)             # a checkpoint of some replica is stuck in its sync
        log = next(log for log in group.logs if log.checkpoints.busy())
        for k in range(5, 9):             # dispatched after that checkpoint was captured
            group.put(k)
        poll(lambda: log.max_queue_offset("CP", 0) == 3)
        closing = threading.Thread(target=log.close)
        closing.start()
        poll(lambda: log.closed)
        release.set()
        closing.join(30)
        assert not closing.is_alive()
        # the job in flight is through too (jobs run in order on the one checkpoint thread)
        probe = CheckpointWriter(background=True)
        probe.submit(CheckpointJob())
        probe.reap(wait=True)
        cp = dispatch_checkpoint.read(log.root)
        assert cp.queues == {("CP", q): 3 if q == 0 else 2 for q in range(4)}
        assert cp.next_index == log.reput.next_index
    finally:
        release.set()
        group.close()
