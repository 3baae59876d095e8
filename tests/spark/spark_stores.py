"""Store directories for the Spark tests: written with DLedgerMmapFileStore, or assembled byte by
byte in Java DLedger's format (bodyCrc 0, the NOOP index-magic quirk, blank padding, no
checkpoint)."""

import os
import random

from dledger.entry import (BODY_OFFSET, MAGIC_NOOP, MAGIC_NORMAL, RECORD_PREFIX, encode_blank,
                           encode_index)
from dledger.store import DLedgerMmapFileStore

DATA_FILE_SIZE = 4096
INDEX_FILE_SIZE = 32 * 128


def bodies(n, seed=1, lo=0, hi=200):
    rnd = random.Random(seed)
    return [rnd.randbytes(rnd.randrange(lo, hi)) for _ in range(n)]


def write_store(store_dir, body_list, *, term=1, committed=None, data_file_size=DATA_FILE_SIZE,
                index_file_size=INDEX_FILE_SIZE, more_terms=()):
    """A store holding ``body_list`` in ``term``, then each (term, bodies) of ``more_terms``."""
    st = DLedgerMmapFileStore.open(store_dir, data_file_size=data_file_size,
                                   index_file_size=index_file_size)
    st.persist_term(term, None)
    if body_list:
        st.batch_append_as_leader(body_list)
    for t, more in more_terms:
        st.persist_term(t, None)
        st.batch_append_as_leader(more)
    if committed is not None:
        st.update_committed_index(committed)
    st.close()
    return store_dir


def write_java_store(store_dir, entries, *, data_file_size=1024, index_file_size=32 * 16,
                     current_term=2):
    """Assemble a Java DLedger store by hand; ``entries`` is a list of (magic, term, body).

    Returns the expected rows: (index, term, pos, magic, size, body).
    """
    data_dir, index_dir = os.path.join(store_dir, "data"), os.path.join(store_dir, "index")
    os.makedirs(data_dir)
    os.makedirs(index_dir)
    segments = [bytearray()]
    units = bytearray()
    expected = []
    for index, (magic, term, body) in enumerate(entries):
        size = BODY_OFFSET + len(body)
        seg = segments[-1]
        if size + 8 > data_file_size - len(seg):
            seg += encode_blank(data_file_size - len(seg))
            segments.append(bytearray())
            seg = segments[-1]
        pos = (len(segments) - 1) * data_file_size + len(seg)
        # Java: chainCrc and bodyCrc are 0; the leader writes magic 1 into every index unit
        seg += RECORD_PREFIX.pack(magic, size, index, term, pos, 0, 0, 0, len(body)) + body
        units += encode_index(MAGIC_NORMAL, pos, size, index, term)
        expected.append((index, term, pos, magic, size, body))
    for i, seg in enumerate(segments):
        with open(os.path.join(data_dir, f"{i * data_file_size:020d}"), "wb") as f:
            f.write(bytes(seg) + bytes(data_file_size - len(seg)))
    for i in range(0, max(1, -(-len(units) // index_file_size))):
        chunk = bytes(units[i * index_file_size:(i + 1) * index_file_size])
        with open(os.path.join(index_dir, f"{i * index_file_size:020d}"), "wb") as f:
            f.write(chunk + bytes(index_file_size - len(chunk)))
    with open(os.path.join(store_dir, "currterm"), "w") as f:
        f.write(f"voteLeader=n0\ncurrTerm={current_term}\n")
    return expected


def java_entries(n, seed=7):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        term = 1 if i < n // 2 else 2
        if i in (0, n // 2):  # a new leader's first entry is a NOOP
            out.append((MAGIC_NOOP, term, b""))
        else:
            out.append((MAGIC_NORMAL, term, rnd.randbytes(rnd.randrange(1, 120))))
    return out


def flip_byte(path, offset, mask=0x01):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ mask]))
