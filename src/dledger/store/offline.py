"""Opening a store directory without a server: ``open_store(path)``.

Accepts the node directory (``dledger-<selfId>``, holding ``data/``, ``index/`` and
``currterm``), a base directory holding exactly one ``dledger-*`` node directory, or a bare
directory holding ``data/`` and ``index/``. Segment sizes are read off the files (every
segment of a list must have the same size), so stores written with any configured size, by
dledger or by Java DLedger, open as they are. Read-only by default: nothing on disk changes,
a torn tail is ignored rather than cut, and a damaged index tail is rebuilt in memory.
"""

from __future__ import annotations

import os

from dledger.errors import StoreLayoutError
from dledger.store.log_store import DEFAULT_DATA_FILE_SIZE, DEFAULT_INDEX_FILE_SIZE
from dledger.store.mmap_file_store import DLedgerMmapFileStore


def resolve_store_dir(path: str) -> str:
    """The node directory behind ``path`` (see the module docstring)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise StoreLayoutError(f"{path} is not a directory")
    if os.path.isdir(os.path.join(path, "data")) or os.path.isdir(os.path.join(path, "index")):
        return path
    nodes = sorted(d for d in os.listdir(path)
                   if d.startswith("dledger-") and os.path.isdir(os.path.join(path, d)))
    if len(nodes) == 1:
        return os.path.join(path, nodes[0])
    if len(nodes) > 1:
        raise StoreLayoutError(f"{path} holds several stores ({', '.join(nodes)}); name one of them")
    raise StoreLayoutError(f"{path} is not a dledger store: no data/ or index/ directory and no "
                           f"dledger-<id> directory in it")


def segment_size(directory: str, default: int) -> int:
    """The common size of the segments in ``directory`` (``default`` when there are none)."""
    if not os.path.isdir(directory):
        return default
    sizes = {}
    for name in sorted(os.listdir(directory)):
        full = os.path.join(directory, name)
        if os.path.isfile(full):
            sizes.setdefault(os.path.getsize(full), full)
    if not sizes:
        return default
    if len(sizes) > 1:
        listed = ", ".join(f"{p} ({s} bytes)" for s, p in sorted(sizes.items()))
        raise StoreLayoutError(f"segments of {directory} differ in size: {listed}")
    return next(iter(sizes))


def open_store(path: str, read_only: bool = True, **kwargs) -> DLedgerMmapFileStore:
    """Open and recover the store at ``path``; see the module docstring."""
    store_dir = resolve_store_dir(path)
    data_path = kwargs.pop("data_path", None) or os.path.join(store_dir, "data")
    kwargs.setdefault("data_file_size", segment_size(data_path, DEFAULT_DATA_FILE_SIZE))
    kwargs.setdefault("index_file_size", segment_size(os.path.join(store_dir, "index"),
                                                      DEFAULT_INDEX_FILE_SIZE))
    return DLedgerMmapFileStore.open(store_dir, data_path=data_path, read_only=read_only, **kwargs)
