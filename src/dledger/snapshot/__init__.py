"""Snapshots of a state machine: what a snapshot covers (``meta``) and where it lives on disk
(``file_snapshot_store``: Java DLedger's layout, streamed writes and reads, checked, crash-safe)."""

from dledger.snapshot.file_snapshot_store import (FileSnapshotStore, InstallOffsetError, InstallTarget,
                                                  PendingSnapshot, SnapshotReader, SnapshotWriter)
from dledger.snapshot.meta import SnapshotMeta

__all__ = ["FileSnapshotStore", "InstallOffsetError", "InstallTarget", "PendingSnapshot", "SnapshotMeta",
           "SnapshotReader", "SnapshotWriter"]
