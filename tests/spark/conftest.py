"""Spark test fixtures: one local SparkSession for the whole run, with fast test settings.

Java is on every CI machine and ``make test`` installs the spark extra, so nothing here skips:
a missing pyspark or java is an error, not a skip. The JVM flags (C1 only, serial GC) only
make the short test queries faster on 2 cores; benchmarks never use them.
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="session")
def spark():
    # workers must run this interpreter (else they get python3 from PATH) and bind to loopback
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    log4j = os.path.join(HERE, "log4j2-quiet.properties")
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
                f"-Dlog4j.configurationFile=file:{log4j} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def dl(spark):
    """The session with ``dledger.spark.register`` called."""
    from dledger.spark import register

    register(spark)
    return spark


def pytest_configure(config):
    config.addinivalue_line("markers", "spark: Spark tests (one local SparkSession; "
                                       "deselect with -m 'not spark' for a quick core run)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if os.path.dirname(str(item.fspath)) == HERE:
            item.add_marker(pytest.mark.spark)
            # PySpark 4.3 warns that it does not fully support pandas >= 3; nothing here
            # depends on pandas, so keep the warning out of the test report.
            item.add_marker(pytest.mark.filterwarnings(
                "ignore:PySpark does not yet fully support pandas:FutureWarning"))
