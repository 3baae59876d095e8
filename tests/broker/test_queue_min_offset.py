"""A queue's min offset: a replica whose log begins after index 0 (it caught up past the
leader's retention, or retention removed its own head) serves each queue from the first
message it still holds, and says so (RocketMQ's min offset)."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.broker.consume_queue import CQ_UNIT_SIZE, ConsumeQueue
from dledger.broker.message_codec import decode
from dledger.broker.reput import ReputService
from dledger.entry import BODY_OFFSET

from .test_reput_dispatch import INDEX, dispatch_all, fill, open_store


# -- the consume queue ------------------------------------------------------------------------
def test_a_queue_started_later_keeps_its_start_across_a_reopen(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "T", 0, units_per_file=8)
    cq.restart_at(1003)
    for k in range(5):
        cq.put_next(1000 + 100 * k, 90, 7)
    cq.flush()
    cq.close()
    cq = ConsumeQueue(str(tmp_path), "T", 0, units_per_file=8)
    assert (cq.min_offset, cq.max_offset, cq.max_physical_offset) == (1003, 1008, 1490)
    assert cq.units(0, 3) == [(1000, 90, 7), (1100, 90, 7), (1200, 90, 7)]
    assert cq.first_offset_from(1150) == 1005 and cq.first_offset_from(0) == 1003
    assert cq.first_offset_from(5000) == 1008


def test_restart_drops_the_old_units_and_their_files(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "T", 0, units_per_file=4)
    for k in range(10):
        cq.put_next(100 * k, 50, 1)
    cq.commit()
    cq.restart_at(2)
    cq.put_next(5000, 50, 1)
    cq.flush()
    cq.close()
    assert sorted(os.listdir(cq.dir)) == ["00000000000000000000"]
    cq = ConsumeQueue(str(tmp_path), "T", 0, units_per_file=4)
    assert (cq.min_offset, cq.max_offset, cq.units(0, 9)) == (2, 3, [(5000, 50, 1)])


def test_truncation_stays_within_a_later_start(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "T", 0, units_per_file=4)
    cq.restart_at(6)
    for k in range(4):
        cq.put_next(100 * k, 50, 1)
    assert cq.truncate_from_physical(200) == 2 and (cq.min_offset, cq.max_offset) == (6, 8)
    assert cq.truncate_from_physical(0) == 2 and (cq.min_offset, cq.max_offset, cq.max_physical_offset) == (6, 6, 0)
    for k in range(3):
        cq.put_next(100 * k, 50, 1)
    assert cq.truncate_to(7) and (cq.min_offset, cq.max_offset) == (6, 7)
    assert cq.truncate_to(4) and (cq.min_offset, cq.max_offset, cq.units(0, 5)) == (4, 4, [])


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 40), st.lists(st.integers(1, 500), max_size=30), st.integers(1, 9))
def test_any_start_and_units_read_back_after_a_reopen(tmp_path_factory, start, sizes, per_file):
    root = str(tmp_path_factory.mktemp("cq"))
    cq = ConsumeQueue(root, "T", 3, units_per_file=per_file)
    cq.restart_at(start)
    units, pos = [], 10_000
    for size in sizes:
        cq.put_next(pos, size, size * 3)
        units.append((pos, size, size * 3))
        pos += size
    cq.flush()
    cq.close()
    cq = ConsumeQueue(root, "T", 3, units_per_file=per_file)
    if units:
        assert (cq.min_offset, cq.max_offset) == (start, start + len(units))
    else:
        assert cq.min_offset == cq.max_offset      # nothing written: an empty queue
    assert cq.units(0, 100) == units


# -- the dispatch -----------------------------------------------------------------------------
def _messages_after(store, k):
    """(topic, queue id) -> [(queue offset, physical offset)] of the messages after entry ``k``."""
    out = {}
    for i in range(k + 1, store.ledger_end_index + 1):
        e = store.get(i)
        m = decode(e.body, inflate=False)
        out.setdefault((m.topic, m.queue_id), []).append((m.queue_offset, e.pos + BODY_OFFSET))
    return out


@pytest.mark.parametrize("dispatched_before", [None, 10, 40])
def test_a_log_that_begins_later_starts_each_queue_at_its_first_message_there(tmp_path, dispatched_before):
    store = open_store(tmp_path / "store")
    fill(store, "m" * 70, seed=3)
    reput = ReputService(str(tmp_path / "r"), units_per_file=5, index_options=INDEX)
    if dispatched_before is not None:
        reput.dispatch_up_to(store, dispatched_before)
    store.reset(30, store.get_entry_term(30))           # the head goes: entries 0..30
    dispatch_all(reput, store)
    expect = _messages_after(store, 30)

    def check(r):
        for key, msgs in expect.items():
            cq = r.queue(*key)
            lo = r.min_queue_offset(store, *key)
            assert (lo, cq.max_offset) == (msgs[0][0], msgs[-1][0] + 1), key
            assert [u[0] for u in cq.units(lo, 100)] == [phys for _q, phys in msgs]
            if dispatched_before is None:               # never dispatched: the queue starts there
                assert cq.min_offset == lo
        assert r.problems == []

    check(reput)
    reput.checkpoint()
    reput.close()
    check(ReputService(str(tmp_path / "r"), units_per_file=5, index_options=INDEX))


def test_after_retention_the_min_offset_is_the_first_message_the_log_still_holds(tmp_path):
    store = open_store(tmp_path / "store")
    fill(store, "m" * 70, seed=5)
    reput = ReputService(str(tmp_path / "r"), units_per_file=5, index_options=INDEX)
    dispatch_all(reput, store)                        # every queue from 0, then the head goes
    store.reset(30, store.get_entry_term(30))
    for key, msgs in _messages_after(store, 30).items():
        assert reput.queues[key].min_offset == 0
        assert reput.min_queue_offset(store, *key) == msgs[0][0]
    assert reput.min_queue_offset(store, "nobody", 0) == 0


def test_a_wrong_stamp_on_a_log_that_begins_at_zero_is_still_a_problem(tmp_path):
    store = open_store(tmp_path / "store")
    fill(store, "mmmbmm", seed=1)
    reput = ReputService(str(tmp_path / "r"), units_per_file=5, index_options=INDEX)
    dispatch_all(reput, store)
    assert len(reput.problems) == 1 and all(cq.min_offset == 0 for cq in reput.queues.values())


def test_units_are_20_bytes_at_their_queue_offset(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "T", 0, units_per_file=4)
    cq.restart_at(5)
    cq.put_next(777, 10, 1)
    cq.flush()
    with open(os.path.join(cq.dir, "00000000000000000080"), "rb") as f:
        data = f.read()
    assert data[:CQ_UNIT_SIZE] == bytes(CQ_UNIT_SIZE) and data[CQ_UNIT_SIZE:2 * CQ_UNIT_SIZE] != bytes(CQ_UNIT_SIZE)
