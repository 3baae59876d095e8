"""Terms and indexes near the int64 limits, read from files or handed to the store, are refused
with a clear error naming the file and the field (the checkpoint, being advisory, is ignored
with such a warning)."""

from __future__ import annotations

import logging
import os
import struct

import pytest

from dledger.entry import MAX_INDEX, MAX_TERM, DLedgerEntry, decode_header, encode
from dledger.errors import CorruptEntryError, CorruptStoreError, DLedgerError, TermFileError
from dledger.store import DLedgerMemoryStore
from helpers.small_store import append_bodies, body, open_small, snapshot
from helpers.store_files import record_location, write_at

INT64_MAX = (1 << 63) - 1


@pytest.mark.parametrize("index,term", [(INT64_MAX, 1), (1, INT64_MAX), (MAX_INDEX + 1, 1),
                                        (1, MAX_TERM + 1), (-1, 1), (1, -5)])
def test_a_record_header_out_of_bounds_is_refused_naming_the_field(index, term):
    raw = bytearray(encode(DLedgerEntry(body=b"abc", index=1, term=1, pos=0)))
    struct.pack_into(">qq", raw, 8, index, term)
    with pytest.raises(CorruptEntryError) as info:
        decode_header(raw, path="/x/data/00000000000000000000")
    assert "out of bounds" in str(info.value) and "/x/data" in str(info.value)


@pytest.mark.parametrize("value", [str(INT64_MAX), str(MAX_TERM + 1), "99999999999999999999999"])
def test_a_term_file_beyond_the_largest_term_stops_the_open_naming_file_and_field(tmp_path, value):
    d = str(tmp_path / "s")
    open_small(d).close()
    with open(os.path.join(d, "currterm"), "w") as fh:
        fh.write(f"voteLeader=\ncurrTerm={value}\n")
    with pytest.raises(TermFileError) as info:
        open_small(d)
    assert os.path.join(d, "currterm") in str(info.value) and "currTerm" in str(info.value)


@pytest.mark.parametrize("key,value", [("endIndex", str(INT64_MAX)), ("committedIndex", "-7"),
                                       ("beforeBeginTerm", str(1 << 64)),
                                       ("endIndex", "99999999999999999999999")])
def test_a_checkpoint_out_of_bounds_is_ignored_with_a_warning_naming_the_field(tmp_path, caplog, key, value):
    d = str(tmp_path / "s")
    s = open_small(d)
    s.persist_term(1, None)
    append_bodies(s, [body(i) for i in range(3)])
    written = snapshot(s)
    s.close()
    lines = {"endIndex": "2", "committedIndex": "2", "beforeBeginIndex": "-1", "beforeBeginTerm": "-1"}
    lines[key] = value
    with open(os.path.join(d, "checkpoint"), "w") as fh:
        fh.write("".join(f"{k}={v}\n" for k, v in lines.items()))
    with caplog.at_level(logging.WARNING):
        s = open_small(d)
    try:
        assert snapshot(s) == written
        assert any(key in r.getMessage() and "checkpoint" in r.getMessage() for r in caplog.records)
    finally:
        s.close()


def test_an_entry_with_a_term_near_the_limit_in_a_trusted_record_is_never_served(tmp_path):
    d = str(tmp_path / "s")
    s = open_small(d)
    s.persist_term(1, None)
    append_bodies(s, [body(i) for i in range(3)])
    s.close()
    loc = record_location(d, 1, 32 * 64, 1024)
    write_at(loc.path, loc.offset + 16, struct.pack(">q", INT64_MAX))
    s = open_small(d)
    try:
        with pytest.raises(CorruptStoreError) as info:
            s.get(1)
        assert loc.path in str(info.value)
    finally:
        s.close()


@pytest.mark.parametrize("make", ["file", "memory"])
def test_persisting_a_term_beyond_the_largest_is_refused(tmp_path, make):
    s = open_small(str(tmp_path / "s")) if make == "file" else DLedgerMemoryStore()
    try:
        with pytest.raises(DLedgerError, match="largest term"):
            s.persist_term(MAX_TERM + 1, None)
        assert s.current_term == 0
    finally:
        s.close()
