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


#: test files whose tests run once with each implementation of the broker's hot loops: the
#: compiled one and the Python references (``dledger.broker.speedups``); the rest run with what
#: this build uses
BOTH_SCANS = {"test_dispatch_parses_once.py", "test_reput_dispatch.py", "test_commit_log_sim.py",
              "test_consumer_state.py", "test_catch_up_past_retention.py", "test_failover_and_restart.py",
              "test_queue_min_offset.py", "test_statuses_and_lookups.py", "test_dispatch_on_commit.py",
              "test_broker_swarm.py"}


def pytest_generate_tests(metafunc):
    if os.path.basename(str(metafunc.definition.fspath)) in BOTH_SCANS:
        metafunc.parametrize("hot_loops", ["C", "Python"], indirect=True)


@pytest.fixture(autouse=True)
def hot_loops(request, monkeypatch):
    """The implementation of the broker's hot loops a test runs with ("C" or "Python"): a
    parameter in ``BOTH_SCANS``' files, what this build uses elsewhere. "Python" puts the
    references in the reput service's, the append hook's, the key index's and the put encoder's hands."""
    from dledger.broker import (append_stamps, commit_log, dispatch_scan, index_file, message_codec, put_encode, reput,
                                speedups)

    which = getattr(request, "param", speedups.IMPLEMENTATION)
    if which == "Python":
        monkeypatch.setattr(reput, "new_scanner", dispatch_scan.MessageScanner)
        monkeypatch.setattr(append_stamps, "locate", message_codec.locate)
        monkeypatch.setattr(commit_log, "stamp_messages", append_stamps.python_stamp_messages)
        monkeypatch.setattr(index_file, "_compiled", None)
        monkeypatch.setattr(put_encode, "_encode_puts", None)
        monkeypatch.setattr(reput, "compiled", None)
        monkeypatch.setattr(commit_log, "_put_results", None)
    elif speedups.compiled is None:
        pytest.fail("the broker's compiled hot loops did not build (is there a C compiler?): reinstall with one")
    return which
