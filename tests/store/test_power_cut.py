"""Reopen after a power cut in ``fsync`` mode, at every write of a run of appends.

A power cut (``dledger.sim.disk.PowerLoss``) at each mapping write or msync of batches of
appends that cross segment ends, with the unsynced sectors torn and reordered at random
(``power_loss(store, rng)``), for many seeds. After each cut the store must reopen (an unsynced
tail is cut, never a reason to refuse), every append acknowledged before the cut (its call
returned) must be there byte for byte, and what follows them can only be a prefix of the append
that was in flight. The cut leaves the store not suspect (nothing acknowledged was lost).
"""

from __future__ import annotations

import random

import pytest

from dledger.entry import DLedgerEntry
from dledger.sim.disk import PowerLoss, SimulatedCrash
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


def test_a_lost_sector_in_the_middle_of_an_unfinished_append_cuts_it_rather_than_refusing(tmp_path):
    """The case recovery refused before: a power cut while an append of several records was in
    flight wrote back its later sectors but not an earlier one; the later records are intact
    and agree with their (also written back) index units."""
    d = str(tmp_path / "s")
    s = open_small(d, "fsync")
    s.clear_suspect()
    s.persist_term(1, None)
    first = s.batch_append_as_leader([bytes([7]) * 100] * 2)
    r = s.batch_append_as_leader([bytes([9]) * 600, bytes([8]) * 100])
    from dledger.sim.disk import crash_store
    crash_store(s)
    data = segments(d)[0]
    # the 512-byte sector holding most of the first record of the second append never reached
    # the disk: zeros where it was
    from helpers.store_files import zero
    zero(data, 512, 512)
    s = open_small(d, "fsync")
    try:
        assert s.ledger_end_index == first.last_index
        assert s.suspect is None
        assert r.first_index == first.last_index + 1
    finally:
        s.close()
