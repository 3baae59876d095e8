"""Recovery after crashes: torn tails, torn and lost index units, lost data pages, segment roll-over.

Every case builds a small store, crashes it (mappings closed, nothing flushed), damages the
files the way the fault would, reopens and checks: the log is a valid prefix of what was written, a lost entry is never served, and
appends continue at the right index and position.
"""

from __future__ import annotations

import os

import pytest

from dledger.entry import BODY_OFFSET, INDEX_UNIT_SIZE, MAGIC_BLANK, MAGIC_SIZE, DLedgerEntry, decode_index
from dledger.errors import INDEX_OUT_OF_RANGE, DLedgerError
from dledger.store import open_store
from dledger.sim.disk import crash_store
from helpers.store_files import copy_store
from helpers.small_store import (DATA_FILE_SIZE, INDEX_FILE_SIZE, MODES, append_bodies, body,
                                 open_small, snapshot)
from helpers.store_files import (index_unit_location, read_at, record_location, segments, write_at,
                                 zero)

N = 5  # entries in the small store; the last one is the victim


def build(path, durability, with_checkpoint, n=N, body_len=16):
    """A crashed store of ``n`` entries; a checkpoint covers the first ``n - 2`` if asked."""
    s = open_small(str(path), durability)
    s.persist_term(1, "n0")
    entries = append_bodies(s, [body(i, body_len) for i in range(n - 2)])
    if with_checkpoint:
        s.update_committed_index(n - 4)
        s.flush()
    entries += append_bodies(s, [body(i, body_len) for i in range(n - 2, n)])
    crash_store(s)
    if not with_checkpoint:  # a store of another origin, or one whose checkpoint was lost
        os.unlink(os.path.join(path, "checkpoint"))
    return [(e.index, e.term, e.pos, e.body) for e in entries]


def assert_out_of_range(store, index):
    with pytest.raises(DLedgerError) as info:
        store.get(index)
    assert info.value.code == INDEX_OUT_OF_RANGE


def assert_continues(store_dir, durability, expected, next_pos):
    """Append after recovery lands at ``len(expected)`` / ``next_pos`` and survives a reopen."""
    s = open_small(store_dir, durability)
    try:
        assert snapshot(s) == expected
        e = s.append_as_leader(DLedgerEntry(body=b"after-recovery"))
        assert (e.index, e.pos) == (len(expected), next_pos)
    finally:
        s.close()
    s = open_small(store_dir, durability)
    try:
        assert snapshot(s) == expected + [(len(expected), 1, next_pos, b"after-recovery")]
        assert s.verify() == []
    finally:
        s.close()


# ---------------------------------------------------------------------------------------------
# ST-03: torn last record, at every byte offset
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("with_checkpoint", [False, True], ids=["no-checkpoint", "checkpoint"])
@pytest.mark.parametrize("unit_survives", [True, False], ids=["unit-kept", "unit-lost"])
def test_torn_last_record_at_every_offset(tmp_path, durability, with_checkpoint, unit_survives):
    base = tmp_path / "base"
    written = build(base, durability, with_checkpoint)
    victim = record_location(str(base), N - 1, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    unit = index_unit_location(str(base), N - 1, INDEX_FILE_SIZE)
    assert victim.size == BODY_OFFSET + 16
    for cut in range(victim.size + 1):
        d = copy_store(str(base), str(tmp_path / f"cut{cut}"))
        # Everything of the record from ``cut`` on never reached the disk (the rest of the
        # file after it is zeros already: the same as a file cut short there).
        zero(victim.path.replace(str(base), d), victim.offset + cut, victim.size - cut)
        if not unit_survives:
            zero(unit.path.replace(str(base), d), unit.offset, INDEX_UNIT_SIZE)
        s = open_small(d, durability)
        try:
            if cut == victim.size:  # nothing torn: the control case
                assert snapshot(s) == written
                continue
            assert s.ledger_end_index == N - 2, f"cut at {cut}"
            assert s.ledger_end_term == 1
            assert_out_of_range(s, N - 1)
            assert snapshot(s) == written[:-1]
            assert s.verify() == []
            assert s.committed_index == (N - 4 if with_checkpoint else -1)
        finally:
            s.close()
        # Append continues where the torn record started; the torn one never comes back.
        assert_continues(d, durability, written[:-1], victim.pos)


@pytest.mark.parametrize("durability", MODES)
def test_torn_tail_of_several_records_is_cut_at_the_first(tmp_path, durability):
    """A power loss can lose more than one record: the log ends before the first torn one."""
    written = build(tmp_path / "s", durability, with_checkpoint=True, n=8)
    first = record_location(str(tmp_path / "s"), 6, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    zero(first.path, first.offset + 20, DATA_FILE_SIZE - first.offset - 20)
    s = open_small(str(tmp_path / "s"), durability)
    try:
        assert snapshot(s) == written[:6]
        assert_out_of_range(s, 6)
        assert_out_of_range(s, 7)
    finally:
        s.close()
    assert_continues(str(tmp_path / "s"), durability, written[:6], first.pos)


@pytest.mark.parametrize("durability", MODES)
def test_tail_cut_is_durable_and_stale_bytes_never_resurrect(tmp_path, durability):
    """After a torn tail is cut and a shorter record written, the old bytes beyond it stay dead."""
    written = build(tmp_path / "s", durability, with_checkpoint=False)
    victim = record_location(str(tmp_path / "s"), N - 1, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    write_at(victim.path, victim.offset + BODY_OFFSET, b"\x00")  # CRC mismatch: torn body
    s = open_small(str(tmp_path / "s"), durability)
    assert snapshot(s) == written[:-1]
    e = s.append_as_leader(DLedgerEntry(body=b"x"))  # shorter than the cut record
    assert e.pos == victim.pos
    crash_store(s)
    s = open_small(str(tmp_path / "s"), durability)
    try:
        assert snapshot(s)[-1] == (N - 1, 1, victim.pos, b"x")
        assert s.ledger_end_index == N - 1
        assert s.verify() == []
    finally:
        s.close()


# ---------------------------------------------------------------------------------------------
# ST-04 / ST-06: index damaged, data intact
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("with_checkpoint", [False, True], ids=["no-checkpoint", "checkpoint"])
def test_torn_last_index_unit_is_rebuilt(tmp_path, durability, with_checkpoint):
    base = tmp_path / "base"
    written = build(base, durability, with_checkpoint)
    unit = index_unit_location(str(base), N - 1, INDEX_FILE_SIZE)
    good = read_at(unit.path, unit.offset, INDEX_UNIT_SIZE)
    for cut in range(INDEX_UNIT_SIZE):
        d = copy_store(str(base), str(tmp_path / f"cut{cut}"))
        upath = unit.path.replace(str(base), d)
        zero(upath, unit.offset + cut, INDEX_UNIT_SIZE - cut)
        s = open_small(d, durability)
        try:
            assert snapshot(s) == written, f"cut at {cut}"
            assert s.ledger_end_index == N - 1
        finally:
            s.close()
        assert read_at(upath, unit.offset, INDEX_UNIT_SIZE) == good  # rewritten from the data


@pytest.mark.parametrize("durability", MODES)
def test_garbage_last_index_unit_is_rebuilt(tmp_path, durability):
    """A unit that names the wrong position (misdirected / stale write) is rebuilt too."""
    written = build(tmp_path / "s", durability, with_checkpoint=True)
    unit = index_unit_location(str(tmp_path / "s"), N - 1, INDEX_FILE_SIZE)
    good = read_at(unit.path, unit.offset, INDEX_UNIT_SIZE)
    write_at(unit.path, unit.offset + 4, (7).to_bytes(8, "big"))  # pos 7: inside entry 0
    s = open_small(str(tmp_path / "s"), durability)
    try:
        assert snapshot(s) == written
    finally:
        s.close()
    assert read_at(unit.path, unit.offset, INDEX_UNIT_SIZE) == good


LOST_N = 200  # 200 units: the index spans two 4 KiB pages


@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("lost_page", [0, 1])
@pytest.mark.parametrize("checkpoint_at", [None, 100], ids=["no-checkpoint", "checkpoint-100"])
def test_lost_index_page_is_rebuilt_from_data(tmp_path, durability, lost_page, checkpoint_at):
    d = str(tmp_path / "s")
    kw = dict(data_file_size=4096, index_file_size=8192)
    s = open_small(d, durability, **kw)
    s.persist_term(3, None)
    append_bodies(s, [body(i, 8) for i in range(checkpoint_at or 0)])
    if checkpoint_at:
        s.flush()
    append_bodies(s, [body(i, 8) for i in range(checkpoint_at or 0, LOST_N)])
    written = snapshot(s)
    crash_store(s)
    assert len(segments(d, "data")) == 3
    index_file = segments(d, "index")[0]
    if checkpoint_at and lost_page == 0:
        # Page 0 holds units 0..127, inside the checkpoint's trusted prefix *and* its end unit
        # is on page 0: the checkpoint no longer checks out, recovery falls back to scanning.
        pass
    zero(index_file, lost_page * 4096, 4096)
    s = open_small(d, durability, **kw)
    try:
        assert snapshot(s) == written
        assert s.ledger_end_index == LOST_N - 1
        e = s.append_as_leader(DLedgerEntry(body=b"next"))
        assert e.index == LOST_N
    finally:
        s.close()
    for k in range(LOST_N):
        u = decode_index(read_at(index_file, k * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE))
        assert (u.index, u.term, u.pos) == (k, 3, written[k][2])


# ---------------------------------------------------------------------------------------------
# ST-05: index units persisted, their data lost
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("with_checkpoint", [False, True], ids=["no-checkpoint", "checkpoint"])
@pytest.mark.parametrize("lost", [1, 2])
def test_index_units_without_data_are_truncated(tmp_path, durability, with_checkpoint, lost):
    d = str(tmp_path / "s")
    written = build(d, durability, with_checkpoint)
    first_lost = record_location(d, N - lost, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    zero(first_lost.path, first_lost.offset, DATA_FILE_SIZE - first_lost.offset)  # data page lost
    s = open_small(d, durability)
    try:
        assert s.ledger_end_index == N - 1 - lost
        assert snapshot(s) == written[:-lost]
        for k in range(N - lost, N):
            assert_out_of_range(s, k)
    finally:
        s.close()
    # The dangling units are gone from disk: nothing vouches for the lost entries any more.
    ifile = segments(d, "index")[0]
    for k in range(N - lost, N):
        assert read_at(ifile, k * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE) == bytes(INDEX_UNIT_SIZE)
    assert_continues(d, durability, written[:-lost], first_lost.pos)


# ---------------------------------------------------------------------------------------------
# ST-17: segment roll-over interrupted
# ---------------------------------------------------------------------------------------------
ROLL_BODY = 200  # 248-byte records: four fill 992 of a 1024-byte segment, the fifth rolls over


def build_rollover(path, durability, with_checkpoint):
    """Four records fill segment 0; the fifth goes to segment 1 after a 32-byte blank."""
    s = open_small(str(path), durability)
    s.persist_term(2, None)
    append_bodies(s, [body(i, ROLL_BODY) for i in range(3)])
    if with_checkpoint:
        s.flush()
    append_bodies(s, [body(i, ROLL_BODY) for i in range(3, 5)])
    written = snapshot(s)
    crash_store(s)
    assert [p for _, _, p, _ in written] == [0, 248, 496, 744, DATA_FILE_SIZE]
    seg0, seg1 = segments(str(path), "data")
    assert MAGIC_SIZE.unpack(read_at(seg0, 992, 8)) == (MAGIC_BLANK, 32)
    return written, seg0, seg1


ROLLOVER_CRASHES = {
    # crash after the blank head was half written; no new segment yet
    "blank-magic-only": lambda seg0, seg1: (zero(seg0, 996, 28), os.unlink(seg1)),
    # crash before the blank was written at all; no new segment
    "no-blank": lambda seg0, seg1: (zero(seg0, 992, 32), os.unlink(seg1)),
    # blank written, crash before the new segment was created
    "blank-no-segment": lambda seg0, seg1: os.unlink(seg1),
    # new segment created (pre-sized, zero), crash before the record reached it
    "empty-new-segment": lambda seg0, seg1: zero(seg1, 0, DATA_FILE_SIZE),
    # new segment created, record torn in it
    "torn-in-new-segment": lambda seg0, seg1: zero(seg1, 100, DATA_FILE_SIZE - 100),
    # new segment created and empty, blank never made it (pages written out of order)
    "empty-segment-no-blank": lambda seg0, seg1: (zero(seg0, 992, 32), zero(seg1, 0, DATA_FILE_SIZE)),
}


@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("with_checkpoint", [False, True], ids=["no-checkpoint", "checkpoint"])
@pytest.mark.parametrize("fault", sorted(ROLLOVER_CRASHES))
def test_crash_during_segment_rollover(tmp_path, durability, with_checkpoint, fault):
    written, seg0, seg1 = build_rollover(tmp_path / "s", durability, with_checkpoint)
    ROLLOVER_CRASHES[fault](seg0, seg1)
    s = open_small(str(tmp_path / "s"), durability)
    try:
        assert snapshot(s) == written[:4]
        assert_out_of_range(s, 4)
        # the next append rolls over again, to the start of segment 1
        e = s.append_as_leader(DLedgerEntry(body=body(99, ROLL_BODY)))
        assert (e.index, e.pos) == (4, DATA_FILE_SIZE)
    finally:
        s.close()
    s = open_small(str(tmp_path / "s"), durability)
    try:
        assert snapshot(s) == written[:4] + [(4, 2, DATA_FILE_SIZE, body(99, ROLL_BODY))]
        assert MAGIC_SIZE.unpack(read_at(seg0, 992, 8)) == (MAGIC_BLANK, 32)
    finally:
        s.close()


@pytest.mark.parametrize("durability", MODES)
def test_rollover_record_intact_is_kept(tmp_path, durability):
    """The control case of the roll-over crashes: nothing damaged, nothing lost."""
    written, _, _ = build_rollover(tmp_path / "s", durability, with_checkpoint=False)
    s = open_small(str(tmp_path / "s"), durability)
    try:
        assert snapshot(s) == written
        assert s.append_as_leader(DLedgerEntry(body=b"z")).pos == DATA_FILE_SIZE + 248
    finally:
        s.close()


# ---------------------------------------------------------------------------------------------
# ST-01, ST-18, ST-19: a crash at every write and msync of append, truncate and reset
# ---------------------------------------------------------------------------------------------
def _disk_70_percent_full(path):
    return (100, 80, 20)  # (total, used, free): above the 0.70 "check expired" ratio


def _open(path, durability, **kwargs):
    return open_small(str(path), durability, disk_usage=_disk_70_percent_full, **kwargs)


def _base_store(path, durability):
    """Six 248-byte entries (two segments), flushed; the term file says term 4."""
    s = _open(path, durability)
    s.persist_term(4, None)
    append_bodies(s, [body(i, ROLL_BODY) for i in range(6)])
    s.update_committed_index(1)
    s.close()


def _state(s):
    return (s.ledger_before_begin_index, s.ledger_before_begin_term, snapshot(s))


BATCH = [body(50 + i, ROLL_BODY) for i in range(5)]

# name -> (operation, function(before_state) -> list of acceptable states after a crash)
OPERATIONS = {
    "batch-append": (
        lambda s: s.batch_append_as_leader(BATCH),
        lambda bb, bbt, log: [(bb, bbt, log + [(6 + k, 4, None, b) for k, b in enumerate(BATCH[:m])])
                              for m in range(len(BATCH) + 1)]),
    "truncate": (
        lambda s: s.truncate(3),
        lambda bb, bbt, log: [(bb, bbt, log), (bb, bbt, log[:3])]),
    "reset-prefix": (
        lambda s: s.reset(2, 4),
        lambda bb, bbt, log: [(bb, bbt, log), (2, 4, log[3:])]),
    "reset-all": (
        lambda s: s.reset(9, 4),
        lambda bb, bbt, log: [(bb, bbt, log), (9, 4, [])]),
}


def _leader_records():
    """The encoded records of BATCH as a leader with the base store's log writes them."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        _base_store(os.path.join(tmp, "leader"), "page_cache")
        s = open_small(os.path.join(tmp, "leader"))
        try:
            s.batch_append_as_leader(BATCH)
            return b"".join(s.get_raw(i) for i in range(6, 6 + len(BATCH)))
        finally:
            s.close()


LEADER_RECORDS = _leader_records()
REPLACEMENT = DLedgerEntry(body=b"from-the-new-leader", index=3, term=4, pos=744)
# a leader whose log (after a snapshot) begins far beyond this follower's data
FAR_ENTRY = DLedgerEntry(body=b"far-ahead", index=20, term=4, pos=5 * DATA_FILE_SIZE + 100)

OPERATIONS.update({
    "batch-append-then-flush": (
        lambda s: (s.batch_append_as_leader(BATCH), s.update_committed_index(8), s.flush()),
        OPERATIONS["batch-append"][1]),
    "follower-batch-append": (
        lambda s: s.batch_append_as_follower(LEADER_RECORDS, 4),
        OPERATIONS["batch-append"][1]),
    "truncate-to-entry": (
        lambda s: s.truncate_to_entry(REPLACEMENT, 4),
        lambda bb, bbt, log: [(bb, bbt, log), (bb, bbt, log[:3]),
                              (bb, bbt, log[:3] + [(3, 4, 744, REPLACEMENT.body)])]),
    "truncate-to-entry-elsewhere": (
        lambda s: s.truncate_to_entry(FAR_ENTRY, 4),
        lambda bb, bbt, log: [(bb, bbt, log), (19, -1, []),
                              (19, -1, [(20, 4, FAR_ENTRY.pos, FAR_ENTRY.body)])]),
    "clean-head-segment": (
        lambda s: (s.update_committed_index(5), s.clean(4e9)),
        lambda bb, bbt, log: [(bb, bbt, log), (3, 4, log[4:])]),
})


def _fingerprint(d):
    out = {}
    for root, _, files in os.walk(d):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                out[os.path.join(root, name)] = fh.read()
    return out


def _matches(state, accepted):
    """Positions of appended entries are not known in advance (None): compare the rest."""
    bb, bbt, log = state
    for abb, abbt, alog in accepted:
        if (bb, bbt) == (abb, abbt) and len(log) == len(alog) and all(
                (i, t, b) == (ai, at, ab) and (ap is None or p == ap)
                for (i, t, p, b), (ai, at, ap, ab) in zip(log, alog)):
            return True
    return False


@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("fault", ["process-crash", "power-loss"])
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_crash_at_every_write_of_an_operation(tmp_path, durability, fault, operation):
    from dledger.sim.disk import PowerLoss, SimulatedCrash
    op, acceptable = OPERATIONS[operation]
    base = tmp_path / "base"
    _base_store(base, durability)
    # dry run: how many mapping writes and msyncs the operation makes
    with PowerLoss() as pl:
        s = _open(copy_store(str(base), str(tmp_path / "dry")), durability, store_io=pl.io)
        before = _state(s)
        start = pl.ops
        op(s)
        total = pl.ops - start
        done = _state(s)
        crash_store(s)
    accepted = acceptable(*before)
    assert total >= 2 and done != before and _matches(done, accepted), "the operation did nothing"
    for n in range(total):
        d = copy_store(str(base), str(tmp_path / f"n{n}"))
        with PowerLoss() as pl:
            s = _open(d, durability, store_io=pl.io)
            pl.arm(n)
            with pytest.raises(SimulatedCrash):
                op(s)
            pl.disarm()
            if fault == "power-loss":
                pl.power_loss(s)
            else:
                crash_store(s)
        # an offline reader sees an acceptable state too, and changes nothing on disk
        before_ro = _fingerprint(d)
        with open_store(d) as ro:
            seen = _state(ro)
            assert _matches(seen, accepted), f"read-only, crash at write {n}: {seen[:2]}"
        assert _fingerprint(d) == before_ro
        s = open_small(d, durability)
        try:
            after = _state(s)
            assert _matches(after, accepted), f"crash at write {n} of {total}: {after[:2]}, " \
                                              f"{[e[:3] for e in after[2]]}"
            assert after == seen, "a writable open recovered another log than the read-only one"
            assert s.verify() == []
            # the store goes on: one more entry, then a clean reopen shows it
            e = s.append_as_leader(DLedgerEntry(body=b"after-crash"))
            assert e.index == s.ledger_end_index
        finally:
            s.close()
        s = open_small(d, durability)
        try:
            assert snapshot(s)[-1][3] == b"after-crash" and s.verify() == []
        finally:
            s.close()


# ---------------------------------------------------------------------------------------------
# the power-loss model itself (dledger.sim.disk.PowerLoss)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("durability", MODES)
def test_power_loss_keeps_exactly_what_was_synced(tmp_path, durability):
    from dledger.sim.disk import PowerLoss
    d = str(tmp_path / "s")
    with PowerLoss() as pl:
        s = open_small(d, durability, store_io=pl.io)
        s.persist_term(1, None)
        append_bodies(s, [body(i, ROLL_BODY) for i in range(3)])
        s.flush()
        append_bodies(s, [body(i, ROLL_BODY) for i in range(3, 6)])  # across a roll-over
        written = snapshot(s)
        pl.power_loss(s)
    s = open_small(d, durability)
    try:
        # page_cache: only the flushed three survive; fsync: every append was synced
        assert snapshot(s) == (written[:3] if durability == "page_cache" else written)
    finally:
        s.close()


def test_process_crash_keeps_the_page_cache_but_not_across_a_power_loss(tmp_path):
    from dledger.sim.disk import PowerLoss
    d = str(tmp_path / "s")
    with PowerLoss() as pl:
        s = open_small(d, store_io=pl.io)
        s.persist_term(1, None)
        append_bodies(s, [body(i) for i in range(4)])
        crash_store(s)                       # the page cache still holds the four entries
        s = open_small(d, store_io=pl.io)
        assert len(snapshot(s)) == 4
        pl.power_loss(s)               # never synced: gone after a power loss
    s = open_small(d)
    try:
        assert snapshot(s) == []
    finally:
        s.close()


# ---------------------------------------------------------------------------------------------
# a crash while recovery itself repairs the store
# ---------------------------------------------------------------------------------------------
def _damaged_store(path, durability):
    """Ten entries over three segments; index units 4..9 lost, entry 9's record torn."""
    s = open_small(str(path), durability, index_file_size=32 * 4)
    s.persist_term(3, None)
    append_bodies(s, [body(i, 100) for i in range(4)])
    s.flush()
    append_bodies(s, [body(i, 100) for i in range(4, 10)])
    written = snapshot(s)
    crash_store(s)
    for seg in segments(str(path), "index")[1:]:
        zero(seg, 0, 32 * 4)
    data = segments(str(path), "data")[-1]
    pos9 = written[9][2]
    zero(data, pos9 % DATA_FILE_SIZE + 60, 88)  # entry 9's body half gone
    return written


@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("fault", ["process-crash", "power-loss"])
def test_crash_while_recovery_repairs(tmp_path, durability, fault):
    from dledger.sim.disk import PowerLoss, SimulatedCrash
    base = tmp_path / "base"
    written = _damaged_store(base, durability)
    with PowerLoss() as pl:
        start = pl.ops
        s = open_small(str(copy_store(str(base), str(tmp_path / "dry"))), durability,
                       index_file_size=32 * 4, store_io=pl.io)
        total = pl.ops - start
        assert snapshot(s) == written[:9]
        crash_store(s)
    assert total >= 3, "recovery repaired nothing"
    for n in range(total):
        d = copy_store(str(base), str(tmp_path / f"n{n}"))
        with PowerLoss() as pl:
            pl.arm(n)
            with pytest.raises(SimulatedCrash):
                open_small(d, durability, index_file_size=32 * 4, store_io=pl.io)
            pl.disarm()
            # the half-opened store dies with the process
            if fault == "power-loss":
                pl.power_loss(None)
            else:
                pl.kill()
        s = open_small(d, durability, index_file_size=32 * 4)
        try:
            assert snapshot(s) == written[:9], f"crash at write {n} of {total} of recovery"
            assert s.verify() == []
            assert s.append_as_leader(DLedgerEntry(body=b"x")).pos == written[9][2]
        finally:
            s.close()
