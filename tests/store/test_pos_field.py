"""A record's ``pos`` field must name where the record lies, whatever its body CRC says.

Found by the swarm (seed 2186, 5 nodes, file stores, ``page_cache``): a power cut tore the
sector holding a record's ``pos`` and ``body_crc`` fields (both read 0). Recovery checked
``pos`` only for records with a CRC (Java's CRC-less records were exempt), so it rebuilt the
index from that record and kept it; the node then committed bytes that differed from the
leader's in ``pos`` only. Java DLedger writes every record's real position into ``pos``, so a
record whose ``pos`` lies elsewhere is torn or misdirected, CRC or not.
"""

from __future__ import annotations

import struct

import pytest

from dledger.entry import MAGIC_NOOP
from dledger.errors import CorruptStoreError
from dledger.sim.disk import crash_store
from helpers.small_store import DATA_FILE_SIZE, INDEX_FILE_SIZE, open_small
from helpers.store_files import read_at, record_location, write_at

POS_OFFSET = 24          # magic 4, size 4, index 8, term 8: then pos (8)
BODY_CRC_OFFSET = 40     # pos 8, channel 4, chain crc 4: then body crc (4)


@pytest.mark.parametrize("crc", ["kept", "zeroed", "empty-body"])
def test_a_tail_record_whose_pos_field_is_wrong_is_never_kept(tmp_path, crc):
    d = str(tmp_path / "s")
    s = open_small(d, "fsync")
    s.clear_suspect()
    s.persist_term(2, "n1")
    for i in range(3):
        s.batch_append_as_leader([b"entry-%d" % i * 4])
    s.update_committed_index(0)
    s.flush()
    for i in range(3, 6):
        # after the checkpoint: scanned on open (entry 4 has an empty body: its CRC is 0 anyway)
        s.batch_append_as_leader([b"" if crc == "empty-body" and i == 4 else b"entry-%d" % i * 4])
    crash_store(s)
    loc = record_location(d, 4, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    write_at(loc.path, loc.offset + POS_OFFSET, struct.pack(">q", 0))
    if crc != "kept":
        write_at(loc.path, loc.offset + BODY_CRC_OFFSET, b"\0\0\0\0")
    s = open_small(d, "fsync")
    try:
        # entry 4 and what follows it are cut (or kept as damaged): never served as they are
        assert s.ledger_end_index == 3 or 4 in dict(s.damaged())
        for i in range(min(s.ledger_end_index + 1, 4)):
            assert s.get(i).body == b"entry-%d" % i * 4
        if s.ledger_end_index >= 4:
            with pytest.raises(Exception):
                s.get(4)
    finally:
        s.close()


@pytest.mark.parametrize("where", [0, 2])
def test_a_no_op_whose_pos_field_flipped_at_rest_is_refused_by_every_read(tmp_path, where):
    """A no-op's record is all header and carries no body CRC (the CRC-32 of nothing is 0), so
    the CRC-less allowance for Java's records let a flipped ``pos`` through every read: the
    leader pushed it, and every follower refused it forever ("pushed entry 0 has pos 4096 but
    would land at 0 here"; swarm seed 90026). Java DLedger never writes a no-op's index unit
    with the NOOP magic, so a unit that says NOOP is ours, and its record's ``pos`` must name
    where it lies: the entry is damaged (to be repaired from a peer), never read."""
    d = str(tmp_path / "s")
    s = open_small(d, "fsync")
    s.clear_suspect()
    s.persist_term(1, "n1")
    for i in range(4):
        if i == where:
            s.batch_append_as_leader([b""], MAGIC_NOOP)
        else:
            s.batch_append_as_leader([b"entry-%d" % i * 4])
    s.update_committed_index(3)
    s.flush()
    s.close()
    loc = record_location(d, where, INDEX_FILE_SIZE, DATA_FILE_SIZE)
    pos = struct.unpack(">q", read_at(loc.path, loc.offset + POS_OFFSET, 8))[0]
    write_at(loc.path, loc.offset + POS_OFFSET, struct.pack(">q", pos ^ 4096))
    s = open_small(d, "fsync")
    try:
        with pytest.raises(CorruptStoreError):
            s.get(where)
        with pytest.raises(CorruptStoreError):
            s.get_raw_range(where, 1 << 20)
        assert where in s.damaged()
        assert s.get(where + 1).body == b"entry-%d" % (where + 1) * 4
    finally:
        s.close()
