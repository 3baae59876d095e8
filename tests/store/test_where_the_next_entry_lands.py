"""Where a follower's next entry lands is where the leader put it: a pad left after the log's
last entry (its entry truncated or lost) does not move it (swarm seed 4200090), nor does an
empty log placed elsewhere by a log-start move finished without the leader's position (swarm
seed 5200124); in both cases the follower once refused the leader's entry for good."""

from __future__ import annotations

from dledger.entry import MAGIC_BLANK, MAGIC_SIZE, decode_header
from dledger.store import DLedgerMmapFileStore

SEGMENT = 4096


def _store(path):
    s = DLedgerMmapFileStore.open(str(path), data_file_size=SEGMENT, index_file_size=32 * 256, durability="fsync")
    s.persist_term(1, None)
    return s


def _fill(s, first: int = 48):
    """Entries whose last one ends 56 bytes before the segment's end (room for a 48-byte entry
    and a pad, not for a larger one): one of 48 + ``first`` bytes, 58 of 68."""
    s.batch_append_as_leader([b"w" * first] + [b"x" * 20] * 58)
    return s


def test_a_truncated_entry_after_a_pad_leaves_room_for_the_leaders_smaller_one(tmp_path):
    follower = _fill(_store(tmp_path / "f"))
    end = follower.ledger_end_index
    last = decode_header(follower.get_raw(end))
    next_pos = last.pos + last.size
    assert SEGMENT - next_pos % SEGMENT == 56, next_pos
    follower.batch_append_as_leader([b"y" * 40])             # does not fit: padded, next segment
    assert decode_header(follower.get_raw(end + 1)).pos == SEGMENT
    follower.truncate(end + 1)                               # e.g. a new leader's log differs there
    pad = follower._state.data_list.get_data(next_pos, MAGIC_SIZE.size)
    assert MAGIC_SIZE.unpack(pad)[0] == MAGIC_BLANK         # the pad is still there

    leader = _fill(_store(tmp_path / "l"))
    leader.batch_append_as_leader([b""])                     # 48 bytes: fits right after
    record = leader.get_raw(end + 1)
    assert decode_header(record).pos == next_pos

    assert follower.batch_append_as_follower(record, 1) == end + 1
    assert follower.get_raw(end + 1) == record
    follower.close()
    reopened = _store(tmp_path / "f")
    assert reopened.ledger_end_index == end + 1 and reopened.get_raw(end + 1) == record
    reopened.close()
    leader.close()


def test_a_record_elsewhere_is_still_refused(tmp_path):
    follower = _fill(_store(tmp_path / "f"))
    end = follower.ledger_end_index
    follower.batch_append_as_leader([b"y" * 40])
    follower.truncate(end + 1)
    other = _fill(_store(tmp_path / "o"), first=40)         # a log whose entries lie elsewhere
    other.batch_append_as_leader([b"z", b""])
    import pytest
    from dledger.errors import DLedgerError
    with pytest.raises(DLedgerError):
        follower.batch_append_as_follower(other.get_raw(end + 1), 1)
    follower.close()
    other.close()


def test_an_empty_log_placed_elsewhere_takes_the_leaders_position(tmp_path):
    leader = _fill(_store(tmp_path / "l"))
    end = leader.ledger_end_index
    leader.batch_append_as_leader([b""])
    record = leader.get_raw(end + 1)
    follower = _store(tmp_path / "f")
    follower.batch_append_as_leader([b"a" * 10] * 3)
    # a log-start move finished without the leader's position: begins after ``end``, empty, and
    # its next entry would land where its old data ended
    follower.reset(end, 1)
    assert follower.ledger_end_index == end and follower._state.data_list.max_wrote_position() != decode_header(record).pos
    assert follower.batch_append_as_follower(record, 1) == end + 1
    assert follower.get_raw(end + 1) == record
    follower.close()
    reopened = _store(tmp_path / "f")
    assert reopened.get_raw(end + 1) == record
    reopened.close()
    leader.close()
