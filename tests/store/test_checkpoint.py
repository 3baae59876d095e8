"""The ``checkpoint`` file after crashes and damage (ahead of the log, torn, empty or garbage).

- A checkpoint ahead of the log (its ``endIndex`` / ``committedIndex`` beyond what the data
  holds, e.g. after data loss or a restored older data directory) must not stop the open: the
  committed index is clamped to the log's end and the log is recovered by scanning.
- A torn, empty or garbage checkpoint is ignored: normal start from a scan, committed -1.
- A good checkpoint restores the committed index and the before-begin term.
"""

from __future__ import annotations

import logging
import os

import pytest

from dledger.entry import DLedgerEntry
from dledger.store.checkpoint import read_checkpoint
from dledger.sim.disk import crash_store
from helpers.small_store import MODES, append_bodies, body, open_small, snapshot

N = 30  # three 1 KiB data segments of 64-byte records


def cp_path(d):
    return os.path.join(d, "checkpoint")


def write(path, content: bytes):
    with open(path, "wb") as fh:
        fh.write(content)


def build(d, durability="page_cache", committed=N - 1):
    s = open_small(d, durability)
    s.persist_term(2, None)
    append_bodies(s, [body(i) for i in range(N)])
    s.update_committed_index(committed)
    written = snapshot(s)
    s.close()
    cp = read_checkpoint(d)
    assert (cp.end_index, cp.committed_index) == (N - 1, committed)
    return written


@pytest.mark.parametrize("durability", MODES)
def test_committed_index_survives_restart(tmp_path, durability):
    d = str(tmp_path / "s")
    written = build(d, durability, committed=17)
    s = open_small(d, durability)
    try:
        assert s.committed_index == 17
        assert snapshot(s) == written
    finally:
        s.close()


@pytest.mark.parametrize("durability", MODES)
def test_commit_without_flush_is_not_persisted_past_the_last_checkpoint(tmp_path, durability):
    d = str(tmp_path / "s")
    build(d, durability, committed=10)
    s = open_small(d, durability)
    s.update_committed_index(20)
    crash_store(s)
    s = open_small(d, durability)
    try:
        assert s.committed_index == 10
    finally:
        s.close()


AHEAD = {
    # endIndex, committedIndex written over a log of N entries (0..N-1)
    "end-and-commit-ahead": (N + 50, N + 50),
    "commit-ahead-only": (N - 1, N + 5),
    "end-ahead-commit-inside": (N + 50, 12),
}


@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("case", sorted(AHEAD))
def test_checkpoint_ahead_of_the_log_opens_clamped(tmp_path, durability, case, caplog):
    d = str(tmp_path / "s")
    written = build(d, durability, committed=5)
    end, committed = AHEAD[case]
    write(cp_path(d), f"endIndex={end}\ncommittedIndex={committed}\n".encode())
    with caplog.at_level(logging.WARNING, logger="dledger"):
        s = open_small(d, durability)
    try:
        assert snapshot(s) == written
        assert s.ledger_end_index == N - 1
        assert s.committed_index == min(committed, N - 1)
        if committed > N - 1:
            assert any("clamped" in r.getMessage() for r in caplog.records)
        e = s.append_as_leader(DLedgerEntry(body=b"more"))
        assert e.index == N
    finally:
        s.close()
    # the rewritten checkpoint is sane again
    cp = read_checkpoint(d)
    assert cp.end_index == N and cp.committed_index <= N


@pytest.mark.parametrize("durability", MODES)
def test_checkpoint_ahead_after_losing_the_tail(tmp_path, durability):
    """The data lost its last segments (restored from an old copy): the log is what is left."""
    d = str(tmp_path / "s")
    written = build(d, durability)
    segs = sorted(os.listdir(os.path.join(d, "data")))
    os.unlink(os.path.join(d, "data", segs[-1]))
    s = open_small(d, durability)
    try:
        got = snapshot(s)
        assert 0 < len(got) < N and got == written[:len(got)]
        assert s.committed_index == s.ledger_end_index == len(got) - 1
        # no entry of the lost segment is served, and appends continue after the survivors
        e = s.append_as_leader(DLedgerEntry(body=b"x"))
        assert e.index == len(got)
    finally:
        s.close()


@pytest.mark.parametrize("durability", MODES)
def test_checkpoint_ahead_of_an_empty_log(tmp_path, durability):
    d = str(tmp_path / "s")
    os.makedirs(d)
    write(cp_path(d), b"endIndex=40\ncommittedIndex=40\n")
    s = open_small(d, durability)
    try:
        assert (s.ledger_end_index, s.committed_index) == (-1, -1)
        assert s.append_as_leader(DLedgerEntry(body=b"a")).index == 0
    finally:
        s.close()


BAD = {
    "empty": b"",
    "torn-first-line": b"endInd",
    "torn-value": b"endIndex=2",
    "missing-committed": b"endIndex=29\n",
    "garbage": b"\x00\xff\x13garbage\x00",
    "not-numbers": b"endIndex=abc\ncommittedIndex=def\n",
    "negative": b"endIndex=-7\ncommittedIndex=-9\n",
    "nul-padded": b"endIndex=29\ncommittedIndex=29\n\x00\x00\x00\x00",
}


@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_checkpoint_means_normal_start(tmp_path, durability, kind):
    d = str(tmp_path / "s")
    written = build(d, durability, committed=20)
    write(cp_path(d), BAD[kind])
    s = open_small(d, durability)
    try:
        assert snapshot(s) == written
        assert s.committed_index == -1
        assert s.append_as_leader(DLedgerEntry(body=b"next")).index == N
        s.update_committed_index(N)
        s.flush()
    finally:
        s.close()
    cp = read_checkpoint(d)
    assert (cp.end_index, cp.committed_index) == (N, N)


def test_checkpoint_names_an_entry_that_was_replaced(tmp_path):
    """endIndex exists but its index unit disagrees (term changed): not trusted, scanned."""
    d = str(tmp_path / "s")
    s = open_small(d)
    s.persist_term(1, None)
    append_bodies(s, [body(i) for i in range(10)])
    s.flush()  # checkpoint endIndex=9
    s.truncate(5)
    s.persist_term(2, None)
    append_bodies(s, [body(100 + i) for i in range(5)])
    written = snapshot(s)
    crash_store(s)
    write(cp_path(d), b"endIndex=9\ncommittedIndex=3\n")  # as it was before the truncation
    s = open_small(d)
    try:
        assert snapshot(s) == written
        assert [t for _, t, _, _ in written] == [1] * 5 + [2] * 5
        assert s.committed_index == 3
    finally:
        s.close()


def test_leftover_checkpoint_tmp_is_ignored(tmp_path):
    d = str(tmp_path / "s")
    written = build(d, committed=7)
    write(cp_path(d) + ".tmp", b"endIndex=99\ncommittedIndex=99\n")
    s = open_small(d)
    try:
        assert s.committed_index == 7
        assert snapshot(s) == written
    finally:
        s.close()


def test_before_begin_term_survives_restart_through_checkpoint(tmp_path):
    d = str(tmp_path / "s")
    s = open_small(d)
    s.persist_term(3, None)
    append_bodies(s, [body(i) for i in range(N)])
    s.update_committed_index(N - 1)
    s.reset(14, 3)
    written = snapshot(s)
    crash_store(s)
    s = open_small(d)
    try:
        assert (s.ledger_before_begin_index, s.ledger_before_begin_term) == (14, 3)
        assert s.get_entry_term(14) == 3
        assert snapshot(s) == written and written[0][0] == 15
    finally:
        s.close()


def test_new_store_starts_with_a_checkpoint(tmp_path):
    d = str(tmp_path / "s")
    s = open_small(d)
    crash_store(s)
    cp = read_checkpoint(d)
    assert (cp.end_index, cp.committed_index, cp.before_begin_index) == (-1, -1, -1)


@pytest.mark.parametrize("durability", MODES)
@pytest.mark.parametrize("flushed", [0, 3], ids=["never-flushed", "flushed-3"])
def test_hole_after_the_checkpoint(tmp_path, durability, flushed):
    """A power loss wrote later pages but not an earlier one (reordered write-back).

    page_cache mode: nothing after the checkpoint was promised durable, so the log ends at the
    hole and appends continue there. fsync mode: every entry was synced before it was
    acknowledged, so a hole followed by intact entries is a lost write: the open keeps the
    log whole and refuses the entry (naming file and offset) until it is repaired from a peer.
    """
    from dledger.errors import CorruptStoreError
    from helpers.small_store import DATA_FILE_SIZE, INDEX_FILE_SIZE
    from helpers.store_files import record_location, zero
    d = str(tmp_path / "s")
    s = open_small(d, durability)
    s.persist_term(1, None)
    append_bodies(s, [body(i) for i in range(flushed)])
    if flushed:
        s.flush()
    append_bodies(s, [body(i) for i in range(flushed, 10)])
    written = snapshot(s)
    crash_store(s)
    hole = record_location(d, 5, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    zero(hole.path, hole.offset, hole.size)
    if durability == "fsync":
        s = open_small(d, durability)
        try:
            assert s.ledger_end_index == 9 and list(s.damaged()) == [5]
            with pytest.raises(CorruptStoreError) as info:
                s.get(5)
            assert hole.path in str(info.value) and f"offset {hole.offset}" in str(info.value)
            assert [s.get(i).body for i in range(10) if i != 5] == \
                [w[3] for w in written if w[0] != 5]
        finally:
            s.close()
        return
    s = open_small(d, durability)
    try:
        assert snapshot(s) == written[:5]
        assert s.append_as_leader(DLedgerEntry(body=b"again")).pos == hole.pos
    finally:
        s.close()
    s = open_small(d, durability)
    try:
        assert snapshot(s) == written[:5] + [(5, 1, hole.pos, b"again")]
        assert s.verify() == []
    finally:
        s.close()
