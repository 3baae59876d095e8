"""Spark test fixtures: one local SparkSession for the whole run (``helpers.local_spark``).

Java is on every CI machine and ``make test`` installs the spark extra, so nothing here skips:
a missing pyspark or java is an error, not a skip.
"""

import os

import pytest

from helpers.local_spark import local_session

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="session")
def spark():
    session = local_session()
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
