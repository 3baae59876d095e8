"""Nodes wired back to back for core unit tests: explicit time, no simulator, no sleeps.

Messages are delivered instantly (in send order) unless a node is cut off or a filter drops
them; time only moves when a test calls ``run``/``step``. The members' memory stores are not
suspect unless ``fresh=True`` (then every store is ``FRESH``, as in a new cluster).
"""

from __future__ import annotations

import random
from collections import deque

from dledger.config import DLedgerConfig
from dledger.core import Node, Role
from dledger.store import DLedgerMemoryStore
from dledger.store.suspect import SuspectReason


class Wired:
    def __init__(self, n: int = 3, seed: int = 1, *, stores=None, start: bool = True, fresh: bool = False,
                 **cfg) -> None:
        self.ids = [f"n{i}" for i in range(n)]
        self.peers = ";".join(f"{pid}-127.0.0.1:{20911 + k}" for k, pid in enumerate(self.ids))
        self.cfg = dict(group="g", **cfg)
        self.seed = seed
        self.now = 0
        self.queue: deque = deque()
        self.cut: set[str] = set()
        self.drop = None              # optional filter(env) -> True to drop
        self.completions: dict = {}
        self.role_changes: dict[str, list] = {i: [] for i in self.ids}
        # the members' stores: established ones (not suspect) unless ``fresh``: new stores, as
        # a new cluster has (each relearns its term first: protocol-aware recovery)
        suspect = SuspectReason.FRESH if fresh else None
        self.stores = stores or {i: DLedgerMemoryStore(data_file_size=1 << 20, suspect=suspect) for i in self.ids}
        self.nodes: dict[str, Node] = {}
        if start:
            for i in self.ids:
                self.start(i)

    def config(self, node_id: str) -> DLedgerConfig:
        return DLedgerConfig(self_id=node_id, peers=self.peers, **self.cfg).validate()

    def start(self, node_id: str) -> Node:
        k = self.ids.index(node_id)
        node = Node(self.config(node_id), self.stores[node_id], random.Random(self.seed * 100 + k), now_ms=self.now)
        self.nodes[node_id] = node
        self._collect(node)
        return node

    def stop(self, node_id: str) -> None:
        self.nodes.pop(node_id, None)

    def _collect(self, node: Node) -> None:
        r = node.take_ready()
        self.queue.extend(r.messages)
        for c in r.completions:
            self.completions[c.token] = c
        self.role_changes[node.self_id].extend(r.role_changes)

    def deliver(self) -> None:
        while self.queue:
            env = self.queue.popleft()
            node = self.nodes.get(env.dst)
            if node is None or env.src in self.cut or env.dst in self.cut:
                continue
            if self.drop is not None and self.drop(env):
                continue
            node.receive(self.now, env)
            self._collect(node)

    def step(self, ms: int = 1) -> None:
        self.now += ms
        for node in list(self.nodes.values()):
            d = node.next_deadline()
            if d is not None and d <= self.now:
                node.tick(self.now)
                self._collect(node)
        self.deliver()

    def run(self, ms: int) -> None:
        for _ in range(ms):
            self.step(1)

    def run_until(self, pred, limit_ms: int = 10_000) -> bool:
        for _ in range(limit_ms):
            if pred():
                return True
            self.step(1)
        return pred()

    def leaders(self) -> list[str]:
        return [i for i, n in self.nodes.items() if n.role is Role.LEADER]

    def leader(self) -> str | None:
        ls = self.leaders()
        return ls[0] if len(ls) == 1 else None

    def propose(self, node_id: str, token, bodies) -> None:
        node = self.nodes[node_id]
        node.propose(self.now, token, bodies)
        self._collect(node)
        self.deliver()
