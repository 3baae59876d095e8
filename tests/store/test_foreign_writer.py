"""A store that dledger flushed, then Java DLedger truncated and appended to, reopens to exactly
Java's log: the checkpoint dledger left is checked against the files (the end entry's term and
position, the chain of index units before it) and ignored when they no longer match.

Java's writes are laid out byte by byte from docs/format.md: records without CRC, index units
with magic 1, a truncation that only moves the write position (stale records and index units
stay), a ``currterm`` without ``crc`` line.
"""

from __future__ import annotations

import os
import struct

import pytest

from dledger.store.checkpoint import read_checkpoint
from dledger.store.suspect import SuspectReason
from helpers.small_store import open_small
from helpers.store_files import index_unit_location, write_at

DATA = 1024
INDEX = 32 * 64


def java_record(index, term, pos, body):
    return struct.pack(">iiqqqiiii", 1, 48 + len(body), index, term, pos, 0, 0, 0, len(body)) + body


def java_truncate_and_append(d, truncate_at, pos, bodies, term):
    """Java's truncate(truncate_at) (write positions moved, nothing erased) then appends."""
    for k, b in enumerate(bodies):
        index = truncate_at + k
        rec = java_record(index, term, pos, b)
        seg = pos - pos % DATA
        if pos % DATA + len(rec) + 8 > DATA:
            raise AssertionError("keep the test's Java appends inside one segment")
        write_at(os.path.join(d, "data", f"{seg:020d}"), pos % DATA, rec)
        u = index_unit_location(d, index, INDEX)
        write_at(u.path, u.offset, struct.pack(">iqiqq", 1, pos, len(rec), index, term))
        pos += len(rec)
    with open(os.path.join(d, "currterm"), "w") as fh:
        fh.write(f"voteLeader=\ncurrTerm={term}\n")


@pytest.mark.parametrize("java_bodies", [[b"j" * 20, b"k" * 30], [b"J" * 60, b"K" * 60, b"L" * 60, b"M" * 60]],
                         ids=["fewer-and-shorter", "more-entries"])
def test_a_log_java_truncated_and_appended_to_reopens_as_java_left_it(tmp_path, java_bodies):
    d = str(tmp_path / "s")
    s = open_small(d, index_file_size=INDEX)
    s.clear_suspect()
    s.persist_term(1, None)
    for i in range(3):
        s.batch_append_as_leader([bytes([65 + i]) * 80])
    s.update_committed_index(2)
    s.batch_append_as_leader([bytes([70 + i]) * 80 for i in range(3)])
    ours = list(s.iter_entries())
    s.close()
    cp = read_checkpoint(d)
    assert cp.end_index == 5 and cp.end_term == 1 and cp.end_pos == ours[5].pos
    java_truncate_and_append(d, 3, ours[3].pos, java_bodies, 2)
    s = open_small(d, index_file_size=INDEX)
    try:
        got = [(e.index, e.term, e.body) for e in s.iter_entries()]
        expect = [(e.index, e.term, e.body) for e in ours[:3]] + [
            (3 + k, 2, b) for k, b in enumerate(java_bodies)]
        assert got == expect
        assert s.current_term == 2 and s.committed_index == 2
        assert s.verify() == []
        assert s.suspect is SuspectReason.LOST_TAIL  # a flushed entry is gone: catch up first
    finally:
        s.close()
