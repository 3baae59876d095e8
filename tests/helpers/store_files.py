"""Byte-level access to a store directory, for tests that damage files on purpose.

Everything here reads and writes the files with plain file I/O (the store must be closed or
crashed first), and decodes locations from the index units on disk, independently of the store.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from dledger.entry import INDEX_UNIT_SIZE, decode_index


def segments(store_dir: str, kind: str = "data") -> list[str]:
    """Paths of the segments of ``kind`` ("data" or "index"), in offset order."""
    d = os.path.join(store_dir, kind)
    return [os.path.join(d, n) for n in sorted(os.listdir(d))] if os.path.isdir(d) else []


def read_at(path: str, offset: int, n: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read(n)


def write_at(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def zero(path: str, offset: int, n: int) -> None:
    """Overwrite ``n`` bytes at ``offset`` with zeros (a lost or torn page)."""
    write_at(path, offset, bytes(n))


def flip_bit(path: str, offset: int, bit: int = 0) -> None:
    """Invert one bit of the byte at ``offset``."""
    b = read_at(path, offset, 1)[0]
    write_at(path, offset, bytes([b ^ (1 << bit)]))


@dataclass(frozen=True)
class Location:
    """Where something lives: ``path`` and file-relative ``offset``, ``size`` bytes long."""

    path: str
    offset: int
    size: int
    pos: int = -1  # global log position (records only)


def index_unit_location(store_dir: str, index: int, index_file_size: int) -> Location:
    """Where index unit ``index`` lies on disk."""
    g = index * INDEX_UNIT_SIZE
    start = g - g % index_file_size
    path = os.path.join(store_dir, "index", f"{start:020d}")
    return Location(path, g - start, INDEX_UNIT_SIZE, g)


def record_location(store_dir: str, index: int, index_file_size: int, data_file_size: int) -> Location:
    """Where entry ``index``'s data record lies, according to its index unit on disk."""
    u = index_unit_location(store_dir, index, index_file_size)
    unit = decode_index(read_at(u.path, u.offset, INDEX_UNIT_SIZE))
    assert unit.index == index, f"index unit {index} on disk names {unit.index}"
    start = unit.pos - unit.pos % data_file_size
    return Location(os.path.join(store_dir, "data", f"{start:020d}"), unit.pos - start, unit.size,
                    unit.pos)


def copy_store(src: str, dst: str) -> str:
    """Copy a (closed or crashed) store directory byte for byte; returns ``dst``."""
    shutil.copytree(src, dst)
    return dst


def segment_bytes(store_dir: str) -> dict[str, bytes]:
    """Every data and index segment's bytes, by ``data/<name>`` and ``index/<name>``: two
    replicas are byte-identical when these are equal."""
    out = {}
    for sub in ("data", "index"):
        for name in sorted(os.listdir(os.path.join(store_dir, sub))):
            with open(os.path.join(store_dir, sub, name), "rb") as fh:
                out[f"{sub}/{name}"] = fh.read()
    return out
