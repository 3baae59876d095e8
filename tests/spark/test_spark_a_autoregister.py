"""Auto-registration: the top-level ``pyspark_dledger*`` modules let Spark find the sources.

The check runs in a session of its own (``SparkSession.newSession``: same JVM and
SparkContext, its own registered data sources and SQL conf), so it does not matter which
tests ran before it: ``register`` calls made on the shared session (the ``dl`` fixture) are
not visible there. The fixture checks that isolation instead of assuming it.
"""

import importlib
import pkgutil

import pytest
from spark_stores import bodies, write_store

PROBE = "dledger-autoregister-probe"


@pytest.fixture
def unregistered(spark):
    """A new session in which ``register`` was never called, whatever ran before."""
    from pyspark.sql.datasource import DataSource, DataSourceReader

    class ProbeReader(DataSourceReader):
        def read(self, partition):
            return iter(())

    class Probe(DataSource):
        @classmethod
        def name(cls):
            return PROBE

        def schema(self):
            return "x int"

        def reader(self, schema):
            return ProbeReader()

    # a source registered on the shared session, as ``register`` does, is known there ...
    spark.dataSource.register(Probe)
    assert spark.read.format(PROBE).load().columns == ["x"]
    session = spark.newSession()
    # ... and unknown to the new session
    with pytest.raises(Exception, match="DATA_SOURCE_NOT_FOUND"):
        session.read.format(PROBE).load()
    return session


def test_spark_lookup_finds_both_sources_on_the_path():
    # the same scan Spark's lookup worker does (pyspark.sql.worker.lookup_data_sources)
    from pyspark.sql.datasource import DataSource

    found = {}
    for info in pkgutil.iter_modules():
        if info.name.startswith("pyspark_dledger"):
            mod = importlib.import_module(info.name)
            assert issubclass(mod.DefaultSource, DataSource)
            found[mod.DefaultSource.name()] = mod.DefaultSource
    assert set(found) == {"dledger", "dledger-messages"}


def test_format_dledger_works_without_register(unregistered, tmp_path):
    store = write_store(str(tmp_path / "dledger-n0"), bodies(30))
    rows = unregistered.read.format("dledger").load(store).select("index").collect()
    assert sorted(r["index"] for r in rows) == list(range(30))


def test_format_dledger_works_in_a_session_with_pushdown_off(unregistered, tmp_path):
    # Spark's default: spark.sql.python.filterPushdown.enabled is false, and Spark refuses
    # every read of a reader that defines pushFilters (DATA_SOURCE_PUSHDOWN_DISABLED)
    from dledger.spark import PUSHDOWN_CONF

    unregistered.conf.set(PUSHDOWN_CONF, "false")
    store = write_store(str(tmp_path / "dledger-n0"), bodies(40))
    df = unregistered.read.format("dledger").option("body", "false").load(store)
    assert df.count() == 40
    rows = df.where("index BETWEEN 10 AND 12").select("index").collect()
    assert sorted(r["index"] for r in rows) == [10, 11, 12]
    # the same session with pushdown on gets the pushdown reader, and the same rows
    unregistered.conf.set(PUSHDOWN_CONF, "true")
    rows = (unregistered.read.format("dledger").load(store).where("index BETWEEN 10 AND 12")
            .select("index").collect())
    assert sorted(r["index"] for r in rows) == [10, 11, 12]
