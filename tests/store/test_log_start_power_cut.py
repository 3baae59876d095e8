"""A follower's log start moved to the leader's (``core.log_start.move_log_start``: a truncation
when its log conflicts, then the store's crash-ordered ``reset`` at the leader's position),
cut by a crash or a power loss at every mapping write and msync it makes. After each cut the
store reopens, the leader's retried install moves it again (a reset that recovery finished
without the leader's position is moved to it), and the leader's records after its begin are
then accepted byte for byte at the leader's positions."""

from __future__ import annotations

import random

import pytest

from dledger.core.log_start import move_log_start
from dledger.entry import decode_header
from dledger.sim.disk import PowerLoss, SimulatedCrash, crash_store
from helpers.small_store import body, open_small

BEGIN = 14          # the leader's before-begin index


def leader_log(d: str):
    """A leader's store whose head (0..BEGIN) is gone: (its begin term, the position of entry
    BEGIN + 1, the encoded records after its begin)."""
    s = open_small(d, "fsync")
    s.clear_suspect()
    s.persist_term(2, None)
    s.batch_append_as_leader([body(i, 90 + 7 * i) for i in range(BEGIN + 6)])
    s.update_committed_index(BEGIN + 5)
    s.reset(BEGIN, s.get_entry_term(BEGIN))
    raw, count = s.get_raw_range(BEGIN + 1, 1 << 20)
    out = (s.ledger_before_begin_term, decode_header(s.get_raw(BEGIN + 1)).pos, bytes(raw), count)
    s.close()
    return out


def follower_run(d: str, pl: PowerLoss, conflicting: bool, move, arm: int | None):
    """A follower behind the leader's begin (``conflicting``: its log reaches past the begin with
    entries of another term); arm a crash at write ``arm``, then move its log start."""
    s = open_small(d, "fsync", store_io=pl.io)
    s.clear_suspect()
    s.persist_term(1, None)
    s.batch_append_as_leader([body(100 + i, 50) for i in range(BEGIN + 3 if conflicting else 6)])
    s.update_committed_index(3)
    s.persist_term(2, None)
    start = pl.ops
    if arm is not None:
        pl.arm(arm)
    try:
        move(s)
    except SimulatedCrash:
        pass
    pl.disarm()
    return s, pl.ops - start


@pytest.mark.parametrize("conflicting", [False, True], ids=["behind", "conflicting"])
@pytest.mark.parametrize("power", [False, True], ids=["crash", "power"])
def test_a_cut_at_every_write_of_a_log_start_move_reopens_and_takes_the_leaders_records(tmp_path, conflicting, power):
    term, next_pos, records, count = leader_log(str(tmp_path / "leader"))

    def move(s):
        return move_log_start(s, BEGIN, term, next_pos, keep=3)

    with PowerLoss() as pl:
        s, total = follower_run(str(tmp_path / "dry"), pl, conflicting, move, None)
        s.close()
    assert total >= 2
    for n in range(total):
        d = str(tmp_path / f"n{n}")
        with PowerLoss() as pl:
            s, _ = follower_run(d, pl, conflicting, move, n)
            if power:
                pl.power_loss(s, random.Random(n))
            else:
                crash_store(s)
        s = open_small(d, "fsync")                                 # never refused
        try:
            assert s.ledger_before_begin_index <= BEGIN, f"cut at write {n}"
            move(s)                                                # the leader's install again
            assert (s.ledger_before_begin_index, s.ledger_before_begin_term, s.ledger_end_index) == \
                (BEGIN, term, BEGIN), f"cut at write {n}"
            assert s.batch_append_as_follower(records, 2) == BEGIN + count
            assert b"".join(bytes(s.get_raw(i)) for i in range(BEGIN + 1, BEGIN + count + 1)) == records
            assert s.verify() == []
        finally:
            s.close()
        s = open_small(d, "fsync")                                 # and it stays so
        try:
            assert (s.ledger_before_begin_index, s.ledger_end_index) == (BEGIN, BEGIN + count)
        finally:
            s.close()


def test_a_log_that_holds_the_begin_entry_is_kept(tmp_path):
    term, next_pos, records, count = leader_log(str(tmp_path / "leader"))
    s = open_small(str(tmp_path / "f"), "fsync")
    s.clear_suspect()
    s.persist_term(2, None)
    for raw in _leader_prefix(str(tmp_path / "leader2")):
        s.batch_append_as_follower(raw, 2)
    before = [bytes(s.get_raw(i)) for i in range(0, s.ledger_end_index + 1)]
    assert s.get_entry_term(BEGIN) == term
    assert move_log_start(s, BEGIN, term, next_pos, keep=-1) is False
    assert [bytes(s.get_raw(i)) for i in range(0, s.ledger_end_index + 1)] == before
    s.close()


def _leader_prefix(d: str) -> list[bytes]:
    """The records 0..BEGIN + 2 the leader of ``leader_log`` wrote before its head went."""
    s = open_small(d, "fsync")
    s.clear_suspect()
    s.persist_term(2, None)
    s.batch_append_as_leader([body(i, 90 + 7 * i) for i in range(BEGIN + 6)])
    out = [bytes(s.get_raw(i)) for i in range(BEGIN + 3)]
    s.close()
    return out


@pytest.mark.parametrize("conflicting", [False, True], ids=["behind", "conflicting"])
def test_a_reset_cut_after_it_announced_its_begin_is_moved_to_the_leaders_position(tmp_path, conflicting):
    """The crash falls after the checkpoint announced the new begin and before any segment
    changed: the next open finishes the reset where the old data ended, which is not where
    the leader's next record lies; the leader's install, retried, moves the empty log there."""
    term, next_pos, records, count = leader_log(str(tmp_path / "leader"))
    d = str(tmp_path / "f")
    with PowerLoss() as pl:
        s, _ = follower_run(d, pl, conflicting, lambda s: s.truncate(BEGIN + 1) if conflicting else None, None)
        s._flusher.announce_begin(BEGIN, term, s.committed_index)
        crash_store(s)
    s = open_small(d, "fsync")
    try:
        assert (s.ledger_before_begin_index, s.ledger_end_index) == (BEGIN, BEGIN)     # finished, elsewhere
        assert s.data_list.max_wrote_position() != next_pos
        assert move_log_start(s, BEGIN, term, next_pos, keep=3) is False
        assert s.data_list.max_wrote_position() == next_pos
        assert s.batch_append_as_follower(records, 2) == BEGIN + count
        assert b"".join(bytes(s.get_raw(i)) for i in range(BEGIN + 1, BEGIN + count + 1)) == records
    finally:
        s.close()
