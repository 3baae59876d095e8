"""Behaviour both stores share (file and memory): appends, reads, follower checks, truncate, reset."""

import struct

import pytest

from dledger.entry import BODY_OFFSET, MAGIC_NOOP, DLedgerEntry, decode
from dledger.errors import (INCONSISTENT_INDEX, INCONSISTENT_STATE, INCONSISTENT_TERM,
                            INDEX_LESS_THAN_LOCAL_BEGIN, INDEX_OUT_OF_RANGE, CorruptEntryError,
                            DLedgerError, EntryTooLargeError)
from dledger.store import DLedgerMemoryStore


def body(i, n=100):
    return (f"entry-{i}-".encode() * n)[:n]


def test_single_appends_get_consecutive_indices_and_positions(any_store):
    store = any_store(data_file_size=10 * 1024 * 1024)
    for i in range(10):
        e = store.append_as_leader(DLedgerEntry(body=body(i)))
        assert (e.index, e.term, e.pos, e.size) == (i, 0, i * 148, 148)
    assert store.ledger_end_index == 9 and store.ledger_before_begin_index == -1
    assert [store.get(i).body for i in range(10)] == [body(i) for i in range(10)]


def test_batch_positions_follow_the_record_sizes(any_store):
    store = any_store(data_file_size=10 * 1024 * 1024)
    result = store.batch_append_as_leader([bytes(128 * (i + 1)) for i in range(10)])
    assert result.first_index == 0 and result.last_index == 9
    assert result.positions == [48 * i + 128 * i * (i + 1) // 2 for i in range(10)]
    assert store.get(9).pos == result.positions[9]


def test_appends_take_the_current_term_and_terms_never_go_back(any_store):
    store = any_store()
    store.persist_term(3, "n1")
    assert store.append_as_leader(DLedgerEntry(body=b"a")).term == 3
    assert (store.current_term, store.vote_for) == (3, "n1")
    with pytest.raises(DLedgerError) as err:
        store.persist_term(2, None)
    assert err.value.code == INCONSISTENT_TERM


def test_entries_roll_over_segments_with_blank_padding(any_store):
    store = any_store(data_file_size=1024)
    positions = [store.append_as_leader(DLedgerEntry(body=bytes(400))).pos for _ in range(5)]
    # 448-byte records: two fit a 1024-byte segment (896 + 8 <= 1024), the third rolls over
    assert positions == [0, 448, 1024, 1472, 2048]


def test_reading_outside_the_log_names_the_problem(any_store):
    store = any_store()
    store.batch_append_as_leader([b"a", b"b", b"c"])
    with pytest.raises(DLedgerError) as err:
        store.get(3)
    assert err.value.code == INDEX_OUT_OF_RANGE
    with pytest.raises(DLedgerError) as err:
        store.get(-1)
    assert err.value.code == INDEX_OUT_OF_RANGE
    store.reset(0, 0)
    with pytest.raises(DLedgerError) as err:
        store.get(0)
    assert err.value.code == INDEX_LESS_THAN_LOCAL_BEGIN


def test_an_oversized_entry_is_refused_and_nothing_is_written(any_store):
    store = any_store(data_file_size=4096)
    store.append_as_leader(DLedgerEntry(body=b"ok"))
    with pytest.raises(EntryTooLargeError):
        store.batch_append_as_leader([b"fine", bytes(5000)])
    assert store.ledger_end_index == 0
    assert store.append_as_leader(DLedgerEntry(body=b"next")).index == 1


def test_append_hooks_stamp_the_body_and_the_crc_covers_the_final_bytes(any_store):
    store = any_store()
    store.add_append_hook(lambda entry, record, off: struct.pack_into(">q", record, off, entry.index))
    for i in range(10):
        store.append_as_leader(DLedgerEntry(body=bytes(16)))
    for i in range(10):
        e = store.get(i)
        assert struct.unpack_from(">q", e.body)[0] == i and e.crc_ok() and e.body_crc != 0


def test_hooks_see_index_term_and_pos_already_assigned(any_store):
    store = any_store()
    seen = []
    store.add_append_hook(lambda entry, record, off: seen.append(
        (entry.index, entry.pos, struct.unpack_from(">q", record, 24)[0])))
    store.batch_append_as_leader([b"x" * 10, b"y" * 20])
    assert seen == [(0, 0, 0), (1, 58, 58)]


def replicate(leader, follower, term=0, max_bytes=1000):
    i = follower.ledger_end_index + 1
    while i <= leader.ledger_end_index:
        raw, n = leader.get_raw_range(i, max_bytes)
        follower.batch_append_as_follower(raw, term, "n0")
        i += n


def test_a_follower_stores_the_leaders_records_at_the_same_positions(any_store):
    leader = any_store(data_file_size=1024)
    follower = DLedgerMemoryStore(data_file_size=1024)
    leader.batch_append_as_leader([bytes(i * 37 % 400) for i in range(40)])
    leader.append_as_leader(DLedgerEntry(magic=MAGIC_NOOP))
    replicate(leader, follower)
    assert follower.ledger_end_index == leader.ledger_end_index == 40
    for i in range(41):
        assert follower.get_raw(i) == leader.get_raw(i)
        assert follower.get(i).pos == leader.get(i).pos


def test_follower_append_one_entry_at_a_time(any_store):
    follower = any_store()
    for i in range(10):
        follower.append_as_follower(DLedgerEntry(body=body(i), index=i, term=0, pos=i * 148), 0, "n1")
    assert [follower.get(i).body for i in range(10)] == [body(i) for i in range(10)]


@pytest.mark.parametrize("change,code", [
    (lambda e: setattr(e, "index", 5), INCONSISTENT_INDEX),
    (lambda e: setattr(e, "pos", 999), INCONSISTENT_STATE),
    (lambda e: setattr(e, "term", 7), INCONSISTENT_TERM),
])
def test_a_follower_refuses_a_push_that_does_not_continue_its_log(any_store, change, code):
    follower = any_store()
    follower.append_as_follower(DLedgerEntry(body=b"zero", index=0, term=0, pos=0), 0)
    bad = DLedgerEntry(body=b"one", index=1, term=0, pos=52)
    change(bad)
    with pytest.raises(DLedgerError) as err:
        follower.append_as_follower(bad, 0)
    assert err.value.code == code
    assert follower.ledger_end_index == 0


def test_a_push_with_a_bad_record_anywhere_writes_nothing(any_store):
    leader = DLedgerMemoryStore(data_file_size=4096)
    leader.batch_append_as_leader([b"a" * 10, b"b" * 10, b"c" * 10])
    raw = bytearray(leader.get_raw_range(0, 10_000)[0])
    raw[-1] ^= 0xFF  # last body byte: CRC mismatch
    follower = any_store()
    with pytest.raises(CorruptEntryError, match="CRC"):
        follower.batch_append_as_follower(raw, 0)
    assert follower.ledger_end_index == -1
    with pytest.raises(CorruptEntryError):
        follower.batch_append_as_follower(raw[:-5], 0)  # truncated record
    assert follower.ledger_end_index == -1


def test_a_push_from_a_stale_leader_term_is_refused(any_store):
    follower = any_store()
    follower.persist_term(2, None)
    leader = DLedgerMemoryStore()
    leader.persist_term(1, None)
    leader.append_as_leader(DLedgerEntry(body=b"x"))
    with pytest.raises(DLedgerError) as err:
        follower.batch_append_as_follower(leader.get_raw(0), 1)
    assert err.value.code == INCONSISTENT_TERM


def test_truncate_removes_the_suffix_and_appends_continue_at_the_cut(any_store):
    store = any_store(data_file_size=1024)
    res = store.batch_append_as_leader([bytes(200)] * 10)
    assert store.truncate(4) == 3
    assert store.ledger_end_index == 3
    with pytest.raises(DLedgerError):
        store.get(4)
    e = store.append_as_leader(DLedgerEntry(body=b"new"))
    assert (e.index, e.pos) == (4, res.positions[4])
    assert store.get(4).body == b"new" and store.get(3).body == bytes(200)
    assert store.truncate(100) == 4  # beyond the end: nothing to do


def test_truncate_never_removes_committed_entries(any_store):
    store = any_store()
    store.batch_append_as_leader([b"a", b"b", b"c"])
    store.update_committed_index(1)
    with pytest.raises(DLedgerError) as err:
        store.truncate(1)
    assert err.value.code == INCONSISTENT_STATE
    assert store.truncate(2) == 1


def test_truncate_to_entry_keeps_an_equal_local_copy_and_drops_the_rest(any_store):
    leader = DLedgerMemoryStore(data_file_size=1024)
    leader.batch_append_as_leader([bytes(300)] * 8)
    follower = any_store(data_file_size=1024)
    replicate(leader, follower)
    assert follower.truncate_to_entry(leader.get(5), 0, "n0") == 5
    assert follower.ledger_end_index == 5
    assert follower.truncate_to_entry(leader.get(6), 0, "n0") == 6
    # an entry beyond what the follower holds: it restarts its log at that entry
    assert follower.truncate_to_entry(leader.get(7), 0, "n0") == 7
    assert follower.get(7) == leader.get(7)


def test_truncate_to_entry_far_beyond_the_log_rebuilds_at_the_leaders_position(any_store):
    leader = DLedgerMemoryStore(data_file_size=1024)
    leader.batch_append_as_leader([bytes(300)] * 12)
    follower = any_store(data_file_size=1024)
    replicate(leader, follower)
    follower.truncate(3)
    assert follower.truncate_to_entry(leader.get(9), 0, "n0") == 9
    assert follower.ledger_before_begin_index == 8
    assert follower.get(9).pos == leader.get(9).pos
    replicate(leader, follower)
    assert follower.ledger_end_index == 11 and follower.get_raw(11) == leader.get_raw(11)


def test_reset_drops_a_prefix_and_keeps_the_rest(any_store):
    store = any_store(data_file_size=1024)
    store.batch_append_as_leader([bytes(300)] * 10)
    assert store.reset(4, 0) == 5
    assert store.ledger_before_begin_index == 4 and store.ledger_before_begin_term == 0
    assert store.get(5).index == 5 and store.ledger_end_index == 9
    assert store.get_entry_term(4) == 0
    assert store.reset(2, 0) == 5  # not forward: nothing happens


def test_reset_of_the_whole_log_leaves_an_empty_log_that_continues_after_it(any_store):
    store = any_store(data_file_size=1024)
    res = store.batch_append_as_leader([bytes(100)] * 4)
    store.persist_term(2, None)
    store.reset(9, 2, next_pos=5000)
    assert (store.ledger_before_begin_index, store.ledger_end_index, store.ledger_end_term) == (9, 9, 2)
    e = store.append_as_leader(DLedgerEntry(body=b"after"))
    assert (e.index, e.pos) == (10, 5000)
    assert res.positions


def test_first_log_of_target_term(any_store):
    store = any_store()
    for term, count in ((0, 3), (2, 4), (5, 2)):
        store.persist_term(term, None)
        store.batch_append_as_leader([b"t"] * count)
    assert store.get_first_log_of_target_term(2, store.ledger_end_index).index == 3
    assert store.get_first_log_of_target_term(5, 8).index == 7
    assert store.get_first_log_of_target_term(4, 8) is None


def test_raw_range_respects_the_byte_budget_but_returns_at_least_one(any_store):
    store = any_store(data_file_size=1 << 20)
    store.batch_append_as_leader([bytes(100)] * 10)
    raw, n = store.get_raw_range(0, 10)
    assert n == 1 and len(raw) == 148
    raw, n = store.get_raw_range(2, 148 * 3)
    assert n == 3 and decode(raw, 0).index == 2 and decode(raw, 296).index == 4
    raw, n = store.get_raw_range(8, 1 << 20, max_count=5)
    assert n == 2
    assert BODY_OFFSET == 48
