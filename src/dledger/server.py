"""DLedgerServer: the facade a host embeds.

Every part is injected at construction or defaults sensibly: the store (opened from the
config, through ``store_io``), the transport (TCP on the node's address in ``peers``; the
in-process hub when ``hub=`` is passed or ``config.transport`` is "inproc"), the runtime (the
process-wide asyncio loop in a background thread) and the random source. Everything else the
server takes from its environment comes from the runtime: the monotonic clock and timers, the
wall clock (segment ages for cleaning) and the flush policy (whether the periodic msync may run
on a background thread). The server never tests what kind of runtime or store it was given:
the simulator passes its own runtime, transport, seeded random and (optionally) store, and so
runs this very class unchanged.

What it promises:
- ``append(body)`` returns a ``concurrent.futures.Future`` of ``AppendEntryResponse``
  (``code``, ``index``, ``term``, ``pos``, ``leader_id``). It completes with SUCCESS once a
  quorum holds the entry (and the state machine, if any, applied it), or with NOT_LEADER,
  LEADER_TRANSFERRING, LEADER_PENDING_FULL, WAIT_QUORUM_ACK_TIMEOUT (after
  ``max_wait_ack_time_ms``; the entry may still commit later) or EXPIRED_TERM. Appends that
  arrive together are appended as one batch and replicated together;
- what SUCCESS survives depends on ``durability``: ``page_cache`` survives a crash of this
  process on a quorum (data is flushed every ``flush_file_interval`` ms), ``fsync`` also
  survives power loss on a quorum (one sync covers a whole batch before it is acknowledged);
- ``read(mode)`` completes when reading local state at the returned index is safe:
  UNSAFE_READ at once (may be stale), RAFT_LOG_READ after a NOOP entry commits, READ_INDEX_READ
  after a heartbeat round confirms leadership, LEASE_READ at once while the leader's lease
  (``lease_ratio`` of the election timeout since the last confirmed round) holds and no
  leadership transfer was started in its term (docs/embedding.md); ``get(index, mode)`` reads
  the entry after the same read (UNSAFE_READ, the default: this node's own store at once);
- role-change handlers receive ``RoleChange(term, role, leader_id, event)`` on the runtime's
  thread, each transition once, in order (``event``: the ``RoleEvent`` that caused it);
- every blocking call has an ``*_async`` twin for hosts running their own asyncio loop;
- a failing disk: when the store fails (a failed msync, term or checkpoint write: the store's
  ``failed``, see ``store/flusher.py``) the node halts at once, as a crashed process: nothing
  more is sent, every pending and later operation ends with DISK_ERROR (reads included), its
  timers stop, its store is closed without a flush, and one error line is logged; ``halted``
  names the failure and ``add_halt_handler`` handlers hear it. Nothing is retried: a restart
  (a new server on the reopened store, whose recovery reads what the disk really holds) is
  the way back. A full disk (DISK_FULL) is not a failure: appends are refused with
  DISK_FULL while it lasts, the node keeps heartbeating and serving reads.
Local misuse (calling before ``startup()``, a body that is not bytes) raises at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable

from dledger.config import FILE, DLedgerConfig
from dledger.core import Node, Role, RoleChange
from dledger.entry import MAGIC_NORMAL, DLedgerEntry, decode
from dledger.errors import DISK_ERROR, DISK_FULL, INDEX_OUT_OF_RANGE, DLedgerError
from dledger.protocol import SUCCESS, AppendEntryResponse, DLedgerResponseCode as Code, ReadMode
from dledger.runtime.driver import APPEND, READ, TRANSFER, WRITE, Driver, Op
from dledger.runtime.log_context import CURRENT, LogContext
from dledger.snapshot.snapshotter import Snapshotter, can_snapshot
from dledger.store import DLedgerMemoryStore, DLedgerMmapFileStore, StoreOptions
from dledger.store.store_io import LOCAL_IO, StoreIO
from dledger.server_membership import MembershipMethods

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_MS = 1000
CLEAN_INTERVAL_MS = 100         # CleanSpaceService period
MAX_DRAIN_BODIES = 2048


def open_store_for(config: DLedgerConfig, *, background_flush: bool = False, store_io: StoreIO = LOCAL_IO):
    """The store ``config`` describes, opened (a file store is recovered first)."""
    c = config
    if c.store_type == FILE:
        options = StoreOptions.from_config(c, checkpoint_interval_ms=CHECKPOINT_INTERVAL_MS,
                                           background_flush=background_flush)
        return DLedgerMmapFileStore.open(c.default_path, options, store_io=store_io)
    return DLedgerMemoryStore(data_file_size=c.mapped_file_size_for_entry_data)


class DLedgerServer(MembershipMethods):
    def __init__(self, config: DLedgerConfig, *, store=None, transport=None, runtime=None,
                 rng: random.Random | None = None, state_machine=None, hub=None,
                 store_io: StoreIO = LOCAL_IO) -> None:
        self.config = config.validate()
        self._store = store
        self._store_io = store_io
        self._own_store = store is None
        self._transport = transport
        self._runtime = runtime
        self._hub = hub
        self._rng = rng if rng is not None else random.Random()
        self._state_machine = state_machine
        self._role_handlers: list[Callable[[RoleChange], None]] = []
        self._halt_handlers: list[Callable[[str], None]] = []
        self._commit_listeners: list[Callable[[int], None]] = []
        self._told_commit = -1
        self._append_hooks: list = []
        self._inbox: deque = deque()
        self._drain_scheduled = False
        self._flush_timer = None
        self._clean_timer = None
        self.node: Node | None = None
        self.driver: Driver | None = None
        #: takes, loads and installs the state machine's snapshots (``dledger.snapshot``), or None
        self.snapshotter: Snapshotter | None = None
        self.started = False
        self._lock = threading.Lock()
        #: the metrics observer (``dledger.metrics``), or None
        self._metrics = None
        #: who this server's log records are about (``runtime.log_context``)
        self.log_context = LogContext(self.config.group, self.config.self_id)

    # =====================================================================================
    # lifecycle
    # =====================================================================================
    @property
    def runtime(self):
        if self._runtime is None:
            from dledger.runtime.asyncio_runtime import AsyncioRuntime
            self._runtime = AsyncioRuntime.shared()
        return self._runtime

    def register_state_machine(self, state_machine) -> None:
        if self.started:
            raise RuntimeError("register_state_machine must be called before startup()")
        self._state_machine = state_machine

    def add_role_change_handler(self, handler: Callable[[RoleChange], None]) -> None:
        self._role_handlers.append(handler)
        if self.driver is not None and handler not in self.driver.role_change_handlers:
            self.driver.role_change_handlers.append(handler)

    def add_commit_listener(self, listener: Callable[[int], None]) -> None:
        """``listener(committed_index)`` runs on the runtime's thread after each step of the
        node that moved its commit index forward (once per step, with the new index): a host
        that reads what is committed learns of it here instead of polling."""
        self._commit_listeners.append(listener)

    def _tell_commits(self, ready) -> None:
        if ready.committed_index > self._told_commit:
            self._told_commit = ready.committed_index
            for listener in self._commit_listeners:
                try:
                    listener(ready.committed_index)
                except Exception:
                    log.exception("commit listener %r failed", listener)

    def add_halt_handler(self, handler: Callable[[str], None]) -> None:
        """``handler(reason)`` runs once, on the runtime's thread, when the node halts because
        its disk failed (see the module docstring)."""
        self._halt_handlers.append(handler)

    @property
    def halted(self) -> str | None:
        """Why the node halted (its store failed), or None while it has not."""
        return self.driver.halted if self.driver is not None else None

    def _store_failure(self) -> str | None:
        return getattr(self._store, "failed", None)

    def _on_halt(self, reason: str) -> None:
        """The driver halted the node (its store failed): stop like a crashed process."""
        log.error("%s: the disk failed (%s); the node halted: it acknowledges, serves and sends "
                  "nothing more until it is restarted on the reopened store", self.config.self_id, reason)
        self.started = False
        self._cancel_timers()
        self._transport.close()
        if self._own_store:
            self._store.close()          # a failed store closes without a flush
        for handler in self._halt_handlers:
            try:
                handler(reason)
            except Exception:
                log.exception("halt handler %r failed", handler)

    def attach_metrics(self, observer) -> None:
        """Let ``observer`` (a ``dledger.metrics`` observer) time appends, pushes and the state
        machine: ``observer.install(server)`` runs on the runtime's thread, now when the server
        runs, else at ``startup()``; from then on host calls are stamped with
        ``observer.clock_ms()``. Use ``dledger.metrics.serve`` rather than this."""
        self._metrics = observer
        if self.started:
            self.runtime.run_sync(lambda: observer.install(self))

    def add_append_hook(self, hook) -> None:
        """``hook(entry, record_view, body_offset)`` may rewrite body bytes on the leader
        before the record is written (e.g. to stamp the entry's position into it)."""
        self._append_hooks.append(hook)
        if self._store is not None:
            self._store.add_append_hook(hook)

    def _open_store(self):
        # the periodic msync may leave the runtime's thread only if the runtime allows it (the
        # simulator does not: a seed must replay exactly)
        return open_store_for(self.config, background_flush=self.runtime.background_flush, store_io=self._store_io)

    def _default_transport(self, rt):
        """The in-process hub when one was passed or ``config.transport`` is "inproc"; else TCP,
        listening on the address ``peers`` gives this node (every group of the process whose
        node has that address shares the port)."""
        c = self.config
        if self._hub is not None or c.transport == "inproc":
            from dledger.transport.inproc import default_hub
            return (self._hub or default_hub()).endpoint(c.group, c.self_id, rt)
        from dledger.transport.tcp_setup import tcp_endpoint
        return tcp_endpoint(c, rt)

    def startup(self) -> "DLedgerServer":
        if self.started:
            return self
        rt = self.runtime

        def start() -> None:
            self.log_context.bind_here()
            if self._transport is None:
                self._transport = self._default_transport(rt)
            if self._store is None:
                try:
                    self._store = self._open_store()
                except BaseException:
                    self._transport.close()
                    self._transport = None
                    raise
            for hook in self._append_hooks:
                self._store.add_append_hook(hook)
            self.log_context.store = self._store
            applied, needs_snapshot = None, False
            if can_snapshot(self._state_machine) and getattr(self._store, "store_dir", None):
                self.snapshotter = Snapshotter(self.config, self._state_machine, self._store.store_dir, rt)
                applied, needs_snapshot = self.snapshotter.load(self._store)
            self.node = Node(self.config, self._store, self._rng, state_machine=self._state_machine,
                             now_ms=rt.now_ms(), applied_index=applied, needs_snapshot=needs_snapshot,
                             snapshots=self.snapshotter.files if self.snapshotter is not None else None,
                             snapshot_index=self.snapshotter.last_index if self.snapshotter is not None else -1)
            self.driver = Driver(self.node, rt, self._transport, health=self._store_failure)
            if self.snapshotter is not None:
                self.snapshotter.attach(self.node, self.driver.wake)
                self.driver.ready_listeners.append(lambda ready: self.snapshotter.maybe_take())
            self.driver.role_change_handlers.extend(self._role_handlers)
            self.driver.halt_handlers.append(self._on_halt)
            self._told_commit = -1
            self.driver.ready_listeners.append(self._tell_commits)
            self.driver.log_context = self.log_context
            self.log_context.member_state = self.node.member_state
            if self._metrics is not None:
                self._metrics.install(self)
            self.started = True
            self.driver.start()
            # Both timers are armed whatever the store: every store (and a wrapper around one)
            # has flush_if_due and clean; the memory store's do nothing.
            if self.config.durability == "page_cache":
                self._flush_timer = rt.call_at(rt.now_ms() + self.config.flush_file_interval, self._flush_tick)
            if self._state_machine is None:
                # Java's CleanSpaceService: off when a state machine is registered (snapshots trim then).
                self._clean_timer = rt.call_at(rt.now_ms() + CLEAN_INTERVAL_MS, self._clean_tick)

        rt.run_sync(start)
        return self

    def _flush_tick(self) -> None:
        if not self.started:
            return
        CURRENT.ctx = self.log_context
        rt = self.runtime
        now = rt.now_ms()
        try:
            self._store.flush_if_due(now)
        except DLedgerError as exc:
            if exc.code == DISK_FULL:    # a checkpoint the full disk refused: retried when due
                log.warning("%s: %s", self.config.self_id, exc)
            elif self._store_failure() is None:
                log.error("%s: flush failed: %s", self.config.self_id, exc)
        if self._store_failure() is not None:
            self.driver.process()        # halts the node (the driver asks the store first)
            return
        self._flush_timer = rt.call_at(now + self.config.flush_file_interval, self._flush_tick)

    def _clean_tick(self) -> None:
        """Expired-segment cleaning and the disk-full guard, every 100 ms. Segment ages are
        file times, so this one timer reads the runtime's wall clock."""
        if not self.started:
            return
        CURRENT.ctx = self.log_context
        try:
            self._store.clean(self.runtime.wall_time())
        except DLedgerError as exc:
            log.error("%s: cleaning failed: %s", self.config.self_id, exc)
        if self._store_failure() is not None:
            self.driver.process()        # halts the node, as after a failed flush
            return
        rt = self.runtime
        self._clean_timer = rt.call_at(rt.now_ms() + CLEAN_INTERVAL_MS, self._clean_tick)

    def _cancel_timers(self) -> None:
        for timer in (self._flush_timer, self._clean_timer):
            if timer is not None:
                timer.cancel()

    def shutdown(self) -> None:
        """Stop the node: pending operations fail, the store is flushed and closed."""
        if not self.started:
            return

        def stop() -> None:
            self.started = False
            self._cancel_timers()
            self.driver.stop()
            self._transport.close()
            if self.snapshotter is not None:
                self.snapshotter.close()
            if self._own_store:
                self._store.close()

        self.runtime.run_sync(stop)

    def snapshot(self) -> Future:
        """Take a snapshot of the state machine now: a future of its last included index
        (the applied index when it began). Needs a file store and a state machine with
        ``on_snapshot_save`` and ``on_snapshot_load``; ``RuntimeError`` otherwise."""
        self._check_started()
        if self.snapshotter is None:
            raise RuntimeError(f"{self.config.self_id} takes no snapshots: it needs a file store and a state "
                               f"machine with on_snapshot_save and on_snapshot_load")
        return self.runtime.run_sync(self.snapshotter.take)

    # =====================================================================================
    # operations (thread-safe; they run on the runtime's thread)
    # =====================================================================================
    def _check_started(self) -> None:
        if not self.started:
            raise RuntimeError(f"DLedgerServer {self.config.self_id} is not started")

    def _refused(self, op: Op) -> bool:
        """A halted node answers every operation with DISK_ERROR at once."""
        if self.halted is None:
            return False
        self.driver.refuse(op)
        return True

    def _submit(self, item: tuple[Op, list, int]) -> None:
        if self._refused(item[0]):
            return
        self._check_started()
        self._inbox.append(item)
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self.runtime.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        """Hand what the host submitted to the node as one batch, at most
        ``MAX_DRAIN_BODIES`` bodies per turn so timers and peers are never starved."""
        self._drain_scheduled = False
        inbox = self._inbox
        items = []
        bodies = 0
        while inbox and bodies < MAX_DRAIN_BODIES:
            item = inbox.popleft()
            items.append(item)
            bodies += len(item[1])
        if inbox and not self._drain_scheduled:
            self._drain_scheduled = True
            self.runtime.call_soon(self._drain)
        if items and self.driver is not None:
            self.driver.propose_many(items)

    def _now(self) -> float:
        """When a host call started: the runtime's clock, or the metrics' finer one."""
        metrics = self._metrics
        return self.runtime.now_ms() if metrics is None else metrics.clock_ms()

    def append(self, body: bytes) -> Future:
        """Append one entry; a future of ``AppendEntryResponse``."""
        if not isinstance(body, (bytes, bytearray, memoryview)):
            raise TypeError(f"body must be bytes, got {type(body).__name__}")
        f: Future = Future()
        body = bytes(body)
        self._submit((Op(f, APPEND, self._now(), len(body)), [body], MAGIC_NORMAL))
        return f

    def batch_append(self, bodies: list[bytes]) -> Future:
        """Append several entries as one batch; the response names the last index and lists
        every position in ``positions``."""
        bodies = [bytes(b) for b in bodies]
        if not bodies:
            raise ValueError("batch_append needs at least one body")
        f: Future = Future()
        self._submit((Op(f, APPEND, self._now(), sum(map(len, bodies))), bodies, MAGIC_NORMAL))
        return f

    def write(self, body: bytes) -> Future:
        """Append and wait for the state machine: a future of ``(response, state machine resp)``."""
        f: Future = Future()
        body = bytes(body)
        self._submit((Op(f, WRITE, self._now(), len(body)), [body], MAGIC_NORMAL))
        return f

    def read(self, mode: ReadMode = ReadMode.RAFT_LOG_READ) -> Future:
        """A future of ``AppendEntryResponse`` whose ``index`` is safe to read up to.
        ``mode`` is a ``ReadMode``, its number or its name in any case (``"LEASE_READ"``);
        anything else raises ``ValueError`` here, in the caller's thread."""
        mode = ReadMode.parse(mode)
        f: Future = Future()
        if self._refused(Op(f, READ)):
            return f
        self._check_started()
        op = Op(f, READ, self._now())
        self.runtime.call_soon_threadsafe(lambda: self.driver.read(op, mode))
        return f

    def transfer_leadership(self, target_id: str) -> Future:
        """Hand leadership to ``target_id``; a future of ``LeadershipTransferResponse``."""
        f: Future = Future()
        if self._refused(Op(f, TRANSFER)):
            return f
        self._check_started()
        op = Op(f, TRANSFER, self._now())
        self.runtime.call_soon_threadsafe(lambda: self.driver.transfer_leadership(op, target_id))
        return f

    def get(self, index: int, mode: ReadMode = ReadMode.UNSAFE_READ) -> DLedgerEntry:
        """The committed entry at ``index`` (``DLedgerError`` 410 beyond the commit index,
        DISK_ERROR once the node halted). ``mode`` as for ``read``: UNSAFE_READ (the default)
        reads this node's own store up to its commit index at once, in any role (it may not
        have learnt of an entry a newer leader committed); the other modes first confirm, as
        ``read(mode)`` does, that this node leads, and raise the read's failure code
        (NOT_LEADER, LEADER_TRANSFERRING, ...). They block the calling thread until the node
        answers: call them from a host thread, never the runtime's (``get_async`` there)."""
        mode = ReadMode.parse(mode)
        if self.halted is not None:
            raise DLedgerError(f"{self.config.self_id} halted: {self.halted}", DISK_ERROR)
        self._check_started()
        if mode is not ReadMode.UNSAFE_READ:
            return self._entry_of(index, self._get(index, mode).result())

        def read_entry() -> DLedgerEntry:
            if index > self.node.committed_index:
                raise DLedgerError(f"index {index} is beyond the committed index {self.node.committed_index}",
                                   INDEX_OUT_OF_RANGE)
            return self._store.get(index)

        return self.runtime.run_sync(read_entry)

    def _get(self, index: int, mode: ReadMode) -> Future:
        """A future of the node's ``GetEntriesResponse`` for ``index`` read in ``mode``."""
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"index must be an int, got {type(index).__name__}")
        f: Future = Future()
        if self._refused(Op(f, READ)):
            return f
        self._check_started()
        op = Op(f, READ, self._now())
        self.runtime.call_soon_threadsafe(lambda: self.driver.get(op, index, mode))
        return f

    def _entry_of(self, index: int, resp) -> DLedgerEntry:
        if resp.code == SUCCESS and resp.entries:
            return decode(resp.entries[0])
        if resp.code == INDEX_OUT_OF_RANGE:
            raise DLedgerError(f"index {index} is beyond the committed index", INDEX_OUT_OF_RANGE)
        name = Code(resp.code).name if resp.code in Code._value2member_map_ else str(resp.code)
        raise DLedgerError(f"{self.config.self_id} could not read index {index}: {name} "
                           f"(leader: {resp.leader_id})", resp.code)

    def metadata(self) -> dict[str, Any]:
        self._check_started()

        def meta() -> dict[str, Any]:
            n = self.node
            config = n.member_state.configuration
            return {"group": self.config.group, "self_id": self.config.self_id, "peers": dict(n.member_state.peer_map),
                    "voters": list(config.voters) if config is not None else [],
                    "learners": list(config.learners) if config is not None else [],
                    "leader_id": n.leader_id, "role": n.role.value, "term": n.term,
                    "ledger_end_index": self._store.ledger_end_index, "committed_index": n.committed_index,
                    "applied_index": n.applied_index}

        return self.runtime.run_sync(meta)

    # -- async twins ----------------------------------------------------------------------
    async def append_async(self, body: bytes) -> AppendEntryResponse:
        return await asyncio.wrap_future(self.append(body))

    async def batch_append_async(self, bodies: list[bytes]) -> AppendEntryResponse:
        return await asyncio.wrap_future(self.batch_append(bodies))

    async def write_async(self, body: bytes):
        return await asyncio.wrap_future(self.write(body))

    async def read_async(self, mode: ReadMode = ReadMode.RAFT_LOG_READ) -> AppendEntryResponse:
        return await asyncio.wrap_future(self.read(mode))

    async def transfer_leadership_async(self, target_id: str):
        return await asyncio.wrap_future(self.transfer_leadership(target_id))

    async def get_async(self, index: int, mode: ReadMode = ReadMode.UNSAFE_READ) -> DLedgerEntry:
        mode = ReadMode.parse(mode)
        if mode is ReadMode.UNSAFE_READ:
            return await asyncio.get_running_loop().run_in_executor(None, self.get, index)
        if self.halted is not None:
            raise DLedgerError(f"{self.config.self_id} halted: {self.halted}", DISK_ERROR)
        return self._entry_of(index, await asyncio.wrap_future(self._get(index, mode)))

    async def metadata_async(self) -> dict[str, Any]:
        return await asyncio.get_running_loop().run_in_executor(None, self.metadata)

    # -- state ----------------------------------------------------------------------------
    @property
    def store(self):
        return self._store

    @property
    def member_state(self):
        return self.node.member_state if self.node is not None else None

    @property
    def role(self) -> Role | None:
        return self.node.role if self.node is not None else None

    @property
    def is_leader(self) -> bool:
        return self.node is not None and self.started and self.node.role is Role.LEADER

    @property
    def leader_id(self) -> str | None:
        return self.node.leader_id if self.node is not None else None

    def wait_for_leader(self, timeout: float | None = None) -> str | None:
        """Block until this node knows the group's leader (itself or a peer); returns its id,
        or None when ``timeout`` seconds pass first. For synchronous hosts on the asyncio
        runtime (under the simulator, run the cluster instead)."""
        known = threading.Event()

        def on_change(change: RoleChange) -> None:
            if change.leader_id is not None:
                known.set()

        self.add_role_change_handler(on_change)
        try:
            if self.leader_id is None:
                known.wait(timeout)
            return self.leader_id
        finally:
            for handlers in (self._role_handlers, self.driver.role_change_handlers if self.driver else []):
                if on_change in handlers:
                    handlers.remove(on_change)

    def __repr__(self) -> str:
        return f"DLedgerServer({self.config.self_id}, {self.node.member_state if self.node else 'not started'})"
