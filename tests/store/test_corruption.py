"""Bit flips in durable entries: never served, never silently truncated (in bodies and in header fields).

A small store of 20 entries (two data segments) gets one bit flipped in entry 8 (or 12, the
first record of the second segment): in the body, or in a header field (magic, size, index,
term, pos, body CRC, body size).

- With a checkpoint covering the entry, the open trusts the prefix without reading it; every
  read path (``get``, ``get_raw``, ``get_raw_range``, ``iter_entries``, ``verify``) must then
  refuse the entry with ``CorruptStoreError`` naming the data file and the record's offset,
  while every other entry stays readable.
- Without a checkpoint the open scans the data; the damaged record is followed by intact
  entries and its index unit locates it, so the open keeps the whole log (never cuts it
  there), lists the entry in ``damaged()`` naming the file and offset, and every read path
  refuses it exactly as above until it is repaired (``tests/store/test_repair.py``); the open
  rewrites none of the damaged bytes.
"""

from __future__ import annotations

import os
import tracemalloc

import pytest

from dledger.errors import INDEX_OUT_OF_RANGE, CorruptStoreError, DLedgerError
from dledger.sim.disk import crash_store
from helpers.store_files import copy_store
from helpers.small_store import DATA_FILE_SIZE, INDEX_FILE_SIZE, append_bodies, body, open_small, snapshot
from helpers.store_files import flip_bit, read_at, record_location, write_at

N = 20
BODY = 32  # 80-byte records: 12 per 1 KiB segment

# field -> (offset in the record, width in bytes)
FIELDS = {
    "magic": (0, 4),
    "size": (4, 4),
    "index": (8, 8),
    "term": (16, 8),
    "pos": (24, 8),
    "body_crc": (40, 4),
    "body_size": (44, 4),
    "body": (48, BODY),
}


def all_bits(field):
    off, width = FIELDS[field]
    return [(off + b // 8, b % 8) for b in range(width * 8)]


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """Two pristine stores: one closed cleanly (checkpoint at the end), one crashed (none)."""
    root = tmp_path_factory.mktemp("corruption")
    out = {}
    for name in ("checkpoint", "no-checkpoint"):
        d = str(root / name)
        s = open_small(d)
        s.persist_term(2, None)
        append_bodies(s, [body(i, BODY) for i in range(N)])
        s.persist_term(3, None)  # later entries get a higher term: flips can go either way
        written = snapshot(s)
        if name == "checkpoint":
            s.update_committed_index(N - 1)
            s.close()
        else:
            crash_store(s)
            os.unlink(os.path.join(d, "checkpoint"))  # as Java writes it, or a lost checkpoint
        out[name] = (d, written)
    return out


def damaged_copy(bases, tmp_path, name, victim, patches):
    src, written = bases[name]
    d = copy_store(src, str(tmp_path / name))
    loc = record_location(d, victim, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    for off, bit in patches:
        flip_bit(loc.path, loc.offset + off, bit)
    return d, loc, written


def assert_names(exc: CorruptStoreError, loc) -> None:
    assert exc.path == loc.path
    assert exc.offset == loc.offset
    assert loc.path in str(exc) and f"offset {loc.offset}" in str(exc)


def check_every_read_refuses(d, loc, written, victim, durability="page_cache"):
    s = open_small(d, durability)
    try:
        assert s.ledger_end_index == N - 1
        with pytest.raises(CorruptStoreError) as info:
            s.get(victim)
        assert_names(info.value, loc)
        with pytest.raises(CorruptStoreError):
            s.get_raw(victim)
        with pytest.raises(CorruptStoreError):
            s.get_raw_range(victim - victim % 12, 1 << 20)  # from the start of its segment
        with pytest.raises(CorruptStoreError):
            list(s.iter_entries())
        errors = s.verify()
        assert len(errors) == 1
        assert_names(errors[0], loc)
        damaged = s.damaged()
        assert list(damaged) == [victim]
        assert damaged[victim].path == loc.path
        for i in range(N):
            if i != victim:
                e = s.get(i)
                assert (e.index, e.term, e.pos, e.body) == written[i]
    finally:
        s.close()


@pytest.mark.parametrize("victim", [8, 12])
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_bit_flip_inside_checkpoint_is_never_served(bases, tmp_path, field, victim):
    for off, bit in all_bits(field):
        d, loc, written = damaged_copy(bases, tmp_path / f"{off}-{bit}", "checkpoint", victim,
                                       [(off, bit)])
        check_every_read_refuses(d, loc, written, victim)


@pytest.mark.parametrize("victim", [8, 12])
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_bit_flip_without_checkpoint_opens_keeping_the_log_and_refusing_the_entry(bases, tmp_path,
                                                                                 field, victim):
    for off, bit in all_bits(field):
        d, loc, written = damaged_copy(bases, tmp_path / f"{off}-{bit}", "no-checkpoint", victim,
                                       [(off, bit)])
        before = read_at(loc.path, loc.offset, loc.size)
        check_every_read_refuses(d, loc, written, victim)
        # nothing was cut or rewritten: the damaged bytes wait for a repair from a peer
        assert read_at(loc.path, loc.offset, loc.size) == before


def test_corrupt_size_never_allocates_it(bases, tmp_path):
    """A size field that claims ~2 GiB (with a matching body size) is refused without reading it."""
    huge = 0x7FFFFFF0
    for name in ("checkpoint", "no-checkpoint"):
        d, loc, written = damaged_copy(bases, tmp_path, name, 8, [])
        write_at(loc.path, loc.offset + 4, huge.to_bytes(4, "big"))
        write_at(loc.path, loc.offset + 44, (huge - 48).to_bytes(4, "big"))
        tracemalloc.start()
        try:
            # the open keeps the entry (scanning over it by its index unit when there is no
            # checkpoint) and every read refuses it
            s = open_small(d)
            with pytest.raises(CorruptStoreError) as info:
                s.get(8)
            assert_names(info.value, loc)
            assert len(s.verify()) == 1
            assert list(s.damaged()) == [8]
            s.close()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 8 * 1024 * 1024, f"{name}: peak allocation {peak} bytes"


def test_index_unit_flip_inside_checkpoint_is_never_served(bases, tmp_path):
    """A flipped bit in a trusted index unit must not make ``get`` serve another record."""
    from helpers.store_files import index_unit_location
    src, written = bases["checkpoint"]
    for off in range(32):
        for bit in range(8):
            d = copy_store(src, str(tmp_path / f"u{off}-{bit}"))
            u = index_unit_location(d, 8, INDEX_FILE_SIZE)
            flip_bit(u.path, u.offset + off, bit)
            s = open_small(d)
            try:
                try:
                    e = s.get(8)
                except CorruptStoreError:
                    continue
                # served: then it must be exactly entry 8 (the flip hit a field get re-derives)
                assert (e.index, e.term, e.pos, e.body) == written[8], (off, bit)
            finally:
                s.close()


@pytest.mark.parametrize("durability", ["page_cache", "fsync"])
@pytest.mark.parametrize("field", ["body", "term", "index", "magic", "size", "pos"])
def test_bit_flip_after_the_checkpoint(tmp_path, durability, field):
    """fsync mode: entries after the checkpoint's end were synced and acknowledged one by one,
    so a damaged one followed by intact entries is mid-log damage: the open keeps them all and
    refuses the damaged entry until it is repaired, rather than cut them away. page_cache mode: what follows the checkpoint was never promised durable (a
    power loss may write it out of order), so the log ends before the damaged entry, which is
    never served."""
    d = str(tmp_path / "s")
    s = open_small(d, durability)
    s.persist_term(2, None)
    append_bodies(s, [body(i, BODY) for i in range(6)])
    s.flush()                      # checkpoint: endIndex 5
    append_bodies(s, [body(i, BODY) for i in range(6, N)])
    s.flush(checkpoint=False)      # durable, but no checkpoint vouches for 6..19
    crash_store(s)
    loc = record_location(d, 9, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    off, width = FIELDS[field]
    flip_bit(loc.path, loc.offset + off + width - 1, 1)
    if durability == "fsync":
        check_every_read_refuses(d, loc, [(i, 2, 80 * i + (80 * i) // 960 * 64, body(i, BODY))
                                          for i in range(N)], 9, durability)
        return
    s = open_small(d, durability)
    try:
        assert s.ledger_end_index == 8
        assert [e.body for e in s.iter_entries()] == [body(i, BODY) for i in range(9)]
        with pytest.raises(DLedgerError) as info:
            s.get(9)
        assert info.value.code == INDEX_OUT_OF_RANGE
    finally:
        s.close()


def _overwrite_record(bases, tmp_path, name, victim, make):
    src, written = bases[name]
    d = copy_store(src, str(tmp_path / name))
    loc = record_location(d, victim, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    write_at(loc.path, loc.offset, make(d, loc))
    return d, loc, written


FAULTS = {
    # ST-13: entry 7's bytes landed where entry 8 belongs (same size: a misdirected write)
    "misdirected-write": lambda d, loc: read_at(
        record_location(d, 7, INDEX_FILE_SIZE, DATA_FILE_SIZE).path,
        record_location(d, 7, INDEX_FILE_SIZE, DATA_FILE_SIZE).offset, loc.size),
    # ST-14: the write of entry 8 never reached the disk (the sectors kept zeros)
    "lost-write": lambda d, loc: bytes(loc.size),
    # the sectors kept what an older, truncated log had there: same index, older term
    "stale-write": None,
}


def _stale(d, loc):
    from dledger.entry import DLedgerEntry, encode
    old = DLedgerEntry(body=body(999, BODY), index=8, term=1, pos=loc.pos)
    return encode(old)


FAULTS["stale-write"] = _stale


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_misdirected_lost_or_stale_write_is_never_served(bases, tmp_path, fault):
    d, loc, written = _overwrite_record(bases, tmp_path, "checkpoint", 8, FAULTS[fault])
    check_every_read_refuses(d, loc, written, 8)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_misdirected_lost_or_stale_write_without_checkpoint_opens_refusing_the_entry(bases, tmp_path,
                                                                                    fault):
    d, loc, written = _overwrite_record(bases, tmp_path, "no-checkpoint", 8, FAULTS[fault])
    check_every_read_refuses(d, loc, written, 8)
