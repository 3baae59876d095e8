"""The seeded swarm run behind the seed sweep and ``python -m dledger.sim``.

Every parameter comes from the seed (TigerBeetle VOPR style): network delay (up to 2-30 ms,
so messages reorder), message loss (0-10 %) and duplication (0-20 %), how often clients
append, how often faults strike. A run has two phases:
- safety phase (``duration_ms``): several clients append unique bodies through the current
  leader (now and then through a random node), while the nemesis partitions the cluster
  into random halves, isolates single nodes, cuts one-way links, heals, crashes nodes
  (any number, even a majority) and restarts them;
- liveness phase: everything is healed and restarted; a leader must appear, every client
  call must finish, and one more append must succeed, within ``liveness_ms``.
Then ``Cluster.check()`` runs every checker. Loss and duplication stop in the liveness
phase only through healing partitions; they keep going (the core must cope with them).
Storage faults (power loss, torn writes, bit flips) are not injected yet.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from dledger.sim.checkers import InvariantViolation
from dledger.sim.cluster import Cluster
from dledger.sim.network import NetworkOptions


@dataclass(slots=True)
class SwarmOptions:
    seed: int
    nodes: int = 3
    store: str = "memory"
    duration_ms: int = 5_000
    liveness_ms: int = 10_000
    clients: int = 3
    #: carry every envelope through the wire codec (off: faster, same run otherwise)
    codec: bool = True

    def reproduce(self) -> str:
        return (f"python -m dledger.sim --seed {self.seed} --nodes {self.nodes} --store {self.store} "
                f"--duration-ms {self.duration_ms}" + ("" if self.codec else " --no-codec"))


def run_swarm(opts: SwarmOptions, base_dir=None) -> Cluster:
    """Run one seed; raises ``InvariantViolation`` (with the reproduce command) on failure."""
    rng = random.Random(opts.seed * 7919 + opts.nodes)
    net = NetworkOptions(min_delay_ms=1, max_delay_ms=rng.choice([2, 5, 10, 30]),
                         loss=rng.choice([0.0, 0.0, 0.02, 0.1]), duplicate=rng.choice([0.0, 0.0, 0.05, 0.2]),
                         codec=opts.codec)
    c = Cluster(n=opts.nodes, seed=opts.seed, store=opts.store, base_dir=base_dir, network=net)
    try:
        _safety_phase(c, rng, opts)
        _liveness_phase(c, opts)
        c.check()
    except InvariantViolation as exc:
        raise InvariantViolation(f"{exc}\nreproduce: {opts.reproduce()}") from None
    except Exception as exc:
        raise InvariantViolation(f"seed {opts.seed} crashed the simulation: {exc!r}\n"
                                 f"reproduce: {opts.reproduce()}") from exc
    return c


def _safety_phase(c: Cluster, rng: random.Random, opts: SwarmOptions) -> None:
    append_every = rng.choice([5, 20, 50])
    fault_every = rng.choice([200, 500, 1_000])
    seq = 0
    next_fault = c.now_ms + rng.randrange(fault_every)
    end = c.now_ms + opts.duration_ms
    while c.now_ms < end:
        c.run_for(append_every)
        for client in range(opts.clients):
            if rng.random() < 0.7:
                via = None if rng.random() < 0.9 else rng.choice(c.ids)
                c.append(f"s{opts.seed}-c{client}-{seq}".encode(), via=via)
                seq += 1
        if c.now_ms >= next_fault:
            next_fault = c.now_ms + rng.randrange(1, 2 * fault_every)
            _nemesis(c, rng)


def _nemesis(c: Cluster, rng: random.Random) -> None:
    ids = c.ids
    action = rng.choice(["halves", "isolate", "one_way", "heal", "heal", "crash", "restart", "restart"])
    if action == "halves":
        shuffled = ids[:]
        rng.shuffle(shuffled)
        k = rng.randrange(1, len(ids))
        c.heal()
        c.partition(shuffled[:k], shuffled[k:])
    elif action == "isolate":
        victim = c.leader() if rng.random() < 0.5 and c.leader() else rng.choice(ids)
        c.heal()
        c.partition([victim], [i for i in ids if i != victim])
    elif action == "one_way":
        a, b = rng.sample(ids, 2)
        c.network.cut(a, b)
    elif action == "heal":
        c.heal()
    elif action == "crash":
        live = c.live()
        if live:
            c.crash(rng.choice(live))
    elif action == "restart":
        if c.crashed:
            c.restart(rng.choice(sorted(c.crashed)))
        elif rng.random() < 0.3:
            c.restart(rng.choice(ids))


def _liveness_phase(c: Cluster, opts: SwarmOptions) -> None:
    c.heal()
    for node_id in sorted(c.crashed):
        c.restart(node_id)
    deadline = c.now_ms + opts.liveness_ms
    if not c.run_until(lambda: c.leader() is not None, deadline - c.now_ms):
        raise InvariantViolation(f"L1: no leader within {opts.liveness_ms} ms after healing")
    final = None
    while c.now_ms < deadline:
        if final is None or (final.done() and not final.result().ok):
            final = c.append(f"s{opts.seed}-final-{c.now_ms}".encode())
        if c.run_until(lambda: final.done() and final.result().ok, 300):
            break
    if final is None or not final.done() or not final.result().ok:
        raise InvariantViolation(f"L1: no append succeeded within {opts.liveness_ms} ms after healing")
    pending = lambda: [op for op in c.history.ops if op.complete_ms is None]  # noqa: E731
    c.run_until(lambda: not pending(), max(deadline - c.now_ms, 1))
    # calls that reached a node that crashed before answering may never complete: they stay
    # "info" for the checker; anything else still open is a liveness bug
    stuck = [op for op in pending() if op.node not in c.crashed and c.incarnation.get(op.node, 0) <= 1]
    if stuck and c.now_ms >= deadline:
        raise InvariantViolation(f"L1: {len(stuck)} client calls never completed, e.g. {stuck[0]}")
