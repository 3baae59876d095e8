"""Cluster: a deterministic simulated cluster of production ``DLedgerServer`` nodes.

Only the environment is simulated: time (``SimScheduler``; each node runs as a ``SimProcess``
on it), the network (``SimNetwork``, every envelope through the wire codec) and, for
``store="memory"``, the disk (each node's memory store survives its crashes, as a disk would).
With ``store="file"`` every node has a real store directory under ``base_dir``, opened through
the node's ``PowerLoss`` recorder. The servers are built exactly as a host builds them; the
cluster only plays the operating system:
- ``crash(node)``: the process is killed. Its timers are cancelled, its network endpoint is
  closed, its driver is killed (in-flight client calls fail, nothing more is sent) and its file
  store is unmapped without msync or checkpoint (what was written stays in the page cache);
- ``power_loss(node, torn=False)``: the machine loses power: a crash, then the node's store
  directory keeps only what was made durable (``torn=True``: a random subset of the unsynced
  sectors, drawn from the seed; see ``dledger.sim.disk``);
- ``crash_inside(node, n, power=False, torn=False)`` (file stores): the node dies at its n-th
  next mapping write or msync, inside whatever append, flush or cut makes it (a crash there,
  or a power cut); the cluster catches the ``SimulatedCrash`` while it runs events;
- ``restart(node)``: a new process opens the store again (a store that refuses to open, e.g.
  damage recovery cannot get past, leaves the node down: ``refusals`` says why);
- a node whose store fails (a failed msync: ``PowerLoss.fail_syncs``) halts by itself
  (``DLedgerServer``: fail-stop); the cluster then takes it for crashed (``halts`` lists
  them) until ``restart``;
- ``step()``: run one event (``run_for``/``run_until`` run many).
Client calls (``append``, ``write``, ``read``, and ``get``: a client's ``GetEntriesRequest``
over the simulated network) are recorded in ``history``; ``check()`` runs every checker over it
and over the stores.
Every random choice comes from ``seed``.

    c = Cluster(n=3, seed=7)
    c.run_until(lambda: c.leader() is not None, 2_000)
    f = c.append(b"hello")
    c.run_until(f.done, 1_000)
    c.check()

Never call ``f.result()`` on a future that is not done: the simulator has one thread, and
time moves only inside ``run_for``/``run_until``.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from concurrent.futures import Future, InvalidStateError
from typing import Callable

from dledger.config import DLedgerConfig
from dledger.core import Role
from dledger.entry import decode
from dledger.protocol import (AppendEntryResponse, DLedgerResponseCode as Code, Envelope, GetEntriesRequest,
                              GetEntriesResponse, ReadMode)
from dledger.server import DLedgerServer, open_store_for
from dledger.sim.clocks import SimClock
from dledger.sim.cluster_membership import MembershipOps
from dledger.errors import DLedgerError
from dledger.sim.disk import FaultyStore, PowerLoss, SimulatedCrash, crash_store
from dledger.sim.checkers import (InvariantChecker, InvariantViolation, RecordingStateMachine, StorageIdentity,
                                  check_logs)
from dledger.sim.history import History, LogEntry, check_commit_log, check_reads
from dledger.sim.network import NetworkOptions, SimNetwork
from dledger.sim.scheduler import SimProcess, SimScheduler
from dledger.store import DLedgerMemoryStore, DLedgerMmapFileStore
from dledger.store.store_io import LOCAL_IO

#: the simulated network's id of the client that sends ``Cluster.get`` requests
CLIENT_ID = "client"
SIM_DEFAULTS = dict(mapped_file_size_for_entry_data=1 << 20, mapped_file_size_for_entry_index=32 * 8192,
                    flush_file_interval=200)


class Cluster(MembershipOps):
    def __init__(self, n: int = 3, seed: int = 0, store: str = "memory", base_dir=None, *,
                 network: NetworkOptions | None = None, record_applies: bool = True, strict_history: bool = True,
                 leader: str | None = None, state_machine_factory=None, disk_faults: bool = False,
                 clock_rates: dict[str, float] | None = None, **config) -> None:
        if store not in ("memory", "file"):
            raise ValueError(f"store must be 'memory' or 'file', got {store!r}")
        self.n = n
        self.seed = seed
        self.store_type = store
        self._tmp = None
        if store == "file" and base_dir is None:
            base_dir = self._tmp = tempfile.mkdtemp(prefix="dledger-sim-")
        self.base_dir = str(base_dir) if base_dir is not None else None
        self.rng = random.Random(seed)
        self.scheduler = SimScheduler()
        self.network = SimNetwork(self.scheduler, random.Random(self.rng.getrandbits(64)), network)
        self.ids = [f"n{i}" for i in range(n)]
        #: nodes added with ``add_node``: they start as ``--join`` does
        self.peers = ";".join(f"{pid}-127.0.0.1:{20911 + k}" for k, pid in enumerate(self.ids))
        self.joining: set[str] = set()
        #: the --peers of each node added with ``add_node`` (the others have ``peers``)
        self.node_peers: dict[str, str] = {}
        #: machines gone for good (``cluster_membership``): the swarm restarts them no more
        self.retired: set[str] = set()
        #: the commit index each node was last checked at (``check_commit_quorum``)
        self._commit_seen: dict[str, int] = {}
        self._config_seen: dict = {}
        self.config_overrides = {**SIM_DEFAULTS, **config}
        self.record_applies = record_applies
        self.strict_history = strict_history
        self.servers: dict[str, DLedgerServer] = {}
        self.incarnation: dict[str, int] = {i: 0 for i in self.ids}
        self.crashed: set[str] = set()
        self.history = History()
        self.invariants = InvariantChecker()
        #: I4 as entries commit: every replica's committed records the same bytes (checkers.py)
        self.identity = StorageIdentity(self.invariants.problems)
        self.state_machines: dict[str, RecordingStateMachine] = {}
        self._memory: dict[str, DLedgerMemoryStore] = {}
        self.state_machine_factory = state_machine_factory
        #: with ``disk_faults=True`` every node's store is wrapped in a ``FaultyStore`` (here)
        self.disk_faults = disk_faults
        self.disks: dict[str, FaultyStore] = {}
        #: (virtual ms, node, reason) of every halt of a node whose store failed (the node
        #: is down from then on, as after a crash, until ``restart``)
        self.halts: list[tuple[int, str, str]] = []
        #: (virtual ms, node, why) of every start whose store refused to open (the node stays
        #: down; a later ``restart`` tries again)
        self.refusals: list[tuple[int, str, str]] = []
        #: nodes armed to die inside a write or msync: node -> (power loss?, torn?)
        self._armed: dict[str, tuple[bool, bool]] = {}
        #: each node's running process (replaced at every restart)
        self.processes: dict[str, SimProcess] = {}
        #: each machine's clock (kept across restarts); ideal (virtual time) unless
        #: ``clock_rates`` gives a node a rate (``dledger.sim.clocks``)
        self.clocks: dict[str, SimClock] = {i: SimClock(self.scheduler, rate)
                                             for i, rate in (clock_rates or {}).items()}
        #: with ``store="file"``: each node's power-loss recorder (its stores are opened through it)
        self.power: dict[str, PowerLoss] = {i: PowerLoss() for i in self.ids} if store == "file" else {}
        #: client calls made through ``append``/``read``/``get`` and not answered yet, per node
        self._in_flight: dict[str, set[Future]] = {i: set() for i in self.ids}
        #: the client endpoint of ``get`` (made at the first), and its calls by request id
        self._client = None
        self._gets: dict[int, tuple[Future, str]] = {}
        #: forced roles (Java DLedger's test harness with the elector disabled): the leader's id
        self.forced_leader = leader
        self.forced_term: int | None = None
        if leader is not None:
            self.config_overrides["enable_leader_elector"] = False
        for node_id in self.ids:
            self._boot(node_id)

    # =====================================================================================
    # nodes
    # =====================================================================================
    def config_for(self, node_id: str) -> DLedgerConfig:
        extra = {"join": True} if node_id in self.joining else {}
        return DLedgerConfig(group="sim", self_id=node_id, peers=self.node_peers.get(node_id, self.peers),
                             store_type=self.store_type,
                             store_base_dir=self.base_dir or "/nonexistent", **{**self.config_overrides, **extra})

    def _boot(self, node_id: str) -> DLedgerServer:
        cfg = self.config_for(node_id)
        proc = self.processes[node_id] = self.scheduler.process(f"{node_id}#{self.incarnation[node_id] + 1}",
                                                                clock=self.clocks.get(node_id))
        store_io = self.power[node_id].io if node_id in self.power else LOCAL_IO
        store = None
        if self.store_type == "memory":
            store = self._memory.get(node_id)
            if store is None:
                store = self._memory[node_id] = DLedgerMemoryStore(data_file_size=cfg.mapped_file_size_for_entry_data)
            store.closed = False
        if self.disk_faults:
            if store is None:
                store = open_store_for(cfg, background_flush=proc.background_flush, store_io=store_io)
            store = self.disks[node_id] = FaultyStore(store)
        sm = None
        if self.state_machine_factory is not None:
            sm = self.state_machine_factory(node_id)
            if isinstance(sm, RecordingStateMachine):
                # a recording machine (e.g. the key-value machine) is checked like the default one
                sm.problems = self.invariants.problems
                self.state_machines[node_id] = sm
        elif self.record_applies:
            sm = self.state_machines[node_id] = RecordingStateMachine(node_id, self.invariants.problems)
        server = DLedgerServer(cfg, store=store, transport=self.network.endpoint(node_id, process=proc), runtime=proc,
                               rng=random.Random(self.rng.getrandbits(64)), state_machine=sm, store_io=store_io)
        self.incarnation[node_id] += 1
        inc = self.incarnation[node_id]
        server.add_halt_handler(lambda reason, node_id=node_id, inc=inc: self._on_halt(node_id, inc, reason))
        try:
            server.startup()
        except DLedgerError as exc:
            # the store refuses to open (damage it cannot recover from, a full disk): the
            # node stays down, as a process that exits at startup
            proc.kill()
            self.network.endpoints[node_id].close()
            self.crashed.add(node_id)
            self.servers[node_id] = server
            self.refusals.append((self.now_ms, node_id, str(exc)))
            return None
        st = server.store
        if node_id in self.power:
            self.power[node_id].attach(st)
        def observe(ready, node_id=node_id, inc=inc, st=st) -> None:
            now = self.scheduler.now
            self.invariants.observe(node_id, inc, now, ready, st.ledger_end_index)
            self.identity.observe(node_id, inc, now, ready.committed_index, st)
            self.check_commit_quorum(node_id, ready.committed_index)

        server.driver.ready_listeners.append(observe)
        self.servers[node_id] = server
        self.crashed.discard(node_id)
        if self.forced_leader is not None:
            self._force(node_id)
        return server

    def _force(self, node_id: str) -> None:
        server = self.servers[node_id]
        server.driver.node.force_role(self.now_ms, self.forced_leader, self.forced_term)
        server.driver.process()

    def force_roles(self, leader: str, term: int | None = None) -> None:
        """Elector disabled: make ``leader`` the leader (of ``term``) and everyone else its
        follower, now and after every restart (as Java DLedger's ``launchServer`` in its tests)."""
        self.forced_leader, self.forced_term = leader, term
        for node_id in self.live():
            self._force(node_id)

    def _on_halt(self, node_id: str, inc: int, reason: str) -> None:
        """The node's server halted (its store failed): the process is gone, as after a crash."""
        if self.incarnation[node_id] != inc or node_id in self.crashed:
            return
        self.halts.append((self.now_ms, node_id, reason))
        self.crash(node_id)

    def crash(self, node_id: str) -> None:
        """Kill the node's process: in-flight client calls fail, nothing is sent or flushed."""
        if node_id in self.crashed:
            return
        self._disarm(node_id)
        server = self.servers[node_id]
        self.processes[node_id].kill()         # every timer it armed is cancelled
        self.network.endpoints[node_id].close()
        server.driver.kill()                   # calls the node had taken in fail
        # calls it had not taken in yet fail as a client's do when its connection breaks
        for f in list(self._in_flight[node_id]):
            try:
                f.set_exception(ConnectionError(f"{node_id} crashed before answering"))
            except InvalidStateError:
                pass
        self._in_flight[node_id].clear()
        if self.store_type == "file":
            crash_store(server.store)          # unmap without msync or checkpoint
        self.crashed.add(node_id)

    def crash_inside(self, node_id: str, writes: int, *, power: bool = False, torn: bool = False) -> None:
        """Arm the node (``store="file"``) to die at its ``writes``-th next mapping write or
        msync from now, inside whatever append, flush or cut makes it: a crash there, or a
        power cut (``power=True``, ``torn`` as for ``power_loss``). Until then it runs on."""
        if node_id not in self.power:
            raise ValueError("a crash inside a write needs store='file'")
        if node_id in self.crashed:
            return
        self.power[node_id].arm(writes)
        self._armed[node_id] = (power, torn)

    def crash_here(self, node_id: str) -> None:
        """Kill ``node_id`` at this very point of the step it runs (``store="file"``): called
        from inside the node's code (a test patches a function to call it), it raises
        ``SimulatedCrash``; what the step did before stays on disk, nothing after it happens."""
        if node_id not in self.power:
            raise ValueError("a crash inside a step needs store='file'")
        self._armed[node_id] = (False, False)
        self.power[node_id].fired = True
        raise SimulatedCrash(f"{node_id} killed inside its step")

    def snapshot(self, node_id: str) -> Future:
        """Have ``node_id`` take a snapshot now (``DLedgerServer.snapshot``): a future of its
        last included index."""
        return self.servers[node_id].snapshot()

    def age_logs(self, hours: float, node_ids=None) -> int:
        """Run retention on the live nodes (or ``node_ids``) as if ``hours`` had passed: each
        store's ``clean`` with the machine's clock that far ahead (file ages are the files' real
        modification times, which the simulated wall clock knows nothing of; the store still
        deletes only in its ``delete_when`` hours or when its disk is full enough). Returns the
        segments deleted."""
        deleted = 0
        for node_id in (node_ids if node_ids is not None else self.live()):
            server = self.servers[node_id]
            server.store.update_committed_index(server.node.committed_index)
            # file ages are the files' real modification times: the machine's clock, moved on
            deleted += server.store.clean(time.time() + hours * 3600)
        return deleted

    def _disarm(self, node_id: str) -> None:
        if self._armed.pop(node_id, None) is not None:
            self.power[node_id].disarm()

    def disarm_all(self) -> None:
        for node_id in list(self._armed):
            self._disarm(node_id)

    def _died_inside(self) -> None:
        """A ``SimulatedCrash`` came up from the scheduler: the armed node that fired died."""
        fired = [i for i in self._armed if self.power[i].fired]
        if not fired:
            raise RuntimeError("a simulated crash from no armed node")
        for node_id in fired:
            power, torn = self._armed[node_id]
            self._disarm(node_id)
            if power:
                self.power_loss(node_id, torn=torn)
            else:
                self.crash(node_id)

    def power_loss(self, node_id: str, torn: bool = False, *, lose: float = 0.0, misdirect: float = 0.0,
                   allow=None, damage_rng: random.Random | None = None) -> None:
        """Cut the node's power (``store="file"`` only): its process dies (if it still ran) and
        its store directory keeps only what was made durable; everything else written since the
        last power loss is lost. ``torn=True`` keeps a random subset of the unsynced 512-byte
        sectors instead (torn, reordered write-back; drawn from the seed). ``lose`` and
        ``misdirect``: synced sectors whose write was lost or misdirected after all, where
        ``allow(path, offset)`` permits (``PowerLoss.power_loss``; drawn from ``damage_rng``
        unless torn). The node stays down until ``restart``."""
        if node_id not in self.power:
            raise ValueError("power loss needs store='file'")
        store = self.servers[node_id].store
        self.crash(node_id)
        rng = random.Random(self.rng.getrandbits(64)) if torn else None
        tear = rng is not None
        if (lose or misdirect) and rng is None:
            rng = damage_rng if damage_rng is not None else random.Random(self.rng.getrandbits(64))
        self.power[node_id].power_loss(store, rng, lose=lose, misdirect=misdirect, allow=allow, tear=tear)

    def restart(self, node_id: str) -> DLedgerServer | None:
        """Crash the node if it runs, then start it again from its store (None: the store
        refused to open; the node stays down, ``refusals`` says why)."""
        if node_id not in self.crashed:
            self.crash(node_id)
        return self._boot(node_id)

    def partition(self, *groups) -> None:
        self.network.partition(*groups)

    def heal(self) -> None:
        self.network.heal()

    # =====================================================================================
    # time
    # =====================================================================================
    @property
    def now_ms(self) -> int:
        return self.scheduler.now

    def step(self) -> bool:
        """Run the next event (time moves to it); False when nothing is scheduled."""
        try:
            return self.scheduler.step()
        except SimulatedCrash:
            self._died_inside()
            return True

    def run_for(self, ms: int) -> None:
        self._run(self.scheduler.now + ms, None)

    def run_until(self, predicate: Callable[[], bool], timeout_ms: int = 10_000) -> bool:
        if predicate():
            return True
        return self._run(self.scheduler.now + timeout_ms, predicate)

    def _run(self, until: int, stop) -> bool:
        while True:
            try:
                return self.scheduler.run_until(until, stop=stop)
            except SimulatedCrash:          # an armed node died inside a write (crash_inside)
                self._died_inside()
                if stop is not None and stop():
                    return True

    # =====================================================================================
    # clients
    # =====================================================================================
    def live(self) -> list[str]:
        return [i for i in self.ids if i not in self.crashed]

    def leader(self) -> str | None:
        """The id of the single current leader (highest term among live leaders), if any."""
        leaders = [(self.servers[i].node.term, i) for i in self.live() if self.servers[i].role is Role.LEADER]
        if not leaders:
            return None
        leaders.sort(reverse=True)
        if len(leaders) > 1 and leaders[0][0] == leaders[1][0]:
            return None
        return leaders[0][1]

    def append(self, body: bytes, via: str | None = None) -> Future:
        """Append through ``via`` (default: the current leader); the history records it."""
        return self._call("append", body, via)

    def write(self, body: bytes, via: str | None = None) -> Future:
        """Append and wait for the state machine (``DLedgerServer.write``): a future of
        ``(response, state machine answer)``; the history records it as an append."""
        return self._call("write", body, via)

    def read(self, mode=None, via: str | None = None) -> Future:
        """A read through ``via`` (default: the current leader); a future of the response
        whose ``index`` is safe to read up to (see ``DLedgerServer.read``). The history
        records it with its mode and the returned index."""
        return self._call("read", ReadMode.RAFT_LOG_READ if mode is None else ReadMode.parse(mode), via)

    def _call(self, kind: str, arg, via: str | None) -> Future:
        node = via if via is not None else self.leader()
        if kind == "read":
            op = self.history.invoke_read(arg, node, self.now_ms)
        else:
            op = self.history.invoke(bytes(arg), node, self.now_ms, kind=kind)
        if node is None or node in self.crashed:
            f: Future = Future()
            resp = AppendEntryResponse(code=Code.NOT_LEADER if node is None else Code.NETWORK_ERROR)
            History.complete(op, self.now_ms, resp)
            f.set_result((resp, None) if kind == "write" else resp)
            return f
        server = self.servers[node]
        call = server.read if kind == "read" else server.write if kind == "write" else server.append
        f = self._track(node, call(arg))

        def done(fut: Future) -> None:
            if fut.exception() is None:
                result = fut.result()
                History.complete(op, self.now_ms, result[0] if kind == "write" else result)
            else:
                op.complete_ms = self.now_ms       # outcome stays "info"

        f.add_done_callback(done)
        return f

    def get(self, index: int, mode=ReadMode.READ_INDEX_READ, via: str | None = None) -> Future:
        """A client's get of the entry at ``index`` in ``mode``, sent to ``via`` (default: the
        current leader) over the simulated network as ``DLedgerClient.get`` sends it: one
        ``GetEntriesRequest`` from ``CLIENT_ID``, not resent. A future of the node's
        ``GetEntriesResponse`` (it fails if the node crashes first, and stays pending if the
        request or answer is lost). The history records it with its mode, index and answer."""
        mode = ReadMode.parse(mode)
        node = via if via is not None else self.leader()
        op = self.history.invoke_get(index, mode, node, self.now_ms)
        f: Future = Future()
        if node is None or node in self.crashed:
            resp = GetEntriesResponse(code=Code.NOT_LEADER if node is None else Code.NETWORK_ERROR)
            History.complete_get(op, self.now_ms, resp)
            f.set_result(resp)
            return f
        if self._client is None:
            self._client = self.network.endpoint(CLIENT_ID)
            self._client.set_receiver(self._client_answer)
        rid = len(self.history)                   # unique per call
        self._gets[rid] = (f, node)

        def done(fut: Future) -> None:
            self._gets.pop(rid, None)
            if fut.exception() is None:
                History.complete_get(op, self.now_ms, fut.result())
            else:
                op.complete_ms = self.now_ms       # outcome stays "info"

        self._track(node, f).add_done_callback(done)
        self._client.send(Envelope(CLIENT_ID, node, rid, False, GetEntriesRequest(
            group="sim", local_id=CLIENT_ID, remote_id=node, begin_index=index, read_mode=int(mode))))
        return f

    def _client_answer(self, env: Envelope) -> None:
        call = self._gets.get(env.request_id)
        if call is not None and env.is_response and env.src == call[1] and isinstance(env.msg, GetEntriesResponse):
            try:
                call[0].set_result(env.msg)
            except InvalidStateError:
                pass

    def _track(self, node_id: str, f: Future) -> Future:
        """Remember a client call until it is answered: if its node crashes first, the call
        fails as a client's does when its connection breaks."""
        calls = self._in_flight[node_id]
        calls.add(f)
        f.add_done_callback(calls.discard)
        return f

    # =====================================================================================
    # checking
    # =====================================================================================
    def _stores(self) -> tuple[dict, dict, list]:
        stores, committed, opened = {}, {}, []
        for i in self.ids:
            server = self.servers[i]
            if i not in self.crashed:
                st = server.store
                stores[i], committed[i] = getattr(st, "inner", st), server.node.committed_index
            elif self.store_type == "memory":
                stores[i] = self._memory[i]
                committed[i] = min(self._memory[i].committed_index, self._memory[i].ledger_end_index)
            else:
                cfg = self.config_for(i)
                try:
                    st = DLedgerMmapFileStore.open(cfg.default_path, data_file_size=cfg.mapped_file_size_for_entry_data,
                                                   index_file_size=cfg.mapped_file_size_for_entry_index, read_only=True)
                except DLedgerError:
                    continue            # a store that refuses to open (damage): nothing to compare
                opened.append(st)
                stores[i], committed[i] = st, min(st.committed_index, st.ledger_end_index)
        return stores, committed, opened

    def committed_log(self) -> list[LogEntry]:
        """The longest committed prefix any replica holds (the agreed log). Entries below the
        first one that replica still holds (retention or a reset removed them) are taken as
        the storage identity checker saw them committed, as far as it saw them."""
        stores, committed, opened = self._stores()
        try:
            ref = max(stores, key=lambda i: committed[i])
            st = stores[ref]
            begin = st.ledger_before_begin_index + 1
            head = []
            for i in range(begin):
                seen = self.identity.agreed.get(i)
                if seen is not None:
                    e = decode(seen[0])
                    head.append(LogEntry(e.index, e.term, e.pos, e.magic, bytes(e.body)))
            return head + [LogEntry(e.index, e.term, e.pos, e.magic, bytes(e.body))
                           for e in st.iter_entries(begin, committed[ref])]
        finally:
            for st in opened:
                st.close()

    def problems(self) -> list[str]:
        problems = list(self.invariants.problems)
        stores, committed, opened = self._stores()
        try:
            problems += check_logs(stores, committed)
        finally:
            for st in opened:
                st.close()
        log = self.committed_log()
        problems += check_commit_log(self.history.ops, log, strict=self.strict_history)
        problems += check_reads(self.history.ops, log)
        by_index = {e.index: e.body for e in log}
        for i, sm in self.state_machines.items():
            for index, body in sm.applied:
                if index in by_index and by_index[index] != body:
                    problems.append(f"{i} applied {body[:16]!r} at {index}, the committed log has "
                                    f"{by_index[index][:16]!r}")
        return problems

    def check(self) -> None:
        """Raise ``InvariantViolation`` with a readable report if any invariant is broken."""
        problems = self.problems()
        if problems:
            counts = self.history.counts()
            head = (f"{len(problems)} invariant violation(s) in a {self.n}-node cluster, seed {self.seed}, "
                    f"at {self.now_ms} ms virtual; history: {dict(counts)}")
            raise InvariantViolation("\n".join([head] + [f"  - {p}" for p in problems[:30]]))

    def close(self) -> None:
        self.disarm_all()
        for i in self.ids:
            if i not in self.crashed:
                self.servers[i].shutdown()
                if i in self.disks and self.store_type == "file":
                    self.disks[i].inner.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
