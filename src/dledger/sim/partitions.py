"""Partition shapes: each function returns the set of blocked *directed* links ``(src, dst)``
for a list of node ids, ready for ``SimNetwork.block``. Random shapes draw from the ``rng``
they are given (the swarm's seeded one).

- ``random_halves``: two random non-empty groups, cut off from each other both ways;
- ``isolate``: one node alone (``isolate_leader(ids, leader)``: the leader the caller names);
- ``majority_ring``: the nodes on a ring, each linked only to its nearest neighbours, so that
  every node sees a majority (itself included) but no two nodes see the same majority;
- ``bridge``: two halves that cannot talk, and one node linked to both;
- ``one_way_out`` / ``one_way_in``: one node can receive but not send, or send but not receive;
  ``one_way`` draws one of them for a random node.
``shape(name, ids, rng, leader=None)`` draws any of them by name (``SHAPES``) for a nemesis;
``connected(ids, blocked)`` gives each node's set of nodes it can talk to both ways.
"""

from __future__ import annotations

import random
from typing import Sequence

Link = tuple[str, str]


def _between(a: Sequence[str], b: Sequence[str]) -> set[Link]:
    return {(x, y) for x in a for y in b} | {(y, x) for x in a for y in b}


def random_halves(ids: Sequence[str], rng: random.Random) -> set[Link]:
    """Two random non-empty groups (sizes drawn too), no link between them."""
    nodes = list(ids)
    rng.shuffle(nodes)
    k = rng.randrange(1, len(nodes))
    return _between(nodes[:k], nodes[k:])


def isolate(ids: Sequence[str], node: str) -> set[Link]:
    """``node`` can neither send to nor hear from anyone (pass the leader to isolate it)."""
    return _between([node], [i for i in ids if i != node])


def majority_ring(ids: Sequence[str], rng: random.Random | None = None) -> set[Link]:
    """Each node linked (both ways) only to its ring neighbours within the distance that makes
    it see a majority; for 3 nodes the ring is broken into a line (a complete triangle would
    be no partition). With ``rng`` the ring order is shuffled."""
    nodes = list(ids)
    if rng is not None:
        rng.shuffle(nodes)
    n = len(nodes)
    majority = n // 2 + 1
    reach = -(-(majority - 1) // 2)             # neighbours on each side
    linked = set()
    for i, x in enumerate(nodes):
        for d in range(1, reach + 1):
            for y in (nodes[(i + d) % n], nodes[(i - d) % n]):
                if y != x:
                    linked.add(frozenset((x, y)))
    if n == 3:
        linked.discard(frozenset((nodes[0], nodes[-1])))
    return {(x, y) for x in nodes for y in nodes if x != y and frozenset((x, y)) not in linked}


def bridge(ids: Sequence[str], rng: random.Random | None = None) -> set[Link]:
    """Two halves that cannot talk to each other, joined by one node linked to everyone
    (the first id, or a random one with ``rng``)."""
    nodes = list(ids)
    if rng is not None:
        rng.shuffle(nodes)
    rest = nodes[1:]                            # nodes[0] is the bridge
    half = len(rest) // 2
    return _between(rest[:half], rest[half:])


def one_way_out(ids: Sequence[str], node: str) -> set[Link]:
    """``node`` hears everyone but nobody hears it."""
    return {(node, i) for i in ids if i != node}


def one_way_in(ids: Sequence[str], node: str) -> set[Link]:
    """Everyone hears ``node`` but it hears nobody."""
    return {(i, node) for i in ids if i != node}


def one_way(ids: Sequence[str], rng: random.Random) -> set[Link]:
    """A random node made deaf or mute."""
    node = rng.choice(list(ids))
    return one_way_out(ids, node) if rng.random() < 0.5 else one_way_in(ids, node)


def isolate_leader(ids: Sequence[str], leader: str) -> set[Link]:
    """``isolate`` applied to the leader the caller names."""
    return isolate(ids, leader)


#: the shapes ``shape`` draws by name
SHAPES = ("random_halves", "isolate", "isolate_leader", "majority_ring", "bridge", "one_way")


def shape(name: str, ids: Sequence[str], rng: random.Random, leader: str | None = None) -> set[Link]:
    """The blocked links of shape ``name`` (one of ``SHAPES``), random parts drawn from ``rng``;
    ``isolate`` cuts off a random node, ``isolate_leader`` the ``leader`` (a random node when
    there is none)."""
    if name == "random_halves":
        return random_halves(ids, rng)
    if name == "isolate" or (name == "isolate_leader" and leader is None):
        return isolate(ids, rng.choice(list(ids)))
    if name == "isolate_leader":
        return isolate(ids, leader)
    if name == "majority_ring":
        return majority_ring(ids, rng)
    if name == "bridge":
        return bridge(ids, rng)
    if name == "one_way":
        return one_way(ids, rng)
    raise ValueError(f"unknown partition shape {name!r}; the shapes are {SHAPES}")


def connected(ids: Sequence[str], blocked: set[Link]) -> dict[str, set[str]]:
    """Each node -> the nodes it can exchange messages with both ways (itself included)."""
    return {x: {y for y in ids if x == y or ((x, y) not in blocked and (y, x) not in blocked)} for x in ids}
