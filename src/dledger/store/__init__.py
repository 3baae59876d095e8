"""Storage: the Raft log on local disk (or in memory).

- ``LogStore``: the interface the core and the server use (``log_store.py``);
- ``MmapFile`` / ``MmapFileList``: mapped segments and the linear space over them;
- ``DLedgerMmapFileStore``: entries, index, term file, checkpoint, recovery, cleaning;
- ``StoreOptions``: a file store's settings, one record (``StoreOptions.from_config``);
- ``DLedgerMemoryStore``: the same interface, nothing on disk;
- ``Durability``: what an acknowledged append survives (``PAGE_CACHE``, ``FSYNC``);
- ``SuspectReason``: why a replica may have lost what it acknowledged (``store.suspect``);
- ``open_store(path)``: open a store directory offline (ours or Java DLedger's), read-only
  by default, for tools such as the CLI and the Spark data source.
"""

from __future__ import annotations

from dledger.store.durability import DURABILITY_MODES, FSYNC, PAGE_CACHE, Durability
from dledger.store.log_store import AppendBatchResult, LogStore
from dledger.store.memory_store import DLedgerMemoryStore
from dledger.store.mmap_file import MmapFile
from dledger.store.mmap_file_list import MmapFileList
from dledger.store.mmap_file_store import DLedgerMmapFileStore
from dledger.store.offline import open_store
from dledger.store.options import StoreOptions
from dledger.store.suspect import SuspectReason

__all__ = [
    "AppendBatchResult",
    "DLedgerMemoryStore",
    "DLedgerMmapFileStore",
    "DURABILITY_MODES",
    "Durability",
    "FSYNC",
    "LogStore",
    "MmapFile",
    "MmapFileList",
    "PAGE_CACHE",
    "StoreOptions",
    "SuspectReason",
    "open_store",
]
