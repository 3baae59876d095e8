"""A single bit flip anywhere in a store's files is detected: never served, never cut silently.

For a small store (entries over three data segments and two index segments, a checkpoint and
a term file, both with their ``crc`` line), one bit of one byte is flipped (every byte of every
record header, index unit, checkpoint and term file; every fifth body byte), then the store is
reopened. Either the open refuses naming the damaged file, or:
- no entry with a changed byte is ever returned by ``get``, ``iter_entries`` or
  ``get_raw_range`` (a damaged entry raises ``CorruptStoreError`` naming file and offset);
- nothing durable is cut: the log keeps its end, unless the store reports that acknowledged
  entries may be lost (``suspect`` is ``LOST_TAIL``);
- a damaged term file is a lost term (``TERM_LOST``), never term 0.

Two shapes: closed cleanly (the checkpoint covers the whole log: the log is trusted and checked
entry by entry when read) and, in fsync mode, crashed with entries after the checkpoint (those
are scanned on open).
"""

from __future__ import annotations

import os
import shutil

import pytest

from dledger.entry import BODY_OFFSET, INDEX_UNIT_SIZE
from dledger.errors import CorruptStoreError, DLedgerError
from dledger.sim.disk import crash_store
from dledger.store.suspect import SuspectReason
from helpers.small_store import open_small
from helpers.store_files import flip_bit, read_at, segments

INDEX_FILE_SIZE = 32 * 4
N = 8


def _build(d: str, shape: str):
    durability = "fsync" if shape == "crashed-fsync" else "page_cache"
    s = open_small(d, durability, index_file_size=INDEX_FILE_SIZE)
    s.clear_suspect()
    s.persist_term(3, "n1")
    bodies = [bytes(((i * 31 + k) % 251) + 1 for k in range(150 + 37 * i)) for i in range(N)]
    for b in bodies[:5]:
        s.batch_append_as_leader([b])
    s.update_committed_index(4)
    s.flush()
    for b in bodies[5:]:
        s.batch_append_as_leader([b])
    entries = list(s.iter_entries())
    raws = [s.get_raw(i) for i in range(N)]
    positions = [e.pos for e in entries]
    if shape == "crashed-fsync":
        crash_store(s)
    else:
        s.close()
    return durability, entries, raws, positions


def _targets(d: str, positions, raws):
    """(path, offset) of every byte to damage."""
    out = []
    for pos, raw in zip(positions, raws):
        seg = [p for p in segments(d) if int(os.path.basename(p)) <= pos][-1]
        base = pos - int(os.path.basename(seg))
        out += [(seg, base + k) for k in range(BODY_OFFSET)]
        out += [(seg, base + k) for k in range(BODY_OFFSET, len(raw), 5)]
    for k in range(N):
        g = k * INDEX_UNIT_SIZE
        seg = os.path.join(d, "index", f"{g - g % INDEX_FILE_SIZE:020d}")
        out += [(seg, g % INDEX_FILE_SIZE + j) for j in range(INDEX_UNIT_SIZE)]
    for name in ("checkpoint", "currterm"):
        path = os.path.join(d, name)
        out += [(path, k) for k in range(os.path.getsize(path))]
    return out


def _check(d, durability, entries, raws, where):
    try:
        s = open_small(d, durability, index_file_size=INDEX_FILE_SIZE)
    except DLedgerError as exc:
        assert d in str(exc), f"{where}: the refusal does not name the file: {exc}"
        return "refused"
    try:
        if s.suspect is not SuspectReason.LOST_TAIL:
            assert s.ledger_end_index == N - 1, f"{where}: log cut to {s.ledger_end_index}"
        if where[0].endswith("currterm"):
            assert s.current_term >= 3 or s.suspect is SuspectReason.TERM_LOST, where
            if s.suspect is not SuspectReason.TERM_LOST:
                assert (s.current_term, s.vote_for) == (3, "n1"), where
        for i in range(s.ledger_before_begin_index + 1, s.ledger_end_index + 1):
            try:
                e = s.get(i)
            except CorruptStoreError as exc:
                assert d in str(exc), where
                continue
            o = entries[i]
            assert (e.index, e.term, e.pos, e.magic, e.body, e.channel, e.chain_crc,
                    e.body_crc) == (o.index, o.term, o.pos, o.magic, o.body, o.channel,
                                    o.chain_crc, o.body_crc), f"{where}: entry {i} served changed"
            try:
                chunk, count = s.get_raw_range(i, 1 << 20)
            except CorruptStoreError:
                continue
            assert chunk == b"".join(raws[i:i + count]), f"{where}: raw range from {i} changed"
        return "opened"
    finally:
        s.close()


@pytest.mark.parametrize("shape", ["closed", "crashed-fsync"])
def test_a_bit_flip_anywhere_is_never_served_nor_cut_silently(tmp_path, shape):
    base = str(tmp_path / "base")
    durability, entries, raws, positions = _build(base, shape)
    outcomes = {"refused": 0, "opened": 0}
    for n, (path, off) in enumerate(_targets(base, positions, raws)):
        d = str(tmp_path / f"f{n}")
        shutil.copytree(base, d)
        target = os.path.join(d, os.path.relpath(path, base))
        bit = (off * 3 + n) % 8
        flip_bit(target, off, bit)
        outcomes[_check(d, durability, entries, raws, (target, off, bit))] += 1
        shutil.rmtree(d)
    assert outcomes["opened"] > 0


@pytest.mark.parametrize("field_offset,name", [(0, "magic"), (4, "size"), (8, "index"),
                                               (16, "term"), (24, "pos"), (32, "channel"),
                                               (36, "chain_crc"), (40, "body_crc"),
                                               (44, "body_size"), (60, "body")])
@pytest.mark.parametrize("bit", [0, 5])
def test_each_header_field_of_a_trusted_record_is_checked_on_read(tmp_path, field_offset, name, bit):
    d = str(tmp_path / "s")
    durability, entries, raws, positions = _build(d, "closed")
    seg = segments(d)[0]
    pos = positions[1]
    flip_bit(seg, pos + field_offset + (7 if name in ("index", "term", "pos") else 3), bit)
    s = open_small(d, durability, index_file_size=INDEX_FILE_SIZE)
    try:
        with pytest.raises(CorruptStoreError) as info:
            s.get(1)
        assert seg in str(info.value) and f"offset {pos}" in str(info.value)
        with pytest.raises(CorruptStoreError):
            s.get_raw_range(0, 1 << 20)
        assert s.get(0).body == entries[0].body and s.get(2).body == entries[2].body
    finally:
        s.close()


def test_a_damaged_term_file_is_a_lost_term_not_term_zero(tmp_path):
    d = str(tmp_path / "s")
    _build(d, "closed")
    path = os.path.join(d, "currterm")
    text = read_at(path, 0, 1000)
    k = text.index(b"currTerm=") + len("currTerm=")
    flip_bit(path, k, 1)  # 3 -> 1: still a number
    s = open_small(d, index_file_size=INDEX_FILE_SIZE)
    try:
        assert s.suspect is SuspectReason.TERM_LOST
        assert s.current_term >= 3 and s.vote_for is None
    finally:
        s.close()
    s = open_small(d, index_file_size=INDEX_FILE_SIZE)  # a second open keeps the state
    try:
        assert s.suspect is SuspectReason.TERM_LOST
    finally:
        s.close()
