"""Storage: the Raft log on local disk (or in memory).

- ``MmapFile`` / ``MmapFileList``: mapped segments and the linear space over them;
- ``DLedgerMmapFileStore``: entries, index, term file, checkpoint, recovery, cleaning;
- ``DLedgerMemoryStore``: the same interface, nothing on disk;
- ``open_store(path)``: open a store directory offline (ours or Java DLedger's), read-only
  by default, for tools such as the CLI and the Spark data source.
"""

from __future__ import annotations

from dledger.store.memory_store import DLedgerMemoryStore
from dledger.store.mmap_file import MmapFile
from dledger.store.mmap_file_list import MmapFileList
from dledger.store.mmap_file_store import (DURABILITY_MODES, FSYNC, PAGE_CACHE, AppendBatchResult,
                                           DLedgerMmapFileStore)
from dledger.store.offline import open_store

__all__ = [
    "AppendBatchResult",
    "DLedgerMemoryStore",
    "DLedgerMmapFileStore",
    "DURABILITY_MODES",
    "FSYNC",
    "MmapFile",
    "MmapFileList",
    "PAGE_CACHE",
    "open_store",
]
