"""Damage at rest: bit flips in the files of a crashed node's store directory.

- ``flip_bit(path, offset, bit)``: flip bit ``bit`` (0 = least significant) of byte
  ``offset`` of the file, in place; returns the byte's old and new values.
- ``corrupt_store(store_dir, rng, kinds=KINDS, allow=None)``: pick, with ``rng``, one place
  of the store and flip one bit there. ``kinds`` says which places may be picked:
  ``"data_body"`` (a byte of an entry's body in a data segment), ``"data_header"`` (a field of
  an entry's record header: magic, size, index, term, pos, channel, chain_crc, body_crc,
  body_size), ``"index"`` (a field of an index unit: magic, pos, size, index, term),
  ``"checkpoint"`` and ``"term"`` (any byte of the ``checkpoint`` or ``currterm`` file).
  ``allow(path, offset)`` (e.g. ``ClusterFaultAtlas.allow_for(node)``) rules places out.
  Returns a ``Corruption`` naming the file, the offset, the bit and the field, or None when
  the store has no place of those kinds that ``allow`` permits.

Only call these on a store no process has open (after ``Cluster.crash`` or a power loss):
they write the files directly, as a disk's decay would. The choice depends only on the
directory's contents and ``rng``, so a seed gives the same damage.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from dledger.entry import BODY_OFFSET, INDEX_UNIT, INDEX_UNIT_SIZE, MAGIC_BLANK, MAGIC_SIZE, MIN_BLANK_LEN, \
    RECORD_PREFIX, VALID_MAGICS

__all__ = ["KINDS", "Corruption", "corrupt_store", "flip_bit"]

KINDS = ("data_body", "data_header", "index", "checkpoint", "term")

#: (name, offset, length) of each field of a record header and of an index unit
RECORD_FIELDS = (("magic", 0, 4), ("size", 4, 4), ("index", 8, 8), ("term", 16, 8), ("pos", 24, 8),
                 ("channel", 32, 4), ("chain_crc", 36, 4), ("body_crc", 40, 4), ("body_size", 44, 4))
UNIT_FIELDS = (("magic", 0, 4), ("pos", 4, 8), ("size", 12, 4), ("index", 16, 8), ("term", 24, 8))
assert sum(n for _f, _o, n in RECORD_FIELDS) == BODY_OFFSET == RECORD_PREFIX.size
assert sum(n for _f, _o, n in UNIT_FIELDS) == INDEX_UNIT_SIZE == INDEX_UNIT.size


@dataclass(frozen=True, slots=True)
class Corruption:
    """One flipped bit: ``kind`` (one of ``KINDS``), where, and what it hit."""

    kind: str
    path: str
    offset: int
    bit: int
    field: str          # e.g. "body of entry 7", "term of index unit 12", "checkpoint"
    old: int            # the byte's value before and after the flip
    new: int


def flip_bit(path: str, offset: int, bit: int) -> tuple[int, int]:
    """Flip bit ``bit`` of byte ``offset`` of ``path`` in place; (old, new) byte values."""
    if not 0 <= bit < 8:
        raise ValueError(f"bit must be 0..7, got {bit}")
    fd = os.open(path, os.O_RDWR)
    try:
        old = os.pread(fd, 1, offset)
        if len(old) != 1:
            raise ValueError(f"{path} has no byte at offset {offset}")
        new = old[0] ^ (1 << bit)
        os.pwrite(fd, bytes((new,)), offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    return old[0], new


def _segments(directory: str) -> list[str]:
    try:
        names = sorted(n for n in os.listdir(directory) if n.isdigit())
    except FileNotFoundError:
        return []
    return [os.path.join(directory, n) for n in names]


def _records(path: str) -> list[tuple[int, int, int]]:
    """(offset, size, entry index) of each entry record of a data segment, in file order."""
    with open(path, "rb") as fh:
        buf = fh.read()
    out, off, end = [], 0, len(buf)
    while off + MIN_BLANK_LEN <= end:
        magic, size = MAGIC_SIZE.unpack_from(buf, off)
        if magic == MAGIC_BLANK and MIN_BLANK_LEN <= size <= end - off:
            off += size
            continue
        if magic not in VALID_MAGICS or not BODY_OFFSET <= size <= end - off:
            break   # the end of the written data (or damage already there)
        out.append((off, size, RECORD_PREFIX.unpack_from(buf, off)[2]))
        off += size
    return out


def _units(path: str) -> list[tuple[int, int]]:
    """(offset, entry index) of each written (non-zero) index unit of an index segment."""
    with open(path, "rb") as fh:
        buf = fh.read()
    zero = bytes(INDEX_UNIT_SIZE)
    return [(off, INDEX_UNIT.unpack_from(buf, off)[3]) for off in range(0, len(buf) - INDEX_UNIT_SIZE + 1,
                                                                         INDEX_UNIT_SIZE)
            if buf[off:off + INDEX_UNIT_SIZE] != zero]


def _sites(store_dir: str, kind: str) -> list[tuple[str, int, int, str]]:
    """Every place of ``kind``: (path, offset, length, field)."""
    sites = []
    if kind in ("data_body", "data_header"):
        for path in _segments(os.path.join(store_dir, "data")):
            for off, size, index in _records(path):
                if kind == "data_body":
                    if size > BODY_OFFSET:
                        sites.append((path, off + BODY_OFFSET, size - BODY_OFFSET, f"body of entry {index}"))
                else:
                    sites.extend((path, off + o, n, f"{name} of entry {index}") for name, o, n in RECORD_FIELDS)
    elif kind == "index":
        for path in _segments(os.path.join(store_dir, "index")):
            for off, index in _units(path):
                sites.extend((path, off + o, n, f"{name} of index unit {index}") for name, o, n in UNIT_FIELDS)
    elif kind in ("checkpoint", "term"):
        path = os.path.join(store_dir, "checkpoint" if kind == "checkpoint" else "currterm")
        size = os.path.getsize(path) if os.path.exists(path) else 0
        if size:
            sites.append((path, 0, size, "checkpoint" if kind == "checkpoint" else "term file"))
    else:
        raise ValueError(f"unknown kind of corruption {kind!r}; known: {KINDS}")
    return sites


def corrupt_store(store_dir: str, rng, *, kinds=KINDS,
                  allow: Callable[[str, int], bool] | None = None) -> Corruption | None:
    """Flip one bit at a place of one of ``kinds`` picked with ``rng`` (see the module docstring)."""
    order = list(kinds)
    rng.shuffle(order)
    for kind in order:
        sites = _sites(store_dir, kind)
        if allow is not None:
            sites = [s for s in sites if allow(s[0], s[1])]
        if not sites:
            continue
        path, off, length, field = sites[rng.randrange(len(sites))]
        offset = off + rng.randrange(length)
        if allow is not None and not allow(path, offset):
            offset = off
        bit = rng.randrange(8)
        old, new = flip_bit(path, offset, bit)
        return Corruption(kind, path, offset, bit, field, old, new)
    return None
