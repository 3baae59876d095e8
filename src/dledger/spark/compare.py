"""Comparing replicas index by index inside one task: the audit without a shuffle.

No pyspark here (numpy and pyarrow only), so this module can be tested alone.

``compare_range(infos, committed, lo, hi, max_listed)`` reads the entries ``[lo, hi)`` of
every replica (``scan.plan_store`` and ``scan.read_segment``: header-only, CRC-32 checked)
and returns a small Arrow table of ``RESULT_SCHEMA`` rows, of four kinds (``gid``):

- ``SEGMENT_SET``: per replica, segment and term, what this range holds of it: ``entries``
  (rows), ``first`` and ``last`` index, ``corrupt`` (damaged rows) and ``copies`` (intact
  rows). A segment that spans several ranges has a row from each; the audit adds them up;
- ``STATS`` (one row): ``divergent`` indexes (the intact copies differ) and the first of them,
  ``violations`` (the copies that their replicas count as committed, index at or below
  ``committed[r]``, differ) and the first of them;
- ``INDEX_SET``: the first ``max_listed`` divergent indexes of the range (``violation`` set
  when the difference is inside the committed prefix);
- ``SHORT_RUN``: runs ``first..last`` of consecutive indexes that some but not all replicas
  hold intact (``0 < copies < len(infos)``): a lagging replica gives one row, not one per
  index. The audit counts the gaps among them once it knows the common range.

On healthy replicas that is a few rows per segment, whatever the log's length: the driver
collects them in one job, and nothing is shuffled.

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
#: segment, term): the per-index set leaves three columns out, the per-segment set one;
#: and two kinds of rows that only the tasks produce
INDEX_SET = 7
SEGMENT_SET = 8
STATS = 16
SHORT_RUN = 17

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
    ("divergent", pa.int64(), "BIGINT"),
    ("divergent_first", pa.int64(), "BIGINT"),
    ("violations", pa.int64(), "BIGINT"),
    ("violation_first", pa.int64(), "BIGINT"),
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


def ranges(infos: list[scan.StoreInfo], size: int | None = None) -> list[int]:
    """Bounds ``b`` such that the tasks are ``[b[k], b[k+1])``: the union of the stores'
    valid ranges in pieces of ``size`` indexes; ``[]`` when every store is empty."""
    size = size or RANGE_ENTRIES
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


def _rows(gid: int, n: int, **cols) -> pa.Table:
    """``n`` rows of kind ``gid``: the given columns, nulls elsewhere."""
    arrays = {"gid": pa.array(np.full(n, gid, np.int32))}
    for f in RESULT_SCHEMA:
        if f.name != "gid":
            value = cols.get(f.name)
            arrays[f.name] = pa.nulls(n, f.type) if value is None else pa.array(value, f.type)
    return pa.table(arrays, schema=RESULT_SCHEMA)


def _runs(sorted_indexes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(firsts, lasts) of the runs of consecutive values in ``sorted_indexes``."""
    if len(sorted_indexes) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    breaks = np.flatnonzero(np.diff(sorted_indexes) != 1)
    firsts = np.concatenate(([sorted_indexes[0]], sorted_indexes[breaks + 1]))
    lasts = np.concatenate((sorted_indexes[breaks], [sorted_indexes[-1]]))
    return firsts, lasts


def compare_range(infos: list[scan.StoreInfo], committed: list[int], lo: int, hi: int,
                  max_listed: int) -> pa.Table:
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
    seg_rows = _rows(SEGMENT_SET, g.num_rows, replica=g["replica"], segment=g["segment"],
                     term=g["term"], entries=g["index_count"], first=g["index_min"],
                     last=g["index_max"], corrupt=g["bad_sum"], copies=g["intact_sum"])

    good = table.filter(pa.array(intact))
    index = _np(good["index"])
    fields = [_np(good[f]) for f in SAME_ENTRY]
    differ = _differing(index, fields)
    inside = index <= np.array(committed, np.int64)[rid[intact]]
    violation = _differing(index[inside], [f[inside] for f in fields])
    stats = _rows(STATS, 1, divergent=[len(differ)],
                  divergent_first=[int(differ[0]) if len(differ) else None],
                  violations=[len(violation)],
                  violation_first=[int(violation[0]) if len(violation) else None])
    listed = differ[:max_listed]
    idx_rows = _rows(INDEX_SET, len(listed), index=listed, differ=np.ones(len(listed), bool),
                     violation=np.isin(listed, violation))
    held, copies = np.unique(index, return_counts=True)
    firsts, lasts = _runs(held[copies < n])
    short_rows = _rows(SHORT_RUN, len(firsts), first=firsts, last=lasts)
    return pa.concat_tables([seg_rows, stats, idx_rows, short_rows])


def compare_tasks(batches, infos: list[scan.StoreInfo], committed: list[int],
                  bounds: list[int], max_listed: int):
    """For ``mapInArrow`` over ``spark.range(len(bounds) - 1)``: row ``k`` compares the range
    ``[bounds[k], bounds[k + 1])``."""
    for batch in batches:
        for k in batch.column(0).to_pylist():
            yield from compare_range(infos, committed, bounds[k], bounds[k + 1],
                                     max_listed).to_batches()
