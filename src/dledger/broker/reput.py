"""ReputService: dispatches committed messages to the consume queues and the key index, on
every replica (RocketMQ's ``DefaultMessageStore.ReputMessageService``).

It walks the log's committed entries in index order, from its checkpoint on, reading them in
checked runs (``store.get_raw_range(..., checked=True)``: one copy per data segment and batch,
every record checked against its index unit and CRC, no entry object per index). One pass over
each run (``dispatch_scan.scan_messages``: compiled where it could be built, else its Python
reference, ``message_codec.dispatch_fields`` per record, which reads only the fields dispatch
needs) finds each NORMAL entry whose body is a message; it becomes one consume-queue unit (physical offset = entry position +
the 48-byte entry header, size, tags hash code) at the queue offset stamped in the message, and
index keys for its UNIQ_KEY and KEYS. Where the compiled loops were built, the scan gathers a
run per consume queue (``scan_queues``: each queue's units packed in order, every key's hash)
and each queue takes its units at once, when every queue of the run exists and its stamped
offsets go on from its next one; any other run (a queue's first message, a broken promise) is
walked message by message, the reference, which writes the same. Each message is parsed once, there: a reader of one
queue's bodies (``keep_bodies_of``: the consumer state's records) takes them from that parse
(``take_kept``), never parsing the message again. Other entries (NOOP, membership, bodies that are not
messages) are passed over. Blank padding at segment ends is never seen: the runs hold records
only. A record that fails its check raises ``CorruptStoreError`` (the store notes the damage)
and the walk stops before it, as it would reading entry by entry.

Checkpoint (``dispatch_checkpoint``): the consume queues and the key index are plain file
writes and an mmap, made after every batch (a process crash keeps them: the page cache
survives); a checkpoint syncs them and then durably records the next entry and every file's
count. The commit log makes one every ``checkpoint_interval_ms`` (``checkpoint_job``, run on the
checkpoint thread: ``checkpoint_writer``) and at close (``checkpoint``, at once). On open, every
file is cut back to the checkpoint's counts (whatever a power cut tore or lost beyond them)
and the walk resumes at its ``next_index``: what was dispatched after it is dispatched again,
to the same units (they follow from the committed log), so nothing is dispatched twice and
nothing is skipped. A missing or damaged checkpoint, or a file holding less than it vouches
for, means dispatching everything again.

Listeners: ``on_dispatch(physical_offset, store_timestamp)`` is called for each message as it
is dispatched; ``on_dispatch_batch(dispatched)`` once per batch, after the checkpoint, with the
batch's ``(physical_offset, store_timestamp)`` pairs (cheaper for a listener that only
measures). Both are off (None) by default. With ``keep_bodies_of`` set to a (topic, queue id),
the stored bodies of that queue's messages are kept by unit (queue offset) as they are
dispatched, until ``take_kept`` hands them over (after each batch).

A replica whose log begins after index 0 (it caught up past the leader's retention: the
entries before were never in its log) starts a queue again at the first message it holds
(``ConsumeQueue.restart_at``: RocketMQ's min offset), when every unit the queue had points
before the log's first entry. Otherwise, a stamped queue offset that is not the queue's next
one is a broken promise of the leader; it is recorded in ``problems`` (and the unit is written as the queue's next, so the message stays
readable). Everything here runs on the server's runtime thread.
"""

from __future__ import annotations

import logging
import os

from dledger.broker import dispatch_checkpoint
from dledger.broker.checkpoint_writer import CheckpointJob
from dledger.broker.consume_queue import ConsumeQueue, list_queues
from dledger.broker.index_service import IndexService
from dledger.broker.dispatch_scan import new_scanner
from dledger.broker.put_checks import queue_id_problem, topic_problem
from dledger.broker.speedups import compiled
from dledger.entry import BODY_OFFSET
from dledger.errors import CorruptStoreError, DLedgerError

log = logging.getLogger(__name__)

CHECKPOINT = dispatch_checkpoint.NAME
#: bytes asked of one range read (a run stops earlier at a segment end or the batch's end)
READ_BYTES = 4 << 20
#: the most consume queues a run gathered per queue may touch (more: message by message)
MAX_GATHERED_QUEUES = 256


class ReputService:
    def __init__(self, root: str, *, units_per_file: int | None = None, index_options: dict | None = None) -> None:
        self.root = root
        os.makedirs(root, exist_ok=True)
        self._cq_kwargs = {} if units_per_file is None else {"units_per_file": units_per_file}
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        #: topic -> its highest queue id with a consume queue, plus one (read from any thread)
        self.topic_queues: dict[str, int] = {}
        self.index = IndexService(root, undo=False, **(index_options or {}))
        self.problems: list[str] = []
        #: ``listener(physical_offset, store_timestamp)`` after each message is dispatched (off: None)
        self.on_dispatch = None
        #: ``listener([(physical_offset, store_timestamp), ...])`` after each batch (off: None)
        self.on_dispatch_batch = None
        #: ``dispatch_scan.scan_messages``: the compiled scan, or the reference's with its caches
        self._scan = new_scanner()
        #: the compiled run gathered per consume queue (``_dispatch_gathered``), None without it
        self._scan_queues = compiled.scan_queues if compiled is not None else None
        #: (the log's first index, its position) when the log begins after index 0 (this
        #: replica caught up past the leader's retention, or retention removed its head)
        self._log_start: tuple[int, int] | None = None
        #: whether anything was dispatched since the last checkpoint
        self.dirty = False
        #: the queue whose message bodies are kept for ``take_kept`` (off: None)
        self.keep_bodies_of: tuple[str, int] | None = None
        #: queue offset -> (physical offset, stored body) of that queue's messages dispatched
        self._kept: dict[int, tuple[int, bytes]] = {}
        self._recover()

    # -- checkpoint -----------------------------------------------------------------------
    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.root, CHECKPOINT)

    def _recover(self) -> None:
        """Cut the files back to what the durable checkpoint vouches for (everything, when it
        is missing or damaged, or a file holds less than it says) and resume after it."""
        cp = dispatch_checkpoint.read(self.root)
        queues = [self.queue(t, q) for t, q in list_queues(self.root)]
        if cp.problem is None and cp.queues is None:      # the earlier format: by position
            for cq in queues:
                cq.truncate_from_physical(cp.next_physical_offset)
            self.index.undo_unwritten()
            self.index.truncate_from_physical(cp.next_physical_offset)
        elif cp.problem is None and all(cq.max_offset >= cp.queues.get((cq.topic, cq.queue_id), 0)
                                        for cq in queues) and self.index.truncate_to(cp.index_files):
            for cq in queues:
                cq.truncate_to(cp.queues.get((cq.topic, cq.queue_id), 0))
        else:
            why = cp.problem or "a file holds less than it vouches for"
            if cp.problem != "there is none" or queues or self.index.files:
                log.warning("%s: the dispatch checkpoint cannot be used (%s): dispatching everything "
                            "again", self.root, why)
            for cq in queues:
                cq.truncate_to(0)
            self.index.clear()
            cp = dispatch_checkpoint.DispatchCheckpoint()
        self.next_index, self.next_physical_offset = cp.next_index, cp.next_physical_offset

    def checkpoint_job(self) -> CheckpointJob:
        """A checkpoint as it stands now, to be run (``CheckpointJob.run``, here or on the
        checkpoint thread): sync the consume queues and the key index that moved, then durably
        record how far they go, the point recovery comes back to after a crash or a power cut.
        A job that failed goes back to ``checkpoint_failed``."""
        job = CheckpointJob()
        try:
            for cq in self.queues.values():
                fds = cq.sync_fds()
                if fds:
                    job.fds += fds
                    job.synced.append(cq)
            fds, files = self.index.sync_fds()
            job.fds += fds
            job.synced += files
        except BaseException:       # out of descriptors: no job, and every file still to sync
            job.close_fds()
            job.mark_unsynced()
            raise
        cp = dispatch_checkpoint.DispatchCheckpoint(
            self.next_index, self.next_physical_offset,
            {key: cq.max_offset for key, cq in self.queues.items() if cq.max_offset}, self.index.counts())
        job.writes.append((self.checkpoint_path, cp.text().encode()))
        self.dirty = False
        return job

    def checkpoint_failed(self, job: CheckpointJob) -> None:
        """``job`` did not finish: what it synced is synced again at the next checkpoint."""
        job.mark_unsynced()
        self.dirty = True

    def checkpoint(self) -> None:
        """A checkpoint, made now on this thread (``OSError`` when it failed)."""
        job = self.checkpoint_job()
        job.run()
        if job.error is not None:
            self.checkpoint_failed(job)
            raise OSError(f"{self.root}: the dispatch checkpoint failed: {job.error}")

    # -- queues ---------------------------------------------------------------------------
    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = self.queues[(topic, queue_id)] = ConsumeQueue(self.root, topic, queue_id, **self._cq_kwargs)
            if queue_id >= self.topic_queues.get(topic, 0):
                self.topic_queues[topic] = queue_id + 1
        return cq

    def log_start(self, store) -> int:
        """The position of the log's first entry (0 for a log that begins at index 0)."""
        first = getattr(store, "ledger_before_begin_index", -1) + 1
        if first <= 0:
            return 0
        if self._log_start is None or self._log_start[0] != first:
            try:
                self._log_start = (first, store.get(first).pos)
            except DLedgerError:          # damaged: the walk stops there anyway
                return self._log_start[1] if self._log_start is not None else 0
        return self._log_start[1]

    def min_queue_offset(self, store, topic: str, queue_id: int) -> int:
        """The first offset of a queue whose message this replica's log still holds (RocketMQ's
        min offset: retention removes the messages, not their units); 0 for a queue nobody sent to."""
        cq = self.find_queue(topic, queue_id)
        if cq is None:
            return 0
        start = self.log_start(store)
        return cq.first_offset_from(start) if start > 0 else cq.min_offset

    def find_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        if (topic, queue_id) in self.queues:
            return self.queues[(topic, queue_id)]
        if os.path.isdir(os.path.join(self.root, "consumequeue", topic, str(queue_id))):
            return self.queue(topic, queue_id)
        return None

    def take_kept(self) -> dict[int, tuple[int, bytes]]:
        """The kept bodies of ``keep_bodies_of``'s messages dispatched since the last call, by
        queue offset: ``(physical offset, stored body)``."""
        kept, self._kept = self._kept, {}
        return kept

    def max_queue_offsets(self) -> dict[tuple[str, int], int]:
        return {key: cq.max_offset for key, cq in self.queues.items() if cq.max_offset}

    # -- dispatch -------------------------------------------------------------------------
    def dispatch_up_to(self, store, last_index: int, max_entries: int = 4096) -> int:
        """Dispatch entries ``next_index .. last_index`` (at most ``max_entries``); how many."""
        begin = max(self.next_index, getattr(store, "ledger_before_begin_index", -1) + 1)
        end = min(last_index, begin + max_entries - 1, store.ledger_end_index)
        if end < begin:
            return 0
        if begin > self.next_index:
            # the log begins after where the walk stands: this replica caught up past the
            # leader's retention, and the messages between are in no log it can read
            log.info("%s: the log begins at entry %d, the dispatch stood at %d: each queue starts again "
                     "at its first message from there", self.root, begin, self.next_index)
        self.log_start(store)
        self.next_index = begin
        dispatched = [] if self.on_dispatch_batch is not None else None
        while self.next_index <= end:
            try:
                records, _count = store.get_raw_range(self.next_index, READ_BYTES, end - self.next_index + 1,
                                                      checked=True)
            except CorruptStoreError:
                # a damaged record in the run: the sound ones before it one by one, up to it
                # (where the read raises again and the walk stops)
                records, _count = store.get_raw_range(self.next_index, READ_BYTES, 1, checked=True)
            self._dispatch_run(records, dispatched)
        for cq in self.queues.values():
            cq.commit()
        self.index.commit()
        self.dirty = True
        if dispatched is not None:
            self.on_dispatch_batch(dispatched)
        return end - begin + 1

    def _dispatch_run(self, records: bytes, dispatched: list | None) -> None:
        """Dispatch the records of ``records`` (one checked run), the first of ``next_index``:
        gathered per consume queue by the compiled scan where it can (``_dispatch_gathered``),
        else message by message (the reference)."""
        if self._scan_queues is not None:
            keep = self.keep_bodies_of or (None, 0)
            gathered = self._scan_queues(records, self.next_index, MAX_GATHERED_QUEUES, keep[0], keep[1])
            if gathered is not None and self._dispatch_gathered(gathered, dispatched):
                return
        self._dispatch_messages(records, dispatched)

    def _dispatch_gathered(self, gathered, dispatched: list | None) -> bool:
        """A run's dispatch gathered per consume queue (``scan_queues``): each queue's units
        written at once, every key indexed at once. Only when each queue exists and its run of
        stamped offsets begins at its next one: then the walk message by message would write
        the same units, keys, kept bodies and listeners' pairs, and note no problem. False
        (nothing done) otherwise: the walk then scans the run again, message by message (a
        queue's first message, a broken promise of the leader)."""
        queue_runs, work, done, kept, next_index, next_pos = gathered
        queues, cqs = self.queues, []
        for topic, queue_id, first, _count, _units, _end in queue_runs:
            cq = queues.get((topic, queue_id))
            if cq is None or first != cq.max_offset:
                return False
            cqs.append(cq)
        if kept:
            first = queues[self.keep_bodies_of].max_offset
            for k, offset_and_body in enumerate(kept):
                self._kept[first + k] = offset_and_body
        for cq, (_topic, _queue_id, _first, count, units, end) in zip(cqs, queue_runs):
            cq.put_run(units, count, end)
        if next_pos >= 0:
            self.next_index, self.next_physical_offset = next_index, next_pos
        if work:
            self.index.index_hash_work(work)
        if done:
            listener = self.on_dispatch
            if listener is not None:
                for offset, store_timestamp in done:
                    listener(offset, store_timestamp)
            if dispatched is not None:
                dispatched.extend(done)
        return True

    def _dispatch_messages(self, records: bytes, dispatched: list | None) -> None:
        """The reference walk: each message of the run in turn, its queue's unit, its keys."""
        queues = self.queues
        listener = self.on_dispatch
        done = [] if listener is not None or dispatched is not None else None
        keyed = []
        keep = self.keep_bodies_of
        next_index = self.next_index
        next_pos = self.next_physical_offset
        try:
            for (index, pos, size, topic, queue_id, queue_offset, store_timestamp, code, hashes, at,
                 length) in self._scan(records, next_index):
                if topic is not None:
                    offset = pos + BODY_OFFSET
                    cq = queues.get((topic, queue_id))
                    if cq is None:
                        why = topic_problem(topic) or queue_id_problem(queue_id)
                        if why:                # written by another writer: no directory for it
                            self.problems.append(f"message at {offset} not dispatched: {why}")
                            next_index, next_pos = index + 1, pos + size
                            continue
                        cq = self.queue(topic, queue_id)
                    if queue_offset > cq.max_offset and self._log_start is not None \
                            and cq.max_physical_offset <= self._log_start[1]:
                        # the queue's earlier messages are all before the log's begin (none
                        # in this replica's log): the queue starts again at this one
                        cq.restart_at(queue_offset)
                    if queue_offset != cq.max_offset:
                        self.problems.append(f"{topic}/{queue_id}: message at {offset} carries queue "
                                             f"offset {queue_offset}, the queue's next is {cq.max_offset}")
                    if keep is not None and (topic, queue_id) == keep:
                        self._kept[cq.max_offset] = (offset, bytes(records[at:at + length]))
                    cq.put_next(offset, size - BODY_OFFSET, code)
                    if hashes:
                        keyed.append((hashes, offset, store_timestamp))
                    if done is not None:
                        done.append((offset, store_timestamp))
                next_index, next_pos = index + 1, pos + size
        finally:
            self.next_index, self.next_physical_offset = next_index, next_pos
            if keyed:
                self.index.index_hashed(keyed)
        if done:
            if listener is not None:
                for offset, store_timestamp in done:
                    listener(offset, store_timestamp)
            if dispatched is not None:
                dispatched.extend(done)

    def close(self, checkpoint: bool = True) -> None:
        """A last checkpoint, then close the files; ``checkpoint=False``: as a crash leaves
        them (nothing more written)."""
        if checkpoint:
            self.checkpoint()
        for cq in self.queues.values():
            cq.close(commit=checkpoint)
        self.index.close(commit=checkpoint)
