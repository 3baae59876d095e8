"""dledger: an embeddable, Raft-replicated commit log, byte-compatible with Java DLedger."""

from dledger.config import DLedgerConfig
from dledger.entry import DLedgerEntry
from dledger.errors import (CorruptEntryError, CorruptStoreError, DLedgerError, EntryTooLargeError,
                            StoreLayoutError, StoreLockedError, TermFileError)
from dledger.protocol import DLedgerResponseCode, ReadMode
from dledger.server import DLedgerServer
from dledger.store import DLedgerMemoryStore, DLedgerMmapFileStore, open_store

__all__ = [
    "AppendOutcomeUnknown",
    "AppendRefusedError",
    "AsyncDLedgerClient",
    "ClusterUnavailableError",
    "DLedgerClient",
    "CorruptEntryError",
    "CorruptStoreError",
    "DLedgerConfig",
    "DLedgerEntry",
    "DLedgerError",
    "DLedgerMemoryStore",
    "DLedgerMmapFileStore",
    "DLedgerServer",
    "EntryTooLargeError",
    "DLedgerResponseCode",
    "ReadMode",
    "StoreLayoutError",
    "StoreLockedError",
    "TermFileError",
    "open_store",
]

__version__ = "0.1.0"

#: names imported on first use: the client pulls in asyncio and the TCP transport, which a
#: host embedding a server alone (or a tool reading a store) need not load
_LAZY = {name: "dledger.client" for name in ("AppendOutcomeUnknown", "AppendRefusedError", "AsyncDLedgerClient",
                                             "ClusterUnavailableError", "DLedgerClient")}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dledger' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
