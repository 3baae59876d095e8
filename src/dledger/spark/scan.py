"""Reading store directories as Arrow record batches: the engine behind the Spark data source.

No pyspark here (numpy and pyarrow only), so this module can be tested and benchmarked alone.

What it owns:
- ``store_info(path)``: what the store itself says about a directory (valid index range,
  committed index, segment sizes), found by opening it read-only with ``open_store`` (the
  store's own recovery: torn tails are left out exactly as the store leaves them out);
- ``plan_segments(infos, lo, hi)``: one ``SegmentTask`` per data segment that can hold an index
  in ``[lo, hi)``. The range is mapped to positions through the 32-byte index units, so a
  segment outside it is never opened;
- ``read_segment(task, ...)``: the entries of one segment as ``pyarrow.RecordBatch``es of
  ``ENTRY_ARROW_SCHEMA`` (or ``HEADER_ARROW_SCHEMA`` without the body).

How a segment is read (rules):
1. Fast path. The index units of the segment are read with numpy; the record headers they
   point at are gathered from the data (one ``pread`` per chunk) and every field is checked
   against its unit (magic, size, index, term, body size; Java leaders write magic 1 into the
   unit of a NOOP entry, accepted by ``dledger.entry.magic_matches_unit`` as the store accepts it). Records must lie back to
   back. Bodies are cut out of the chunk by Arrow without a Python loop; only the CRC-32 of
   each body is a (C-level) per-entry call.
2. Slow path. From the first record where the index and the data disagree (or where there is
   no index), the segment is walked record by record with ``dledger.entry.iter_segment_records``,
   the store's own walk: blank padding is skipped (at the head of a segment or up to its end),
   a zero header ends the data, a record that fails its checks is reported in one
   row (``error`` set, ``crc_ok`` false) and the walk resumes at the next entry's index unit
   when that one points at an intact record.
3. Only entries inside the store's valid range are emitted (``store_info``); when the store
   cannot be opened at all (for example mid-log damage), everything readable is emitted and
   the damage is reported in rows, never raised.
4. Rows honour ``[lo, hi)`` exactly (the data source tells Spark the filter is applied).

Columns: ``replica`` (which store), ``segment`` (start offset of the data file, i.e. its
name), ``index``, ``term``, ``pos`` (the record's position in this replica's data files, from
its index unit), ``magic``, ``size``
(whole record), ``body_crc`` (as stored, 0 = not computed, as Java writes), ``crc`` (CRC-32 of
the body as read; null when verification is off), ``crc_ok`` (stored CRC is 0 or matches),
``error`` (null, or why the record is damaged), ``body``.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dledger.entry import (BODY_OFFSET, INDEX_UNIT_SIZE, MAGIC_BLANK, MAGIC_SIZE, MIN_BLANK_LEN,
                           RECORD_PREFIX, VALID_MAGICS, IndexUnit, RecordHeader, crc32,
                           decode_header, is_segment_name, iter_segment_records,
                           magic_matches_unit, matches_unit, segment_name)
from dledger.errors import CorruptEntryError, DLedgerError

# The store package (``open_store``, the checkpoint) is imported inside ``store_info``: only the
# driver opens stores, and Spark's Python workers that run ``read_segment`` need just the
# record layout (``dledger.entry``), not the store, the core or the server.

ENTRY_FIELDS = [
    ("replica", pa.string(), "STRING"),
    ("segment", pa.int64(), "BIGINT"),
    ("index", pa.int64(), "BIGINT"),
    ("term", pa.int64(), "BIGINT"),
    ("pos", pa.int64(), "BIGINT"),
    ("magic", pa.int32(), "INT"),
    ("size", pa.int32(), "INT"),
    ("body_crc", pa.int64(), "BIGINT"),
    ("crc", pa.int64(), "BIGINT"),
    ("crc_ok", pa.bool_(), "BOOLEAN"),
    ("error", pa.string(), "STRING"),
    ("body", pa.binary(), "BINARY"),
]
ENTRY_ARROW_SCHEMA = pa.schema([(n, t) for n, t, _ in ENTRY_FIELDS])
HEADER_ARROW_SCHEMA = pa.schema([(n, t) for n, t, _ in ENTRY_FIELDS[:-1]])
ENTRY_DDL = ", ".join(f"`{n}` {d}" for n, _, d in ENTRY_FIELDS)
HEADER_DDL = ", ".join(f"`{n}` {d}" for n, _, d in ENTRY_FIELDS[:-1])

#: big-endian views of the record prefix and the index unit (docs/format.md)
HEADER_DTYPE = np.dtype([("magic", ">i4"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8"),
                         ("pos", ">i8"), ("channel", ">i4"), ("chain_crc", ">u4"),
                         ("body_crc", ">u4"), ("body_size", ">i4")])
UNIT_DTYPE = np.dtype([("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"),
                       ("term", ">i8")])
assert HEADER_DTYPE.itemsize == BODY_OFFSET and UNIT_DTYPE.itemsize == INDEX_UNIT_SIZE

_VALID_MAGICS = np.array(sorted(VALID_MAGICS))

#: rows and bytes per record batch
BATCH_ROWS = 65536
BATCH_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class StoreInfo:
    """One replica's store directory as the store itself sees it (read-only open)."""

    replica: str
    path: str
    store_dir: str
    data_dir: str
    index_dir: str
    data_file_size: int
    index_file_size: int
    begin: int | None = None       # first valid index (None: the store did not open)
    end: int | None = None         # last valid index (begin - 1 when empty)
    end_term: int | None = None
    committed: int | None = None   # committed index from the checkpoint (-1 unknown)
    error: str | None = None       # why the store did not open


@dataclass(slots=True)
class SegmentTask:
    """One data segment to read (picklable: it travels to the Spark workers)."""

    replica: str
    path: str
    name: str
    start: int            # global offset of the segment (its file name)
    file_size: int
    index_dir: str
    index_file_size: int
    begin: int | None
    end: int | None


def replica_names(paths: list[str]) -> list[str]:
    """Names for the ``replica`` column: each path's last component, made unique if needed."""
    names = [os.path.basename(os.path.normpath(p)) or p for p in paths]
    if len(set(names)) == len(names):
        return names
    return [os.path.normpath(p) for p in paths]


def store_info(path: str, replica: str | None = None, *, recover: bool = True) -> StoreInfo:
    """Open ``path`` read-only and report its valid range (see the module docstring).

    ``recover=False`` skips the store's recovery (which, for a store without a checkpoint such
    as a Java one, reads up to the last three segments record by record): the range is then
    unknown, the committed index comes from the checkpoint file alone, and readers trust what
    the index and the data agree on, so a torn or stale tail shows up as rows with ``error``.
    """
    from dledger.store.checkpoint import read_checkpoint
    from dledger.store.offline import open_store, resolve_store_dir, segment_size

    store_dir = resolve_store_dir(path)
    data_dir = os.path.join(store_dir, "data")
    index_dir = os.path.join(store_dir, "index")
    info = StoreInfo(replica or os.path.basename(os.path.normpath(path)), path, store_dir,
                     data_dir, index_dir, segment_size(data_dir, 0), segment_size(index_dir, 0))
    if not recover:
        cp = read_checkpoint(store_dir)
        info.committed = cp.committed_index if cp is not None else -1
        return info
    try:
        with open_store(store_dir) as store:
            info.begin = store.ledger_before_begin_index + 1
            info.end = store.ledger_end_index
            info.end_term = store.ledger_end_term
            info.committed = store.committed_index
    except DLedgerError as exc:
        info.error = str(exc)
    return info


# ----------------------------------------------------------------------------------------------
# index units
# ----------------------------------------------------------------------------------------------
def _segment_files(directory: str) -> list[tuple[int, str]]:
    if not os.path.isdir(directory):
        return []
    out = []
    for name in os.listdir(directory):
        if is_segment_name(name):
            out.append((int(name), name))
    out.sort()
    return out


def read_units(index_dir: str, index_file_size: int, first: int, count: int) -> np.ndarray:
    """Index units ``first .. first+count-1`` (fewer where the index files end), big-endian."""
    if count <= 0 or index_file_size <= 0 or first < 0:
        return np.empty(0, UNIT_DTYPE)
    lo, hi = first * INDEX_UNIT_SIZE, (first + count) * INDEX_UNIT_SIZE
    parts = []
    pos = lo
    while pos < hi:
        file_start = pos - pos % index_file_size
        path = os.path.join(index_dir, segment_name(file_start))
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            break
        try:
            want = min(hi, file_start + index_file_size) - pos
            data = os.pread(fd, want, pos - file_start)
        finally:
            os.close(fd)
        data = data[:len(data) - len(data) % INDEX_UNIT_SIZE]
        if data:
            parts.append(data)
        if len(data) < want:
            break
        pos += want
    if not parts:
        return np.empty(0, UNIT_DTYPE)
    return np.frombuffer(b"".join(parts) if len(parts) > 1 else parts[0], UNIT_DTYPE)


def unit_position(info_or_task, k: int) -> int | None:
    """Data position named by index unit ``k`` when the unit looks sound, else None."""
    u = read_units(info_or_task.index_dir, info_or_task.index_file_size, k, 1)
    if len(u) != 1 or int(u["index"][0]) != k or int(u["magic"][0]) not in VALID_MAGICS \
            or int(u["size"][0]) < BODY_OFFSET:
        return None
    return int(u["pos"][0])


# ----------------------------------------------------------------------------------------------
# planning
# ----------------------------------------------------------------------------------------------
def plan_store(info: StoreInfo, lo: int | None = None, hi: int | None = None) -> list[SegmentTask]:
    """The segments of one store that can hold indexes in ``[lo, hi)``, in log order."""
    files = _segment_files(info.data_dir)
    fsize = info.data_file_size
    if not files or fsize <= 0:
        return []
    pmin, pmax = None, None
    if info.end is not None:
        first, last = max(info.begin, lo if lo is not None else info.begin), info.end
        if hi is not None:
            last = min(last, hi - 1)
        if first > last:
            return []
        if lo is not None and lo > info.begin:
            pmin = unit_position(info, first)
        if hi is not None and hi - 1 < info.end:
            pmax = unit_position(info, last)
    else:  # range unknown (no recovery): trust sound index units at the range's ends
        if hi is not None and (hi <= 0 or (lo is not None and lo >= hi)):
            return []
        if lo is not None and lo > 0:
            pmin = unit_position(info, lo)
        if hi is not None:
            pmax = unit_position(info, hi - 1)
    tasks = []
    for start, name in files:
        if pmin is not None and start + fsize <= pmin:
            continue
        if pmax is not None and start > pmax:
            continue
        tasks.append(SegmentTask(info.replica, os.path.join(info.data_dir, name), name, start,
                                 fsize, info.index_dir, info.index_file_size, info.begin,
                                 info.end))
    return tasks


def plan_segments(infos: list[StoreInfo], lo: int | None = None,
                  hi: int | None = None) -> list[SegmentTask]:
    return [t for info in infos for t in plan_store(info, lo, hi)]


# ----------------------------------------------------------------------------------------------
# reading one segment
# ----------------------------------------------------------------------------------------------
class _Rows:
    """Column builder for rows found one by one (slow path)."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {n: [] for n, _, _ in ENTRY_FIELDS}

    def __len__(self) -> int:
        return len(self.cols["index"])

    def add(self, **row) -> None:
        for n, lst in self.cols.items():
            lst.append(row.get(n))


class SegmentReader:
    """Reads one ``SegmentTask``; ``batches()`` yields the record batches."""

    def __init__(self, task: SegmentTask, lo: int | None = None, hi: int | None = None, *,
                 body: bool = True, verify: bool = True, batch_rows: int = BATCH_ROWS,
                 batch_bytes: int = BATCH_BYTES) -> None:
        self.task = task
        self.body = body
        self.verify = verify
        self.batch_rows = batch_rows
        self.batch_bytes = batch_bytes
        self.schema = ENTRY_ARROW_SCHEMA if body else HEADER_ARROW_SCHEMA
        lo_eff = lo
        if task.begin is not None:
            lo_eff = task.begin if lo is None else max(lo, task.begin)
        hi_eff = hi
        if task.end is not None:
            hi_eff = task.end + 1 if hi is None else min(hi, task.end + 1)
        self.lo, self.hi = lo_eff, hi_eff
        self._replica = pa.scalar(task.replica, pa.string())
        self._segment = pa.scalar(task.start, pa.int64())

    def _in_range(self, k: int) -> bool:
        return (self.lo is None or k >= self.lo) and (self.hi is None or k < self.hi)

    # -- entry point ---------------------------------------------------------------------
    def batches(self):
        t = self.task
        if self.hi is not None and self.lo is not None and self.lo >= self.hi:
            return
        fd = os.open(t.path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            fsize = min(size, t.file_size)
            off0 = self._first_record_offset(fd, fsize)
            if off0 is None:
                return
            head = os.pread(fd, BODY_OFFSET, off0)
            k0 = None
            if len(head) == BODY_OFFSET:
                magic, size, index, *_rest, body_size = RECORD_PREFIX.unpack(head)
                if magic in VALID_MAGICS and size >= BODY_OFFSET \
                        and body_size == size - BODY_OFFSET and off0 + size <= fsize:
                    k0 = index
            if k0 is None:
                yield from self._slow(fd, fsize, off0, None)
                return
            if self.hi is not None and k0 >= self.hi:
                return
            k = k0 if self.lo is None else max(k0, self.lo)
            off = off0
            if k != k0:
                pos = unit_position(t, k)
                if pos is not None and pos >= t.start + fsize:
                    return  # the range starts in a later segment
                if pos is None or pos < t.start:
                    yield from self._slow(fd, fsize, off0, k0)
                    return
                off = pos - t.start
            yield from self._fast(fd, fsize, off, k)
        finally:
            os.close(fd)

    def _first_record_offset(self, fd: int, fsize: int) -> int | None:
        """Offset of the first record, past a head blank (docs/format.md); None when no records."""
        off = 0
        while off + MIN_BLANK_LEN <= fsize:
            magic, size = MAGIC_SIZE.unpack(os.pread(fd, MIN_BLANK_LEN, off))
            if magic == MAGIC_BLANK and MIN_BLANK_LEN <= size and off + size <= fsize:
                off += size
                continue
            if magic == 0 and size == 0:
                return None
            return off
        return None

    # -- fast path -----------------------------------------------------------------------
    def _fast(self, fd: int, fsize: int, off: int, k: int):
        """Index-driven read from record ``k`` at file offset ``off``; falls back when needed."""
        t = self.task
        seg_end = t.start + fsize
        while self.hi is None or k < self.hi:
            want = self.batch_rows if self.hi is None else min(self.batch_rows, self.hi - k)
            units = read_units(t.index_dir, t.index_file_size, k, want)
            n = len(units)
            if n == 0:
                break
            pos = units["pos"].astype(np.int64)
            usize = units["size"].astype(np.int64)
            in_seg = (pos >= t.start) & (pos + usize <= seg_end)
            # stop at the first unit that leaves this segment (the next segment holds it)
            if not in_seg.all():
                n = int(np.argmin(in_seg))
                if n == 0:
                    # nothing of this segment in the index from here: done, or walk the data
                    if pos[0] < t.start or not self._segment_done(fd, fsize, off):
                        yield from self._slow(fd, fsize, off, k)
                    return
                units, pos, usize = units[:n], pos[:n], usize[:n]
            good = (units["index"] == np.arange(k, k + n)) & (usize >= BODY_OFFSET)
            good &= pos == (off + t.start + np.concatenate(([0], np.cumsum(usize[:-1]))))
            if not good.all():
                n = int(np.argmin(good))
                if n == 0:
                    yield from self._slow(fd, fsize, off, k)
                    return
                units, pos, usize = units[:n], pos[:n], usize[:n]
            # keep the batch within the byte budget
            ends = np.cumsum(usize)
            if ends[-1] > self.batch_bytes and n > 1:
                n = max(1, int(np.searchsorted(ends, self.batch_bytes, side="right")))
                units, pos, usize, ends = units[:n], pos[:n], usize[:n], ends[:n]
            nbytes = int(ends[-1])
            buf = os.pread(fd, nbytes, off)
            if len(buf) < nbytes:
                yield from self._slow(fd, fsize, off, k)
                return
            rel = np.concatenate(([0], ends[:-1]))
            hdr = self._headers(buf, rel)
            ok = np.isin(hdr["magic"], _VALID_MAGICS) & (hdr["size"] == units["size"])
            ok &= (hdr["index"] == units["index"]) & (hdr["term"] == units["term"])
            ok &= hdr["body_size"] == hdr["size"] - BODY_OFFSET
            um, dm = units["magic"], hdr["magic"]
            ok &= magic_matches_unit(um, dm)
            if not ok.all():
                m = int(np.argmin(ok))
                if m:
                    yield self._batch(buf, rel[:m], usize[:m], hdr[:m], pos[:m])
                yield from self._slow(fd, fsize, off + int(rel[m]), k + m)
                return
            yield self._batch(buf, rel, usize, hdr, pos)
            k += n
            off += nbytes
        if self.hi is None or k < self.hi:
            # the index ran out before the valid end (e.g. a lost index tail): walk the data
            if not self._segment_done(fd, fsize, off):
                yield from self._slow(fd, fsize, off, k)

    def _segment_done(self, fd: int, fsize: int, off: int) -> bool:
        """True when nothing but blank padding or zeros follows ``off``."""
        if off + MIN_BLANK_LEN > fsize:
            return True
        magic, size = MAGIC_SIZE.unpack(os.pread(fd, MIN_BLANK_LEN, off))
        return (magic == 0 and size == 0) or (magic == MAGIC_BLANK and off + size == fsize)

    @staticmethod
    def _headers(buf: bytes, rel: np.ndarray) -> np.ndarray:
        u8 = np.frombuffer(buf, np.uint8)
        win = np.lib.stride_tricks.sliding_window_view(u8, BODY_OFFSET)
        return np.ascontiguousarray(win[rel]).view(HEADER_DTYPE).ravel()

    def _batch(self, buf: bytes, rel: np.ndarray, usize: np.ndarray, hdr: np.ndarray,
               pos: np.ndarray) -> pa.RecordBatch:
        n = len(rel)
        body_crc = hdr["body_crc"].astype(np.int64)
        bodies = None
        if self.body or self.verify:
            # records lie back to back: one binary array of whole records over the chunk,
            # then Arrow cuts the 48-byte prefix off each (give a stop: pyarrow 26 needs it)
            offsets = np.append(rel, rel[-1] + usize[-1]).astype(np.int32)
            whole = pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                                 pa.py_buffer(buf)])
            bodies = pc.binary_slice(whole, BODY_OFFSET, int(usize.max()))
        if self.verify:
            # the one per-entry step: a C-level CRC-32 call per body
            crc = np.fromiter(map(crc32, bodies.to_pylist()), np.int64, n)
            crc_ok = (body_crc == 0) | (body_crc == crc)
            crc_arr, ok_arr = pa.array(crc), pa.array(crc_ok)
        else:
            crc_arr, ok_arr = pa.nulls(n, pa.int64()), pa.nulls(n, pa.bool_())
        arrays = [
            pa.repeat(self._replica, n),
            pa.repeat(self._segment, n),
            pa.array(hdr["index"].astype(np.int64)),
            pa.array(hdr["term"].astype(np.int64)),
            pa.array(pos),
            pa.array(hdr["magic"].astype(np.int32)),
            pa.array(hdr["size"].astype(np.int32)),
            pa.array(body_crc),
            crc_arr,
            ok_arr,
            pa.nulls(n, pa.string()),
        ]
        if self.body:
            arrays.append(bodies)
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    # -- slow path -----------------------------------------------------------------------
    def _slow(self, fd: int, fsize: int, off: int, expect: int | None):
        """Record-by-record walk from ``off`` (see rule 2 of the module docstring)."""
        t = self.task
        rows = _Rows()
        with mmap.mmap(fd, fsize, access=mmap.ACCESS_READ) as mm:
            walk = iter_segment_records(mm, off, fsize)
            while True:
                if self.hi is not None and expect is not None and expect >= self.hi:
                    break
                item = next(walk, None)
                if item is None or (item.header is None and item.error is None):
                    break  # the segment's end, or a zero header: the data ends
                off, h, problem = item
                if problem is not None:
                    problem = problem.split(" (file")[0]
                elif expect is not None and h.index != expect:
                    problem = f"entry index {h.index} where {expect} was expected"
                if problem is None:
                    k = h.index
                    if self.hi is not None and k >= self.hi:
                        break
                    if self._in_range(k):
                        err = self._unit_disagrees(k, h, t.start + off)
                        self._add_entry(rows, mm, off, h, err)
                    expect = k + 1
                else:
                    k = expect if expect is not None else -1
                    if self._in_range(k) or (k < 0 and self.lo is None):
                        magic, size = MAGIC_SIZE.unpack_from(mm, off)
                        rows.add(replica=t.replica, segment=t.start, index=k, term=None,
                                 pos=t.start + off, magic=magic, size=size, body_crc=None,
                                 crc=None, crc_ok=False, error=problem,
                                 body=b"" if self.body else None)
                    nxt = self._resync(mm, fsize, expect)
                    if nxt is None:
                        break
                    off, expect = nxt
                    walk = iter_segment_records(mm, off, fsize)
                if len(rows) >= self.batch_rows:
                    yield self._rows_batch(rows)
                    rows = _Rows()
        if len(rows):
            yield self._rows_batch(rows)

    def _unit_disagrees(self, k: int, h: RecordHeader, pos: int) -> str | None:
        u = read_units(self.task.index_dir, self.task.index_file_size, k, 1)
        if len(u) != 1:
            return None  # no unit: the store rebuilds it from the data (recovery rule)
        unit = IndexUnit(*(int(u[c][0]) for c in ("magic", "pos", "size", "index", "term")))
        if unit.index != k or unit.pos != pos:
            return None  # stale or missing unit: nothing to compare with
        if not matches_unit(unit, h.magic, h.size, k, h.term, pos, h.body_crc):
            return (f"record header (magic {h.magic}, size {h.size}, term {h.term}) "
                    f"disagrees with its index unit (magic {unit.magic}, size {unit.size}, "
                    f"term {unit.term})")
        return None

    def _resync(self, mm, fsize: int, expect: int | None):
        """Where the walk goes on after a bad record: the next entry's intact record, if any."""
        if expect is None:
            return None
        t = self.task
        k = expect + 1
        pos = unit_position(t, k)
        if pos is None or not t.start <= pos < t.start + fsize:
            return None
        off = pos - t.start
        try:
            fields = decode_header(mm, off, limit=fsize)
        except CorruptEntryError:
            return None
        if fields.index != k:
            return None
        return off, k

    def _add_entry(self, rows: _Rows, mm, off: int, h: RecordHeader, err: str | None) -> None:
        magic, size, k, term, body_crc = h.magic, h.size, h.index, h.term, h.body_crc
        t = self.task
        body = mm[off + BODY_OFFSET:off + size]
        crc = ok = None
        if self.verify:
            crc = crc32(body)
            ok = body_crc == 0 or body_crc == crc
        if err is not None:
            ok = False
        rows.add(replica=t.replica, segment=t.start, index=k, term=term, pos=t.start + off,
                 magic=magic, size=size, body_crc=body_crc, crc=crc, crc_ok=ok, error=err,
                 body=body if self.body else None)

    def _rows_batch(self, rows: _Rows) -> pa.RecordBatch:
        arrays = [pa.array(rows.cols[f.name], type=f.type) for f in self.schema]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def read_segment(task: SegmentTask, lo: int | None = None, hi: int | None = None, *,
                 body: bool = True, verify: bool = True):
    """Record batches of one segment (see ``SegmentReader``)."""
    return SegmentReader(task, lo, hi, body=body, verify=verify).batches()


def read_tasks(batches, tasks: list[SegmentTask], lo: int | None = None, hi: int | None = None,
               *, body: bool = True, verify: bool = True):
    """The record batches of ``tasks[i]`` for every ``i`` in the first column of ``batches``.

    The function behind ``DataFrame.mapInArrow`` over ``spark.range(len(tasks))``: each row of
    the input names one segment to read. Reading segments this way needs only the executors'
    Python workers (no data source planning, see ``dledger.spark.audit``).
    """
    for batch in batches:
        for i in batch.column(0).to_pylist():
            yield from read_segment(tasks[i], lo, hi, body=body, verify=verify)


def read_stores(paths: list[str], lo: int | None = None, hi: int | None = None, *,
                body: bool = True, verify: bool = True) -> pa.Table:
    """All entries of ``paths`` as one Arrow table, without Spark (tests, small tools)."""
    infos = [store_info(p, r) for p, r in zip(paths, replica_names(paths))]
    schema = ENTRY_ARROW_SCHEMA if body else HEADER_ARROW_SCHEMA
    batches = [b for t in plan_segments(infos, lo, hi)
               for b in read_segment(t, lo, hi, body=body, verify=verify)]
    return pa.Table.from_batches(batches, schema=schema)
