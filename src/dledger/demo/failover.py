"""The demo's fault plan: SIGKILL the leader mid-stream, start it again later.

``Failover(nodes, total)`` is the load's ``schedule``: once ``kill_at`` of the entries are
decided it SIGKILLs the node that answered the latest acknowledgement (the leader), and once
``restart_at`` are decided it starts that node again from its store. Between the two it checks
that the other nodes are still running. Times are seconds since the load started, as in
``load.Ack``. ``leaderless_s(acks)`` is the time from the kill to the first acknowledgement by
another node: how long the group could not commit.
"""

from __future__ import annotations

import time

from dledger.demo.cluster import NodeProcesses
from dledger.demo.load import Ack, LoadResult


class Failover:
    def __init__(self, nodes: NodeProcesses, total: int, *, kill_at: float = 0.4, restart_at: float = 0.7) -> None:
        self.nodes = nodes
        self.total = total
        self.kill_at, self.restart_at = kill_at, restart_at
        self.killed: str | None = None
        self.killed_t: float | None = None
        self.restarted_t: float | None = None

    def __call__(self, done: int, load: LoadResult) -> None:
        if self.killed is None:
            self.nodes.check_alive()
            if done >= self.kill_at * self.total and load.acks:
                self.killed = load.acks[-1].node_id
                self.nodes.kill(self.killed)
                self.killed_t = time.perf_counter() - load.started_at
        elif self.restarted_t is None:
            self.nodes.check_alive(except_id=self.killed)
            if done >= self.restart_at * self.total:
                self.restart(load)
        else:
            self.nodes.check_alive()

    def restart(self, load: LoadResult) -> None:
        """Start the killed node again (at ``restart_at``, or at the end if the load ended first)."""
        if self.killed is not None and self.restarted_t is None:
            self.nodes.start(self.killed)
            self.restarted_t = time.perf_counter() - load.started_at

    def new_leader_ack(self, acks: list[Ack]) -> Ack | None:
        """The first acknowledgement after the kill (from another node, necessarily)."""
        if self.killed_t is None:
            return None
        return next((a for a in acks if a.t_s > self.killed_t and a.node_id != self.killed), None)

    def leaderless_s(self, acks: list[Ack]) -> float | None:
        first = self.new_leader_ack(acks)
        return None if first is None else first.t_s - self.killed_t
