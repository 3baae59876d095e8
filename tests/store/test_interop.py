"""Byte compatibility with Java DLedger, checked with code written here from the byte layouts of docs/format.md alone.

- A store directory laid out byte by byte as Java DLedger writes it (bodyCrc 0, NOOP entries
  whose index unit says magic 1, end-of-segment blanks, a `currterm` properties file) opens,
  reads, and accepts new appends.
- A store that dledger writes parses with an independent decoder that walks the files.
"""

import os
import struct

from dledger.entry import DLedgerEntry
from dledger.store import DLedgerMmapFileStore, open_store

DATA_SIZE = 1024
INDEX_SIZE = 32 * 8


def java_record(magic, index, term, pos, body):
    size = 48 + len(body)
    return struct.pack(">iiqqqiiii", magic, size, index, term, pos, 0, 0, 0, len(body)) + body


def java_index_unit(magic, pos, size, index, term):
    return struct.pack(">iqiqq", magic, pos, size, index, term)


def write_java_store(node_dir, entries):
    """entries: list of (magic, term, body). Lays them out as Java's appendAsLeader does."""
    data = {}
    index = bytearray()
    seg, wrote = 0, 0
    data[seg] = bytearray(DATA_SIZE)
    for i, (magic, term, body) in enumerate(entries):
        size = 48 + len(body)
        if size + 8 > DATA_SIZE - wrote:  # blank padding, then a new segment
            rest = DATA_SIZE - wrote
            data[seg][wrote:wrote + 8] = struct.pack(">ii", -1, rest)
            seg += DATA_SIZE
            data[seg] = bytearray(DATA_SIZE)
            wrote = 0
        pos = seg + wrote
        data[seg][wrote:wrote + size] = java_record(magic, i, term, pos, body)
        wrote += size
        index += java_index_unit(1, pos, size, i, term)  # Java leaders write magic 1 always
    os.makedirs(os.path.join(node_dir, "data"))
    os.makedirs(os.path.join(node_dir, "index"))
    for start, content in data.items():
        with open(os.path.join(node_dir, "data", f"{start:020d}"), "wb") as fh:
            fh.write(content)
    for k in range(0, max(len(index), 1), INDEX_SIZE):
        chunk = bytes(index[k:k + INDEX_SIZE])
        with open(os.path.join(node_dir, "index", f"{k:020d}"), "wb") as fh:
            fh.write(chunk + bytes(INDEX_SIZE - len(chunk)))
    with open(os.path.join(node_dir, "currterm"), "w") as fh:
        fh.write("voteLeader=n1\ncurrTerm=3\n")


JAVA_ENTRIES = ([(1, 1, f"message-{i}".encode() * 20) for i in range(6)]
                + [(2, 2, b"")]
                + [(1, 2, f"after-noop-{i}".encode() * 15) for i in range(8)])


def test_a_java_written_store_opens_read_only_with_every_entry(tmp_path):
    node = str(tmp_path / "dledger-n0")
    write_java_store(node, JAVA_ENTRIES)
    store = open_store(str(tmp_path))
    assert (store.ledger_before_begin_index, store.ledger_end_index, store.ledger_end_term) == (-1, 14, 2)
    assert (store.current_term, store.vote_for) == (3, "n1")
    for i, (magic, term, body) in enumerate(JAVA_ENTRIES):
        e = store.get(i)
        assert (e.index, e.magic, e.term, e.body, e.body_crc) == (i, magic, term, body, 0)
    assert store._state.index_overrides == {}  # the NOOP index quirk is accepted, not "repaired"
    assert store.verify() == []
    store.close()


def test_a_java_written_store_keeps_working_as_our_store(tmp_path):
    node = str(tmp_path / "dledger-n0")
    write_java_store(node, JAVA_ENTRIES)
    store = DLedgerMmapFileStore.open(node, data_file_size=DATA_SIZE, index_file_size=INDEX_SIZE)
    assert store.ledger_end_index == 14 and store.current_term == 3
    e = store.append_as_leader(DLedgerEntry(body=b"from dledger"))
    assert (e.index, e.term) == (15, 3)
    store.close()
    again = DLedgerMmapFileStore.open(node, data_file_size=DATA_SIZE, index_file_size=INDEX_SIZE)
    assert again.get(15).body == b"from dledger" and again.get(3).body == JAVA_ENTRIES[3][2]
    again.close()


def independent_walk(node_dir):
    """Decode a store from the documented byte layouts only: walk data segments, check each index unit."""
    data_dir = os.path.join(node_dir, "data")
    names = sorted(os.listdir(data_dir))
    index_blob = b"".join(open(os.path.join(node_dir, "index", n), "rb").read()
                          for n in sorted(os.listdir(os.path.join(node_dir, "index"))))
    out = []
    for name in names:
        start = int(name)
        blob = open(os.path.join(data_dir, name), "rb").read()
        off = 0
        while off + 8 <= len(blob):
            magic, size = struct.unpack_from(">ii", blob, off)
            if magic == -1:
                assert off + size == len(blob), "a blank only ends a segment"
                off += size
                continue
            if magic == 0 and size == 0:
                break
            (magic, size, index, term, pos, channel, chain, crc, blen) = struct.unpack_from(
                ">iiqqqiIIi", blob, off)
            assert blen == size - 48 and pos == start + off
            payload = blob[off + 48:off + size]
            unit = struct.unpack_from(">iqiqq", index_blob, index * 32)
            assert unit == (magic, pos, size, index, term)
            out.append((index, term, magic, payload, crc))
            off += size
    return out


def test_a_store_we_write_parses_with_an_independent_decoder(tmp_path):
    import zlib
    node = str(tmp_path / "dledger-n0")
    store = DLedgerMmapFileStore.open(node, data_file_size=DATA_SIZE, index_file_size=INDEX_SIZE)
    store.persist_term(2, "n0")
    bodies = [os.urandom(i * 13 % 300) for i in range(25)]
    store.batch_append_as_leader(bodies)
    store.append_as_leader(DLedgerEntry(magic=2))
    store.close()
    walked = independent_walk(node)
    assert [w[0] for w in walked] == list(range(26))
    assert [w[3] for w in walked[:25]] == bodies
    assert all(w[4] == zlib.crc32(w[3]) for w in walked)
    assert walked[25][2] == 2  # our NOOP index unit carries its real magic
    props = dict(line.split("=", 1) for line in open(os.path.join(node, "currterm")).read().split())
    # Java's two keys exactly, plus the checksum line Java's Properties reader ignores
    assert len(props.pop("crc")) == 8
    assert props == {"voteLeader": "n0", "currTerm": "2"}
