"""The demo's fault plan: SIGKILL the leader mid-stream, start it again later.

``Failover(nodes, total)`` is the load's ``schedule``: once ``kill_at`` of the entries are
decided it SIGKILLs the node that answered the latest acknowledgement (the leader), and once
``restart_at`` are decided it starts that node again from its store. Before the kill it waits
(bounded) until both followers' logs reach the leader's end, so the survivors form a quorum
that holds every acknowledged entry; throughout, it checks that the nodes are still running. Times are seconds since the load started, as in
``load.Ack``. ``leaderless_s(acks)`` is the time from the kill to the first acknowledgement by
another node: how long the group could not commit.
"""

from __future__ import annotations

import asyncio
import time

from dledger.demo.cluster import ClusterError, NodeProcesses
from dledger.demo.load import Ack, LoadResult


FOLLOW_S = 10.0


class Failover:
    def __init__(self, nodes: NodeProcesses, total: int, *, kill_at: float = 0.4, restart_at: float = 0.7) -> None:
        self.nodes = nodes
        self.total = total
        self.kill_at, self.restart_at = kill_at, restart_at
        self.killed: str | None = None
        self.killed_t: float | None = None
        self.restarted_t: float | None = None

    async def __call__(self, done: int, load: LoadResult) -> None:
        if self.killed is None:
            self.nodes.check_alive()
            if done >= self.kill_at * self.total and load.acks:
                leader = load.acks[-1].node_id
                await self._check_followers(leader)
                self.killed = leader
                self.nodes.kill(self.killed)
                self.killed_t = time.perf_counter() - load.started_at
                load.release()
        elif self.restarted_t is None:
            self.nodes.check_alive(except_id=self.killed)
            if done >= self.restart_at * self.total:
                self.restart(load)
        else:
            self.nodes.check_alive()

    async def _check_followers(self, leader: str) -> None:
        """Both followers must hold what the leader held a moment ago: killing the leader while
        one does not follow it would leave no quorum, and the demo would only stall."""
        ends = await self.nodes.ledger_ends()
        target = ends.get(leader)
        if target is None:
            return                      # it no longer answers: it is not the leader to wait for
        deadline = time.monotonic() + FOLLOW_S
        while True:
            behind = {n: e for n, e in ends.items() if n != leader and (e is None or e < target)}
            if not behind:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"before the kill: {', '.join(sorted(behind))} did not reach index {target} "
                                   f"of leader {leader} within {FOLLOW_S:g} s (log ends {ends}); killing the "
                                   f"leader would leave no quorum")
            await asyncio.sleep(0.05)
            ends = await self.nodes.ledger_ends()

    def hold_at(self, batch: int, in_flight: int) -> int:
        """The first entry the load holds back until the kill: the kill point plus what may be
        in flight then, so that part of the stream always follows the kill."""
        kill = int(self.kill_at * self.total)
        return max(kill + 1, min(kill + (in_flight + 1) * batch, self.total - batch))

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
