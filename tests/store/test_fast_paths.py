"""The column-wise fast paths of the store give exactly what the record-by-record paths give.

Three hot paths have a second, column-wise way that runs no Python bytecode per record:
the follower's check of a pushed batch (``plan_by_columns`` beside ``plan_by_record``), the
leader's batch encoding (``_append_leader_joined`` beside the record loop) and the index scan
of ``get_raw_range``. Each is compared here with its reference on random input, damage
included. Reading for a push also skips the record checks for entries written since the
open; the last tests pin down where that trust starts and that followers still refuse a
record damaged after it was written.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from dledger.entry import BODY_OFFSET, DLedgerEntry, encode
from dledger.errors import CorruptEntryError, CorruptStoreError, DLedgerError
from dledger.store import DLedgerMmapFileStore
from dledger.store.follower_batch import next_position, plan_by_columns, plan_by_record
from dledger.store.log_store import BatchedAppendHook

FIELDS = ("magic", "size", "index", "term", "pos", "crc", "body", "body_size")
FIELD_OFFSET = {"magic": 0, "size": 4, "index": 8, "term": 16, "pos": 24, "crc": 40, "body_size": 44}


def lay_out(bodies, first_index, terms, p0, file_size):
    """Encode records as a leader lays them out from position ``p0`` (no blanks in the batch)."""
    out, cur_from, cur_wp = [], p0 - p0 % file_size, p0 % file_size
    for k, body in enumerate(bodies):
        size = BODY_OFFSET + len(body)
        cur_from, cur_wp = next_position(cur_from, cur_wp, size, file_size)
        out.append(encode(DLedgerEntry(body=body, index=first_index + k, term=terms[k], pos=cur_from + cur_wp)))
        cur_wp += size
    return b"".join(out)


@st.composite
def pushed_batches(draw):
    file_size = draw(st.sampled_from([512, 4096, 1 << 20]))
    n = draw(st.integers(1, 12))
    if draw(st.booleans()):
        size = draw(st.integers(0, 60))
        bodies = [bytes((k + j) % 256 for j in range(size)) for k in range(n)]
    else:
        bodies = [bytes((k * 7 + j) % 256 for j in range(draw(st.integers(0, 60)))) for k in range(n)]
    terms = sorted(draw(st.lists(st.integers(2, 4), min_size=n, max_size=n)))
    p0 = draw(st.sampled_from([0, file_size - 200, file_size - 60, 3 * file_size + 100]))
    p0 = max(p0, 0)
    first = draw(st.integers(0, 1000))
    raw = bytearray(lay_out(bodies, first, terms, p0, file_size))
    damage = draw(st.sampled_from((None,) + FIELDS))
    if damage is not None:
        victim = draw(st.integers(0, n - 1))
        off = sum(BODY_OFFSET + len(b) for b in bodies[:victim])
        if damage == "body":
            if not bodies[victim]:
                damage = "crc"
            else:
                raw[off + BODY_OFFSET] ^= 0x20
        if damage != "body":
            fo = FIELD_OFFSET[damage]
            delta = draw(st.sampled_from([-2, -1, 1, 5]))
            raw[off + fo + 3] = (raw[off + fo + 3] + delta) % 256
    next_pos = draw(st.sampled_from(["right", "none", "off"]))
    np_value = {"right": p0, "none": None, "off": p0 + 8}[next_pos]
    expect = draw(st.sampled_from([first, first, first + 1]))
    last_term = draw(st.sampled_from([terms[0], terms[0], terms[0] + 1, 0]))
    leader_term = draw(st.sampled_from([terms[-1], terms[-1], terms[-1] - 1, 9]))
    return memoryview(bytes(raw)), expect, last_term, leader_term, np_value, file_size


@settings(max_examples=600, deadline=None)
@given(pushed_batches())
def test_column_and_record_plans_agree_on_any_batch(case):
    view, expect, last_term, leader_term, next_pos, file_size = case
    args = (view, expect, last_term, leader_term, next_pos, file_size, 1 << 20)
    try:
        reference = plan_by_record(*args)
    except DLedgerError:
        reference = None
    fast = plan_by_columns(*args)
    if fast is not None:
        assert reference is not None, "the column check accepted a batch the record loop refuses"
        assert fast == reference


def test_a_plain_batch_takes_the_column_path():
    raw = lay_out([bytes(100)] * 8, 5, [3] * 8, 1000, 1 << 20)
    plan = plan_by_columns(memoryview(raw), 5, 3, 3, 1000, 1 << 20, 1 << 20)
    assert plan is not None and plan.runs == [(0, len(raw), 0, 8)]
    assert [u[3] for u in plan.units] == list(range(5, 13))


def test_a_batch_crossing_a_segment_end_takes_the_record_path_with_two_runs():
    raw = lay_out([bytes(100)] * 8, 0, [1] * 8, 4096 - 400, 4096)
    view = memoryview(raw)
    assert plan_by_columns(view, 0, 1, 1, 4096 - 400, 4096, 1 << 20) is None
    plan = plan_by_record(view, 0, 1, 1, 4096 - 400, 4096, 1 << 20)
    assert [(k, end) for _o, _n, k, end in plan.runs] == [(0, 2), (2, 8)]
    assert plan.units[2][1] == 4096


# ---------------------------------------------------------------------------------------
# leader batches: joined encoding == record loop, byte for byte
# ---------------------------------------------------------------------------------------
def _files(store):
    out = {}
    for lst in (store.data_list, store.index_list):
        for f in lst.files:
            out[os.path.relpath(f.path, store.store_dir)] = bytes(f.mm[:])
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.integers(0, 300), min_size=1, max_size=30), min_size=1, max_size=12),
       st.sampled_from([2048, 8192]))
def test_joined_leader_batches_write_the_same_bytes_as_the_record_loop(batches, data_file_size):
    base = tempfile.mkdtemp(prefix="dledger-fast-")
    try:
        stores = [DLedgerMmapFileStore.open(os.path.join(base, name), data_file_size=data_file_size,
                                            index_file_size=32 * 16) for name in ("joined", "loop")]
        stores[1]._writer._append_leader_joined = lambda *a: None
        for s in stores:
            s.persist_term(1, None)
        for k, sizes in enumerate(batches):
            bodies = [bytes((k + i + j) % 256 for j in range(n)) for i, n in enumerate(sizes)]
            results = [s.batch_append_as_leader(bodies) for s in stores]
            assert results[0] == results[1]
        assert _files(stores[0]) == _files(stores[1])
        for s in stores:
            s.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _stamp_hook(seen):
    """A hook as the broker's: it reads the entry's fields and writes into the body (its first
    16 bytes, when it has them: the index and the position), and records what it saw."""
    def hook(entry, record, off):
        seen.append((entry.index, entry.term, entry.pos, entry.size, entry.magic, bytes(entry.body),
                     bytes(record[:off])))
        if len(record) >= off + 16:
            struct.pack_into(">qq", record, off, entry.index, entry.pos + off)
    return hook


def _joined_against_loop(batches, data_file_size: int, hooks, first: list[bytes] | None = None) -> None:
    """Write ``batches`` (lists of body sizes) into two stores, the first by the joined path, the
    second by the record loop (its joined path turned off), each with the hooks ``hooks(k,
    seen)`` gives for store ``k`` (``seen``: that store's list for the hooks to fill), after a
    first batch ``first``: the same answers, files and observations, and every CRC good."""
    base = tempfile.mkdtemp(prefix="dledger-fast-")
    try:
        stores = [DLedgerMmapFileStore.open(os.path.join(base, name), data_file_size=data_file_size,
                                            index_file_size=32 * 16) for name in ("joined", "loop")]
        stores[1]._writer._append_leader_joined = lambda *a: None
        seen = [[], []]
        for k, (s, log) in enumerate(zip(stores, seen)):
            s.persist_term(1, None)
            for hook in hooks(k, log):
                s.add_append_hook(hook)
            if first is not None:
                s.batch_append_as_leader(first)
        for k, sizes in enumerate(batches):
            bodies = [bytes((k + i + j) % 256 for j in range(n)) for i, n in enumerate(sizes)]
            results = [s.batch_append_as_leader(bodies) for s in stores]
            assert results[0] == results[1]
        assert seen[0] == seen[1]
        assert _files(stores[0]) == _files(stores[1])
        for i in range(stores[0].ledger_end_index + 1):
            assert stores[0].get(i).crc_ok()
        for s in stores:
            s.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.integers(0, 300), min_size=1, max_size=30), min_size=1, max_size=12),
       st.sampled_from([2048, 8192]))
def test_joined_leader_batches_with_append_hooks_write_the_same_bytes_as_the_record_loop(batches, data_file_size):
    """With append hooks the joined path runs them on views of the joined records and takes each
    CRC after them: the files, the answers and what every hook saw are the record loop's."""
    _joined_against_loop(batches, data_file_size, lambda k, seen: [_stamp_hook(seen)])


def test_a_hook_that_raises_in_a_joined_batch_leaves_nothing_written(open_file_store):
    store = open_file_store()
    store.persist_term(1, None)
    calls = []

    def hook(entry, record, off):
        calls.append(entry.index)
        if entry.index == 2:
            raise ValueError("refused")

    store.add_append_hook(hook)
    store.batch_append_as_leader([b"a" * 20, b"b" * 20])
    files = _files(store)
    with pytest.raises(ValueError):
        store.batch_append_as_leader([b"c" * 20, b"d" * 20, b"e" * 20])
    assert calls == [0, 1, 2] and store.ledger_end_index == 1 and _files(store) == files
    calls.clear()
    store._writer.hooks.remove(hook)
    assert store.batch_append_as_leader([b"f" * 20, b"g" * 20]).first_index == 2
    assert store.get(3).body == b"g" * 20


# ---------------------------------------------------------------------------------------
# get_raw_range: the column-wise index scan == reading record by record
# ---------------------------------------------------------------------------------------
def _reference_range(store, begin, max_bytes, max_count):
    out, nbytes = [store.get_raw(begin)], 0
    nbytes = len(out[0])
    pos = store._reader.index_unit(begin).pos + nbytes
    i = begin + 1
    while i <= store.ledger_end_index and len(out) < max_count:
        unit = store._reader.index_unit(i)
        if unit.pos != pos or nbytes + unit.size > max_bytes:
            break
        out.append(store.get_raw(i))
        nbytes += unit.size
        pos += unit.size
        i += 1
    return b"".join(out), len(out)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 200), min_size=1, max_size=120),
       st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 3000), st.integers(1, 80)), min_size=1,
                max_size=20),
       st.booleans())
def test_raw_ranges_equal_a_record_by_record_read(sizes, reads, reopen):
    base = tempfile.mkdtemp(prefix="dledger-range-")
    try:
        path = os.path.join(base, "s")
        s = DLedgerMmapFileStore.open(path, data_file_size=2048, index_file_size=32 * 16)
        s.persist_term(1, None)
        for i in range(0, len(sizes), 7):
            s.batch_append_as_leader([bytes([i % 256]) * n for n in sizes[i:i + 7]])
        if reopen:                       # then every read also runs the record checks
            s.flush()
            s.close()
            s = DLedgerMmapFileStore.open(path, data_file_size=2048, index_file_size=32 * 16)
        for begin, max_bytes, max_count in reads:
            begin %= len(sizes)
            assert s.get_raw_range(begin, max_bytes, max_count) == _reference_range(s, begin, max_bytes, max_count)
        s.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# which reads for a push are checked
# ---------------------------------------------------------------------------------------
def _damage_body(store, index):
    unit = store._reader.index_unit(index)
    f = store.data_list.find_file(unit.pos)
    at = unit.pos - f.file_from_offset + BODY_OFFSET
    f.mm[at] ^= 0xFF


def test_entries_from_before_the_open_are_checked_when_read_for_a_push_also_after_a_truncation(open_file_store):
    s = open_file_store()
    s.persist_term(1, None)
    s.batch_append_as_leader([b"old-%d" % i for i in range(20)])
    s.flush()
    s.close()
    s = open_file_store()
    _damage_body(s, 5)
    with pytest.raises(CorruptStoreError):
        s.get_raw_range(5, 1 << 20)
    s.batch_append_as_leader([b"new-%d" % i for i in range(10)])   # 20..29, written here
    s.truncate(12)                                                # keeps 0..11, from before the open
    s.batch_append_as_leader([b"again-%d" % i for i in range(5)])  # 12..16
    with pytest.raises(CorruptStoreError):
        s.get_raw_range(3, 1 << 20)
    raw, count = s.get_raw_range(12, 1 << 20)
    assert count == 5 and raw == b"".join(s.get_raw(i) for i in range(12, 17))


def test_a_record_damaged_after_it_was_written_is_refused_by_the_follower(open_file_store):
    leader, follower = open_file_store("leader"), open_file_store("follower")
    for s in (leader, follower):
        s.persist_term(1, None)
    leader.batch_append_as_leader([b"entry-%d" % i for i in range(8)])
    _damage_body(leader, 6)
    raw, count = leader.get_raw_range(0, 1 << 20)   # written here: read back without the checks
    assert count == 8
    with pytest.raises(CorruptEntryError, match="entry 6: body CRC mismatch"):
        follower.batch_append_as_follower(raw, 1)
    assert follower.ledger_end_index == -1           # nothing of the batch was written
    with pytest.raises(CorruptStoreError):
        leader.get(6)                                # and the leader's own reads refuse it



def _batched_stamp_hook(seen, batches_seen):
    """``_stamp_hook`` with its batch form (``BatchedAppendHook``): the same writes, all records
    of a joined batch in one call."""
    per_record = _stamp_hook(seen)

    def on_records(records, starts, sizes, indexes, positions, term, magic):
        batches_seen.append(len(starts))
        with memoryview(records) as whole:
            for start, size, index, pos in zip(starts, sizes, indexes, positions):
                body = bytes(whole[start + BODY_OFFSET:start + size])
                with whole[start:start + size] as view:
                    per_record(DLedgerEntry(body, magic, index, term, pos, 0, 0, 0, size), view, BODY_OFFSET)
    return BatchedAppendHook(per_record, on_records)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.integers(0, 100), min_size=2, max_size=30), min_size=1, max_size=8),
       st.booleans())
def test_a_hooks_batch_form_writes_what_its_record_form_writes_and_runs_once_per_joined_batch(batches, plain_too):
    """The joined leader append gives a ``BatchedAppendHook`` the whole batch at once: the files
    are the record loop's with the per-record form. With a plain hook beside it, every hook is
    run per record (the batch form is not called)."""
    batch_calls = []

    def hooks(k, seen):
        first = _batched_stamp_hook(seen, batch_calls) if k == 0 else _stamp_hook(seen)
        return [first, lambda entry, record, off: None] if plain_too else [first]

    # a first batch makes the first segment (an empty store writes by the loop)
    _joined_against_loop(batches, 8192, hooks, first=[b"first"])
    if plain_too:
        assert batch_calls == []
    else:
        # the first batch fits the first segment: joined; later ones may cross its end (the loop)
        assert batch_calls and batch_calls[0] == len(batches[0]) and len(batch_calls) <= len(batches)


def test_a_batch_form_that_raises_leaves_nothing_written(open_file_store):
    store = open_file_store()
    store.persist_term(1, None)

    def on_records(records, starts, *rest):
        struct.pack_into(">q", records, starts[0] + BODY_OFFSET, 7)
        raise ValueError("refused")

    store.batch_append_as_leader([b"a" * 20])
    files = _files(store)
    store.add_append_hook(BatchedAppendHook(lambda entry, record, off: None, on_records))
    with pytest.raises(ValueError, match="refused"):
        store.batch_append_as_leader([b"c" * 20, b"d" * 20])
    assert store.ledger_end_index == 0 and _files(store) == files
    store._writer.hooks.clear()
    assert store.batch_append_as_leader([b"f" * 20, b"g" * 20]).first_index == 1
    assert store.get(1).body == b"f" * 20
