"""Metrics: Prometheus exposition of the servers of a process (``dledger node --metrics-port``).

    from dledger.metrics import serve
    endpoint = serve(9100, [server_a, server_b], host="127.0.0.1")   # http://127.0.0.1:9100/metrics
    ...                                                               # and /health, /ready
    endpoint.close()

Every group of the process is on the one endpoint, labelled ``group`` and ``node`` (and
``peer`` where a follower is meant). Histograms are measured where the server already sees
appends complete and pushes answered (``observer``); gauges are read from the servers at scrape
time (``collector``); ``/health`` and ``/ready`` answer from the same servers (``health``,
served with the metrics by ``http_endpoint``). Names, types, labels and their Java DLedger
counterparts, and what the health paths answer: docs/operations.md.
"""

from dledger.metrics.collector import DLedgerCollector, MetricsEndpoint, MetricsPortError, serve
from dledger.metrics.histogram import Histogram
from dledger.metrics.observer import NodeMetrics

__all__ = ["DLedgerCollector", "Histogram", "MetricsEndpoint", "MetricsPortError", "NodeMetrics", "serve"]
