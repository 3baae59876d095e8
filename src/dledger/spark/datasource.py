"""The ``dledger`` Python Data Source (PySpark >= 4.1): DataFrames over store directories.

``spark.read.format("dledger").load(path)`` (one store directory) or ``.load([p1, p2, ...])``
or ``.load("p1,p2")`` (several: one per replica; the ``replica`` column tells them apart).
Rows and columns are described in ``dledger.spark.scan``.

Options (values are strings, names are case-insensitive):
- ``body`` (default ``true``): ``false`` gives the header-only schema (no ``body`` column).
  The Data Source API has no column pruning, so this is how scans skip shipping bodies;
- ``verify`` (default ``true``): compute the body CRC-32 (``crc``/``crc_ok``); ``false`` leaves
  both null and makes header-only scans cheaper;
- ``pushdown`` (default ``true``): ``false`` gives a reader without ``pushFilters``. Not
  needed for sessions where ``spark.sql.python.filterPushdown.enabled`` is off: Spark then
  plans the read in a planner that refuses readers defining ``pushFilters``, and ``reader()``
  hands that planner the plain reader by itself (``_pushdown_disabled_by_caller``);
- ``recover`` (default ``true``): ``false`` skips the store's read-only recovery when planning
  (see ``scan.store_info``); for big stores without a checkpoint (Java's) that recovery reads
  up to three segments record by record on every query;
- ``replicas``: comma-separated names for the ``replica`` column, in path order (default: the
  last path component of each directory).

Rules kept here:
- one input partition per data segment file (``partitions()`` returns a list, as Spark wants);
- index-range filters (``=``, ``>``, ``>=``, ``<``, ``<=`` on ``index``) are pushed down:
  ``scan.plan_segments`` maps the range to data positions through the index units, so
  segments outside it are never opened, and ``read()`` returns exactly the rows in range
  (so those filters are not handed back to Spark). Every other filter is handed back;
- ``read()`` yields ``pyarrow.RecordBatch``es whose schema equals the declared one exactly.

All methods run in Spark's Python worker processes, which must be able to import ``dledger``
(see ``docs/spark.md``).
"""

from __future__ import annotations

import json
import os

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

try:  # filter classes exist from PySpark 4.1 on
    from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan,
                                        LessThanOrEqual)
    _RANGE_FILTERS: tuple = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
except ImportError:  # pragma: no cover - PySpark 4.0
    _RANGE_FILTERS = ()

from dledger.spark import scan


def _flag(options, name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    value = str(value).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name!r} must be true or false, got {value!r}")


def store_paths(options) -> list[str]:
    """The store directories named by ``load()`` (``path`` or ``paths``; commas split)."""
    raw: list[str] = []
    if options.get("paths"):
        value = options["paths"]
        raw.extend(json.loads(value) if value.lstrip().startswith("[") else [value])
    if options.get("path"):
        raw.append(options["path"])
    paths = [p.strip() for item in raw for p in str(item).split(",") if p.strip()]
    if not paths:
        raise ValueError("the dledger data source needs a store directory: load(path) or "
                         "load([path, ...])")
    return paths


def replica_names(options, paths: list[str]) -> list[str]:
    if options.get("replicas"):
        names = [n.strip() for n in options["replicas"].split(",")]
        if len(names) != len(paths):
            raise ValueError(f"option replicas names {len(names)} replicas for {len(paths)} paths")
        return names
    return scan.replica_names(paths)


class SegmentPartition(InputPartition):
    """One data segment of one replica."""

    def __init__(self, task: scan.SegmentTask) -> None:
        super().__init__(task.path)
        self.task = task


class DLedgerDataSource(DataSource):
    """``format("dledger")``: one row per log entry."""

    @classmethod
    def name(cls) -> str:
        return "dledger"

    def schema(self) -> str:
        return scan.ENTRY_DDL if _flag(self.options, "body", True) else scan.HEADER_DDL

    def reader(self, schema) -> "DLedgerReader":
        if _flag(self.options, "pushdown", True) and not _pushdown_disabled_by_caller():
            return DLedgerPushdownReader(self.options)
        return DLedgerReader(self.options)


def _pushdown_disabled_by_caller() -> bool:
    """True when Spark's read planner calls ``reader()`` with filter pushdown turned off.

    Spark plans a read without pushdown in ``pyspark.sql.worker.plan_data_source_read``,
    whose ``_main`` holds the session's ``spark.sql.python.filterPushdown.enabled`` in the
    local ``enable_pushdown`` and refuses a reader that defines ``pushFilters`` when it is
    false. That planner never calls ``pushFilters``, so handing it the plain reader loses
    nothing: Spark then applies every filter itself. Any other caller (the pushdown planner,
    tests, other PySpark versions) gets the default answer, False.
    """
    import sys

    try:
        frame = sys._getframe(2)   # 0: this function, 1: reader(), 2: its caller
    except ValueError:             # reader() called from the top of a stack
        return False
    return frame.f_code.co_name == "_main" and frame.f_locals.get("enable_pushdown") is False


class DLedgerReader(DataSourceReader):
    def __init__(self, options) -> None:
        given = store_paths(options)
        self.names = replica_names(options, given)
        # resolved here, where the read is planned (the driver's working directory): a
        # cluster's executors run elsewhere, where a relative path means something else
        self.paths = [os.path.abspath(p) for p in given]
        self.body = _flag(options, "body", True)
        self.verify = _flag(options, "verify", True)
        self.recover = _flag(options, "recover", True)
        self.lo: int | None = None  # index range [lo, hi) from pushFilters
        self.hi: int | None = None

    def partitions(self):
        if self.lo is not None and self.hi is not None and self.lo >= self.hi:
            return []
        infos = [scan.store_info(p, n, recover=self.recover)
                 for p, n in zip(self.paths, self.names)]
        return [SegmentPartition(t) for t in scan.plan_segments(infos, self.lo, self.hi)]

    def read(self, partition: SegmentPartition):
        if not isinstance(partition, SegmentPartition):
            return iter(())  # Spark's stand-in partition when partitions() found nothing
        return scan.read_segment(partition.task, self.lo, self.hi, body=self.body,
                                 verify=self.verify)


class DLedgerPushdownReader(DLedgerReader):
    """The reader with index-range pushdown (needs the pushdown conf, see the module doc)."""

    def pushFilters(self, filters):
        for f in filters:
            if not _RANGE_FILTERS or not isinstance(f, _RANGE_FILTERS) \
                    or f.attribute != ("index",) or not isinstance(f.value, int) \
                    or isinstance(f.value, bool):
                yield f
                continue
            v = f.value
            lo, hi = None, None
            if isinstance(f, EqualTo):
                lo, hi = v, v + 1
            elif isinstance(f, GreaterThan):
                lo = v + 1
            elif isinstance(f, GreaterThanOrEqual):
                lo = v
            elif isinstance(f, LessThan):
                hi = v
            else:
                hi = v + 1
            if lo is not None:
                self.lo = lo if self.lo is None else max(self.lo, lo)
            if hi is not None:
                self.hi = hi if self.hi is None else min(self.hi, hi)
