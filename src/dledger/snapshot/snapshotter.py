"""Snapshotter: when a node takes its state machine's snapshot, loads it, and trims its log.

A part of ``DLedgerServer`` (it does the file I/O the sans-IO core does not), present when a
file store has a state machine that can save and load its state (``on_snapshot_save`` and
``on_snapshot_load``):

- **at start** (``load``): a snapshot received whole from a leader before the node stopped is
  put in place first (``finish_received_install``); then the newest intact snapshot
  (``FileSnapshotStore.newest``: a damaged one is skipped for the next older one, with one log
  line) is loaded into the state machine,
  and the node applies only the log after it. A snapshot older than the log's first entry
  cannot be completed from the log, and no snapshot at all cannot either once the log lost
  its head: the node then applies nothing until the leader installs one (``needs_snapshot``,
  one log line);
- **taking one** (``maybe_take`` after each step, ``take`` on demand): once
  ``snapshot_threshold`` entries were applied since the last one. Applying pauses at the
  applied index (entries still commit and replicate; appends complete when applied after it),
  and the state machine writes its state on a worker thread, so the event loop and the log
  never wait for it. A state machine with ``snapshot_state()`` is asked for a point-in-time
  view on the loop instead, and applying goes on while ``on_snapshot_save(writer, view)``
  writes it. The snapshot is then made durable (``PendingSnapshot.commit``) and older ones
  pruned to ``max_snapshot_reserve_num``;
- **trimming the log** (after a snapshot): the head segments at or below the *oldest* kept
  snapshot go (``store.remove_prefix``), so that every snapshot kept can still be completed
  from the log (a damaged newest one falls back to an older one with nothing lost). A leader
  also keeps what a follower it heard from within ``snapshot_follower_window_ms`` needs next.

Where the simulator runs a node (its runtime allows no thread), the worker's part runs on the
runtime's one thread in a later turn: applying still pauses for it, and a seed replays exactly.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from dledger.errors import CorruptSnapshotError
from dledger.snapshot.file_snapshot_store import FileSnapshotStore, PendingSnapshot
from dledger.snapshot.meta import SnapshotMeta

log = logging.getLogger(__name__)

#: how often the log's trimming is tried again while something holds it back (a follower
#: behind, on a leader)
TRIM_RETRY_MS = 1000


def can_snapshot(state_machine: Any) -> bool:
    """Does ``state_machine`` save and load snapshots?"""
    return (state_machine is not None and callable(getattr(state_machine, "on_snapshot_save", None))
            and callable(getattr(state_machine, "on_snapshot_load", None)))


class Snapshotter:
    def __init__(self, config, state_machine, store_dir: str, runtime) -> None:
        self.config = config
        self.state_machine = state_machine
        self.runtime = runtime
        self.files = FileSnapshotStore(store_dir, max_reserve=config.max_snapshot_reserve_num)
        self.threshold = config.snapshot_threshold
        #: the newest durable snapshot's index (-1: none)
        self.last_index = -1
        #: the snapshot being taken: its index, or -1
        self.saving = -1
        self._waiters: list[Future] = []
        #: snapshots taken by this process (metrics)
        self.taken = 0
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        #: an automatic snapshot is due once the applied index reaches it
        self.due_at = -1
        #: the indexes of the snapshots kept (refreshed after each change), and when the log
        #: may next be trimmed (a leader retries while a follower holds it back)
        self.kept: list[int] = []
        self._trim_at_ms = 0
        self.node = None
        #: runs the node after a snapshot (the driver's ``process``): applying resumed
        self.process = None

    # -- start -------------------------------------------------------------------------------
    def load(self, store) -> tuple[int, bool]:
        """Load the newest usable snapshot into the state machine, before the node starts.
        Returns (the applied index the node starts from, whether it needs a snapshot)."""
        begin = store.ledger_before_begin_index
        self.files.finish_received_install()
        meta = self.files.newest()
        self.kept = [m.last_included_index for m in self.files.metas()]
        if meta is not None and meta.last_included_index >= begin:
            self._load_from(meta)
            log.info("loaded %s; the log after it is replayed (log %d..%d)", meta, begin + 1,
                     store.ledger_end_index)
            self.last_index = meta.last_included_index
            self.due_at = self.last_index + self.threshold
            return meta.last_included_index, False
        self.due_at = begin + self.threshold
        if begin < 0:
            return -1, False
        why = f"the newest snapshot covers entries up to {meta.last_included_index} only" if meta \
            else "no snapshot is here"
        log.error("this log begins after entry %d and %s: the state cannot be rebuilt from what this "
                  "node holds; applying waits until the leader installs its snapshot", begin, why)
        return begin, True

    def _load_from(self, meta: SnapshotMeta) -> None:
        with self.files.open_reader(meta) as reader:
            self.state_machine.on_snapshot_load(reader)

    def attach(self, node, process) -> None:
        self.node = node
        self.process = process

    # -- taking one --------------------------------------------------------------------------
    def maybe_take(self) -> None:
        """After a step: take a snapshot when ``snapshot_threshold`` entries were applied
        since the last one."""
        node = self.node
        if self.saving >= 0 or self._closed or node is None:
            return
        restored = node.caller.restored_index
        if restored > self.last_index:          # the leader's snapshot was installed here
            self.last_index = restored
            self.due_at = restored + self.threshold
            self.kept = [m.last_included_index for m in self.files.metas()]
        installs = node.pusher.installs
        if installs.snapshot_wanted:
            installs.snapshot_wanted = False   # a follower waits for a snapshot this leader lacks
            if node.caller.applied_index > self.last_index:
                self.take()
        elif self.threshold > 0 and node.caller.applied_index >= self.due_at:
            self.take()
        elif self.kept and node.now_ms >= self._trim_at_ms and min(self.kept) > node.store.ledger_before_begin_index:
            self.trim()

    def take(self) -> Future:
        """Take a snapshot of the state as of the applied index now; the future's result is
        its last included index (the one in progress, when a snapshot is being taken)."""
        fut: Future = Future()
        node = self.node
        if self.saving >= 0:
            self._waiters.append(fut)
            return fut
        index = node.caller.applied_index
        if node.caller.needs_snapshot or index < 0:
            fut.set_exception(RuntimeError("nothing applied to take a snapshot of"))
            return fut
        if index <= self.last_index:
            fut.set_result(self.last_index)
            return fut
        self.due_at = index + self.threshold
        store = node.store
        term = store.ledger_before_begin_term if index == store.ledger_before_begin_index \
            else store.get_entry_term(index)
        try:
            pending = self.files.begin_save(index, term)
        except OSError as exc:
            log.error("cannot start a snapshot of entry %d: %s", index, exc)
            fut.set_exception(exc)
            return fut
        self.saving = index
        self._waiters.append(fut)
        sm = self.state_machine
        view_of = getattr(sm, "snapshot_state", None)
        if callable(view_of):
            view = view_of()
            work = lambda: sm.on_snapshot_save(pending.writer, view)      # noqa: E731
            paused = False
        else:
            node.caller.pause()
            work = lambda: sm.on_snapshot_save(pending.writer)            # noqa: E731
            paused = True
        self._off_loop(lambda: self._save(pending, work), lambda result: self._saved(pending, paused, result))
        return fut

    @staticmethod
    def _save(pending: PendingSnapshot, work) -> SnapshotMeta:
        """The worker's part: the state machine writes, then the snapshot is made durable."""
        try:
            work()
            return pending.commit()
        except Exception:
            pending.abort()
            raise

    def _saved(self, pending: PendingSnapshot, paused: bool, result: tuple) -> None:
        """Back on the runtime's thread: applying resumes, the log is trimmed, waiters told."""
        meta, exc = result
        node = self.node
        if paused:
            node.caller.resume()
        self.saving = -1
        waiters, self._waiters = self._waiters, []
        if exc is not None:
            log.error("snapshot of entry %d failed: %r; the log keeps every entry, the next one is "
                      "tried after %d more applied", pending.index, exc, self.threshold)
            for fut in waiters:
                fut.set_exception(exc)
        else:
            self.last_index = meta.last_included_index
            self.kept = [m.last_included_index for m in self.files.metas()]
            self.taken += 1
            node.caller.snapshot_index = max(node.caller.snapshot_index, self.last_index)
            log.info("took %s (%d bytes)", meta, meta.data_size)
            self.trim()
            for fut in waiters:
                fut.set_result(meta.last_included_index)
        if not self._closed and self.process is not None:
            self.process()

    # -- trimming ----------------------------------------------------------------------------
    def trim_bound(self) -> int:
        """The highest index the log may drop up to: the oldest kept snapshot's, lowered (on a
        leader) to keep what a live follower needs next."""
        if not self.kept:
            return -1
        bound = min(self.kept)
        need = self.node.followers_need_from(self.config.snapshot_follower_window_ms)
        if need is not None:
            bound = min(bound, need - 1)
        return bound

    def trim(self) -> int:
        """Drop the log's head segments a snapshot covers (see the module docstring)."""
        store = self.node.store
        self._trim_at_ms = self.node.now_ms + TRIM_RETRY_MS
        bound = self.trim_bound()
        if bound <= store.ledger_before_begin_index:
            return 0
        store.update_committed_index(self.node.committed_index)
        try:
            gone = store.remove_prefix(bound)
        except Exception as exc:           # the store says what failed; the log stays whole
            log.error("trimming the log up to entry %d failed: %s", bound, exc)
            return 0
        if gone:
            log.info("dropped %d log segment(s) a snapshot covers: the log now begins after entry %d",
                     gone, store.ledger_before_begin_index)
        return gone

    # -- threads -----------------------------------------------------------------------------
    def _off_loop(self, fn, done) -> None:
        """Run ``fn`` on the worker thread, then ``done((result, exc))`` on the runtime's
        thread; on a runtime that allows no thread, in a later turn of its own."""
        rt = self.runtime

        def call() -> tuple:
            try:
                return fn(), None
            except Exception as exc:       # handed to ``done`` (a crash of the process is not)
                return None, exc

        if not getattr(rt, "background_flush", False):
            rt.call_soon(lambda: done(call()))
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="dledger-snapshot")
        work = self._executor.submit(call)
        work.add_done_callback(lambda f: rt.call_soon_threadsafe(done, f.result()))

    def close(self) -> None:
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


__all__ = ["Snapshotter", "can_snapshot"]
