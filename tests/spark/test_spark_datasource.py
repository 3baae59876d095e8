"""The ``dledger`` data source on a real local SparkSession."""

import os

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from dledger.entry import BODY_OFFSET, MAGIC_NOOP, crc32
from dledger.spark import scan
from dledger.store import open_store
from spark_stores import (DATA_FILE_SIZE, INDEX_FILE_SIZE, bodies, flip_byte, java_entries,
                          write_java_store, write_store)


def _entries(store_dir):
    with open_store(store_dir) as st:
        return [(e.index, e.term, e.pos, e.magic, e.size, e.body) for e in st.iter_entries()]


def _rows(df):
    return sorted((r["index"], r["term"], r["pos"], r["magic"], r["size"], bytes(r["body"]))
                  for r in df.collect())


def _segments(store_dir):
    return sorted(os.listdir(os.path.join(store_dir, "data")))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("ds") / "dledger-n0")
    write_store(d, bodies(400, seed=3), committed=350)
    return d


def test_declared_arrow_schemas_match_what_spark_expects(dl):
    from pyspark.sql.pandas.types import to_arrow_schema
    from dledger.spark.messages_source import MESSAGE_ARROW_SCHEMA, MESSAGE_DDL

    for ddl, schema in ((scan.ENTRY_DDL, scan.ENTRY_ARROW_SCHEMA),
                        (scan.HEADER_DDL, scan.HEADER_ARROW_SCHEMA),
                        (MESSAGE_DDL, MESSAGE_ARROW_SCHEMA)):
        struct = dl.createDataFrame([], ddl).schema
        assert to_arrow_schema(struct, timezone="UTC").equals(schema)


def test_reads_every_entry_of_a_store_one_partition_per_segment(dl, store):
    df = dl.read.format("dledger").load(store)
    assert df.columns == [n for n, _, _ in scan.ENTRY_FIELDS]
    assert df.rdd.getNumPartitions() == len(_segments(store)) > 10
    assert _rows(df) == _entries(store)
    flags = df.agg(F.min(F.col("crc_ok").cast("int")).alias("ok"),
                   F.count("error").alias("errors"),
                   F.countDistinct("replica").alias("replicas")).first()
    assert (flags["ok"], flags["errors"], flags["replicas"]) == (1, 0, 1)
    # the crc column is the CRC-32 of the body, and the store stamped it
    some = df.where("index < 5").collect()
    assert all(r["crc"] == r["body_crc"] == crc32(bytes(r["body"])) for r in some)


def test_pushdown_prunes_segments_and_returns_exact_rows(dl, store):
    all_parts = dl.read.format("dledger").load(store).rdd.getNumPartitions()
    q = dl.read.format("dledger").option("body", "false").load(store).where(
        "index >= 200 AND index <= 204")
    assert [r["index"] for r in q.orderBy("index").collect()] == [200, 201, 202, 203, 204]
    parts = q.rdd.getNumPartitions()
    assert 1 <= parts <= 2 < all_parts
    plan = q._jdf.queryExecution().executedPlan().toString()
    assert ">= 200" not in plan and "<= 204" not in plan  # the range went to pushFilters
    # equality, strict bounds, and a range beyond the log
    eq = dl.read.format("dledger").load(store).where(F.col("index") == 399)
    assert [r["index"] for r in eq.collect()] == [399] and eq.rdd.getNumPartitions() == 1
    strict = dl.read.format("dledger").load(store).where("index > 10 AND index < 13")
    assert sorted(r["index"] for r in strict.collect()) == [11, 12]
    beyond = dl.read.format("dledger").load(store).where("index > 1000")
    assert beyond.count() == 0
    assert beyond.rdd.getNumPartitions() == 1  # Spark's empty stand-in: no segment planned
    assert scan.plan_segments([scan.store_info(store)], 1001, None) == []
    # a filter on another column is still applied by Spark
    other = dl.read.format("dledger").load(store).where("index < 50 AND size > 150")
    assert all(r["size"] > 150 for r in other.collect())


def test_header_only_schema_has_no_body(dl, store):
    df = dl.read.format("dledger").option("body", "false").load(store)
    assert "body" not in df.columns and df.columns[-1] == "error"
    full = dl.read.format("dledger").load(store).drop("body")
    assert sorted(map(tuple, df.collect())) == sorted(map(tuple, full.collect()))
    nov = dl.read.format("dledger").option("body", "false").option("verify", "false").load(store)
    r = nov.where("index = 7").first()
    assert r["crc"] is None and r["crc_ok"] is None and r["body_crc"] != 0


def test_several_replicas_in_one_load(dl, tmp_path):
    paths = [write_store(str(tmp_path / name), bodies(n, seed=5)) for name, n in
             (("a", 120), ("b", 100), ("c", 120))]
    counts = {r["replica"]: r["count"] for r in
              dl.read.format("dledger").option("body", "false").load(paths)
              .groupBy("replica").count().collect()}
    assert counts == {"a": 120, "b": 100, "c": 120}
    joined = dl.read.format("dledger").option("body", "false").load(",".join(paths))
    assert joined.count() == 340
    named = dl.read.format("dledger").option("replicas", "x,y,z").load(paths)
    names = sorted(r["replica"] for r in named.select("replica").distinct().collect())
    assert names == ["x", "y", "z"]
    # pushdown on several replicas plans only the segments that hold the tail
    tail = dl.read.format("dledger").load(paths).where("index >= 99")
    rows = tail.collect()
    assert sorted((r["replica"], r["index"]) for r in rows) == \
        [(n, i) for n, last in (("a", 119), ("b", 99), ("c", 119)) for i in range(99, last + 1)]
    holding = {(r["replica"], r["segment"]) for r in rows}
    total = sum(len(os.listdir(os.path.join(p, "data"))) for p in paths)
    assert tail.rdd.getNumPartitions() == len(holding) < total


def test_java_written_store_reads_like_ours(dl, tmp_path):
    d = str(tmp_path / "dledger-n0")
    expected = write_java_store(d, java_entries(60))
    df = dl.read.format("dledger").load(d)
    assert _rows(df) == sorted(expected) == _entries(d)
    fast = dl.read.format("dledger").option("recover", "false").load(d)
    assert _rows(fast) == _rows(df)
    assert df.rdd.getNumPartitions() == len(_segments(d)) >= 3
    rows = df.collect()
    assert all(r["body_crc"] == 0 and r["crc_ok"] and r["error"] is None for r in rows)
    noops = sorted(r["index"] for r in rows if r["magic"] == MAGIC_NOOP)
    assert noops == [0, 30]
    # pushdown works through the Java index units too
    q = df.where("index = 45")
    assert [r["index"] for r in q.collect()] == [45] and q.rdd.getNumPartitions() == 1


def test_torn_tail_is_left_out_as_the_store_leaves_it_out(dl, tmp_path):
    d = str(tmp_path / "dledger-n0")
    write_store(d, bodies(50, seed=9))
    with open_store(d) as st:
        end = st.ledger_end_index
        last = st._reader.index_unit(end)
    # a record head after the end that runs past the file: a torn write
    seg = os.path.join(d, "data", f"{last.pos - last.pos % DATA_FILE_SIZE:020d}")
    off = last.pos % DATA_FILE_SIZE + last.size
    with open(seg, "r+b") as f:
        f.seek(off)
        f.write((1).to_bytes(4, "big") + (1 << 20).to_bytes(4, "big")
                + (end + 1).to_bytes(8, "big"))
    df = dl.read.format("dledger").load(d)
    assert _rows(df) == _entries(d)
    assert max(r["index"] for r in df.collect()) == end == 49
    assert df.where("error IS NOT NULL").count() == 0
    # without the store's recovery the torn record is reported instead of left out
    raw = {r["index"]: r for r in dl.read.format("dledger").option("recover", "false").load(d)
           .collect()}
    assert sorted(raw) == list(range(51))
    assert raw[50]["error"] and not raw[50]["crc_ok"] and raw[49]["error"] is None


def test_damaged_entries_are_reported_in_columns_not_raised(dl, tmp_path):
    d = str(tmp_path / "dledger-n0")
    write_store(d, bodies(80, seed=11, lo=20), committed=79)
    with open_store(d) as st:
        u10, u40 = st._reader.index_unit(10), st._reader.index_unit(40)
    seg = lambda pos: os.path.join(d, "data", f"{pos - pos % DATA_FILE_SIZE:020d}")  # noqa: E731
    flip_byte(seg(u10.pos), u10.pos % DATA_FILE_SIZE + BODY_OFFSET + 3)  # a body bit
    flip_byte(seg(u40.pos), u40.pos % DATA_FILE_SIZE + 1, 0x40)         # the magic
    rows = {r["index"]: r for r in dl.read.format("dledger").load(d).collect()}
    assert sorted(rows) == list(range(80))          # nothing lost around the damage
    assert rows[10]["crc_ok"] is False and rows[10]["error"] is None
    assert rows[10]["crc"] != rows[10]["body_crc"]
    assert rows[40]["crc_ok"] is False and "magic" in rows[40]["error"]
    assert rows[40]["pos"] == u40.pos
    bad = {i for i, r in rows.items() if not r["crc_ok"]}
    assert bad == {10, 40}


def test_scan_without_spark_matches_the_store(tmp_path):
    d = str(tmp_path / "dledger-n0")
    write_store(d, bodies(300, seed=13))
    table = scan.read_stores([d])
    assert isinstance(table, pa.Table)
    got = sorted(zip(*(table.column(c).to_pylist() for c in
                       ("index", "term", "pos", "magic", "size", "body"))))
    assert got == _entries(d)


def test_bad_paths_give_a_clear_error(dl, tmp_path):
    with pytest.raises(Exception, match="not a dledger store|is not a directory"):
        dl.read.format("dledger").load(str(tmp_path / "missing")).count()


def test_clean_stores_are_read_through_the_index_fast_path(tmp_path, monkeypatch):
    ours = str(tmp_path / "ours")
    write_store(ours, bodies(300, seed=17))
    java = str(tmp_path / "java")
    write_java_store(java, java_entries(80))

    def no_slow(*args, **kwargs):
        raise AssertionError("the record-by-record path was taken on a clean store")

    monkeypatch.setattr(scan.SegmentReader, "_slow", no_slow)
    for d, n in ((ours, 300), (java, 80)):
        table = scan.read_stores([d])
        assert table.column("index").to_pylist() == list(range(n))
        assert sorted(zip(*(table.column(c).to_pylist() for c in
                            ("index", "term", "pos", "magic", "size", "body")))) == _entries(d)
    part = scan.read_stores([ours], lo=123, hi=250, body=False)
    assert part.column("index").to_pylist() == list(range(123, 250))


def test_lost_index_tail_is_read_from_the_data(tmp_path):
    d = str(tmp_path / "dledger-n0")
    write_store(d, bodies(200, seed=19))
    for k in range(150, 200):            # units 150.. never reached the disk
        pos = k * 32
        name = f"{pos - pos % INDEX_FILE_SIZE:020d}"
        with open(os.path.join(d, "index", name), "r+b") as f:
            f.seek(pos % INDEX_FILE_SIZE)
            f.write(bytes(32))
    expected = _entries(d)
    assert len(expected) == 200          # the store rebuilds the index from the data
    table = scan.read_stores([d])
    got = sorted(zip(*(table.column(c).to_pylist() for c in
                       ("index", "term", "pos", "magic", "size", "body"))))
    assert got == expected
    assert table.column("error").null_count == 200


def test_without_the_pushdown_conf_the_plain_reader_still_works(dl, store):
    from dledger.spark import PUSHDOWN_CONF

    dl.conf.set(PUSHDOWN_CONF, "false")
    try:
        # Spark refuses a reader with pushFilters while the conf is off
        # (DATA_SOURCE_PUSHDOWN_DISABLED); the source then hands it the plain reader itself
        q = dl.read.format("dledger").load(store).where("index < 3")
        assert sorted(r["index"] for r in q.collect()) == [0, 1, 2]
        assert q.rdd.getNumPartitions() == len(_segments(store))   # nothing pruned
        q = dl.read.format("dledger").option("pushdown", "false").load(store).where("index < 3")
        assert sorted(r["index"] for r in q.collect()) == [0, 1, 2]
        assert q.rdd.getNumPartitions() == len(_segments(store))   # nothing pruned
    finally:
        dl.conf.set(PUSHDOWN_CONF, "true")


def test_pushdown_prunes_without_recovery_too(tmp_path):
    d = str(tmp_path / "dledger-n0")
    write_store(d, bodies(400, seed=3))
    fast = scan.store_info(d, recover=False)
    assert fast.end is None
    all_tasks = scan.plan_segments([fast])
    tasks = scan.plan_segments([fast], 200, 205)
    assert 1 <= len(tasks) <= 2 < len(all_tasks)
    rows = [i for t in tasks for b in scan.read_segment(t, 200, 205, body=False)
            for i in b.column("index").to_pylist()]
    assert rows == [200, 201, 202, 203, 204]
    # a lower bound alone: earlier segments are not planned, nothing is lost after it
    tail = scan.plan_segments([fast], 390, None)
    got = [i for t in tail for b in scan.read_segment(t, 390, None, body=False)
           for i in b.column("index").to_pylist()]
    assert got == list(range(390, 400)) and len(tail) < len(all_tasks)


def test_a_damaged_mid_log_record_is_read_with_the_damage_in_its_row(tmp_path):
    d = str(tmp_path / "dledger-n0")
    write_store(d, bodies(120, seed=23, lo=20))
    os.remove(os.path.join(d, "checkpoint"))    # no trusted prefix: recovery scans the tail
    with open_store(d) as st:
        unit = st._reader.index_unit(110)
    seg = os.path.join(d, "data", f"{unit.pos - unit.pos % DATA_FILE_SIZE:020d}")
    flip_byte(seg, unit.pos % DATA_FILE_SIZE + 2, 0x20)     # entry 110's size field
    info = scan.store_info(d)
    # the store opens (the damaged entry is kept and refused, until repaired from a peer) and
    # keeps its whole log: nothing after the damage is cut
    assert info.error is None and info.end == 119
    with open_store(d) as st:
        assert list(st.damaged()) == [110]
    table = scan.read_stores([d])
    rows = dict(zip(table.column("index").to_pylist(), table.column("error").to_pylist()))
    assert sorted(rows) == list(range(120))
    assert [i for i, e in rows.items() if e] == [110]
