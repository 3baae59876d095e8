"""Auto-registration: the top-level ``pyspark_dledger*`` modules let Spark find the sources.

Runs first in this directory (file order), before any test calls ``register``.
"""

import importlib
import pkgutil

from spark_stores import bodies, write_store


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


def test_format_dledger_works_without_register(spark, tmp_path):
    registered = spark.conf.get("dledger.tests.registered", "false")
    assert registered == "false", "run this file before the others (it checks auto-registration)"
    store = write_store(str(tmp_path / "dledger-n0"), bodies(30))
    rows = spark.read.format("dledger").load(store).select("index").collect()
    assert sorted(r["index"] for r in rows) == list(range(30))
