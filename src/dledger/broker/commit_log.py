"""DLedgerCommitLog: a RocketMQ-style CommitLog whose log is a ``DLedgerServer``.

As in RocketMQ's ``DLedgerCommitLog``, each message is one DLedger entry whose body is the
message in the CommitLog layout (``message_codec``), and the message's physical offset is the
entry's position plus the 48-byte entry header. ``put_message`` encodes the message (born
time, born and store host) and appends it through the server; an **append hook** runs on the
leader just before the record is written and stamps three fields: the queue offset (the next of
the message's topic-queue: offsets are assigned in log order, so never a gap nor a repeat),
the physical offset and the store timestamp. Followers store the leader's bytes unchanged, so
the stamped offset is the real position on every replica.

The queue-offset table is rebuilt, at the first message a leader appends in a new term, from
the consume queues (everything dispatched) plus the local log's undispatched tail, which holds
every entry the new leader will commit: the offsets continue from the log with no gap.

The role-change handler (``role_change.RoleTracker``) makes the store writable on the leader
and read-only elsewhere; a put anywhere else gets SERVICE_NOT_AVAILABLE naming the leader.
Dispatch (``reput.ReputService``) runs on every replica on a timer of the server's runtime;
its checkpoint once a second syncs and writes on a thread of its own (``checkpoint_writer``).
Consumer reads are in ``consumer``. The broker's files live under ``root`` (default: the node's
store directory ``<store_base_dir>/dledger-<id>``): ``consumequeue/``, ``keyindex/`` (DLedger
already has an ``index/`` there) and ``dispatch.checkpoint``.

``put_message_async`` returns an ``AwaitableFuture``: ``await`` it on asyncio, or, under the
simulator, run the cluster until ``done()``; ``put_message`` blocks for it (real runtime only).
"""

from __future__ import annotations

import logging
import struct
from collections import Counter
from concurrent.futures import Future
from operator import itemgetter

from dledger.broker import consumer
from dledger.broker.append_stamps import stamp_messages, stamp_one
from dledger.broker.checkpoint_writer import CheckpointWriter
from dledger.broker.message_codec import MessageFormatError, decode, message_id, split_host
from dledger.broker.put_encode import PutEncoder
from dledger.broker.put_result import (AwaitableFuture, PutMessageResult, PutMessageStatus, done_future, put_ok,
                                       refused)
from dledger.broker.consumer_state import ConsumerState
from dledger.broker.reput import ReputService
from dledger.broker.role_change import RoleTracker
from dledger.broker.speedups import compiled
from dledger.broker.store_view import entry_end, max_position, min_position, read_at
from dledger.core import Role, RoleChange
from dledger.entry import BODY_OFFSET, MAGIC_NORMAL
from dledger.metrics.histogram import Histogram
from dledger.protocol import DLedgerResponseCode as Code
from dledger.protocol import ReadMode
from dledger.store.log_store import BatchedAppendHook

log = logging.getLogger(__name__)

#: the compiled twin of ``_results``' loop (``speedups``), None without it
_put_results = compiled.put_results if compiled is not None else None

MAX_MESSAGE_SIZE = 4 * 1024 * 1024     # RocketMQ's maxMessageSize default
DISPATCH_INTERVAL_MS = 5
#: how often the dispatch files are synced and the durable checkpoint written (RocketMQ flushes
#: its consume queues every second)
CHECKPOINT_INTERVAL_MS = 1000
#: dispatch lag buckets, ms (upper bounds): store timestamp to consume-queue unit written
DISPATCH_LAG_BUCKETS_MS = (1, 2, 3, 5, 7, 10, 15, 20, 30, 40, 50, 75, 100, 150, 200, 300, 500, 750,
                           1000, 2000, 5000, 10000)

#: the status of a put whose append was answered with a code other than SUCCESS. The answers
#: given before the leader took the append (NOT_LEADER, LEADER_TRANSFERRING, DISK_FULL,
#: LEADER_PENDING_FULL) say it was not written; the answers given after (WAIT_QUORUM_ACK_TIMEOUT,
#: EXPIRED_TERM: the term moved on while the message waited for a quorum) say it may still
#: commit: FLUSH_SLAVE_TIMEOUT. Any other code is UNKNOWN_ERROR, also "it may be in the log".
_STATUS_FOR_CODE = {
    Code.NOT_LEADER: PutMessageStatus.SERVICE_NOT_AVAILABLE,
    Code.LEADER_TRANSFERRING: PutMessageStatus.SERVICE_NOT_AVAILABLE,
    Code.DISK_FULL: PutMessageStatus.SERVICE_NOT_AVAILABLE,
    Code.LEADER_PENDING_FULL: PutMessageStatus.OS_PAGECACHE_BUSY,
    Code.WAIT_QUORUM_ACK_TIMEOUT: PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    Code.EXPIRED_TERM: PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
}


class DLedgerCommitLog:
    def __init__(self, server, *, root: str | None = None, max_message_size: int = MAX_MESSAGE_SIZE,
                 dispatch_interval_ms: int = DISPATCH_INTERVAL_MS, cq_units_per_file: int | None = None,
                 index_options: dict | None = None, checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS) -> None:
        self.server = server
        cfg = server.config
        self.root = root or cfg.default_path
        self.store_host = split_host(cfg.peer_map.get(cfg.self_id, "127.0.0.1:0"))
        self._encoder = PutEncoder(self.store_host)
        self.max_message_size = max_message_size
        #: the offset message id less its 16 hex digits of offset (the store host's part)
        self._id_prefix = message_id(self.store_host, 0)[:-16]
        self.dispatch_interval_ms = dispatch_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self._checkpoint_at = 0
        #: runs each checkpoint's syncs and writes: on a thread of its own where the runtime
        #: flushes in the background (an asyncio runtime), else at once (the simulator)
        self.checkpoints = CheckpointWriter(getattr(server.runtime, "background_flush", False))
        self.reput = ReputService(self.root, units_per_file=cq_units_per_file, index_options=index_options)
        self.roles = RoleTracker(cfg.self_id)
        #: per topic-queue next offset, valid for the leader term ``_table_term``
        self._table: dict[tuple[str, int], int] = {}
        self._table_term = -1
        #: what the hook stamped, by entry position, until the put's answer takes it
        self._stamped: dict[int, tuple[int, int]] = {}
        self._timer = None
        #: when the pending dispatch turn runs (runtime ms), None: at once or none pending
        self._timer_at: int | None = None
        self.closed = False
        #: dispatch lag of every message this replica dispatched (ms), and the stamps of the
        #: batch being dispatched (its units are written when the batch ends)
        self.dispatch_lag = Histogram(DISPATCH_LAG_BUCKETS_MS)
        self.reput.on_dispatch_batch = self._on_dispatched
        #: consumer offsets and other consumer records, replicated through the log
        self.consumer_state = ConsumerState(self)
        #: when the last dispatch ran (runtime ms): dispatches are at least an interval apart
        self._dispatched_at = -dispatch_interval_ms
        server.add_append_hook(BatchedAppendHook(self._hook, self._hook_records))
        server.add_role_change_handler(self._on_role_change)
        server.add_commit_listener(self._on_commit)
        if server.started:
            server.runtime.run_sync(self._adopt_and_dispatch)

    def _adopt_and_dispatch(self) -> None:
        """Wrapped after startup (runtime thread): the current role, and dispatch started. On the
        runtime thread, so ``_timer`` is set before the tick can run and clear it: set from another
        thread, it could land after the tick ran and hold a spent handle, and no commit would
        schedule a dispatch again."""
        self._adopt_current_role()
        if self._timer is None and not self.closed:
            self._start_dispatch()

    def _adopt_current_role(self) -> None:
        """Wrapped after startup: take the role the node holds now (later changes are told)."""
        node = self.server.node
        if node is not None:
            self.roles.on_change(RoleChange(node.term, node.role, node.leader_id))
            if node.role is Role.LEADER:
                self._commit_earlier_terms(node.term)

    # =====================================================================================
    # the append hook and the queue-offset table (runtime thread, leader)
    # =====================================================================================
    def _hook(self, entry, view, body_offset: int) -> None:
        """The append hook, per record (``append_stamps.stamp_one``)."""
        if entry.magic != MAGIC_NORMAL:
            return
        if entry.term != self._table_term:
            self._rebuild_table(entry.term)
        stamp_one(view, body_offset, entry.pos, self._table, self._stamped,
                  int(self.server.runtime.wall_time() * 1000))

    def _hook_records(self, records, starts: list[int], sizes: list[int], indexes, positions: list[int], term: int,
                      magic: int) -> None:
        """The append hook's batch form: the records of one joined batch stamped at once
        (``append_stamps.stamp_messages``), the same stamps as ``_hook`` on each."""
        if magic != MAGIC_NORMAL:
            return
        if term != self._table_term:
            self._rebuild_table(term)
        stamp_messages(records, starts, sizes, positions, self._table, self._stamped,
                       int(self.server.runtime.wall_time() * 1000))

    def _rebuild_table(self, term: int) -> None:
        """Next queue offsets from the consume queues and the local log's undispatched tail."""
        table = self.reput.max_queue_offsets()
        store = self.server.store
        for i in range(self.reput.next_index, store.ledger_end_index + 1):
            e = store.get(i)
            if e.magic != MAGIC_NORMAL or not e.body:
                continue
            try:
                m = decode(e.body, inflate=False)
            except MessageFormatError:
                continue
            key = (m.topic, m.queue_id)
            table[key] = max(table.get(key, 0), m.queue_offset + 1)
        self._table, self._table_term = table, term

    def _on_role_change(self, change) -> None:
        # what was stamped stays until its append is answered: an entry of a term this node
        # left can still commit (and be answered SUCCESS) once it leads again
        self.roles.on_change(change)
        if change.role is Role.LEADER and not self.closed:
            self._commit_earlier_terms(change.term)
        if self._timer is None and not self.closed:
            self._start_dispatch()

    def _commit_earlier_terms(self, term: int) -> None:
        """A new master whose log ends in an earlier term commits none of that tail until an
        entry of its own term does (Raft's commit rule), so without a put its consumers would
        not see messages the previous master acknowledged. RocketMQ waits, on becoming master,
        until its log is committed to the end; here the commit log asks the node for a
        RAFT_LOG_READ, which appends a no-op of the term, as Java DLedger's
        FastAdvanceCommitIndexService does (unless the node does it itself:
        ``enable_fast_advance_commit_index``)."""
        srv = self.server
        store = srv.store
        if srv.config.enable_fast_advance_commit_index or store.ledger_end_term >= term \
                or srv.node.committed_index >= store.ledger_end_index:
            return
        srv.read(ReadMode.RAFT_LOG_READ).add_done_callback(self._earlier_terms_read)

    def _earlier_terms_read(self, f: Future) -> None:
        exc = f.exception()
        why = repr(exc) if exc is not None else f.result().code
        if why != Code.SUCCESS:
            log.info("%s: the no-op that commits the earlier terms' entries did not commit (%s); "
                     "the next put commits them", self.server.config.self_id, why)

    # =====================================================================================
    # dispatch (runtime thread, every replica)
    # =====================================================================================
    def _start_dispatch(self) -> None:
        """Dispatch at once (runtime thread only: see ``_adopt_and_dispatch``)."""
        self._timer = self.server.runtime.call_soon(self._dispatch_tick)

    def _on_commit(self, committed_index: int) -> None:
        """The node committed more (runtime thread): dispatch it, at most once an interval
        (sooner than a pending turn that only waits to write the checkpoint)."""
        if self.closed:
            return
        rt = self.server.runtime
        due = max(rt.now_ms(), self._dispatched_at + self.dispatch_interval_ms)
        if self._timer is not None:
            if self._timer_at is None or self._timer_at <= due:       # None: at once
                return
            self._timer.cancel()
        self._timer, self._timer_at = rt.call_at(due, self._dispatch_tick), due

    def _dispatch_tick(self) -> None:
        srv = self.server
        self._timer = self._timer_at = None
        if self.closed or not srv.started or srv.node is None:
            return
        n = self.dispatch_committed()
        rt = srv.runtime
        now = self._dispatched_at = rt.now_ms()
        if n >= 4096:                                       # a backlog: on at once
            self._timer = rt.call_soon(self._dispatch_tick)
            self._timer_at = now
        elif self.reput.dirty or self.checkpoints.busy():   # a checkpoint to write, or to take in
            self._timer_at = now + self.dispatch_interval_ms
            if not self.checkpoints.busy():
                self._timer_at = max(self._timer_at, self._checkpoint_at + self.checkpoint_interval_ms)
            self._timer = rt.call_at(self._timer_at, self._dispatch_tick)

    def dispatch_committed(self) -> int:
        """Dispatch what is committed and not dispatched yet (runtime thread); how many entries.
        A checkpoint once an interval: its syncs and writes are handed to ``checkpoints``, the
        next one waits until the last one finished."""
        srv = self.server
        n = self.reput.dispatch_up_to(srv.store, srv.node.committed_index)
        now = srv.runtime.now_ms()
        self._reap_checkpoint()
        if self.reput.dirty and now - self._checkpoint_at >= self.checkpoint_interval_ms \
                and not self.checkpoints.busy():
            job = self.reput.checkpoint_job()
            job.writes.append(self.consumer_state.snapshot())
            self.checkpoints.submit(job)
            self._checkpoint_at = now
            self._reap_checkpoint()
        return n

    def _reap_checkpoint(self, wait: bool = False) -> None:
        """Take in the checkpoint job once it finished: a failed one is logged, and what it
        synced is synced again at the next checkpoint."""
        job = self.checkpoints.reap(wait)
        if job is not None and job.error is not None:
            log.error("%s: the dispatch checkpoint failed, to be tried again: %s", self.root, job.error)
            self.reput.checkpoint_failed(job)

    def _on_dispatched(self, batch: list[tuple[int, int]]) -> None:
        """A dispatch batch was written: each message's lag, to the end of the batch."""
        now, observe = self.server.runtime.wall_time() * 1000, self.dispatch_lag.observe_times
        for stamp, n in Counter(map(itemgetter(1), batch)).items():     # a batch's stamps repeat
            observe(now - stamp, n)
        self.consumer_state.catch_up()

    # =====================================================================================
    # puts
    # =====================================================================================
    def _limit(self) -> int:
        """The largest message this store takes (the server's entry limit less the header)."""
        return min(self.max_message_size, getattr(self.server.store, "max_entry_size", 1 << 62) - BODY_OFFSET)

    def _not_writable(self) -> PutMessageResult | None:
        srv = self.server
        if self.closed or not srv.started:
            return refused(PutMessageStatus.SERVICE_NOT_AVAILABLE, "the server is not running")
        if not (self.roles.writable and srv.is_leader):
            leader = srv.leader_id
            return refused(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                           f"{srv.config.self_id} is not the master; the leader is {leader or 'unknown'}", leader)
        return None

    def _result(self, resp, pos: int, size: int) -> PutMessageResult:
        stamped = self._stamped.pop(pos, None)
        if resp.code != Code.SUCCESS:
            status = _STATUS_FOR_CODE.get(resp.code, PutMessageStatus.UNKNOWN_ERROR)
            return refused(status, f"append answered {Code(resp.code).name if resp.code in Code._value2member_map_ else resp.code}",
                           resp.leader_id)
        if stamped is None:
            return refused(PutMessageStatus.UNKNOWN_ERROR, f"no stamp recorded for the entry at {pos}")
        offset = pos + BODY_OFFSET
        return put_ok(offset, size, stamped[0], f"{self._id_prefix}{offset:016X}", stamped[1], resp.leader_id)

    def _results(self, resp, raws: list[bytes]) -> list[PutMessageResult]:
        """``_result`` of each message of a batch append, its answer read once (the PUT_OK
        answers by the compiled twin where it was built: the same results)."""
        positions = resp.positions or [-1] * len(raws)
        if resp.code != Code.SUCCESS:
            return [self._result(resp, p, len(r)) for p, r in zip(positions, raws)]
        if _put_results is not None and type(positions) is list and type(raws) is list:
            out = _put_results(positions, raws, self._stamped, self._id_prefix, resp.leader_id, PutMessageResult,
                               PutMessageStatus.PUT_OK)
            if out is not None:
                return out
        pop, prefix, leader, out = self._stamped.pop, self._id_prefix, resp.leader_id, []
        for pos, raw in zip(positions, raws):
            stamped = pop(pos, None)
            if stamped is None:
                out.append(refused(PutMessageStatus.UNKNOWN_ERROR, f"no stamp recorded for the entry at {pos}"))
                continue
            offset = pos + BODY_OFFSET
            out.append(put_ok(offset, len(raw), stamped[0], f"{prefix}{offset:016X}", stamped[1], leader))
        return out

    def put_message_async(self, topic: str, queue_id: int, body: bytes, *, tags: str | None = None,
                          keys=(), properties: dict | None = None, born_host=None, flag: int = 0) -> AwaitableFuture:
        """Put one message; a future of ``PutMessageResult`` (bad input: a status, at once)."""
        raw = self._encoder.encode(topic, queue_id, body, tags, keys, properties, born_host, flag,
                                   int(self.server.runtime.wall_time() * 1000), self._limit())
        if isinstance(raw, PutMessageResult):
            return done_future(raw)
        return self._append([raw], single=True)

    def put_messages_async(self, messages) -> AwaitableFuture:
        """Put a batch: ``messages`` are dicts of ``put_message``'s arguments. A future of the
        list of results, one per message; a refused message stops the whole batch."""
        raws = self._encoder.encode_batch(messages, int(self.server.runtime.wall_time() * 1000), self._limit())
        if type(raws) is not list:
            return done_future([raws])
        if not raws:
            return done_future([])
        return self._append(raws, single=False)

    def _append(self, raws: list[bytes], single: bool) -> AwaitableFuture:
        out = AwaitableFuture()
        no = self._not_writable()
        if no is not None:
            out.set_result(no if single else [no] * len(raws))
            return out
        try:
            inner = self.server.append(raws[0]) if single else self.server.batch_append(raws)
        except (RuntimeError, ValueError) as exc:
            r = refused(PutMessageStatus.SERVICE_NOT_AVAILABLE, str(exc))
            out.set_result(r if single else [r] * len(raws))
            return out

        def done(f: Future) -> None:
            try:
                resp = f.result()
            except BaseException as exc:  # noqa: BLE001 - a failed append is a status, never a raise
                r = refused(PutMessageStatus.UNKNOWN_ERROR, f"append failed: {exc}")
                out.set_result(r if single else [r] * len(raws))
                return
            if single:
                out.set_result(self._result(resp, resp.pos, len(raws[0])))
            else:
                out.set_result(self._results(resp, raws))

        inner.add_done_callback(done)
        return out

    def put_message(self, topic: str, queue_id: int, body: bytes, *, timeout: float | None = 10.0,
                    **kwargs) -> PutMessageResult:
        """Blocking ``put_message_async`` (a real runtime; under the simulator run the cluster)."""
        return self.put_message_async(topic, queue_id, body, **kwargs).result(timeout)

    def put_messages(self, messages, *, timeout: float | None = 10.0) -> list[PutMessageResult]:
        return self.put_messages_async(messages).result(timeout)

    # =====================================================================================
    # reads (any replica; committed data only)
    # =====================================================================================
    def _on_runtime(self, fn):
        return self.server.runtime.run_sync(fn)

    def confirm_offset(self) -> int:
        """The position just past the last committed entry (RocketMQ's confirm offset)."""
        srv = self.server
        return self._on_runtime(lambda: entry_end(srv.store, min(srv.node.committed_index, srv.store.ledger_end_index)))

    def max_offset(self) -> int:
        """As RocketMQ's DLedgerCommitLog: the committed position (what readers may see), or
        the log's first position while nothing is committed."""
        confirm = self.confirm_offset()
        return confirm if confirm > 0 else self.min_offset()

    def written_offset(self) -> int:
        """Where the next record will be written (committed or not)."""
        return self._on_runtime(lambda: max_position(self.server.store))

    def min_offset(self) -> int:
        return self._on_runtime(lambda: min_position(self.server.store))

    def get_message(self, physical_offset: int, size: int) -> bytes | None:
        """The ``size`` bytes of the committed message at ``physical_offset`` (None if none)."""
        srv = self.server

        def read() -> bytes | None:
            end = entry_end(srv.store, min(srv.node.committed_index, srv.store.ledger_end_index))
            if physical_offset + size > end:
                return None
            return read_at(srv.store, physical_offset, size)

        return self._on_runtime(read)

    def get_message_at(self, physical_offset: int) -> bytes | None:
        """The committed message at ``physical_offset``, its size read from its first 4 bytes."""
        head = self.get_message(physical_offset, 4)
        if head is None:
            return None
        size = struct.unpack(">i", head)[0]
        return self.get_message(physical_offset, size) if size > 0 else None

    # -- consumers (see consumer.py) ----------------------------------------------------
    def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int = 32):
        return consumer.get_messages(self, topic, queue_id, queue_offset, max_count)

    def query_by_key(self, topic: str, key: str, max_num: int = 32):
        return consumer.query_by_key(self, topic, key, max_num)

    def look_message_by_id(self, msg_id: str):
        return consumer.look_message_by_id(self, msg_id)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        """The first offset of a queue this replica can serve (its messages before it are gone:
        retention, or a log that began later on this replica); 0 for a queue nobody sent to."""
        return self._on_runtime(lambda: self.reput.min_queue_offset(self.server.store, topic, queue_id))

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        def read() -> int:
            cq = self.reput.find_queue(topic, queue_id)
            return cq.max_offset if cq is not None else 0
        return self._on_runtime(read)

    # =====================================================================================
    def close(self) -> None:
        """Stop dispatching and close the broker's files (the server is the host's to stop):
        a last checkpoint first, unless the node's process is gone (a crash: whatever the
        files hold then is what recovery finds)."""
        if self.closed:
            return

        def stop(checkpoint: bool = True) -> None:
            self.closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if checkpoint:          # the last checkpoint goes after the one in flight
                self._reap_checkpoint(wait=True)
            self.reput.close(checkpoint=checkpoint)
            if checkpoint:
                self.consumer_state.save()

        try:
            self._on_runtime(stop)
        except Exception:   # the runtime is gone (a killed simulated process): as after a crash
            stop(checkpoint=False)
