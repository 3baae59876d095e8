"""dledger: an embeddable, Raft-replicated commit log, byte-compatible with Java DLedger.

Every public name is imported on first use (PEP 562 ``__getattr__``): ``import dledger`` loads
nothing else, so a process that needs one corner of the package (a Spark worker reading
segments with ``dledger.spark.scan``, a tool reading one store) does not pay for the server,
the core, the transport or the client. ``from dledger import DLedgerServer`` works as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

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

#: where each public name lives; imported on first use
_LAZY = {
    **{name: "dledger.client" for name in ("AppendOutcomeUnknown", "AppendRefusedError",
                                           "AsyncDLedgerClient", "ClusterUnavailableError",
                                           "DLedgerClient")},
    **{name: "dledger.errors" for name in ("CorruptEntryError", "CorruptStoreError",
                                           "DLedgerError", "EntryTooLargeError",
                                           "StoreLayoutError", "StoreLockedError",
                                           "TermFileError")},
    **{name: "dledger.store" for name in ("DLedgerMemoryStore", "DLedgerMmapFileStore",
                                          "open_store")},
    "DLedgerConfig": "dledger.config",
    "DLedgerEntry": "dledger.entry",
    "DLedgerResponseCode": "dledger.protocol",
    "ReadMode": "dledger.protocol",
    "DLedgerServer": "dledger.server",
}
assert set(_LAZY) == set(__all__)

if TYPE_CHECKING:  # for type checkers and IDEs: the names as if imported eagerly
    from dledger.client import (AppendOutcomeUnknown, AppendRefusedError, AsyncDLedgerClient,
                                ClusterUnavailableError, DLedgerClient)
    from dledger.config import DLedgerConfig
    from dledger.entry import DLedgerEntry
    from dledger.errors import (CorruptEntryError, CorruptStoreError, DLedgerError,
                                EntryTooLargeError, StoreLayoutError, StoreLockedError,
                                TermFileError)
    from dledger.protocol import DLedgerResponseCode, ReadMode
    from dledger.server import DLedgerServer
    from dledger.store import DLedgerMemoryStore, DLedgerMmapFileStore, open_store


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
