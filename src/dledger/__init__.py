"""dledger: an embeddable, Raft-replicated commit log, byte-compatible with Java DLedger."""

from dledger.client import (AppendOutcomeUnknown, AppendRefusedError, AsyncDLedgerClient,
                            ClusterUnavailableError, DLedgerClient)
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
