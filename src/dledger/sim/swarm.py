"""The swarm: one seeded fault run (``run_swarm``) behind ``python -m dledger.sim swarm``.

Everything a seed does comes from ``SwarmOptions`` (drawn from the seed, ``swarm_options``).
A run has two phases:

- safety phase (``safety_ms``): ``clients`` clients, each with at most one call in flight,
  append unique bodies, read with every ``ReadMode`` and drive a key-value register machine
  (``sim/kv.py``: put, compare-and-set, and gets served from a node's applied state after a
  read), through the leader or now and then a random node. A client that waits longer than
  ``client_timeout_ms`` moves on (its call stays in flight and is recorded when it ends). The
  nemesis strikes every ``fault_every_ms`` on average: partitions (random halves, an isolated
  node, the isolated leader, a bridge, a one-way cut), heal, crash (any number of nodes),
  restart, and power loss on file stores (only of ``power_victims``: a fixed minority in
  ``page_cache`` durability, any node in ``fsync``);
  On file stores, the storage faults drawn for the seed strike too (``swarm_options``): bit
  flips at rest before a down node restarts and lost or misdirected writes at power loss,
  both where the fault atlas allows (``sim/fault_atlas.py``; in ``page_cache`` durability only on
  the ``power_victims``), a full disk for a while, a failing msync (the node halts: fail-stop,
  and the cluster takes it for crashed), slow syncs (the node's process pauses for the sync's
  virtual time) and crashes or power cuts inside a write or msync (``Cluster.crash_inside``);
- liveness phase (budget ``liveness_ms``): message loss, corruption in transit (loss too: a
  corrupted frame is dropped) and the disk's faults stop, every
  partition heals and every node restarts. A node whose store refuses to open (damage it
  cannot recover from without a repair) stays down and does not fail the seed, as long as a
  majority is up: a leader must appear, a new append must commit, every node that is up must
  apply it (convergence), and every client call must end (answered or failed).

Invariants watched on every step (``InvariantChecker`` sees every ``Ready``) are looked at
after every tick, so a violation stops the run where it happened. At the end: every checker of
``Cluster.check`` (log matching, committed prefixes, the commit-log and read checkers over the
history, applied = committed) and the linearizability of the key-value history
(``KVModel``): ILLEGAL fails the seed, UNKNOWN (the search ran out of steps) is reported in
the result, never a failure. A failure raises ``SwarmFailure`` with the seed, every drawn
option and a one-line reproduction.
"""

from __future__ import annotations

import dataclasses
import random
from concurrent.futures import Future
from dataclasses import dataclass, field

from dledger.protocol import DLedgerResponseCode as Code, ReadMode
from dledger.sim.fault_atlas import ClusterFaultAtlas
from dledger.sim.checkers import InvariantViolation
from dledger.sim.cluster import Cluster
from dledger.sim.corruption import corrupt_store
from dledger.sim.disk import SlowSync
from dledger.sim.kv import KVRecorder, KVStateMachine, encode_cas, encode_put
from dledger.sim.membership_faults import MembershipFaults
from dledger.sim.linearizability import CheckResult, Verdict
from dledger.sim.network import NetworkOptions
from dledger.sim.snapshot_faults import SnapshotFaults
from dledger.sim.swarm_options import CLIENT_OPS, NEMESIS_ACTIONS, SwarmOptions

READ_MODES = (ReadMode.RAFT_LOG_READ, ReadMode.READ_INDEX_READ, ReadMode.LEASE_READ, ReadMode.UNSAFE_READ)
#: how long a get may wait for its node to apply up to the read index before it is dropped
GET_APPLY_WAIT_MS = 2_000


class SwarmFailure(InvariantViolation):
    """A seed broke an invariant (or crashed the simulation); the message says how to rerun it."""


@dataclass
class SwarmResult:
    opts: SwarmOptions
    cluster: Cluster
    kv: KVRecorder
    verdict: Verdict
    nemesis: dict[str, int] = field(default_factory=dict)
    #: how often each storage fault struck (bit flips, full disks, failing msyncs, crashes
    #: inside a write), besides the cluster's ``halts`` and ``refusals``
    disk: dict[str, int] = field(default_factory=dict)
    #: with ``--snapshots``: snapshots taken on demand and snapshot files damaged
    snapshots: dict[str, int] = field(default_factory=dict)
    #: with ``--membership``: the changes made, and the final (voters, learners)
    membership: dict[str, int] = field(default_factory=dict)
    members: tuple = ()

    @property
    def now_ms(self) -> int:
        return self.cluster.now_ms

    @property
    def history(self):
        return self.cluster.history

    @property
    def scheduler(self):
        return self.cluster.scheduler

    def committed_log(self):
        return self.cluster.committed_log()

    @property
    def unknown(self) -> bool:
        return self.verdict.result is CheckResult.UNKNOWN

    def close(self) -> None:
        self.cluster.close()


class _Client:
    """One client: at most one call in flight; moves on after ``client_timeout_ms``."""

    __slots__ = ("cid", "future", "started", "free_at", "get", "target")

    def __init__(self, cid: int) -> None:
        self.cid = cid
        #: the node this client believes leads (None: ask the cluster), as a real client's
        #: cached leader: kept while it answers, replaced by the hint of a NOT_LEADER answer
        self.target: str | None = None
        self.future: Future | None = None
        self.started = 0
        self.free_at = 0
        #: a get between its read and its value: (op id, key, node, incarnation, index, deadline)
        self.get: tuple | None = None


class _Swarm:
    def __init__(self, opts: SwarmOptions, base_dir) -> None:
        self.opts = opts
        self.rng = random.Random(f"swarm-run/{opts.seed}/{opts.nodes}/{opts.durability}/{opts.store}")
        net = NetworkOptions(min_delay_ms=opts.min_delay_ms, max_delay_ms=opts.max_delay_ms, loss=opts.loss,
                             duplicate=opts.duplicate, codec=opts.codec, replay=opts.replay, corrupt=opts.corrupt)
        ids = [f"n{i}" for i in range(opts.nodes)]
        rates = ({i: 1 + self.rng.uniform(-opts.clock_drift, opts.clock_drift) for i in ids}
                 if opts.clock_drift else None)
        #: the seed's snapshots (``--snapshots``; ``sim/snapshot_faults.py``), or None
        self.snaps = SnapshotFaults(opts) if opts.snapshots else None
        extra = self.snaps.config() if self.snaps is not None else {}
        self.c = Cluster(n=opts.nodes, seed=opts.seed, store=opts.store, base_dir=base_dir, network=net,
                         state_machine_factory=self.snaps.factory if self.snaps is not None else KVStateMachine,
                         durability=opts.durability, clock_rates=rates, **extra)
        #: the seed's membership changes (``--membership``; ``sim/membership_faults.py``), or None
        self.members = MembershipFaults(opts) if opts.membership else None
        self.kv = KVRecorder()
        self.clients = [_Client(i) for i in range(opts.clients)]
        self.next_cid = opts.clients
        self.calls: list[Future] = []
        self.seq = 0
        self.nemesis_counts: dict[str, int] = {a: 0 for a in NEMESIS_ACTIONS}
        self.ops, self.op_weights = zip(*[(k, w) for k, w in opts.mix_weights().items() if w > 0])
        actions = [(a, w) for a, w in opts.nemesis_weights().items() if w > 0]
        self.actions, self.action_weights = zip(*actions) if actions else ((), ())
        self.setup_disks()

    # -- the disk's faults ----------------------------------------------------------------
    def setup_disks(self) -> None:
        """The storage faults' own random source (so that a seed without them keeps its run),
        the fault atlas and the slow syncs."""
        opts, c = self.opts, self.c
        self.disk_rng = random.Random(f"swarm-disk/{opts.seed}/{opts.nodes}/{opts.durability}")
        # page_cache: damage only on the power victims, a fixed minority (anywhere on them);
        # fsync: on any node, each region of the store on a fixed minority (the atlas)
        self.atlas = ClusterFaultAtlas(c.ids, random.Random(f"atlas/{opts.seed}")) if opts.durability == "fsync" else None
        #: node -> virtual time its full disk ends
        self.full_until: dict[str, int] = {}
        self.disk_counts: dict[str, int] = {k: 0 for k in ("bit_flip", "enospc", "eio", "crash_inside")}
        if opts.slow_sync_ms and c.power:
            for node_id, pl in c.power.items():
                pl.on_sync = SlowSync(lambda ms, n=node_id: c.processes[n].pause(ms), base_ms=opts.slow_sync_ms,
                                      per_mib_ms=5.0, rng=self.disk_rng, spike=0.01, spike_ms=100.0)

    def allow(self, node_id: str):
        """Where ``node_id``'s disk may be damaged (None: nowhere)."""
        if self.atlas is not None:
            return self.atlas.allow_for(node_id)
        return (lambda path, offset: True) if node_id in self.opts.power_victims else None

    def flip_at_rest(self, node_id: str) -> None:
        """Before a down node restarts: maybe one bit of its store flips (where allowed)."""
        opts, c = self.opts, self.c
        if not opts.bit_flip or node_id not in c.power or self.disk_rng.random() >= opts.bit_flip:
            return
        allow = self.allow(node_id)
        if allow is not None and corrupt_store(c.config_for(node_id).default_path, self.disk_rng, allow=allow):
            self.disk_counts["bit_flip"] += 1

    def disk_strike(self) -> None:
        """After a nemesis strike: maybe a full disk for a while, maybe a failing msync."""
        opts, c, drng = self.opts, self.c, self.disk_rng
        if not c.power:
            return
        if opts.enospc and drng.random() < opts.enospc:
            node_id = drng.choice(c.ids)
            until = c.now_ms + drng.randint(100, 2_000)
            self.full_until[node_id] = max(until, self.full_until.get(node_id, 0))
            c.power[node_id].no_space = True
            c.scheduler.call_at(until, self.space_back, node_id)
            self.disk_counts["enospc"] += 1
        if opts.eio and drng.random() < opts.eio:
            live = c.live()
            if opts.durability == "page_cache":
                # a failed write-back may drop pages the node acknowledged from the page cache
                # (its next open is suspect): page_cache mode promises that of a fixed minority
                live = [n for n in live if n in opts.power_victims]
            if live:
                c.power[drng.choice(live)].fail_syncs(1)
                self.disk_counts["eio"] += 1

    def space_back(self, node_id: str) -> None:
        if self.c.now_ms >= self.full_until.get(node_id, 0):
            self.c.power[node_id].no_space = False

    def heal_disks(self) -> None:
        """The liveness phase: the disk's faults stop (slow syncs stay: they only take time)."""
        c = self.c
        c.disarm_all()
        for pl in c.power.values():
            pl.no_space = False
            pl.heal_syncs()
        self.full_until.clear()

    def power_cut(self, victim: str, torn: bool) -> None:
        opts = self.opts
        if opts.crash_inside and self.disk_rng.random() < opts.crash_inside and victim in self.c.live():
            self.c.crash_inside(victim, self.disk_rng.randint(0, 40), power=True, torn=torn)
            self.disk_counts["crash_inside"] += 1
            return
        allow = self.allow(victim)
        if allow is not None and (opts.lost_write or opts.misdirect):
            self.c.power_loss(victim, torn=torn, lose=opts.lost_write, misdirect=opts.misdirect, allow=allow,
                              damage_rng=self.disk_rng)
        else:
            self.c.power_loss(victim, torn=torn)

    # -- invariants after every step ------------------------------------------------------
    def watch(self) -> None:
        if self.c.invariants.problems:
            raise InvariantViolation(f"at {self.c.now_ms} ms: {self.c.invariants.problems[0]}")

    # -- clients --------------------------------------------------------------------------
    def via(self, cl: _Client) -> str | None:
        if self.rng.random() < self.opts.via_random:
            return self.rng.choice(self.c.ids)
        if cl.target is None:
            cl.target = self.c.leader()
        return cl.target

    def learn(self, cl: _Client) -> None:
        """After an answer: keep the node that served, follow a NOT_LEADER hint, else forget."""
        f = cl.future
        resp = f.result() if f is not None and f.done() and f.exception() is None else None
        if isinstance(resp, tuple):
            resp = resp[0]
        if resp is None:
            cl.target = None
        elif resp.code == Code.NOT_LEADER:
            cl.target = resp.leader_id if resp.leader_id in self.c.servers else None
        elif resp.code != Code.SUCCESS:
            cl.target = None

    def drive_clients(self) -> None:
        now = self.c.now_ms
        for k, cl in enumerate(self.clients):
            if cl.get is not None:
                self.finish_get(cl)
            if cl.future is not None and not cl.future.done():
                if now - cl.started < self.opts.client_timeout_ms:
                    continue
                # gave up waiting: the call stays in flight; a new client takes this one's place
                if cl.get is not None:
                    self.kv.drop(cl.get[0])
                cl = self.clients[k] = _Client(self.next_cid)
                self.next_cid += 1
            if cl.get is not None or now < cl.free_at:
                continue
            self.learn(cl)
            cl.future = None
            self.issue(cl)

    def issue(self, cl: _Client) -> None:
        c, rng, opts = self.c, self.rng, self.opts
        kind = rng.choices(self.ops, self.op_weights)[0]
        via = self.via(cl)
        now = c.now_ms
        cl.started = now
        self.seq += 1
        if kind == "append":
            f = c.append(f"s{opts.seed}-c{cl.cid}-{self.seq}".encode(), via=via)
        elif kind == "read":
            f = c.read(rng.choice(READ_MODES), via=via)
        elif kind in ("put", "cas"):
            key = f"k{rng.randrange(opts.keys)}"
            op_id = self.kv.new_id()
            value = str(op_id)
            if kind == "put":
                inp, body = ("put", key, value), encode_put(op_id, key, value)
            else:
                expected = rng.choice([None] + [str(i) for i in range(max(1, op_id - 6), op_id)])
                inp, body = ("cas", key, expected, value), encode_cas(op_id, key, expected, value)
            self.kv.invoke(op_id, cl.cid, inp, now)
            f = c.write(body, via=via)
            f.add_done_callback(lambda fut, op_id=op_id: self.kv.complete_write(op_id, self.c.now_ms, *fut.result())
                                if fut.exception() is None else None)
        else:
            key = f"k{rng.randrange(opts.keys)}"
            mode = rng.choice(READ_MODES)
            node = via
            op_id = self.kv.new_id()
            if mode is not ReadMode.UNSAFE_READ:
                self.kv.invoke(op_id, cl.cid, ("get", key), now)
            f = c.read(mode, via=node)
            inc = c.incarnation[node] if node is not None else 0
            cl.get = (op_id, key, node, inc, mode, None)
        cl.future = f
        self.calls.append(f)
        cl.free_at = now + rng.randint(0, opts.think_ms)

    def finish_get(self, cl: _Client) -> None:
        """Second half of a get: once its read succeeded and the node applied up to the read
        index, read the key from that node's state machine."""
        op_id, key, node, inc, mode, deadline = cl.get
        c = self.c
        f = cl.future
        if not f.done():
            return
        resp = f.result() if f.exception() is None else None
        if resp is None or resp.code != Code.SUCCESS or node in c.crashed or c.incarnation[node] != inc:
            self.kv.drop(op_id)
            cl.get = None
            return
        if deadline is None:
            cl.get = deadline_set = (op_id, key, node, inc, mode, c.now_ms + GET_APPLY_WAIT_MS)
            deadline = deadline_set[5]
        if c.servers[node].node.applied_index >= resp.index:
            value = c.state_machines[node].state.get(key)
            if mode is ReadMode.UNSAFE_READ:
                self.kv.unsafe_gets += 1
            else:
                self.kv.complete_get(op_id, c.now_ms, value)
            cl.get = None
        elif c.now_ms >= deadline:
            self.kv.drop(op_id)
            cl.get = None

    # -- nemesis --------------------------------------------------------------------------
    def strike(self) -> None:
        c, rng, ids = self.c, self.rng, self.c.ids
        if not self.actions:
            return
        action = rng.choices(self.actions, self.action_weights)[0]
        self.nemesis_counts[action] += 1
        if action == "halves":
            shuffled = ids[:]
            rng.shuffle(shuffled)
            k = rng.randrange(1, len(ids))
            c.heal()
            c.partition(shuffled[:k], shuffled[k:])
        elif action in ("isolate", "isolate_leader"):
            leader = c.leader()
            victim = leader if action == "isolate_leader" and leader is not None else rng.choice(ids)
            c.heal()
            c.partition([victim], [i for i in ids if i != victim])
        elif action == "bridge":
            # two sides that cannot talk, one node that talks to both
            shuffled = ids[:]
            rng.shuffle(shuffled)
            rest = shuffled[1:]                 # shuffled[0] is the bridge: in neither group
            half = max(1, len(rest) // 2)
            c.heal()
            c.partition(rest[:half], rest[half:])
        elif action == "one_way":
            a, b = rng.sample(ids, 2)
            c.network.cut(a, b)
        elif action == "heal":
            c.heal()
        elif action == "crash":
            live = c.live()
            if live:
                victim = rng.choice(live)
                if self.opts.crash_inside and c.power and self.disk_rng.random() < self.opts.crash_inside:
                    c.crash_inside(victim, self.disk_rng.randint(0, 40))
                    self.disk_counts["crash_inside"] += 1
                else:
                    c.crash(victim)
        elif action == "restart":
            if c.crashed - c.retired:
                victim = rng.choice(sorted(c.crashed - c.retired))
                self.flip_at_rest(victim)
                if self.snaps is not None:
                    self.snaps.flip_at_rest(c, victim)
                c.restart(victim)
            elif rng.random() < 0.3:
                victim = rng.choice(ids)
                if victim not in c.retired:
                    c.restart(victim)
        elif action == "power_loss":
            victim = rng.choice(self.opts.power_victims)
            self.power_cut(victim, rng.random() < self.opts.torn)
        if self.opts.clog and rng.random() < self.opts.clog:
            a, b = rng.sample(ids, 2)
            c.network.clog(a, b, rng.randint(50, 2_000))
        if self.opts.pause and rng.random() < self.opts.pause:
            live = c.live()
            if live:
                timeout = c.config_for(ids[0]).max_heart_beat_leak * c.config_for(ids[0]).heart_beat_time_interval_ms
                c.processes[rng.choice(live)].pause(rng.randint(10, 3 * timeout))
        self.disk_strike()
        if self.snaps is not None:
            self.snaps.strike(c)
        if self.members is not None:
            self.members.strike(c)

    # -- phases ---------------------------------------------------------------------------
    def safety_phase(self) -> None:
        c, opts, rng = self.c, self.opts, self.rng
        end = c.now_ms + opts.safety_ms
        next_fault = c.now_ms + rng.randrange(opts.fault_every_ms)
        while c.now_ms < end:
            c.run_for(opts.tick_ms)
            self.watch()
            self.drive_clients()
            if c.now_ms >= next_fault:
                next_fault = c.now_ms + rng.randrange(1, 2 * opts.fault_every_ms)
                self.strike()
                self.watch()

    def liveness_phase(self) -> None:
        c, opts = self.c, self.opts
        c.network.options = dataclasses.replace(c.network.options, loss=0.0, corrupt=0.0)
        c.heal()
        self.heal_disks()
        for node_id in c.ids:
            if node_id not in c.retired:
                c.restart(node_id)
        up = c.live()
        voters = self.members.config_view(c)[0] if self.members is not None else c.ids
        if sum(1 for v in voters if v in up) <= len(voters) // 2:
            why = "; ".join(f"{n}: {r}" for _t, n, r in c.refusals[-c.n:])
            raise InvariantViolation(f"L1: only {len(up)} of {len(voters)} voters could reopen after healing ({why})")
        deadline = c.now_ms + opts.liveness_ms

        def left() -> int:
            return max(deadline - c.now_ms, 1)

        if not c.run_until(lambda: c.leader() is not None, left()):
            raise InvariantViolation(f"L1: no leader within {opts.liveness_ms} ms after healing")
        final = None
        while c.now_ms < deadline:
            if final is None or (final.done() and not final.result().ok):
                final = c.append(f"s{opts.seed}-final-{c.now_ms}".encode())
            if c.run_until(lambda: final.done() and final.result().ok, min(300, left())):
                break
            self.watch()
        if final is None or not final.done() or not final.result().ok:
            raise InvariantViolation(f"L1: no append committed within {opts.liveness_ms} ms after healing")
        index = final.result().index
        if self.members is not None:
            self.calls.extend(self.members.futures)
            leader_config = c.servers[c.leader()].node.member_state.configuration if c.leader() else None
            converging = [i for i in c.live() if leader_config is None or leader_config.is_member(i)]
        else:
            converging = c.live()
        if not self._converge(converging, index, deadline):
            behind = {i: c.servers[i].node.applied_index for i in converging}
            raise InvariantViolation(f"L1: replicas did not converge on index {index} within "
                                     f"{opts.liveness_ms} ms after healing: applied {behind}")
        if not c.run_until(lambda: all(f.done() for f in self.calls), left()):
            stuck = [op for op in c.history.ops if op.complete_ms is None]
            raise InvariantViolation(f"L1: {len(stuck)} client calls never ended, e.g. {stuck[0] if stuck else '?'}")
        self.watch()

    def _converge(self, converging: list[str], index: int, deadline: int) -> bool:
        """Run until every node of ``converging`` applied ``index``. A leader elected after the
        final append committed holds no entry of its own term until the next append, so by
        Raft's commit rule it commits none of the earlier ones (nor do the followers that
        learn their commit index from it): while the leader's log ends in an earlier term,
        append once more, as a client of a quiet group would (seed 1401269: the leader that
        committed the final append stood down as soon as it committed its own removal)."""
        c, opts = self.c, self.opts
        nudge = None

        def converged() -> bool:
            return all(c.servers[i].node.applied_index >= index for i in converging)

        while not c.run_until(converged, min(300, max(deadline - c.now_ms, 1))):
            if c.now_ms >= deadline:
                return False
            leader = c.leader()
            member = c.servers[leader].node.member_state if leader is not None else None
            if member is not None and member.ledger_end_term < member.curr_term \
                    and (nudge is None or nudge.done()):
                nudge = c.append(f"s{opts.seed}-nudge-{c.now_ms}".encode())
        return True


def run_swarm(opts: SwarmOptions, base_dir=None) -> SwarmResult:
    """Run one seed; raises ``SwarmFailure`` (seed, options, reproduction) on failure."""
    swarm = None
    try:
        swarm = _Swarm(opts, base_dir)
        swarm.safety_phase()
        swarm.liveness_phase()
        swarm.c.check()
        if swarm.snaps is not None and (problems := swarm.snaps.problems()):
            raise InvariantViolation("I10 applied exactly once across snapshots: " + "; ".join(problems[:10]))
        verdict = swarm.kv.check()
        if verdict.result is CheckResult.ILLEGAL:
            raise InvariantViolation(f"I9 key-value history not linearizable:\n{verdict.describe()}")
    except InvariantViolation as exc:
        raise SwarmFailure(failure_report(opts, str(exc), swarm)) from None
    except Exception as exc:
        raise SwarmFailure(failure_report(opts, f"the simulation crashed: {exc!r}", swarm)) from exc
    return SwarmResult(opts, swarm.c, swarm.kv, verdict, swarm.nemesis_counts, swarm.disk_counts,
                       swarm.snaps.counts if swarm.snaps is not None else {},
                       swarm.members.counts if swarm.members is not None else {},
                       swarm.members.config_view(swarm.c) if swarm.members is not None else ())


def failure_report(opts: SwarmOptions, what: str, swarm: "_Swarm | None") -> str:
    where = f" at {swarm.c.now_ms} ms virtual" if swarm is not None else ""
    if swarm is not None:
        try:
            swarm.c.close()
        except Exception:
            pass
    return (f"seed {opts.seed} failed{where}: {what}\noptions:\n{opts.describe()}\n"
            f"reproduce: {opts.reproduce()}")


__all__ = ["CLIENT_OPS", "SwarmFailure", "SwarmOptions", "SwarmResult", "run_swarm"]
