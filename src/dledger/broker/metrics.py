"""The broker store's Prometheus metrics, beside the node's (``dledger.metrics``).

``BrokerCollector(commit_log)`` is a prometheus-client collector; register it on a
``MetricsEndpoint``'s registry (``dledger broker --metrics-port`` does). At each scrape it reads,
on the scraping thread, values the runtime's thread keeps writing (a scrape may mix values a
moment apart):

- ``dledger_broker_dispatch_lag_seconds`` (histogram): each dispatched message, from its store
  timestamp to the end of the dispatch batch that wrote its consume-queue unit;
- ``dledger_broker_dispatched_index`` (gauge): the last entry the reput service dispatched;
- ``dledger_broker_dispatch_behind_entries`` (gauge): committed entries not dispatched yet;
- ``dledger_broker_writable`` (gauge): 1 while this broker is the writable master.

Labels: ``group`` and ``node``, as the node's metrics.
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

LABELS = ["group", "node"]


class BrokerCollector:
    def __init__(self, commit_log) -> None:
        self.log = commit_log

    def collect(self):
        log = self.log
        cfg = log.server.config
        labels = [cfg.group, cfg.self_id]
        buckets, _count, total = log.dispatch_lag.snapshot(0.001)
        lag = HistogramMetricFamily("dledger_broker_dispatch_lag_seconds",
                                    "Dispatched messages: store timestamp to consume-queue unit written, in seconds",
                                    labels=LABELS)
        lag.add_metric(labels, [("+Inf" if le == float("inf") else repr(float(le)), n) for le, n in buckets], total)
        yield lag
        dispatched = log.reput.next_index - 1
        node = log.server.node if log.server.started else None
        gauges = (
            ("dledger_broker_dispatched_index", "The last entry the reput service dispatched (-1: none)", dispatched),
            ("dledger_broker_dispatch_behind_entries", "Committed entries not dispatched yet",
             max(0, node.committed_index - dispatched) if node is not None else 0),
            ("dledger_broker_writable", "1 while this broker is the writable master", int(log.roles.writable)),
        )
        for name, doc, value in gauges:
            g = GaugeMetricFamily(name, doc, labels=LABELS)
            g.add_metric(labels, value)
            yield g


__all__ = ["BrokerCollector"]
