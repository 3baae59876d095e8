"""dledger on Spark: the ``dledger`` and ``dledger-messages`` data sources and the replica audit.

This package is the only place that imports pyspark, and only inside functions or in the
modules that need it (``datasource``, ``messages_source``, ``audit``), so ``import dledger``
works without the ``spark`` extra.

- ``register(spark)``: registers both data sources on a session and turns on Python filter
  pushdown (``spark.sql.python.filterPushdown.enabled``, a runtime SQL conf; without it a
  reader that pushes filters fails every read);
- ``dledger.spark.scan``: the segment reader (numpy/pyarrow, no Spark);
- ``dledger.spark.compare``: one index range of every replica compared inside a task (the
  audit's job, numpy/pyarrow, no Spark);
- ``dledger.spark.audit``: ``run_audit(paths, ...)`` and the ``dledger audit`` command.
"""

from __future__ import annotations

import pathlib

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

__all__ = ["PUSHDOWN_CONF", "install_hint", "register"]


def install_hint() -> str:
    """How to install the ``spark`` extra, for an error that lacks it. dledger is not on the
    public package index: the extra installs from a checkout (this one, when dledger runs from
    a checkout's ``src/``)."""
    root = pathlib.Path(__file__).resolve().parents[3]
    checkout = str(root) if (root / "pyproject.toml").is_file() and (root / "src" / "dledger").is_dir() \
        else "/path/to/dledger"
    return f"pip install -e '{checkout}[spark]' from a checkout of dledger (make installs it in the checkout's .venv)"


def register(spark) -> None:
    """Make ``format("dledger")`` and ``format("dledger-messages")`` available on ``spark``."""
    from dledger.spark.datasource import DLedgerDataSource
    from dledger.spark.messages_source import DLedgerMessagesDataSource

    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(DLedgerDataSource)
    spark.dataSource.register(DLedgerMessagesDataSource)
