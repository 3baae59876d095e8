"""Reopen after a power cut in ``fsync`` mode, at every write of a run of appends.

A power cut (``dledger.sim.disk.PowerLoss``) at each mapping write or msync of batches of
appends that cross segment ends, with the unsynced sectors torn and reordered at random
(``power_loss(store, rng)``), for many seeds. After each cut the store must reopen (an unsynced
tail is cut, never a reason to refuse), every append acknowledged before the cut (its call
returned) must be there byte for byte, and what follows them can only be a prefix of the append
that was in flight. The cut leaves the store not suspect (nothing acknowledged was lost): an
interrupted append wrote no index unit yet (units are written once the data is synced).
"""

from __future__ import annotations

import random

import pytest

from dledger.entry import DLedgerEntry
from dledger.sim.disk import PowerLoss, SimulatedCrash
from dledger.store.suspect import SuspectReason
from helpers.small_store import open_small, snapshot
from helpers.store_files import segments

SEEDS = range(24)


def _plan(seed: int) -> list[list[bytes]]:
    """Batches of 1-3 bodies of 60-330 bytes (no zero byte): several cross a 1 KiB segment end."""
    rng = random.Random(seed)
    return [[bytes(rng.randrange(1, 256) for _ in range(rng.randrange(60, 330)))
             for _ in range(rng.randrange(1, 4))] for _ in range(7)]


def _run(d: str, pl: PowerLoss, plan, flush_after: int, arm: int | None):
    """Append the plan; returns (acknowledged entries, the batch in flight or None)."""
    s = open_small(d, "fsync", store_io=pl.io)
    s.clear_suspect()
    s.persist_term(2, None)
    acked: list[tuple[int, int, bytes]] = []
    if arm is not None:
        pl.arm(arm)
    start = pl.ops
    inflight = None
    try:
        for k, batch in enumerate(plan):
            inflight = batch
            r = s.batch_append_as_leader(batch)
            acked.extend((r.first_index + j, r.term, b) for j, b in enumerate(batch))
            inflight = None
            if k == flush_after:
                s.flush()
    except SimulatedCrash:
        pass
    pl.disarm()
    return s, acked, inflight, pl.ops - start


@pytest.mark.parametrize("seed", SEEDS)
def test_fsync_power_cut_at_every_write_keeps_every_acknowledged_append_and_reopens(tmp_path, seed):
    plan = _plan(seed)
    flush_after = seed % 4  # a checkpoint after an early batch: the rest is scanned on open
    with PowerLoss() as pl:
        s, acked, _, total = _run(str(tmp_path / "dry"), pl, plan, flush_after, None)
        pl.power_loss(s)
    assert len(acked) == sum(map(len, plan)) and total > 10
    assert len(segments(str(tmp_path / "dry"))) >= 3, "the plan must cross segment ends"
    for n in range(total):
        d = str(tmp_path / f"n{n}")
        with PowerLoss() as pl:
            s, acked, inflight, _ = _run(d, pl, plan, flush_after, n)
            pl.power_loss(s, random.Random(seed * 1000 + n))
        s = open_small(d, "fsync")  # never refused
        try:
            got = [(i, t, b) for i, t, _, b in snapshot(s)]
            assert got[:len(acked)] == acked, f"crash at write {n}: acknowledged appends lost"
            extra = [b for _, _, b in got[len(acked):]]
            assert extra == (inflight or [])[:len(extra)], f"crash at write {n}: foreign entries"
            assert s.verify() == []
            assert s.suspect is None, f"crash at write {n}: {s.suspect}"
            e = s.append_as_leader(DLedgerEntry(body=b"after the cut"))
            assert e.index == len(got)
        finally:
            s.close()


def test_a_lost_sector_under_entries_whose_units_are_on_disk_is_a_lost_write_and_a_lost_tail(tmp_path):
    """Both appends returned, so their index units were written after their data was synced: a
    sector of the second append's data that reads as never written is a lost write of
    acknowledged data, not an append a power cut interrupted (whose units are never written
    before its data is synced). The records from there are cut (nothing can restore them here)
    and the store reports LOST_TAIL, so the replica neither votes nor counts toward a commit
    until a leader gave them back (seed 200010 lost committed entries when such a cut passed for
    an interrupted append)."""
    d = str(tmp_path / "s")
    s = open_small(d, "fsync")
    s.clear_suspect()
    s.persist_term(1, None)
    first = s.batch_append_as_leader([bytes([7]) * 100] * 2)
    r = s.batch_append_as_leader([bytes([9]) * 600, bytes([8]) * 100])
    from dledger.sim.disk import crash_store
    crash_store(s)
    data = segments(d)[0]
    from helpers.store_files import zero
    zero(data, 512, 512)                     # the sector holding most of the second append's first record
    s = open_small(d, "fsync")
    try:
        assert s.ledger_end_index == first.last_index
        assert r.first_index == first.last_index + 1
        assert s.suspect is SuspectReason.LOST_TAIL
    finally:
        s.close()


def _crashed_losing(s, d: str, offset: int, length: int):
    """The fsync store ``s`` (in ``d``) crashed, then ``length`` bytes of its first data segment
    from ``offset`` lost (read as zeros: a lost write), and opened again."""
    from dledger.sim.disk import crash_store
    from helpers.store_files import zero
    crash_store(s)
    zero(segments(d)[0], offset, length)
    return open_small(d, "fsync")


def test_a_lost_sector_that_held_the_last_entries_leaves_their_units_and_a_lost_tail(tmp_path):
    """The last append's record starts inside a sector and a lost write takes the sector's new
    bytes: from that record on the data reads all zeros, a clean end of the log, yet the
    record's index unit is on disk naming that very place. Units are written only after their
    data is synced, so the record was there and was acknowledged: the store reports LOST_TAIL
    (seed 564518: recovery took such an end for the log's, erased the unit, and the replica
    then helped elect a leader without an entry it had acknowledged)."""
    d = str(tmp_path / "s")
    s = open_small(d, "fsync")
    s.clear_suspect()
    s.persist_term(1, None)
    first = s.batch_append_as_leader([bytes([7]) * 100] * 2)
    last = s.append_as_leader(DLedgerEntry(body=bytes([9]) * 60))
    assert last.pos < 512 < last.pos + last.size + 512
    s = _crashed_losing(s, d, last.pos, 512 - last.pos)   # the sector's bytes from the record on are lost
    try:
        assert s.ledger_end_index == first.last_index
        assert s.suspect is SuspectReason.LOST_TAIL
    finally:
        s.close()


def test_a_lost_sector_that_held_the_back_of_the_last_header_leaves_its_unit_and_a_lost_tail(tmp_path):
    """The same lost write, with the last record's header across the sector boundary: its magic
    and size survive in the sector before, the rest reads zeros (the trace of bytes that never
    reached the disk, as an append a power cut interrupted leaves). Its index unit is on disk,
    naming it, and units are written only after their data is synced: the record was whole and
    acknowledged, so the store reports LOST_TAIL (seed 800301: recovery cut it as a torn tail
    without it, and the replica helped elect a leader without an entry it had acknowledged)."""
    d = str(tmp_path / "s")
    s = open_small(d, "fsync")
    s.clear_suspect()
    s.persist_term(1, None)
    s.batch_append_as_leader([bytes([7]) * 100] * 2)
    third = s.append_as_leader(DLedgerEntry(body=bytes([8]) * 148))
    last = s.append_as_leader(DLedgerEntry(body=bytes([9]) * 60))
    assert last.pos + 8 <= 512 < last.pos + 48 < last.pos + last.size
    s = _crashed_losing(s, d, 512, 512)               # the second sector's bytes are lost
    try:
        assert s.ledger_end_index == third.index
        assert s.suspect is SuspectReason.LOST_TAIL
    finally:
        s.close()


def test_a_clean_end_with_no_unit_after_it_is_not_a_lost_tail(tmp_path):
    """The counterpart: the same store with nothing lost opens as it was, not suspect, and the
    unit of the entry after the end is what tells them apart."""
    d = str(tmp_path / "s")
    s = open_small(d, "fsync")
    s.clear_suspect()
    s.persist_term(1, None)
    first = s.batch_append_as_leader([bytes([7]) * 100] * 2)
    from dledger.sim.disk import crash_store
    crash_store(s)
    s = open_small(d, "fsync")
    try:
        assert s.ledger_end_index == first.last_index
        assert s.suspect is None
    finally:
        s.close()


def test_units_are_written_only_once_the_data_is_synced(tmp_path):
    """fsync mode: a power cut between the data msync and the index units leaves no unit of the
    append on disk, whatever the write-back kept; a unit on disk proves its data synced."""
    with PowerLoss() as pl:
        s = open_small(str(tmp_path / "s"), "fsync", store_io=pl.io)
        s.clear_suspect()
        s.persist_term(1, None)
        s.batch_append_as_leader([b"a" * 100])
        seen = []
        real = s.data_list.sync_from

        def sync_then_look(pos):
            real(pos)
            seen.append(s.index_list.max_wrote_position())

        s.data_list.sync_from = sync_then_look
        s.batch_append_as_leader([b"b" * 100, b"c" * 100])
        s.append_as_leader(DLedgerEntry(body=b"d" * 100))
        assert seen == [32, 96]              # at each data sync, only the earlier appends' units
        assert s.index_list.max_wrote_position() == 128
        s.close()
