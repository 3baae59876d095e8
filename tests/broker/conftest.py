"""Broker test fixtures: the Spark session fixtures of ``tests/spark/conftest.py`` (one local
session for the whole run), for the test that reads a broker's log through the Spark source;
that file's tests carry the ``spark`` marker like the tests in ``tests/spark``."""

import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "dledger_tests_spark_conftest", os.path.join(HERE, os.pardir, "spark", "conftest.py"))
_spark_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_spark_conftest)

spark = _spark_conftest.spark
dl = _spark_conftest.dl


def pytest_collection_modifyitems(config, items):
    for item in items:
        if os.path.basename(str(item.fspath)).startswith("test_spark_"):
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.filterwarnings(
                "ignore:PySpark does not yet fully support pandas:FutureWarning"))


def pytest_configure(config):
    config.addinivalue_line("markers", "spark: Spark tests (one local SparkSession; "
                                       "deselect with -m 'not spark' for a quick core run)")
