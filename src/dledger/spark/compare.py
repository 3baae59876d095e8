"""Comparing replicas index by index inside one task: the audit without a shuffle.

No pyspark here (numpy and pyarrow only), so this module can be tested alone.

``compare_range(infos, committed, lo, hi)`` reads the entries ``[lo, hi)`` of every replica
(``scan.plan_store`` and ``scan.read_segment``: header-only, CRC-32 checked) and returns one
Arrow batch of ``RESULT_SCHEMA`` rows, of two kinds (``gid``, the grouping ids of the
audit's other plan, see ``dledger.spark.audit``):

- ``SEGMENT_SET``: per replica, segment and term, what this range holds of it: ``entries``
  (rows), ``first`` and ``last`` index, ``corrupt`` (damaged rows) and ``copies`` (intact
  rows). A segment that spans several ranges has a row from each; the audit sums them;
- ``INDEX_SET``: one row per index where the intact copies differ (``differ``), or where some
  but not all replicas hold an intact copy (``short``, ``0 < copies < len(infos)``);
  ``violation`` when the copies that their replicas count as committed (index at or below
  ``committed[r]``) differ. Indexes where every replica holds the same intact entry produce no
  row: on healthy replicas the output is a few rows per segment.

What "the same entry" means: the same (term, pos, size, magic, CRC-32 of the body as read),
compared exactly. A damaged row (``error`` set, or a CRC mismatch) is never a copy.

Why ranges give the same answer as one scan of every segment: the audit uses them only when
every store opened with recovery (``StoreInfo.end`` known). Then a full scan emits only
indexes inside each store's valid range, and a read of ``[lo, hi)`` emits exactly the full
scan's rows in that range (rule 4 of ``dledger.spark.scan``), so every row lands in exactly
one range, with the copies of an index from all replicas in the same task.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dledger.spark import scan

#: ``grouping_id()`` values of the audit's aggregation with grouping sets (index, replica,
#: segment, term): the per-index set leaves three columns out, the per-segment set one
INDEX_SET = 7
SEGMENT_SET = 8

RESULT_FIELDS = [
    ("gid", pa.int32(), "INT"),
    ("replica", pa.string(), "STRING"),
    ("segment", pa.int64(), "BIGINT"),
    ("term", pa.int64(), "BIGINT"),
    ("index", pa.int64(), "BIGINT"),
    ("entries", pa.int64(), "BIGINT"),
    ("first", pa.int64(), "BIGINT"),
    ("last", pa.int64(), "BIGINT"),
    ("corrupt", pa.int64(), "BIGINT"),
    ("copies", pa.int64(), "BIGINT"),
    ("differ", pa.bool_(), "BOOLEAN"),
    ("violation", pa.bool_(), "BOOLEAN"),
    ("short", pa.bool_(), "BOOLEAN"),
]
RESULT_SCHEMA = pa.schema([(n, t) for n, t, _ in RESULT_FIELDS])
RESULT_DDL = ", ".join(f"`{n}` {d}" for n, _, d in RESULT_FIELDS)

#: indexes per task: about 3 x 100,000 header rows in memory at once for three replicas
RANGE_ENTRIES = 100_000

#: the fields that make two copies of an index the same entry
SAME_ENTRY = ("term", "pos", "size", "magic", "crc")


def can_split(infos: list[scan.StoreInfo]) -> bool:
    """True when every store's valid range is known (see the module docstring)."""
    return all(i.error is None and i.begin is not None and i.end is not None for i in infos)


def ranges(infos: list[scan.StoreInfo], size: int = RANGE_ENTRIES) -> list[int]:
    """Bounds ``b`` such that the tasks are ``[b[k], b[k+1])``: the union of the stores'
    valid ranges in pieces of ``size`` indexes; ``[]`` when every store is empty."""
    held = [(i.begin, i.end) for i in infos if i.end >= i.begin]
    if not held:
        return []
    lo, hi = min(b for b, _ in held), max(e for _, e in held) + 1
    return list(range(lo, hi, size)) + [hi]


def _read(infos, lo: int, hi: int) -> tuple[pa.Table, np.ndarray]:
    """The rows of ``[lo, hi)`` of every store, and each row's replica number."""
    batches, rid = [], []
    for r, info in enumerate(infos):
        for t in scan.plan_store(info, lo, hi):
            for b in scan.read_segment(t, lo, hi, body=False, verify=True):
                batches.append(b)
                rid.append(np.full(b.num_rows, r, np.int64))
    table = pa.Table.from_batches(batches, schema=scan.HEADER_ARROW_SCHEMA)
    return table, np.concatenate(rid) if rid else np.empty(0, np.int64)


def _np(col) -> np.ndarray:
    return col.to_numpy(zero_copy_only=False)


def _differing(index: np.ndarray, fields: list[np.ndarray]) -> np.ndarray:
    """The indexes (sorted, unique) whose rows do not all hold the same ``fields``."""
    if len(index) < 2:
        return np.empty(0, np.int64)
    order = np.lexsort(tuple(reversed([index, *fields])))   # by index, then the fields
    s = index[order]
    changed = np.zeros(len(s) - 1, bool)
    for f in fields:
        fs = f[order]
        changed |= fs[1:] != fs[:-1]
    return np.unique(s[1:][(s[1:] == s[:-1]) & changed])


def compare_range(infos: list[scan.StoreInfo], committed: list[int], lo: int,
                  hi: int) -> pa.Table:
    """The rows of ``[lo, hi)`` (see the module docstring); ``committed[r]`` is replica
    ``infos[r]``'s committed index (-1: none)."""
    table, rid = _read(infos, lo, hi)
    n = len(infos)
    # damaged and intact as the audit's SQL has them: error set or crc_ok false, and neither
    has_error = _np(pc.is_valid(table["error"]))
    crc_ok = _np(pc.fill_null(table["crc_ok"], False))
    crc_known = _np(pc.is_valid(table["crc_ok"]))
    bad = has_error | (crc_known & ~crc_ok)
    intact = ~has_error & crc_ok

    seg = pa.table({"replica": table["replica"], "segment": table["segment"],
                    "term": table["term"], "index": table["index"],
                    "bad": pa.array(bad.astype(np.int64)),
                    "intact": pa.array(intact.astype(np.int64))})
    g = seg.group_by(["replica", "segment", "term"], use_threads=False).aggregate(
        [("index", "count"), ("index", "min"), ("index", "max"), ("bad", "sum"),
         ("intact", "sum")])
    k = g.num_rows
    seg_rows = pa.table({
        "gid": pa.array(np.full(k, SEGMENT_SET, np.int32)),
        "replica": g["replica"], "segment": g["segment"], "term": g["term"],
        "index": pa.nulls(k, pa.int64()),
        "entries": g["index_count"], "first": g["index_min"], "last": g["index_max"],
        "corrupt": g["bad_sum"], "copies": g["intact_sum"],
        "differ": pa.nulls(k, pa.bool_()), "violation": pa.nulls(k, pa.bool_()),
        "short": pa.nulls(k, pa.bool_())}, schema=RESULT_SCHEMA)

    good = table.filter(pa.array(intact))
    index = _np(good["index"])
    fields = [_np(good[f]) for f in SAME_ENTRY]
    differ = _differing(index, fields)
    inside = index <= np.array(committed, np.int64)[rid[intact]]
    violation = _differing(index[inside], [f[inside] for f in fields])
    held, copies = np.unique(index, return_counts=True)
    short = held[copies < n]
    flagged = np.union1d(differ, short)
    m = len(flagged)
    idx_rows = pa.table({
        "gid": pa.array(np.full(m, INDEX_SET, np.int32)),
        "replica": pa.nulls(m, pa.string()), "segment": pa.nulls(m, pa.int64()),
        "term": pa.nulls(m, pa.int64()), "index": pa.array(flagged.astype(np.int64)),
        "entries": pa.nulls(m, pa.int64()), "first": pa.nulls(m, pa.int64()),
        "last": pa.nulls(m, pa.int64()), "corrupt": pa.nulls(m, pa.int64()),
        "copies": pa.array(copies[np.searchsorted(held, flagged)].astype(np.int64)),
        "differ": pa.array(np.isin(flagged, differ)),
        "violation": pa.array(np.isin(flagged, violation)),
        "short": pa.array(np.isin(flagged, short))}, schema=RESULT_SCHEMA)
    return pa.concat_tables([seg_rows, idx_rows])


def compare_tasks(batches, infos: list[scan.StoreInfo], committed: list[int],
                  bounds: list[int]):
    """For ``mapInArrow`` over ``spark.range(len(bounds) - 1)``: row ``k`` compares the range
    ``[bounds[k], bounds[k + 1])``."""
    for batch in batches:
        for k in batch.column(0).to_pylist():
            yield from compare_range(infos, committed, bounds[k], bounds[k + 1]).to_batches()
