"""The one local SparkSession of a test run, with fast test settings: the JVM flags (C1 only,
serial GC) only make the short test queries faster on 2 cores; benchmarks never use them.
``getOrCreate`` hands every caller of the run the same session."""

import os
import sys

LOG4J = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spark",
                     "log4j2-quiet.properties")


def local_session():
    # workers must run this interpreter (else they get python3 from PATH) and bind to loopback
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]").appName("dledger-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.driver.extraJavaOptions",
                f"-Dlog4j.configurationFile=file:{LOG4J} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session
