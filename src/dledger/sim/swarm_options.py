"""SwarmOptions: everything one swarm seed does, drawn from the seed (TigerBeetle VOPR style).

``SwarmOptions.from_seed(seed, nodes=3, durability="page_cache", store="memory")`` draws every
other field from the seed, so ``(seed, nodes, durability, store, codec)`` is the whole
reproduction: ``reproduce()`` prints it as one command line and ``describe()`` lists the drawn
fields, one per line, for a failure report. The ranges:

- network: delay 1 ms to 2-50 ms per message (so messages reorder), loss 0-30 %, duplication
  0-50 % (each often 0, as VOPR draws them);
- storage: process crashes, and on file stores power loss (``torn`` write-back in part of the
  cases). In ``page_cache`` durability power loss only ever hits a fixed minority of nodes
  (``power_victims``): losing the page cache of a majority is outside that mode's promise
  (docs/simulation.md); in ``fsync`` durability any node, any number;
- the nemesis: how often it strikes and the weight of each action (partition shapes, heal,
  crash, restart, power loss);
- clients: how many, how often they act, the mix of appends, reads and key-value commands,
  how often they go through a random node instead of the leader;
- phases: the length of the safety phase (under faults) and the budget of the liveness phase.

- network faults beyond loss and duplication: replay of old envelopes 0-50 %, corruption in
  transit 0-10 % (refused by the frame CRC), clogged links and paused processes now and then,
  clock drift up to 5 % (each often 0).

- storage faults beyond crash and power loss (file stores, unless ``storage_faults=False``):
  bit flips at rest on a node that is down (per restart, 0-50 %), lost and misdirected
  writes at power loss (per synced sector, 0-1 % each), both only where the cluster's fault
  atlas allows them (``sim/fault_atlas.py``: every region keeps an intact copy on a majority; in
  ``page_cache`` durability only on the ``power_victims``); a full disk now and then (per
  strike, 0-30 %: 0.1-2 s of ENOSPC at segment creation and at term and checkpoint writes,
  then space comes back); a failing msync (per strike, 0-20 %: EIO, the node fail-stops);
  slow syncs (each msync takes 0, 1 or 5 ms of virtual time plus rare 100 ms spikes); a
  crash or power cut inside a write or an msync instead of between events (0, 30 or 100 %
  of those strikes). They are drawn after every other field, so a seed's other fields keep
  their values; ``storage_faults=False`` draws none of them (the runs of before they existed).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

#: nemesis actions the swarm knows (``nemesis`` holds one weight per action, in this order)
NEMESIS_ACTIONS = ("halves", "isolate", "isolate_leader", "bridge", "one_way", "heal", "crash", "restart",
                   "power_loss")
#: client operations (``mix`` holds one weight per kind, in this order)
CLIENT_OPS = ("append", "read", "put", "cas", "get")


@dataclass(frozen=True, slots=True)
class SwarmOptions:
    seed: int
    nodes: int = 3
    store: str = "memory"
    durability: str = "page_cache"
    #: carry every envelope through the wire codec (off: faster, same run otherwise)
    codec: bool = True

    # -- network ---------------------------------------------------------------------------
    min_delay_ms: int = 1
    max_delay_ms: int = 5
    loss: float = 0.0
    duplicate: float = 0.0
    #: probability that a sent envelope is also re-delivered much later (``NetworkOptions.replay``)
    replay: float = 0.0
    #: probability that a delivered copy has one bit flipped in transit (the frame CRC refuses it)
    corrupt: float = 0.0
    #: probability per nemesis strike of clogging a random link for up to 2 s (``network.clog``)
    clog: float = 0.0
    #: probability per nemesis strike of pausing a random node's process for up to three
    #: election timeouts (``SimProcess.pause``: timers and inbox held)
    pause: float = 0.0
    #: clock drift bound: each machine's clock runs at a rate drawn in ``1 +- clock_drift``;
    #: at most the config's ``max_clock_drift`` (5 %), under which LEASE_READ must stay safe
    clock_drift: float = 0.0

    # -- storage ---------------------------------------------------------------------------
    #: share of power losses that tear the unsynced sectors instead of dropping them all
    torn: float = 0.0
    #: nodes power loss may hit (page_cache: a fixed minority; fsync: every node)
    power_victims: tuple[str, ...] = ()
    #: probability, per restart of a node that is down, that one bit of its store flips at
    #: rest first (``corrupt_store``, where the fault atlas allows)
    bit_flip: float = 0.0
    #: per synced sector at a power loss: probability that its write was misdirected
    misdirect: float = 0.0
    #: probability per nemesis strike that a node's disk is full for 0.1-2 s (ENOSPC at segment
    #: creation and at term and checkpoint writes)
    enospc: float = 0.0
    #: probability per nemesis strike that a node's next msync fails with EIO (fail-stop)
    eio: float = 0.0

    #: per synced sector at a power loss: probability that its write was lost
    lost_write: float = 0.0
    #: virtual ms each msync costs (0: syncs take no time); a 100 ms spike 1 % of the time
    slow_sync_ms: int = 0
    #: share of crash and power-loss strikes that hit inside a write or msync of the node
    crash_inside: float = 0.0
    #: False: none of the storage faults above is drawn (the runs of before they existed)
    storage_faults: bool = True

    # -- snapshots (``--snapshots``, file stores) --------------------------------------------
    #: the key-value machine takes snapshots and the log is trimmed behind them (small data
    #: segments), so followers catch up by installs; off: the runs of before they existed
    snapshots: bool = False
    snapshot_threshold: int = 0
    snapshot_reserve: int = 3
    snapshot_window_ms: int = 60_000
    #: probability per nemesis strike that a random live node takes a snapshot now
    snapshot_now: float = 0.0
    #: probability, per restart of ``snapshot_flip_victim``, that a bit of its newest snapshot
    #: (data or meta) flips at rest first
    snapshot_flip: float = 0.0
    snapshot_flip_victim: str | None = None

    # -- membership changes (``--membership``) ------------------------------------------------
    #: the nemesis also changes the group's members (``sim/membership_faults.py``); off: the runs
    #: of before they existed
    membership: bool = False
    #: probability per nemesis strike of a membership change
    membership_rate: float = 0.0
    #: weight of each of ``membership_faults.MEMBERSHIP_ACTIONS``
    membership_mix: tuple[int, ...] = ()

    # -- nemesis ---------------------------------------------------------------------------
    #: mean virtual time between two nemesis strikes
    fault_every_ms: int = 500
    #: weight of each of ``NEMESIS_ACTIONS``
    nemesis: tuple[int, ...] = (2, 2, 1, 1, 1, 3, 2, 3, 0)

    # -- clients ---------------------------------------------------------------------------
    clients: int = 3
    #: the swarm's step: clients act and invariants are checked every ``tick_ms``
    tick_ms: int = 10
    #: a client that got its answer waits up to this long before its next operation
    think_ms: int = 20
    #: a client stops waiting after this long (the call stays in flight, its outcome unknown)
    client_timeout_ms: int = 1_000
    #: weight of each of ``CLIENT_OPS``
    mix: tuple[int, ...] = (3, 2, 2, 1, 2)
    #: share of calls sent to a random node instead of the leader
    via_random: float = 0.1
    #: number of keys of the key-value register machine
    keys: int = 3

    # -- phases ----------------------------------------------------------------------------
    safety_ms: int = 3_000
    #: the safety phase was drawn from the seed (the reproduction line then leaves it out:
    #: giving it draws the fields after it differently)
    safety_drawn: bool = False
    liveness_ms: int = 10_000

    @classmethod
    def from_seed(cls, seed: int, *, nodes: int = 3, durability: str = "page_cache", store: str = "memory",
                  codec: bool = True, safety_ms: int | None = None, storage_faults: bool = True,
                  snapshots: bool = False, membership: bool = False) -> "SwarmOptions":
        """Every field not given drawn from ``seed`` (the draw order is fixed: append new
        draws at the end so existing seeds keep their runs)."""
        if store not in ("memory", "file"):
            raise ValueError(f"store must be 'memory' or 'file', got {store!r}")
        if durability not in ("page_cache", "fsync"):
            raise ValueError(f"durability must be 'page_cache' or 'fsync', got {durability!r}")
        rng = random.Random(f"swarm/{seed}/{nodes}/{durability}/{store}")
        ids = [f"n{i}" for i in range(nodes)]

        def often_zero(hi: float) -> float:
            return round(rng.choice([0.0, 0.0, rng.uniform(0, hi / 3), rng.uniform(0, hi)]), 3)

        max_delay = rng.choice([2, 5, 10, 20, 50])
        loss = often_zero(0.30)
        duplicate = often_zero(0.50)
        crash_w, restart_w = rng.choice([0, 1, 2, 4]), rng.choice([2, 3, 4])
        power_w = rng.choice([0, 1, 2, 4]) if store == "file" else 0
        nemesis = (rng.choice([0, 1, 3]), rng.choice([0, 1, 3]), rng.choice([0, 1, 2]), rng.choice([0, 1]),
                   rng.choice([0, 1, 2]), rng.choice([1, 2, 4]), crash_w, restart_w, power_w)
        minority = (nodes - 1) // 2
        victims = tuple(ids) if durability == "fsync" else tuple(sorted(rng.sample(ids, rng.randint(1, minority))))
        mix = (rng.choice([1, 2, 4]), rng.choice([1, 2, 3]), rng.choice([1, 2, 3]), rng.choice([0, 1, 2]),
               rng.choice([1, 2, 3]))
        drawn = cls(
            seed=seed, nodes=nodes, store=store, durability=durability, codec=codec,
            min_delay_ms=1, max_delay_ms=max_delay, loss=loss, duplicate=duplicate,
            torn=rng.choice([0.0, 0.5, 1.0]) if power_w else 0.0,
            power_victims=victims if power_w else (),
            fault_every_ms=rng.choice([100, 250, 500, 1_000]), nemesis=nemesis,
            clients=rng.randint(2, 5), tick_ms=rng.choice([5, 10, 20]), think_ms=rng.choice([0, 10, 50]),
            client_timeout_ms=rng.choice([500, 1_000, 2_000]), mix=mix,
            via_random=rng.choice([0.0, 0.1, 0.3]), keys=rng.randint(1, 4),
            safety_ms=safety_ms if safety_ms is not None else rng.choice([1_500, 2_000, 3_000]),
            safety_drawn=safety_ms is None,
            # drawn last, so that every field above keeps the value it had before these existed
            replay=often_zero(0.50), corrupt=often_zero(0.10), clog=rng.choice([0.0, 0.0, 0.1, 0.3]),
            pause=rng.choice([0.0, 0.0, 0.1, 0.3]), clock_drift=rng.choice([0.0, 0.0, 0.01, 0.05]),
            storage_faults=storage_faults,
        )
        if not codec:
            # corruption flips bits of encoded frames: without the codec there are none (the
            # draw above stays, so the other fields keep their values)
            drawn = dataclasses.replace(drawn, corrupt=0.0)
        if snapshots and store == "file":
            # drawn from their own source: the fields above keep their values
            srng = random.Random(f"swarm-snapshots/{seed}/{nodes}/{durability}")
            drawn = dataclasses.replace(
                drawn, snapshots=True, snapshot_threshold=srng.choice([3, 10, 30, 100]),
                snapshot_reserve=srng.choice([1, 2, 3]), snapshot_window_ms=srng.choice([0, 0, 300, 3_000]),
                snapshot_now=srng.choice([0.0, 0.1, 0.3]), snapshot_flip=srng.choice([0.0, 0.0, 0.3, 1.0]),
                snapshot_flip_victim=srng.choice(ids))
        if membership:
            # drawn from their own source: the fields above keep their values
            mrng = random.Random(f"swarm-membership-options/{seed}/{nodes}/{durability}/{store}")
            drawn = dataclasses.replace(
                drawn, membership=True, membership_rate=mrng.choice([0.2, 0.5, 1.0]),
                membership_mix=tuple(mrng.choice(w) for w in ([1, 2, 3], [0, 1, 2], [0, 1, 2], [1, 2, 3],
                                                              [0, 1, 2], [0, 1, 2], [0, 1, 2])))
        if store != "file" or not storage_faults:
            return drawn
        # the storage faults, drawn after everything above (file stores only)
        return dataclasses.replace(
            drawn, bit_flip=often_zero(0.5), misdirect=often_zero(0.01), lost_write=often_zero(0.01),
            enospc=often_zero(0.3), eio=often_zero(0.2), slow_sync_ms=rng.choice([0, 0, 1, 5]),
            crash_inside=rng.choice([0.0, 0.0, 0.3, 1.0]))

    def reproduce(self) -> str:
        """The one command line that runs this seed again."""
        return (f"python -m dledger.sim swarm --seed {self.seed} --nodes {self.nodes} "
                f"--durability {self.durability} --store {self.store}"
                + ("" if self.safety_drawn else f" --safety-ms {self.safety_ms}")
                + ("" if self.codec else " --no-codec")
                + ("" if self.storage_faults else " --no-storage-faults")
                + (" --snapshots" if self.snapshots else "")
                + (" --membership" if self.membership else ""))

    def describe(self) -> str:
        """Every field, one per line (the failure report)."""
        shown = {"nemesis": self.nemesis_weights(), "mix": self.mix_weights()}
        return "\n".join(f"  {f.name} = {shown.get(f.name, getattr(self, f.name))!r}"
                         for f in dataclasses.fields(self))

    def nemesis_weights(self) -> dict[str, int]:
        return dict(zip(NEMESIS_ACTIONS, self.nemesis))

    def mix_weights(self) -> dict[str, int]:
        return dict(zip(CLIENT_OPS, self.mix))
