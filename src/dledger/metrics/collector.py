"""The Prometheus side: a collector over the servers of a process, and the HTTP endpoint.

``DLedgerCollector`` is a custom prometheus-client collector. At each scrape it turns every
attached server's ``NodeMetrics`` into histograms and counters, and reads the gauges (role,
term, indexes, lag) from the server itself, on the scraping thread: plain attribute reads of
values the runtime's thread keeps writing, so one scrape may mix values a moment apart (a
commit index one step newer than the log end it is compared with shows as lag 0, never as a
negative one). A server not running (before ``startup()``, after ``shutdown()``) reports its
histograms and counters only; a halted one also reports ``dledger_halted 1``.

``MetricsEndpoint`` owns a private ``CollectorRegistry`` (nothing global: two endpoints in one
process are independent) holding this collector, ``dledger_build_info`` and prometheus-client's
process, platform and garbage-collector collectors, and the HTTP server thread that serves it
on ``/metrics``, beside ``/health`` and ``/ready`` (``metrics.http_endpoint``,
``metrics.health``). Every name, type and label is listed in docs/operations.md with the Java
DLedger metric it corresponds to.
"""

from __future__ import annotations

import platform
import threading
import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from dledger import __version__
from dledger.core import Role
from dledger.metrics import health
from dledger.metrics.health import DEFAULT_READY_MAX_LAG
from dledger.metrics.histogram import Histogram
from dledger.metrics.http_endpoint import HttpEndpoint
from dledger.metrics.observer import NodeMetrics

LABELS = ("group", "node")
PEER_LABELS = ("group", "node", "peer")
ROLES = (Role.LEADER, Role.FOLLOWER, Role.CANDIDATE)
MS = 0.001


class MetricsPortError(OSError):
    """The metrics endpoint cannot listen where it was asked to (the message says why)."""


def _histogram(name: str, doc: str, labels=LABELS) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, labels=list(labels))


def _add(family: HistogramMetricFamily, labels: list[str], h: Histogram, scale: float = 1.0) -> None:
    buckets, _count, total = h.snapshot(scale)
    family.add_metric(labels, [(_le(b), n) for b, n in buckets], total)


def _le(bound: float) -> str:
    if bound == float("inf"):
        return "+Inf"
    return repr(float(bound))


class DLedgerCollector:
    """Every attached server's metrics, labelled by group and node id."""

    def __init__(self) -> None:
        self._nodes: list[NodeMetrics] = []
        self._lock = threading.Lock()

    def add(self, metrics: NodeMetrics) -> None:
        with self._lock:
            if metrics not in self._nodes:
                self._nodes.append(metrics)

    def nodes(self) -> list[NodeMetrics]:
        with self._lock:
            return list(self._nodes)

    def find(self, group: str, node_id: str) -> NodeMetrics | None:
        with self._lock:
            return next((m for m in self._nodes if m.group == group and m.node_id == node_id), None)

    def collect(self):
        with self._lock:
            nodes = list(self._nodes)
        fams = {
            "append_latency": _histogram("dledger_append_entry_latency_seconds",
                                         "Append requests that succeeded: from the call (or the request's arrival) "
                                         "to SUCCESS, in seconds"),
            "append_bytes": _histogram("dledger_append_entry_batch_bytes",
                                       "Body bytes per append request that succeeded"),
            "append_entries": _histogram("dledger_append_entry_batch_entries",
                                         "Entries per append request that succeeded"),
            "replicate_latency": _histogram("dledger_replicate_entry_latency_seconds",
                                            "APPEND pushes to a follower: from sending to its SUCCESS answer, "
                                            "in seconds", PEER_LABELS),
            "replicate_bytes": _histogram("dledger_replicate_entry_batch_bytes",
                                          "Encoded record bytes per acknowledged push", PEER_LABELS),
            "replicate_entries": _histogram("dledger_replicate_entry_batch_entries",
                                            "Entries per acknowledged push", PEER_LABELS),
            "apply_latency": _histogram("dledger_apply_task_latency_seconds",
                                        "State machine on_apply calls, in seconds"),
            "apply_entries": _histogram("dledger_apply_task_batch_entries",
                                        "Entries handed to one state machine on_apply call"),
        }
        leader_changes = CounterMetricFamily("dledger_leader_changes",
                                             "Times this node came to know a leader other than the one it knew "
                                             "(none included): elections, failovers and transfers as it saw them",
                                             labels=list(LABELS))
        entries_total = CounterMetricFamily("dledger_appended_entries",
                                            "Entries of append requests that succeeded", labels=list(LABELS))
        bytes_total = CounterMetricFamily("dledger_appended_bytes",
                                          "Body bytes of append requests that succeeded", labels=list(LABELS))
        snapshots_taken = CounterMetricFamily("dledger_snapshots_taken",
                                              "Snapshots this process took of its state machine", labels=list(LABELS))
        snapshots_installed = CounterMetricFamily("dledger_snapshots_installed",
                                                  "Leader's snapshots this process installed", labels=list(LABELS))
        gauges = {name: GaugeMetricFamily(name, doc, labels=list(LABELS)) for name, doc in (
            ("dledger_term", "The node's current term"),
            ("dledger_ledger_end_index", "Index of the last entry in the node's log (-1: empty)"),
            ("dledger_entries", "Entries the node's log holds (log end minus the index before its first entry)"),
            ("dledger_committed_index", "The node's commit index"),
            ("dledger_applied_index", "The last entry applied (handed to the state machine, or committed without one)"),
            ("dledger_commit_lag_entries", "Entries in the node's log above its commit index"),
            ("dledger_apply_lag_entries", "Committed entries not applied yet"),
            ("dledger_halted", "1 when the node halted because its disk failed"),
            ("dledger_has_leader", "1 while the node knows its group's leader (itself included), else 0"),
            ("dledger_snapshot_index", "Last included index of the node's newest snapshot (-1: none)"),
            ("dledger_snapshots_kept", "Snapshots the node keeps on disk"),
            ("dledger_waits_for_snapshot", "1 while the node's state machine waits for the leader's snapshot"),
        )}
        role = GaugeMetricFamily("dledger_role", "1 for the node's current role, 0 for the others",
                                 labels=[*LABELS, "role"])
        match = GaugeMetricFamily("dledger_peer_match_index",
                                  "Leader only: the highest index each follower acknowledged in this leadership "
                                  "(-1: none yet)", labels=list(PEER_LABELS))
        lag = GaugeMetricFamily("dledger_peer_lag_entries",
                                "Leader only: entries of the leader's log a follower has not acknowledged",
                                labels=list(PEER_LABELS))
        for m in nodes:
            labels = [m.group, m.node_id]
            a = m.append
            _add(fams["append_latency"], labels, a.latency, MS)
            _add(fams["append_bytes"], labels, a.nbytes)
            _add(fams["append_entries"], labels, a.entries)
            leader_changes.add_metric(labels, m.leader_changes)
            entries_total.add_metric(labels, a.entries.total)
            bytes_total.add_metric(labels, a.nbytes.total)
            for peer, flow in sorted(m.replicate.items()):
                _add(fams["replicate_latency"], labels + [peer], flow.latency, MS)
                _add(fams["replicate_bytes"], labels + [peer], flow.nbytes)
                _add(fams["replicate_entries"], labels + [peer], flow.entries)
            _add(fams["apply_latency"], labels, m.apply_latency, MS)
            _add(fams["apply_entries"], labels, m.apply_entries)
            self._gauges(m, labels, gauges, role, match, lag)
            self._snapshots(m, labels, gauges, snapshots_taken, snapshots_installed)
        yield from fams.values()
        yield leader_changes
        yield entries_total
        yield bytes_total
        yield snapshots_taken
        yield snapshots_installed
        yield from gauges.values()
        yield role
        yield match
        yield lag

    @staticmethod
    def _snapshots(m: NodeMetrics, labels, gauges, taken, installed) -> None:
        server = m.server
        if server is None or not server.started or server.node is None:
            return
        snap = server.snapshotter
        caller = server.node.caller
        gauges["dledger_waits_for_snapshot"].add_metric(labels, 1 if caller.needs_snapshot else 0)
        installed.add_metric(labels, caller.restores)
        if snap is None:
            return
        gauges["dledger_snapshot_index"].add_metric(labels, snap.last_index)
        gauges["dledger_snapshots_kept"].add_metric(labels, len(snap.kept))
        taken.add_metric(labels, snap.taken)

    @staticmethod
    def _gauges(m: NodeMetrics, labels, gauges, role, match, lag) -> None:
        server = m.server
        if server is None:
            return
        halted = server.halted
        gauges["dledger_halted"].add_metric(labels, 1 if halted is not None else 0)
        node, store = server.node, server.store
        if not server.started or node is None or store is None:
            return
        member = node.member_state
        end, before = store.ledger_end_index, store.ledger_before_begin_index
        committed, applied = member.committed_index, node.caller.applied_index
        current = member.role
        for name, value in (("dledger_term", member.curr_term), ("dledger_ledger_end_index", end),
                            ("dledger_entries", end - before), ("dledger_committed_index", committed),
                            ("dledger_applied_index", applied),
                            ("dledger_commit_lag_entries", max(0, end - committed)),
                            ("dledger_apply_lag_entries", max(0, committed - applied)),
                            ("dledger_has_leader", 0 if member.leader_id is None else 1)):
            gauges[name].add_metric(labels, value)
        for r in ROLES:
            role.add_metric(labels + [r.value.lower()], 1 if r is current else 0)
        if current is Role.LEADER:
            for peer, pr in sorted(dict(node.pusher.progress).items()):
                match.add_metric(labels + [peer], pr.match)
                lag.add_metric(labels + [peer], max(0, end - pr.match))


class BuildInfoCollector:
    """``dledger_build_info{version, python} 1``: what runs (as Prometheus' own build info)."""

    def collect(self):
        info = GaugeMetricFamily("dledger_build_info", "Always 1; the labels say which dledger and which Python "
                                                       "this process runs", labels=["version", "python"])
        info.add_metric([__version__, platform.python_version()], 1)
        yield info


class MetricsEndpoint:
    """Prometheus exposition of some servers on ``http://host:port/metrics``, with ``/health``
    and ``/ready`` beside it (``metrics.http_endpoint``, ``metrics.health``)."""

    def __init__(self, port: int, host: str = "0.0.0.0", *, clock: Callable[[], float] = time.monotonic,
                 ready_max_lag: int = DEFAULT_READY_MAX_LAG) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"metrics port must be a number from 0 to 65535, got {port!r}")
        if isinstance(ready_max_lag, bool) or not isinstance(ready_max_lag, int) or ready_max_lag < 0:
            raise ValueError(f"ready_max_lag must be a number of entries, 0 or more, got {ready_max_lag!r}")
        self.clock = clock
        #: entries a node may trail its leader's commit index by and still answer ``/ready`` 200
        self.ready_max_lag = ready_max_lag
        self.collector = DLedgerCollector()
        self.registry = CollectorRegistry()
        self.registry.register(self.collector)
        self.registry.register(BuildInfoCollector())
        # the process (CPU, memory, open fds, start time), the interpreter and its collector,
        # which prometheus-client puts in its global registry only
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        checks = {"/health": self._health, "/ready": self._ready}
        try:
            self._http = HttpEndpoint(host, port, self.registry, checks)
        except OSError as exc:
            raise MetricsPortError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
        self.host = host
        #: the port listened on (the one chosen by the system when ``port`` was 0)
        self.port: int = self._http.port

    @property
    def url(self) -> str:
        """The metrics URL (``/health`` and ``/ready`` are beside it)."""
        return f"{self.base_url}/metrics"

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        if host in ("::", "[::]"):
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def _health(self, _query) -> tuple[int, str]:
        live, line = health.liveness(self.collector.nodes())
        return (200 if live else 503), line

    def _ready(self, query) -> tuple[int, str]:
        groups = query.get("group")
        group = groups[0] if groups else None
        nodes = self.collector.nodes()
        if group is not None and not any(m.group == group for m in nodes):
            return 404, f"no node of group {group!r} is served here"
        ready, line = health.readiness(nodes, self.ready_max_lag, group)
        return (200 if ready else 503), line

    def add(self, server) -> NodeMetrics:
        """Expose ``server`` (started or not). A server of a group and node id already
        exposed (a restart in this process) continues the same histograms and counters."""
        c = server.config
        metrics = self.collector.find(c.group, c.self_id)
        if metrics is None:
            metrics = NodeMetrics(c.group, c.self_id, self.clock)
            self.collector.add(metrics)
        server.attach_metrics(metrics)
        return metrics

    def scrape(self) -> bytes:
        """What a scrape of the endpoint returns now (the Prometheus text format)."""
        return generate_latest(self.registry)

    def close(self) -> None:
        """Stop listening (the servers keep their observers; they cost little)."""
        self._http.close()

    def __enter__(self) -> "MetricsEndpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def serve(port: int, servers: Iterable = (), host: str = "0.0.0.0", *,
          clock: Callable[[], float] = time.monotonic, ready_max_lag: int = DEFAULT_READY_MAX_LAG) -> MetricsEndpoint:
    """Serve the metrics of ``servers`` (more with ``endpoint.add``) on ``host:port``;
    ``port`` 0 picks a free one (``endpoint.port``). ``MetricsPortError`` when it cannot
    listen there, ``ValueError`` for a port out of range or a negative ``ready_max_lag``."""
    endpoint = MetricsEndpoint(port, host, clock=clock, ready_max_lag=ready_max_lag)
    for server in servers:
        endpoint.add(server)
    return endpoint


__all__ = ["BuildInfoCollector", "DLedgerCollector", "MetricsEndpoint", "MetricsPortError", "serve"]
