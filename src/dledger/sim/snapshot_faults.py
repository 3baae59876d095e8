"""SnapshotFaults: the swarm's snapshots (``--snapshots``): taken, trimmed behind, installed, damaged.

With ``SwarmOptions.snapshots`` (file stores) the swarm's key-value machine is
``SnapshotKVStateMachine``: every node takes a snapshot each ``snapshot_threshold`` applied
entries, keeps ``snapshot_reserve`` of them and trims its log behind the oldest (small data
segments, so trimming really removes segments), and a leader keeps for
``snapshot_window_ms`` what a follower it heard from needs. So a follower that was down or cut
off catches up by a streamed install, mixed with every other fault of the seed: a crash or
power loss in the middle of a save (the simulator's worker part runs a few virtual ms later) or
of an install (between chunks, or inside the store's writes of the log-start move), partitions
and lost messages while chunks flow. On top of that, per nemesis strike, a random live node may
take a snapshot now (``snapshot_now``), and before ``snapshot_flip_victim`` restarts, one bit
of its newest snapshot (data or meta) may flip (``snapshot_flip``): it falls back to an older
snapshot, or waits for the leader's.

The check (``problems``): every key-value machine of every incarnation of every node holds the
same hash chain at every index it reached (``sim.hash_chain.same_history``): each committed
entry applied exactly once, in order, whether through ``on_apply``, a snapshot taken here or one
installed from the leader.
"""

from __future__ import annotations

import os
import random

from dledger.sim.hash_chain import same_history
from dledger.sim.kv import SnapshotKVStateMachine

#: the data segment size when snapshots trim the log (small: a swarm run appends little)
SEGMENT_BYTES = 4096


class SnapshotFaults:
    def __init__(self, opts) -> None:
        self.opts = opts
        self.rng = random.Random(f"swarm-snapshot-faults/{opts.seed}/{opts.nodes}/{opts.durability}")
        #: every key-value machine made, by "node#incarnation"
        self.machines: dict[str, SnapshotKVStateMachine] = {}
        self.counts = {"taken_now": 0, "flipped": 0}

    def config(self) -> dict:
        """The cluster's settings for the seed's snapshots."""
        o = self.opts
        return dict(snapshot_threshold=o.snapshot_threshold, max_snapshot_reserve_num=o.snapshot_reserve,
                    snapshot_follower_window_ms=o.snapshot_window_ms, mapped_file_size_for_entry_data=SEGMENT_BYTES)

    def factory(self, node_id: str) -> SnapshotKVStateMachine:
        sm = SnapshotKVStateMachine(node_id)
        k = sum(1 for key in self.machines if key.startswith(f"{node_id}#")) + 1
        self.machines[f"{node_id}#{k}"] = sm
        return sm

    def strike(self, c) -> None:
        """After a nemesis strike: maybe a random live node takes a snapshot now."""
        if self.opts.snapshot_now and self.rng.random() < self.opts.snapshot_now:
            live = c.live()
            if live:
                server = c.servers[self.rng.choice(live)]
                if server.snapshotter is not None:
                    server.snapshot()
                    self.counts["taken_now"] += 1

    def flip_at_rest(self, c, node_id: str) -> None:
        """Before ``node_id`` restarts: maybe one bit of its newest snapshot flips."""
        o = self.opts
        if node_id != o.snapshot_flip_victim or not o.snapshot_flip or self.rng.random() >= o.snapshot_flip:
            return
        base = os.path.join(c.config_for(node_id).default_path, "snapshot")
        if not os.path.isdir(base):
            return
        dirs = sorted((int(n.split("_", 1)[1]), n) for n in os.listdir(base)
                      if n.startswith("snapshot_") and n.split("_", 1)[1].lstrip("-").isdigit())
        if not dirs:
            return
        path = os.path.join(base, dirs[-1][1], self.rng.choice(["data", "snapshot_meta"]))
        size = os.path.getsize(path) if os.path.exists(path) else 0
        if not size:
            return
        offset = self.rng.randrange(size)
        with open(path, "r+b") as f:
            f.seek(offset)
            b = f.read(1)[0]
            f.seek(offset)
            f.write(bytes([b ^ (1 << self.rng.randrange(8))]))
        self.counts["flipped"] += 1

    def problems(self) -> list[str]:
        return same_history(self.machines)   # (each machine's own findings go to the cluster's)


__all__ = ["SEGMENT_BYTES", "SnapshotFaults"]
