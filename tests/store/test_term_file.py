"""The ``currterm`` file after crashes and damage (torn, missing, only a temporary copy left).

Rules under test (``dledger.store.term_file``): a corrupt ``currterm`` stops the open with
``TermFileError`` naming the file; a missing one means term 0 for an empty log and the last
entry's term for a non-empty one (never term 0 with entries of a higher term); when only a
``currterm.tmp`` or ``currterm.bak`` left by an interrupted rewrite exists, the copy that
validates with the highest term is used.
"""

from __future__ import annotations

import os

import pytest

from dledger.errors import TermFileError
from dledger.store.properties import read_properties
from dledger.sim.disk import crash_store
from helpers.small_store import append_bodies, body, open_small


def term_path(d):
    return os.path.join(d, "currterm")


def write(path, text):
    with open(path, "wb") as fh:
        fh.write(text if isinstance(text, bytes) else text.encode("latin-1"))


def store_with_log(d, term=5, n=3, vote="n2"):
    s = open_small(d)
    s.persist_term(term, vote)
    append_bodies(s, [body(i) for i in range(n)])
    s.close()


CORRUPT = {
    "empty": b"",
    "garbage": b"\x89PNG\r\n\x1a\n\x00\x00",
    "no-separator": b"currTerm 3\n",
    "not-a-number": b"currTerm=three\nvoteLeader=n1\n",
    "negative": b"currTerm=-4\nvoteLeader=\n",
    "no-term-key": b"voteLeader=n1\n",
    "torn-nul-tail": b"voteLeader=n1\ncurrTerm=3\x00\x00\x00\x00",
}


@pytest.mark.parametrize("kind", sorted(CORRUPT))
@pytest.mark.parametrize("with_log", [False, True], ids=["empty-log", "log"])
def test_corrupt_term_file_stops_the_open_naming_it(tmp_path, kind, with_log):
    d = str(tmp_path / "s")
    if with_log:
        store_with_log(d)
    else:
        os.makedirs(d)
    # a valid leftover copy must not paper over a damaged currterm: it may hold an older vote
    write(term_path(d) + ".bak", "currTerm=1\nvoteLeader=n0\n")
    write(term_path(d), CORRUPT[kind])
    with pytest.raises(TermFileError) as info:
        open_small(d)
    assert term_path(d) in str(info.value)
    assert open(term_path(d), "rb").read() == CORRUPT[kind]  # left for the operator


def test_missing_term_file_on_empty_log_is_term_zero(tmp_path):
    d = str(tmp_path / "s")
    s = open_small(d)
    try:
        assert (s.current_term, s.vote_for) == (0, None)
        assert s.ledger_end_index == -1
    finally:
        s.close()


@pytest.mark.parametrize("durability", ["page_cache", "fsync"])
def test_missing_term_file_with_a_log_is_raised_to_the_last_term(tmp_path, durability):
    d = str(tmp_path / "s")
    s = open_small(d, durability)
    s.persist_term(4, None)
    append_bodies(s, [body(0)])
    s.persist_term(7, "n1")
    append_bodies(s, [body(1), body(2)])
    crash_store(s)
    os.unlink(term_path(d))
    s = open_small(d, durability)
    try:
        assert s.current_term == 7, "never a term below the log's last entry"
        assert s.vote_for is None
        assert s.ledger_end_term == 7
        # the raised term was made durable at once
        assert read_properties(term_path(d))["currTerm"] == "7"
        e = append_bodies(s, [body(3)])[0]
        assert (e.index, e.term) == (3, 7)
    finally:
        s.close()


def test_term_file_below_the_log_is_raised(tmp_path):
    """A currterm older than the log (restored from a backup, say) is raised, never used as is."""
    d = str(tmp_path / "s")
    store_with_log(d, term=6)
    write(term_path(d), "currTerm=2\nvoteLeader=n1\n")
    s = open_small(d)
    try:
        assert s.current_term == 6 and s.vote_for is None
    finally:
        s.close()
    assert read_properties(term_path(d))["currTerm"] == "6"


LEFTOVERS = {
    # name: (tmp content, bak content, expected (term, vote))
    "only-tmp": ("currTerm=9\nvoteLeader=n1\n", None, (9, "n1")),
    "only-bak": (None, "voteLeader=n2\ncurrTerm=8\n", (8, "n2")),
    "tmp-newer": ("currTerm=9\nvoteLeader=\n", "currTerm=8\nvoteLeader=n0\n", (9, None)),
    "bak-newer": ("currTerm=8\nvoteLeader=n1\n", "currTerm=9\nvoteLeader=n2\n", (9, "n2")),
    "same-term-tmp-wins": ("currTerm=9\nvoteLeader=n1\n", "currTerm=9\nvoteLeader=\n", (9, "n1")),
    "tmp-torn": ("currTerm=1", "currTerm=8\nvoteLeader=n2\n", (8, "n2")),
    "tmp-garbage": ("\x00\x00\x00", "currTerm=8\nvoteLeader=n2\n", (8, "n2")),
    "bak-garbage": ("currTerm=9\nvoteLeader=n1\n", "garbage", (9, "n1")),
}


@pytest.mark.parametrize("case", sorted(LEFTOVERS))
def test_only_leftover_copies_present_uses_the_newest_valid_one(tmp_path, case):
    tmp, bak, expected = LEFTOVERS[case]
    d = str(tmp_path / "s")
    os.makedirs(d)
    if tmp is not None:
        write(term_path(d) + ".tmp", tmp)
    if bak is not None:
        write(term_path(d) + ".bak", bak)
    s = open_small(d)
    try:
        assert (s.current_term, s.vote_for) == expected
        # the next write goes to currterm and is what a later open reads
        s.persist_term(expected[0] + 1, "n4")
    finally:
        s.close()
    s = open_small(d)
    try:
        assert (s.current_term, s.vote_for) == (expected[0] + 1, "n4")
    finally:
        s.close()


def test_leftover_copy_below_the_log_is_raised_to_the_log(tmp_path):
    d = str(tmp_path / "s")
    store_with_log(d, term=6)
    os.replace(term_path(d), term_path(d) + ".bak")
    write(term_path(d) + ".bak", "currTerm=3\nvoteLeader=n1\n")
    s = open_small(d)
    try:
        assert s.current_term == 6
    finally:
        s.close()


def test_all_copies_unusable_with_a_log_falls_back_to_the_log_term(tmp_path):
    d = str(tmp_path / "s")
    store_with_log(d, term=6)
    os.unlink(term_path(d))
    write(term_path(d) + ".tmp", "garbage")
    write(term_path(d) + ".bak", "\x00")
    s = open_small(d)
    try:
        assert s.current_term == 6
    finally:
        s.close()


def test_persisted_term_and_vote_survive_a_crash(tmp_path):
    d = str(tmp_path / "s")
    s = open_small(d)
    s.persist_term(3, "n1")
    s.persist_term(4, None)
    s.persist_term(4, "n2")
    crash_store(s)
    assert not os.path.exists(term_path(d) + ".tmp")
    s = open_small(d)
    try:
        assert (s.current_term, s.vote_for) == (4, "n2")
    finally:
        s.close()


def test_java_written_term_file_is_read(tmp_path):
    """Java writes ``voteLeader`` first, may leave it empty, and Properties allow comments."""
    d = str(tmp_path / "s")
    os.makedirs(d)
    write(term_path(d), "#Sat Nov 21 06:00:00 UTC 2026\nvoteLeader=\ncurrTerm=12\n")
    s = open_small(d)
    try:
        assert (s.current_term, s.vote_for) == (12, None)
    finally:
        s.close()
