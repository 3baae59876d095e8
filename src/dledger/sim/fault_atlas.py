"""ClusterFaultAtlas: where a cluster's disks may be damaged so that every entry keeps good copies.

Bit flips, lost and misdirected writes are faults no replicated log can survive on every
replica at once. As TigerBeetle's VOPR does with its cluster fault atlas, the simulator damages
storage only where an intact copy is bound to remain: the atlas splits each store into
*regions* and gives each region a fixed set of replicas that may be damaged there, at most
``faulty_max`` of them (default: a minority, ``(n - 1) // 2``). Every region is therefore intact
on at least ``n - faulty_max`` replicas (a majority by default) at any time, whatever the
swarm does and for how long.

Regions: replicas are byte-identical (an entry lies at the same position of the same segment
on every node), so a data or index region is a ``region_bytes`` slice of the log's position
space, ``("data" | "index", position // region_bytes)``, the same on every node; the
checkpoint and the term file are one region each. Anything else is its own region by name.

A record may straddle two data regions (index units never do: a region holds whole units).
Were each part damaged on its own region's replicas, the record would be damaged on up to
``2 * faulty_max`` of them, a majority of three. So the last and the first ``record_bytes`` of
a region (by default 4 KiB, or a quarter of a smaller region; more than any record of the
swarm) may be damaged only on replicas that may be damaged in the neighbouring region too: a
record of that size or less, wherever it lies, is damaged on at most ``faulty_max`` replicas
(near a boundary whose two regions name different replicas, on none). The start of a segment
is no such boundary: no record crosses it. Power loss asks about a 512-byte sector by its first
byte, so this holds for its damage when ``record_bytes`` is a multiple of 512 (the default is,
for regions of 8 KiB and more).

    atlas = ClusterFaultAtlas(cluster.ids, random.Random(seed))
    corrupt_store(store_dir, rng, allow=atlas.allow_for(node))
    power.power_loss(store, rng, lose=0.01, misdirect=0.01, allow=atlas.allow_for(node))

Which replicas a region may damage depends only on the atlas's seed and the region, not on
the order of the questions.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence

__all__ = ["ClusterFaultAtlas"]


class ClusterFaultAtlas:
    def __init__(self, ids: Sequence[str], rng: random.Random, *, region_bytes: int = 64 * 1024,
                 faulty_max: int | None = None, record_bytes: int | None = None) -> None:
        self.ids = sorted(ids)
        n = len(self.ids)
        self.faulty_max = (n - 1) // 2 if faulty_max is None else faulty_max
        if not 0 <= self.faulty_max < n:
            raise ValueError(f"faulty_max must leave an intact replica: 0 <= {self.faulty_max} < {n}")
        record_bytes = min(4096, region_bytes // 4) if record_bytes is None else record_bytes
        if not 0 <= 2 * record_bytes <= region_bytes:
            raise ValueError(f"record_bytes must fit twice in a region: 0 <= 2 * {record_bytes} <= {region_bytes}")
        self.region_bytes = region_bytes
        self.record_bytes = record_bytes
        self._seed = rng.getrandbits(64)
        self._faulty: dict[tuple, frozenset[str]] = {}

    def region(self, path: str, offset: int) -> tuple:
        """The region of byte ``offset`` of ``path`` (a file of a store directory)."""
        name = os.path.basename(path)
        parent = os.path.basename(os.path.dirname(path))
        if parent in ("data", "index") and name.isdigit():
            return parent, (int(name) + offset) // self.region_bytes
        return (name,)

    def faulty(self, region: tuple) -> frozenset[str]:
        """The replicas that may be damaged in ``region``."""
        found = self._faulty.get(region)
        if found is None:
            pick = random.Random(f"{self._seed}:{region!r}")
            found = self._faulty[region] = frozenset(pick.sample(self.ids, self.faulty_max))
        return found

    def allows(self, node: str, path: str, offset: int) -> bool:
        """May byte ``offset`` of ``path`` on ``node`` be damaged?"""
        region = self.region(path, offset)
        if node not in self.faulty(region):
            return False
        if region[0] != "data" or not self.record_bytes:
            return True
        # a record near a boundary may lie partly in the neighbouring region (module docstring)
        at = (int(os.path.basename(path)) + offset) % self.region_bytes
        if at < self.record_bytes and offset > at:     # (offset == at: the segment starts here)
            return node in self.faulty(("data", region[1] - 1))
        if at >= self.region_bytes - self.record_bytes:
            return node in self.faulty(("data", region[1] + 1))
        return True

    def allow_for(self, node: str) -> Callable[[str, int], bool]:
        """``allow(path, offset)`` for ``node``'s files (``corrupt_store``, ``power_loss``)."""
        return lambda path, offset: self.allows(node, path, offset)
