"""dledger: an embeddable, Raft-replicated commit log, byte-compatible with Java DLedger."""

from dledger.entry import DLedgerEntry
from dledger.errors import (CorruptEntryError, CorruptStoreError, DLedgerError, EntryTooLargeError,
                            StoreLayoutError, TermFileError)
from dledger.store import DLedgerMemoryStore, DLedgerMmapFileStore, open_store

__all__ = [
    "CorruptEntryError",
    "CorruptStoreError",
    "DLedgerEntry",
    "DLedgerError",
    "DLedgerMemoryStore",
    "DLedgerMmapFileStore",
    "EntryTooLargeError",
    "StoreLayoutError",
    "TermFileError",
    "open_store",
]

__version__ = "0.1.0"
