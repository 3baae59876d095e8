"""NodeMetrics: what one server measures while it runs (the histograms of docs/operations.md).

Attached with ``DLedgerServer.attach_metrics`` (``dledger.metrics.serve`` does it), it hooks
four places the server already has, on the runtime's thread, and adds nothing to the core:

- the driver's ready listeners: once per ``Ready`` it looks at the completed host operations
  (an append, batch append or write that ended in SUCCESS: its latency from the host's call,
  its entries and body bytes), at the answers to appends that came over the network (latency
  from the request's arrival), and at the APPEND pushes leaving for followers (stamped);
- the transport's receiver: an append request from a client is stamped on arrival, a
  follower's SUCCESS answer to a push gives the replicate latency, entries and bytes of that
  push, per follower, and the commit index a leader announces in its heartbeats and pushes
  is kept (``leader_commit``: how far behind a follower is, for ``/ready``);
- the state machine, when one is registered: each ``on_apply`` call is timed;
- the driver's role-change handlers: a change that names a leader other than the one the node
  knew counts as a leader change (``leader_changes``).

The cost with metrics on is per operation and per message (a ``bisect`` and a few additions),
never per entry of a batch; with metrics off the server pays a ``None`` check when it stamps
a call (and the bodies' length, which it always records on the operation). Gauges (term, indexes, role, lag) are not kept here: the collector reads
them from the server when scraped. ``clock`` is seconds on a monotonic clock (``time.monotonic``,
the clock of the asyncio runtime); pass the simulator's virtual clock to measure a simulated
run. Requests and pushes never answered are forgotten beyond ``MAX_TRACKED`` of each.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from dledger.metrics.histogram import BYTE_BUCKETS, ENTRY_BUCKETS, LATENCY_BUCKETS_MS, Histogram
from dledger.protocol import (AppendEntryRequest, AppendEntryResponse, BatchAppendEntryRequest, HeartBeatRequest,
                              PushEntryRequest, PushEntryResponse, PushEntryType)
from dledger.errors import DLedgerResponseCode
from dledger.runtime.driver import APPEND, WRITE

SUCCESS = int(DLedgerResponseCode.SUCCESS)
MAX_TRACKED = 4096


class _Flow:
    """The three histograms of one flow: append requests, or pushes to one follower."""

    __slots__ = ("latency", "entries", "nbytes")

    def __init__(self) -> None:
        self.latency = Histogram(LATENCY_BUCKETS_MS)
        self.entries = Histogram(ENTRY_BUCKETS)
        self.nbytes = Histogram(BYTE_BUCKETS)

    def observe(self, latency_ms: float, entries: int, nbytes: int) -> None:
        h = self.latency
        h.counts[bisect_left(h.bounds, latency_ms)] += 1
        h.total += latency_ms
        h = self.entries
        h.counts[bisect_left(h.bounds, entries)] += 1
        h.total += entries
        h = self.nbytes
        h.counts[bisect_left(h.bounds, nbytes)] += 1
        h.total += nbytes


class TimedStateMachine:
    """The host's state machine, with each ``on_apply`` call timed; anything else is the
    host's object's own."""

    def __init__(self, state_machine: Any, metrics: "NodeMetrics") -> None:
        self.state_machine = state_machine
        self._metrics = metrics

    def on_apply(self, entries) -> None:
        clock = self._metrics.clock
        t0 = clock()
        try:
            self.state_machine.on_apply(entries)
        finally:
            m = self._metrics
            m.apply_latency.observe((clock() - t0) * 1000.0)
            m.apply_entries.observe(len(entries))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.state_machine, name)


class NodeMetrics:
    """The histograms of one server (one node of one group)."""

    def __init__(self, group: str, node_id: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.group = group
        self.node_id = node_id
        self.clock = clock
        self.server = None
        #: append requests that ended in SUCCESS (local calls and client requests alike)
        self.append = _Flow()
        #: APPEND pushes a follower acknowledged, per follower id
        self.replicate: dict[str, _Flow] = {}
        self.apply_latency = Histogram(LATENCY_BUCKETS_MS)
        self.apply_entries = Histogram(ENTRY_BUCKETS)
        self._requests: dict[tuple[str, int], tuple[float, int, int]] = {}
        self._pushes: dict[int, tuple[float, int, int]] = {}
        #: ``(term, index)``: the highest commit index a leader announced to this node (in a
        #: heartbeat or a push), in the highest term heard (``metrics.health``: readiness)
        self.leader_commit: tuple[int, int] = (-1, -1)
        #: times this node came to know a leader other than the one it knew (none included)
        self.leader_changes = 0
        self._known_leader: str | None = None

    def clock_ms(self) -> float:
        return self.clock() * 1000.0

    # -- installation (on the runtime's thread) -------------------------------------------
    def install(self, server) -> None:
        """Hook into ``server``'s driver, transport and state machine (each start of it)."""
        self.server = server
        driver = server.driver
        for peer in server.node.member_state.remote_peer_ids:
            self.replicate.setdefault(peer, _Flow())
        if self.on_ready not in driver.ready_listeners:
            driver.ready_listeners.append(self.on_ready)
        if self.on_role_change not in driver.role_change_handlers:
            driver.role_change_handlers.append(self.on_role_change)
        driver.transport.set_receiver(self.receiver(driver.on_envelope))
        caller = server.node.caller
        if caller.state_machine is not None and not isinstance(caller.state_machine, TimedStateMachine):
            caller.state_machine = TimedStateMachine(caller.state_machine, self)

    # -- the hooks --------------------------------------------------------------------------
    def on_role_change(self, change) -> None:
        """A role change (a driver role-change handler): a leader other than the one this node
        knew, itself included, counts as a leader change (as etcd's leader changes seen); a
        change that names no leader (a candidate) forgets the one it knew."""
        leader = change.leader_id
        if leader is not None and leader != self._known_leader:
            self.leader_changes += 1
        self._known_leader = leader

    def receiver(self, deliver: Callable[[Any], None]) -> Callable[[Any], None]:
        """A transport receiver that notes client appends and push answers, then delivers."""
        clock, requests, pushes = self.clock, self._requests, self._pushes

        def receive(env) -> None:
            msg = env.msg
            kind = type(msg)
            if env.is_response:
                if kind is PushEntryResponse and pushes:
                    sent = pushes.pop(env.request_id, None)
                    if sent is not None and msg.code == SUCCESS:
                        flow = self.replicate.get(env.src)
                        if flow is not None:
                            flow.observe(clock() * 1000.0 - sent[0], sent[1], sent[2])
            elif kind is PushEntryRequest or kind is HeartBeatRequest:
                announced = (msg.term, msg.commit_index)
                try:
                    if announced > self.leader_commit:
                        self.leader_commit = announced
                except TypeError:         # a malformed request: the node refuses it
                    pass
            elif kind is AppendEntryRequest or kind is BatchAppendEntryRequest:
                try:
                    if kind is AppendEntryRequest:
                        size = (1, len(msg.body))
                    else:
                        size = (len(msg.batch_msgs), sum(map(len, msg.batch_msgs)))
                except TypeError:         # a malformed request: the node refuses it
                    size = None
                if size is not None:
                    if len(requests) >= MAX_TRACKED:
                        del requests[next(iter(requests))]
                    requests[(env.src, env.request_id)] = (clock() * 1000.0, *size)
            deliver(env)

        return receive

    def on_ready(self, ready) -> None:
        """Once per ``Ready`` (a driver ready listener)."""
        messages, completions = ready.messages, ready.completions
        if not messages and not completions:
            return
        now = self.clock() * 1000.0
        flow = self.append
        if messages:
            pushes, requests = self._pushes, self._requests
            for env in messages:
                msg = env.msg
                kind = type(msg)
                if kind is PushEntryRequest:
                    if msg.type == PushEntryType.APPEND and msg.count:
                        if len(pushes) >= MAX_TRACKED:
                            del pushes[next(iter(pushes))]
                        pushes[env.request_id] = (now, msg.count, len(msg.entries))
                elif kind is AppendEntryResponse and requests and env.is_response:
                    req = requests.pop((env.dst, env.request_id), None)
                    if req is not None and msg.code == SUCCESS:
                        flow.observe(now - req[0], req[1], req[2])
        if completions:
            self._completed(now, completions)

    def _completed(self, now: float, completions) -> None:
        """The host's appends that ended in SUCCESS: the histograms inlined (one per call would
        cost a Python call per operation)."""
        flow = self.append
        lat, ent, nb = flow.latency, flow.entries, flow.nbytes
        lat_bounds, lat_counts, ent_bounds, ent_counts = lat.bounds, lat.counts, ent.bounds, ent.counts
        nb_bounds, nb_counts = nb.bounds, nb.counts
        lat_sum = ent_sum = nb_sum = 0
        for c in completions:
            resp = c.response
            if resp.code != SUCCESS:
                continue
            op = c.token
            kind = getattr(op, "kind", None)
            if kind != APPEND and kind != WRITE:
                continue
            v = now - op.started_ms
            lat_counts[bisect_left(lat_bounds, v)] += 1
            lat_sum += v
            n = len(resp.positions)
            if n <= 1:                  # a single append: the first bucket (le 1)
                n = 1
                ent_counts[0] += 1
            else:
                ent_counts[bisect_left(ent_bounds, n)] += 1
            ent_sum += n
            n = op.nbytes
            nb_counts[bisect_left(nb_bounds, n)] += 1
            nb_sum += n
        lat.total += lat_sum
        ent.total += ent_sum
        nb.total += nb_sum


__all__ = ["MAX_TRACKED", "NodeMetrics", "TimedStateMachine"]
