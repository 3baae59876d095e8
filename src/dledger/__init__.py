"""dledger: an embeddable, Raft-replicated commit log, byte-compatible with Java DLedger."""

from dledger.config import DLedgerConfig
from dledger.entry import DLedgerEntry
from dledger.errors import (CorruptEntryError, CorruptStoreError, DLedgerError, EntryTooLargeError,
                            StoreLayoutError, TermFileError)
from dledger.server import DLedgerServer
from dledger.store import DLedgerMemoryStore, DLedgerMmapFileStore, open_store

__all__ = [
    "CorruptEntryError",
    "CorruptStoreError",
    "DLedgerConfig",
    "DLedgerEntry",
    "DLedgerError",
    "DLedgerMemoryStore",
    "DLedgerMmapFileStore",
    "DLedgerServer",
    "EntryTooLargeError",
    "StoreLayoutError",
    "TermFileError",
    "open_store",
]

__version__ = "0.1.0"
