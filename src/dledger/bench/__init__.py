"""The 3-process benchmark: node processes on loopback, load from inside the leader or through
the client, committed entries/s and commit latency.

Modules: ``stats`` (latency percentiles and one result row), ``load`` (the load generators:
inside a node's process on its ``DLedgerServer``, and through ``AsyncDLedgerClient``),
``node`` (the node process a benchmark starts: ``python -m dledger.bench.node``), ``cluster``
(starts, drives and stops three such processes), ``runner`` (configurations, failover), and
``cli`` (``dledger bench``). ``benchmarks/bench_tcp_cluster.py`` is a thin script over
``runner``, so both run one implementation.
"""
