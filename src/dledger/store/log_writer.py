"""LogWriter: the file store's write paths (leader single and batch, follower batch).

A part of ``DLedgerMmapFileStore`` (see ``mmap_file_store.py``): it holds the shared state
(``state.StoreState``), writes records into its ``data_list`` and index units into its
``index_list``, reads the current term from its ``term_file``, and moves
``ledger_end_index``/``ledger_end_term`` there. It owns the append hooks. Its settings
(``durability``, the largest entry) come from ``StoreOptions``; ``truncate_index_to`` (the cut
part's) cuts the index list back when an append is undone. The façade's append entry points
carry the write gate (``store_io.writes_to_disk``) and call ``append_leader`` and
``append_follower`` here.

Rules:
- leaders stamp each record's ``pos`` with its local position; a follower's batch is checked
  in full (``follower_batch.plan_follower_batch``) before any byte of it is written, then
  copied unchanged, so replicas are byte-identical;
- ``body_crc`` is the CRC-32 of the final body, after the append hooks;
- the 8 bytes after the last record are zeroed (``_mark_end``), so bytes left by an earlier
  truncation never read as a continuation of the log;
- an append that raises before counting its entries (a full disk when a segment is created, a
  hook that raised) counts none of them and is cut back (``_cut_back``): it changed nothing;
- in ``fsync`` mode every append call msyncs what it wrote, data then index, before it returns,
  and writes its index units only once its data is synced: an index unit on disk then proves
  its record's data was synced, so recovery tells a lost write of acknowledged data (units of
  later entries present) from an append a power cut interrupted (no units past its data);
  when that msync fails the append raises ``DISK_ERROR``, the log end goes back to where it
  was before the call (the store never counts an entry it could not make durable), and the
  store is failed (``StoreState.fail``, ``flusher.py``): it refuses every later append until it is reopened.

The loops here are the store's hot paths (see docs/architecture.md, "Why the hot path looks
the way it does"): segment state is kept in locals, and batches go column-wise where that wins.
The objects fixed for the store's life (the segment lists, the term file, the settings) are the
part's own attributes, so a per-entry path reads them in one step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import accumulate, chain, repeat, starmap
from operator import add

from dledger.entry import (BODY_OFFSET, INDEX_UNIT, INDEX_UNIT_SIZE, MIN_BLANK_LEN,
                           RECORD_PREFIX, VALID_MAGICS, DLedgerEntry, IndexUnit, crc32)
from dledger.errors import (DISK_ERROR, DISK_FULL, INCONSISTENT_STATE, INCONSISTENT_TERM,
                            DLedgerError, EntryTooLargeError, ReadOnlyStoreError)
from dledger.store.durability import FSYNC
from dledger.store.follower_batch import plan_follower_batch
from dledger.store.log_store import AppendBatchResult, AppendHook
from dledger.store.mmap_file import MmapFile
from dledger.store.mmap_file_list import zero_header_at
from dledger.store.options import StoreOptions
from dledger.store.state import StoreState

_ZERO8 = bytes(MIN_BLANK_LEN)


class LogWriter:
    """Appending to the file store (a part of ``DLedgerMmapFileStore``)."""

    def __init__(self, state: StoreState, options: StoreOptions,
                 truncate_index_to: Callable[[int], None]) -> None:
        self.state = state
        self.data_list = state.data_list
        self.index_list = state.index_list
        self.term_file = state.term_file
        self.read_only = state.read_only
        self.store_dir = state.store_dir
        self.durability = options.durability
        #: the largest record accepted (``StoreOptions.entry_size_limit``)
        self.max_entry_size = options.entry_size_limit
        #: cut the index list back to entry ``i`` (the cut part's, ``Cut.truncate_index_to``)
        self.truncate_index_to = truncate_index_to
        self.hooks: list[AppendHook] = []
        self._encode_buf = bytearray()

    def add_append_hook(self, hook: AppendHook) -> None:
        """Run ``hook`` on every leader append (see ``DLedgerMmapFileStore.add_append_hook``)."""
        if hook not in self.hooks:
            self.hooks.append(hook)

    def _check_append(self) -> None:
        self.state.check_open()
        if self.read_only:
            raise ReadOnlyStoreError(f"store {self.store_dir} is opened read-only")
        if self.state.failed is not None:
            self.state.check_not_failed()
        if self.state.is_disk_full:
            raise DLedgerError(f"disk full: store {self.store_dir} refuses appends", DISK_FULL)
        expected = (self.state.ledger_end_index + 1) * INDEX_UNIT_SIZE
        if self.index_list.max_wrote_position() != expected and self.index_list.files:
            raise DLedgerError(f"index list at {self.index_list.max_wrote_position()}, expected "
                               f"{expected}", DISK_ERROR)

    def _ensure_index_start(self) -> None:
        if not self.index_list.files:
            self.index_list.rebuild_with_pos((self.state.ledger_end_index + 1) * INDEX_UNIT_SIZE)

    def append_leader(self, bodies: Sequence[bytes], magic: int,
                      entries: list[DLedgerEntry] | None) -> AppendBatchResult:
        """Append ``bodies`` as leader (index, term, pos assigned here); ``entries``: the
        entries they came from, filled in as written (a single append), or None (a batch)."""
        self._check_append()
        if magic not in VALID_MAGICS:
            raise ValueError(f"invalid magic {magic}")
        if not bodies:
            return AppendBatchResult(self.state.ledger_end_index + 1, self.term_file.term, [])
        limit = self.max_entry_size - BODY_OFFSET
        if max(map(len, bodies)) > limit:
            big = next(i for i, b in enumerate(bodies) if len(b) > limit)
            raise EntryTooLargeError(f"entry body of {len(bodies[big])} bytes exceeds the maximum "
                                     f"of {limit} bytes (max_entry_size {self.max_entry_size})")
        term = self.term_file.term
        if term < self.state.ledger_end_term:
            raise DLedgerError(f"current term {term} is below the last entry's term "
                               f"{self.state.ledger_end_term}", INCONSISTENT_TERM)
        self._ensure_index_start()
        first_index = index = self.state.ledger_end_index + 1
        data, idx = self.data_list, self.index_list
        start_pos = data.max_wrote_position()
        if entries is None and len(bodies) > 1:
            result = self._append_leader_joined(bodies, magic, term, first_index, start_pos)
            if result is not None:
                return result
        positions: list[int] = []
        add = positions.append
        pack_rec = RECORD_PREFIX.pack_into
        pack_idx = INDEX_UNIT.pack_into
        hooks = self.hooks
        # The loop keeps each segment's state in locals and writes it back on segment switches
        # and at the end: attribute traffic was a third of the per-entry cost. It packs its own
        # index units rather than handing them to _write_index_units: that helper's list, zip
        # and join cost single appends a third of their rate (325K -> 221K/s at 128 B).
        df = data.files[-1] if data.files else None
        if df is None:
            df = data.reserve(BODY_OFFSET + len(bodies[0]))
        wp, dsize, base, mm, ready = df.wrote_position, df.file_size, df.file_from_offset, df.mm, df.populated_to
        xf = idx.files[-1]
        xw, xsize, xmm = xf.wrote_position, xf.file_size, xf.mm
        #: fsync mode: the index units, written only once the data is synced (_end_append)
        deferred: list[tuple] | None = [] if self.durability is FSYNC else None
        try:
            for body in bodies:
                n = len(body)
                size = BODY_OFFSET + n
                if wp + size + MIN_BLANK_LEN > dsize:
                    df.wrote_position = wp
                    df = data.reserve(size)
                    wp, dsize, base, mm, ready = (df.wrote_position, df.file_size, df.file_from_offset,
                                                  df.mm, df.populated_to)
                if wp + size > ready:
                    df.populate(wp, wp + size)
                    ready = df.populated_to
                pos = base + wp
                if hooks:
                    self._write_hooked(df, wp, body, magic, index, term, pos, entries, len(positions))
                else:
                    crc = crc32(body)
                    pack_rec(mm, wp, magic, size, index, term, pos, 0, 0, crc, n)
                    mm[wp + BODY_OFFSET:wp + size] = body
                    if entries is not None:
                        e = entries[len(positions)]
                        e.index, e.term, e.pos, e.size, e.body_crc, e.magic = index, term, pos, size, crc, magic
                wp += size
                if deferred is not None:
                    deferred.append((magic, pos, size, index, term))
                else:
                    if xw + INDEX_UNIT_SIZE > xsize:
                        xf.wrote_position = xw
                        xf = idx.reserve(INDEX_UNIT_SIZE, use_blank=False)
                        xw, xsize, xmm = xf.wrote_position, xf.file_size, xf.mm
                    pack_idx(xmm, xw, magic, pos, size, index, term)
                    xw += INDEX_UNIT_SIZE
                add(pos)
                index += 1
        except Exception:
            df.wrote_position = wp
            xf.wrote_position = xw
            self._cut_back(start_pos)
            raise
        df.wrote_position = wp
        xf.wrote_position = xw
        self._end_append(df, first_index, first_index + len(positions) - 1, term, start_pos, deferred)
        return AppendBatchResult(first_index, term, positions)

    def _append_leader_joined(self, bodies: Sequence[bytes], magic: int, term: int, first_index: int,
                              start_pos: int) -> AppendBatchResult | None:
        """A batch of small bodies that fits the current segment: every record encoded by one
        ``map`` and one join, written with one copy, its index units likewise; no Python
        bytecode runs per entry. None when the batch crosses a segment end or its bodies
        average over 4 KiB (there the loop's single copy wins); the loop then writes it."""
        n = len(bodies)
        lens = list(map(len, bodies))
        total = sum(lens) + BODY_OFFSET * n
        files = self.data_list.files
        if total > n * 4096 or not files:
            return None
        df = files[-1]
        wp = df.wrote_position
        if wp + total + MIN_BLANK_LEN > df.file_size:
            return None
        sizes = list(map(add, lens, repeat(BODY_OFFSET, n)))
        positions = list(accumulate(sizes[:-1], initial=df.file_from_offset + wp))
        indexes = range(first_index, first_index + n)
        if self.hooks:
            records = self._hooked_records(bodies, magic, term, lens, sizes, positions, indexes)
        else:
            heads = map(RECORD_PREFIX.pack, repeat(magic, n), sizes, indexes, repeat(term, n), positions,
                        repeat(0, n), repeat(0, n), map(crc32, bodies), lens)
            records = b"".join(chain.from_iterable(zip(heads, bodies)))
        if wp + total > df.populated_to:
            df.populate(wp, wp + total)
        df.mm[wp:wp + total] = records
        df.wrote_position = wp + total
        units = list(zip(repeat(magic, n), positions, sizes, indexes, repeat(term, n)))
        deferred = None
        if self.durability is FSYNC:
            deferred = units                     # written once the data is synced
        else:
            try:
                self._write_index_units(units, 0, n)
            except Exception:
                self._cut_back(start_pos)
                raise
        self._end_append(df, first_index, first_index + n - 1, term, start_pos, deferred)
        return AppendBatchResult(first_index, term, positions)

    def _hooked_records(self, bodies: Sequence[bytes], magic: int, term: int, lens: list[int], sizes: list[int],
                        positions: list[int], indexes: range) -> bytearray:
        """The batch's records joined, each given to the hooks as ``_write_hooked`` gives it (an
        entry with its index, term, pos, size and magic; a view of its record; the body's
        offset), or all at once to each hook's batch form when every hook has one
        (``log_store.BatchedAppendHook``), then each CRC taken over the final body: the same
        bytes as the per-entry path, with the store's own per-entry work done by ``map``. A hook
        that raises leaves nothing written (the records are not in the file yet)."""
        n = len(bodies)
        heads = map(RECORD_PREFIX.pack, repeat(magic, n), sizes, indexes, repeat(term, n), positions,
                    repeat(0, n), repeat(0, n), repeat(0, n), lens)
        buf = bytearray(b"".join(chain.from_iterable(zip(heads, bodies))))
        starts = list(accumulate(sizes[:-1], initial=0))
        hooks = self.hooks
        batch_forms = [getattr(hook, "on_records", None) for hook in hooks]
        batched = all(batch_forms)           # each hook's batch form (``BatchedAppendHook``)
        if batched:
            for on_records in batch_forms:
                on_records(buf, starts, sizes, indexes, positions, term, magic)
        with memoryview(buf) as whole:
            if not batched:
                for body, index, pos, size, start in zip(bodies, indexes, positions, sizes, starts):
                    entry = DLedgerEntry(body, magic, index, term, pos, 0, 0, 0, size)
                    with whole[start:start + size] as view:
                        for hook in hooks:
                            hook(entry, view, BODY_OFFSET)
            body_views = map(whole.__getitem__, map(slice, map(add, starts, repeat(BODY_OFFSET, n)),
                                                     map(add, starts, sizes)))
            crcs = list(map(crc32, body_views))
        # the heads again, CRCs in (``pack_into`` answers None: the map runs for its writes)
        for _ in map(RECORD_PREFIX.pack_into, repeat(buf, n), starts, repeat(magic, n), sizes, indexes,
                     repeat(term, n), positions, repeat(0, n), repeat(0, n), crcs, lens):
            pass
        return buf

    def _end_append(self, df: MmapFile | None, first_index: int, last_index: int, last_term: int,
                    start_pos: int, deferred: list[tuple] | None = None) -> None:
        """After records ``first_index..last_index`` were written from data position
        ``start_pos`` on: move the log end, mark it, and sync in fsync mode: the data, then the
        index units (``deferred``: written only now, after the data sync), then the index (a
        failed sync puts the log end back and fails the store)."""
        before = self.state.ledger_end_index, self.state.ledger_end_term
        self.state.ledger_end_index = last_index
        self.state.ledger_end_term = last_term
        self._mark_end(df)
        if self.durability is FSYNC:
            try:
                self.data_list.sync_from(start_pos)
            except OSError as exc:
                self.state.ledger_end_index, self.state.ledger_end_term = before
                raise self.state.sync_failed(f"msync of entries {first_index}..{last_index}", exc) from exc
            if deferred:
                try:
                    self._write_index_units(deferred, 0, len(deferred))
                except Exception:
                    # a full disk at a new index segment: the append changes nothing
                    self.state.ledger_end_index, self.state.ledger_end_term = before
                    self._cut_back(start_pos)
                    raise
            try:
                self.index_list.sync_from(first_index * INDEX_UNIT_SIZE)
            except OSError as exc:
                self.state.ledger_end_index, self.state.ledger_end_term = before
                raise self.state.sync_failed(f"msync of entries {first_index}..{last_index}", exc) from exc

    def _cut_back(self, start_pos: int) -> None:
        """An append raised before it counted its entries (a full disk at a segment's creation,
        a hook that raised): cut the data list back to ``start_pos``, where the call began,
        and the index list back to the log's end, so the call changed nothing. Left there, the
        bytes of uncounted records would lie before the next append's position and break the
        log's chain at recovery, and stray index units would refuse every later append."""
        data, idx = self.data_list, self.index_list
        try:
            if data.files and data.max_wrote_position() > start_pos:
                data.truncate_offset(start_pos)
                zero_header_at(data, start_pos)
            if idx.files and idx.max_wrote_position() > (self.state.ledger_end_index + 1) * INDEX_UNIT_SIZE:
                self.truncate_index_to(self.state.ledger_end_index + 1)
        except OSError as exc:
            self.state.fail(f"msync while undoing a refused append failed: {exc}")

    def _write_hooked(self, df: MmapFile, wp: int, body: bytes, magic: int, index: int, term: int,
                      pos: int, entries: list[DLedgerEntry] | None, k: int) -> None:
        size = BODY_OFFSET + len(body)
        buf = self._encode_buf
        if len(buf) < size:
            buf.extend(bytes(size - len(buf)))
        RECORD_PREFIX.pack_into(buf, 0, magic, size, index, term, pos, 0, 0, 0, len(body))
        buf[BODY_OFFSET:size] = body
        entry = entries[k] if entries is not None else DLedgerEntry(body=body, magic=magic)
        entry.index, entry.term, entry.pos, entry.size, entry.magic = index, term, pos, size, magic
        with memoryview(buf) as whole, whole[:size] as view:
            for hook in self.hooks:
                hook(entry, view, BODY_OFFSET)
        final_body = bytes(buf[BODY_OFFSET:size])
        crc = crc32(final_body)
        RECORD_PREFIX.pack_into(buf, 0, magic, size, index, term, pos, 0, 0, crc, len(body))
        df.mm[wp:wp + size] = buf[:size]
        entry.body, entry.body_crc = final_body, crc

    @staticmethod
    def _mark_end(f: MmapFile | None) -> None:
        """Zero the 8 bytes after the last record, so bytes left behind by an earlier truncation
        never read as a continuation of the log."""
        if f is not None and f.wrote_position + MIN_BLANK_LEN <= f.file_size:
            f.mm[f.wrote_position:f.wrote_position + MIN_BLANK_LEN] = _ZERO8

    def append_follower(self, records, leader_term: int) -> int:
        """Append encoded records exactly as they lie in the leader's data file (see
        ``DLedgerMmapFileStore.batch_append_as_follower``). Returns the new end index."""
        self._check_append()
        if leader_term != self.term_file.term:
            raise DLedgerError(f"leader term {leader_term} differs from local term "
                               f"{self.term_file.term}", INCONSISTENT_TERM)
        view = memoryview(records)
        data = self.data_list
        has_position = bool(data.files) or (self.state.ledger_end_index < 0 and self.state.ledger_before_begin_index < 0)
        plan = plan_follower_batch(view, expect_index=self.state.ledger_end_index + 1,
                                   last_term=self.state.ledger_end_term, leader_term=leader_term,
                                   next_pos=data.max_wrote_position() if has_position else None,
                                   file_size=data.mapped_file_size, max_entry_size=self.max_entry_size)
        units = plan.units
        if not units:
            return self.state.ledger_end_index
        first = IndexUnit._make(units[0])
        if not data.files and first.pos != 0:
            data.rebuild_with_pos(first.pos)
        self._ensure_index_start()
        start_pos = data.max_wrote_position()
        first_index = first.index
        done = 0
        df = None
        deferring = self.durability is FSYNC         # units written once the data is synced
        try:
            for off, nbytes, k, end in plan.runs:
                # one copy per run: the plan put each run's records back to back in one segment
                df = data.reserve(nbytes)
                wp = df.wrote_position
                run_first = IndexUnit._make(units[k])
                if df.file_from_offset + wp != run_first.pos:
                    raise DLedgerError(f"follower write of entry {run_first.index} would land at "
                                       f"{df.file_from_offset + wp}, not {run_first.pos}", INCONSISTENT_STATE)
                if wp + nbytes > df.populated_to:
                    df.populate(wp, wp + nbytes)
                df.mm[wp:wp + nbytes] = view[off:off + nbytes]
                df.wrote_position = wp + nbytes
                if not deferring:
                    self._write_index_units(units, k, end)
                done = end
        except Exception:
            self._cut_back(start_pos)
            raise
        last = IndexUnit._make(units[done - 1])
        self._end_append(df, first_index, last.index, last.term, start_pos, units[:done] if deferring else None)
        return self.state.ledger_end_index

    def _write_index_units(self, units: list[tuple], k: int, end: int) -> None:
        """Append the index units ``units[k:end]`` (``(magic, pos, size, index, term)`` tuples),
        packed in one join per index segment."""
        idx = self.index_list
        xf = idx.files[-1]
        pack = INDEX_UNIT.pack
        while k < end:
            xw = xf.wrote_position
            room = (xf.file_size - xw) // INDEX_UNIT_SIZE
            if room <= 0:
                xf = idx.reserve(INDEX_UNIT_SIZE, use_blank=False)
                continue
            m = min(room, end - k)
            xf.mm[xw:xw + m * INDEX_UNIT_SIZE] = b"".join(starmap(pack, units[k:k + m]))
            xf.wrote_position = xw + m * INDEX_UNIT_SIZE
            k += m

