"""Getting a SparkSession for dledger jobs: embedded local mode, a standalone cluster, or Connect.

``get_session(master)``:
- ``None``: the active session if there is one (a host that already runs Spark, or the test
  suite), else an embedded ``local[*]`` session;
- ``local[...]``: an embedded session. Workers bind to loopback; no web UI, and the JVM runs
  with ``LOCAL_JVM_OPTIONS`` (quicker to start and warm up on a small machine) and maps the
  class archive of ``dledger.spark.jvm_archive`` (written by the first such session);
- ``spark://host:7077`` (or ``yarn``, ``k8s://...``): a cluster. The session ships what the
  executors need to import ``dledger`` (``dledger.spark.shipping``); their Python must have
  PySpark's own requirements (pyarrow, pandas), and the store directories must be readable at
  the same paths on the executors;
- ``sc://host:15002``: Spark Connect (needs the ``connect`` extra). The data source runs on the
  server; the session ships the same zip to it as artifacts.

Every classic session (local or cluster) runs its Python workers with this interpreter unless
``PYSPARK_PYTHON`` is set: the workers that plan a read run next to the driver and need
``dledger`` and pyarrow, which ``python3`` from ``PATH`` may lack. Executors whose Python lives
elsewhere are pointed at it with ``spark.sql.execution.pyspark.python`` (in ``conf``, or the
cluster's ``spark-defaults.conf``).

The session gets ``spark.sql.python.filterPushdown.enabled=true`` and both data sources
registered (``dledger.spark.register``) unless ``sources=False``. Sessions this module creates are owned by the caller
(``stop()`` them); the active session it returns is not.
"""

from __future__ import annotations

import os
import sys

#: JVM flags of embedded local sessions: C1 only, serial GC. They cut the session start and
#: the first queries on 2 busy cores (measured in docs/spark.md); ``conf`` can override them.
LOCAL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def local_jvm_options() -> str:
    """``LOCAL_JVM_OPTIONS`` and the class-data-sharing archive's flags (``jvm_archive``)."""
    from dledger.spark.jvm_archive import jvm_options

    return f"{LOCAL_JVM_OPTIONS} {jvm_options()}".strip()


def get_session(master: str | None = None, app_name: str = "dledger", conf: dict | None = None,
                sources: bool = True):
    """Returns ``(spark, owned)``; see the module docstring. ``sources=False`` skips registering
    the data sources (a job that does not read through them, such as the audit: registering
    costs a Python process that looks for other data sources)."""
    from pyspark.sql import SparkSession

    from dledger.spark import register
    from dledger.spark.shipping import is_local, ship

    if master is None:
        active = SparkSession.getActiveSession()
        if active is not None:
            if sources:
                register(active)
            return active, False
        master = "local[*]"
    if master.startswith("sc://"):
        spark = SparkSession.builder.remote(master).appName(app_name).getOrCreate()
        ship(spark, connect=True)
        if sources:
            register(spark)
        return spark, True
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.sql.shuffle.partitions": str(max(2, 2 * (os.cpu_count() or 1))),
    }
    # the Python workers that plan a data source read run next to the driver, with the
    # interpreter of PYSPARK_PYTHON (default: python3 from PATH, which may lack pyarrow or
    # dledger); a cluster's executors may run another one (spark.sql.execution.pyspark.python)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings.update({"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1",
                         "spark.driver.bindAddress": "127.0.0.1",
                         # a short-lived job on a small machine: the JIT's top tier and the
                         # parallel GC compete with the work for the cores (see docs/spark.md)
                         "spark.driver.extraJavaOptions": local_jvm_options()})
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not is_local(master):
        ship(spark)
    if sources:
        register(spark)
    return spark, True
