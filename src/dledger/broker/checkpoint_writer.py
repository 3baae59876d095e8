"""The dispatch checkpoint's syncs and writes, off the runtime thread.

Every ``checkpoint_interval_ms`` the broker makes what it dispatched durable and records how far
that goes: it fsyncs the consume queues that moved and the key-index files whose header changed,
then writes the dispatch checkpoint and the consumer offsets table, each to a temporary file
that is synced, renamed over the old one, and its directory synced. Made on the runtime thread,
that is six or more fsyncs in one turn, and every put and push waits behind them: 7-15 ms each
second on this project's benchmark machine, 89-110 ms when the three replicas synced at once
(docs/benchmarks.md).

A ``CheckpointJob`` is what one checkpoint does, captured on the runtime thread in one turn
(``ReputService.checkpoint_job``): file descriptors to sync, each a descriptor of its own (a
duplicate, or a new one for a mapped file), so that a file closed or removed meanwhile is still
the one synced and no reused number is; and the files to write, with their bytes. A
``CheckpointWriter`` runs it on a thread of its own when it is ``background`` (the runtime's
``background_flush``, as for the store's msyncs), else at once on the caller's thread (the
simulator: every run the same).

Why the checkpoint's promise (every file holds at least what it counts, intact) holds while the
runtime thread goes on dispatching:
- where a checkpoint counts, the files only grow: consume-queue units and key-index entries are
  appended; the slots and header a later dispatch rewrites are rebuilt by recovery from the
  counted entries. So a sync that runs later syncs at least what was captured. On Linux an
  fsync of a file writes the pages dirtied through a shared mapping of it too (``msync`` with
  ``MS_SYNC`` is the same call underneath), and it leaves the GIL;
- the files are written only after every sync of the job succeeded, in the job's order;
- one job at a time, and a checkpoint made on the caller's thread (``close``) first waits for
  the job in flight: checkpoints reach the disk in the order they were captured, never an older
  one over a newer.
A job that fails (a sync or a write raised) does nothing after the failure; ``reap`` hands it
back with its ``error``, and the caller marks what it synced as not synced, to be synced again
at the next checkpoint.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field


def write_atomic(path: str, data: bytes, fsync=None) -> None:
    """Durably replace ``path`` with ``data``: a temporary file written and synced, renamed over
    ``path``, the directory synced (``fsync``: ``os.fsync`` when None, looked up at the call)."""
    sync = fsync or os.fsync
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        sync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        sync(dfd)
    finally:
        os.close(dfd)


@dataclass(slots=True)
class CheckpointJob:
    #: descriptors to fsync, owned by the job (closed once it ran)
    fds: list[int] = field(default_factory=list)
    #: ``(path, bytes)`` written with ``write_atomic``, in order, after every sync
    writes: list[tuple[str, bytes]] = field(default_factory=list)
    #: what the descriptors sync (objects with ``mark_unsynced()``), for a failed job
    synced: list = field(default_factory=list)
    #: why the job did not finish (None: it did, or it has not run yet)
    error: str | None = None
    future: Future | None = None

    def run(self, fsync=None) -> None:
        """Sync, then write; the first failure is kept in ``error`` and ends the job."""
        sync = fsync or os.fsync
        try:
            for fd in self.fds:
                sync(fd)
            for path, data in self.writes:
                write_atomic(path, data, sync)
        except OSError as exc:
            self.error = f"{exc.strerror or exc} ({exc.filename or 'a file being synced'})"
        finally:
            self.close_fds()

    def close_fds(self) -> None:
        """Close the descriptors the job owns (once it ran, or when it never will)."""
        fds, self.fds = self.fds, []
        for fd in fds:
            os.close(fd)

    def mark_unsynced(self) -> None:
        """What the job synced counts as not synced: the next checkpoint syncs it again."""
        for item in self.synced:
            item.mark_unsynced()


_executor: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _thread() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        with _lock:
            if _executor is None:
                _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dledger-checkpoint")
    return _executor


class CheckpointWriter:
    """Runs one ``CheckpointJob`` at a time: on the checkpoint thread (``background``) or at once."""

    def __init__(self, background: bool, fsync=None) -> None:
        self.background = background
        #: the sync call (``os.fsync`` when None; tests slow it down or make it fail)
        self.fsync = fsync
        self._job: CheckpointJob | None = None

    def busy(self) -> bool:
        """A job was handed over and has not finished."""
        job = self._job
        return job is not None and job.future is not None and not job.future.done()

    def submit(self, job: CheckpointJob) -> None:
        """Run ``job``: on the checkpoint thread, or now. A job in flight must be reaped first."""
        if self._job is not None:
            raise RuntimeError("a checkpoint job is still to be reaped")
        self._job = job
        try:
            if self.background:
                job.future = _thread().submit(job.run, self.fsync)
            else:
                job.run(self.fsync)
        except BaseException as exc:
            # a bug, or no thread to be had (the interpreter is shutting down): reaped as a
            # failed job, its descriptors closed
            job.error = job.error or f"checkpoint failed: {exc!r}"
            job.close_fds()
            raise

    def reap(self, wait: bool = False) -> CheckpointJob | None:
        """The job handed over, once it finished (``wait``: wait for it); None while it runs or
        when there is none. Its ``error`` says whether it did everything."""
        job = self._job
        if job is None:
            return None
        if job.future is not None:
            if wait:
                job.future.exception()
            elif not job.future.done():
                return None
            exc = job.future.exception()
            if exc is not None and job.error is None:       # a bug, not the disk: say so
                job.error = f"checkpoint thread failed: {exc!r}"
        self._job = None
        return job


__all__ = ["CheckpointJob", "CheckpointWriter", "write_atomic"]
