"""Every single bit flip of a ``currterm`` written by dledger is damage the open survives.

Rule under test (``dledger.store.term_file``, ``properties.damaged_checked_file``): a term file
written with a ``crc`` line whose checksum, or whose syntax, shows damage (a flip in the crc
line's own key or line break, a ``vote`` line left without its ``=``, a term that no longer
parses) opens the store with ``SuspectReason.TERM_LOST``: the node relearns its term from the
others and never votes twice. It never refuses the open, never starts from the flipped term or
vote, and never from a term below the log's last entry's. A damaged leftover copy next to an
intact ``currterm`` changes nothing. (A file without a crc line, as Java DLedger writes it, that
does not parse still stops the open: ``test_term_file.py``.)
"""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import given, settings, strategies as st

from dledger.store.suspect import SuspectReason
from helpers.small_store import append_bodies, body, open_small


def _store(d, *, with_log: bool) -> bytes:
    s = open_small(d, "fsync")
    s.clear_suspect()  # a member in good standing: only the flip makes it suspect
    s.persist_term(5, "n2")
    if with_log:
        append_bodies(s, [body(i) for i in range(3)])
    s.close()
    with open(os.path.join(d, "currterm"), "rb") as fh:
        return fh.read()


def _flip(path: str, data: bytes, bit: int) -> None:
    buf = bytearray(data)
    buf[bit // 8] ^= 1 << (bit % 8)
    with open(path, "wb") as fh:
        fh.write(bytes(buf))


def test_the_term_file_is_written_with_a_crc_line(tmp_path):
    data = _store(str(tmp_path / "s"), with_log=True)
    assert b"\ncrc=" in data and b"currTerm=5" in data and b"voteLeader=n2" in data


@pytest.mark.parametrize("with_log", [True, False], ids=["log", "empty-log"])
@pytest.mark.parametrize("leftover", [None, ".tmp", ".bak"])
def test_every_bit_flip_of_the_term_file_opens_with_the_term_lost(tmp_path, with_log, leftover):
    base = str(tmp_path / "s")
    data = _store(base, with_log=with_log)
    path = os.path.join(base, "currterm")
    for bit in range(len(data) * 8):
        d = str(tmp_path / f"b{bit}")
        shutil.copytree(base, d)
        if leftover is not None:  # an intact older copy must not be taken for the lost one
            with open(os.path.join(d, "currterm" + leftover), "wb") as fh:
                fh.write(b"voteLeader=n0\ncurrTerm=4\n")
        _flip(os.path.join(d, "currterm"), data, bit)
        s = open_small(d, "fsync")
        try:
            assert s.suspect is SuspectReason.TERM_LOST, f"bit {bit}: flip not detected"
            assert s.vote_for is None, f"bit {bit}: a flipped or older vote was used"
            if with_log:
                assert s.current_term >= 5, f"bit {bit}: term below the log's last entry's"
            assert s.ledger_end_index == (2 if with_log else -1)
        finally:
            s.close()
        shutil.rmtree(d)
    assert open(path, "rb").read() == data


@settings(max_examples=40, deadline=None)
@given(bit=st.integers(min_value=0), leftover=st.sampled_from([".tmp", ".bak"]))
def test_a_damaged_leftover_next_to_an_intact_term_file_changes_nothing(tmp_path_factory, bit,
                                                                        leftover):
    d = str(tmp_path_factory.mktemp("s"))
    data = _store(d, with_log=True)
    _flip(os.path.join(d, "currterm" + leftover), data, bit % (len(data) * 8))
    s = open_small(d, "fsync")
    try:
        assert s.suspect is None
        assert (s.current_term, s.vote_for) == (5, "n2")
    finally:
        s.close()


@pytest.mark.parametrize("second", range(0, 8 * 8, 3))
def test_two_flips_that_break_the_crc_lines_separator_and_its_value_still_open_term_lost(tmp_path, second):
    """Over a long run a small file can take two flips (seed 400185, 5 nodes, fsync): one turned
    the ``=`` of the ``crc`` line into ``5``, another hit the line's value, so no single flip
    restores it. A line that starts with ``crc`` is still the trace of dledger's writer."""
    base = str(tmp_path / "s")
    data = _store(base, with_log=True)
    at = data.index(b"\ncrc=") + 4                       # the crc line's '='
    buf = bytearray(data)
    buf[at] ^= 0x08                                      # '=' -> '5'
    value = at + 1 + second // 8
    if value < len(buf) - 1:
        buf[value] ^= 1 << (second % 8)
    d = str(tmp_path / "d")
    shutil.copytree(base, d)
    with open(os.path.join(d, "currterm"), "wb") as fh:
        fh.write(bytes(buf))
    s = open_small(d, "fsync")
    try:
        assert s.suspect is SuspectReason.TERM_LOST
        assert s.current_term >= s.ledger_end_term
    finally:
        s.close()


def test_two_flips_in_the_crc_key_and_another_line_still_open_term_lost(tmp_path):
    """Seed 6147 (3 nodes, fsync), after the vote-timing change: one flip turned ``crc`` into
    ``cr\\xe3``, another ``voteLeader`` into ``vote\\x0ceader``; a key one or two flips from
    ``crc`` still marks the file as dledger's (Java's keys are far from it)."""
    base = str(tmp_path / "s")
    data = _store(base, with_log=True)
    buf = bytearray(data)
    buf[data.index(b"\ncrc=") + 3] ^= 0x80                 # 'c' -> 0xe3
    buf[data.index(b"voteLeader") + 4] ^= 0x40             # 'L' -> 0x0c
    with open(os.path.join(base, "currterm"), "wb") as fh:
        fh.write(bytes(buf))
    s = open_small(base, "fsync")
    try:
        assert s.suspect is SuspectReason.TERM_LOST
    finally:
        s.close()
