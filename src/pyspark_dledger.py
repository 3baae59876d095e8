"""Auto-registration of ``format("dledger")``.

Spark (4.0+) imports every top-level ``pyspark_*`` module it finds on the Python path and
registers its ``DefaultSource``; with dledger installed, ``spark.read.format("dledger")``
then works without calling ``dledger.spark.register``. Filter pushdown still needs
``spark.sql.python.filterPushdown.enabled=true`` (``register`` sets it).
"""

from dledger.spark.datasource import DLedgerDataSource as DefaultSource

__all__ = ["DefaultSource"]
