"""StoreState: the one state the parts of the file store share (its bounds and its files).

``DLedgerMmapFileStore`` is assembled from parts (the flusher, retention, ... see
``mmap_file_store.py``); each part holds a reference to this one object and reads and moves
the store's state here, never another part's fields. It holds:

- the files: ``data_list``, ``index_list`` (the two segment lists), ``term_file``;
- the bounds: ``ledger_before_begin_index``/``_term``, ``ledger_end_index``/``_term``,
  ``committed_index``; ``written_from`` (entries from this index on were written through
  this store object since ``load``: a push reads them back unchecked);
- the lifecycle: ``loaded``, ``closed``, ``failed`` (why the store failed: see
  ``flusher.py``), ``is_disk_full``;
- ``checkpoint`` (the checkpoint last written, or found by recovery), ``cut_epoch`` (moves on
  every cut: a background flush job made before it is dropped), ``damaged`` (entries found
  damaged and not repaired: index -> the error), ``index_overrides`` (rebuilt index units a
  read-only open keeps in memory).

Rules:
- the store's public fields of the same names (``store.ledger_end_index``, ``store.failed``,
  ...) are views of these: one value, never two copies;
- ``fail(reason)`` keeps the first reason and marks the boot as vouching for nothing more
  (``flusher.py`` tells why); ``check_not_failed`` / ``sync_failed`` are the one place a
  failed store's error is worded.
"""

from __future__ import annotations

import logging

from dledger.errors import DISK_ERROR, INCONSISTENT_STATE, DLedgerError, StoreClosedError
from dledger.store.mmap_file_list import MmapFileList
from dledger.store.suspect import BOOT_FILE_NAME, remove_file_durably
from dledger.store.term_file import TermFile

log = logging.getLogger(__name__)


class StoreState:
    """The file store's shared state (see the module docstring)."""

    __slots__ = ("store_dir", "read_only", "data_path", "index_path", "data_list", "index_list", "term_file",
                 "ledger_before_begin_index", "ledger_before_begin_term", "ledger_end_index",
                 "ledger_end_term", "committed_index", "written_from", "loaded", "closed", "failed",
                 "is_disk_full", "checkpoint", "cut_epoch", "damaged", "index_overrides")

    def __init__(self, store_dir: str, *, read_only: bool, data_path: str, index_path: str,
                 data_list: MmapFileList, index_list: MmapFileList, term_file: TermFile) -> None:
        self.store_dir = store_dir
        self.read_only = read_only
        self.data_path = data_path
        self.index_path = index_path
        self.data_list = data_list
        self.index_list = index_list
        self.term_file = term_file
        self.ledger_before_begin_index = -1
        self.ledger_before_begin_term = -1
        self.ledger_end_index = -1
        self.ledger_end_term = -1
        self.committed_index = -1
        self.written_from = 0
        self.loaded = False
        self.closed = False
        self.failed: str | None = None
        self.is_disk_full = False
        self.checkpoint = None
        self.cut_epoch = 0
        self.damaged: dict = {}
        self.index_overrides: dict = {}

    def note_damage(self, index: int, exc) -> None:
        """Entry ``index`` failed a check (``exc``: the ``CorruptStoreError``): it is refused
        until repaired (``repair.py``)."""
        if index not in self.damaged:
            log.error("store %s: entry %d is damaged and refused until repaired: %s",
                      self.store_dir, index, exc)
        self.damaged[index] = exc

    def check_open(self) -> None:
        if self.closed:
            raise StoreClosedError(f"store {self.store_dir} is closed")
        if not self.loaded:
            raise DLedgerError(f"store {self.store_dir} is not loaded; call load() first", INCONSISTENT_STATE)

    def fail(self, reason: str) -> None:
        """Mark the store failed (the first reason is kept)."""
        if self.failed is None:
            self.failed = reason
            log.error("store %s failed, it acknowledges nothing more until reopened: %s",
                      self.store_dir, reason)
            if not self.read_only:
                # the kernel may drop the pages a failed sync did not write: this boot's page
                # cache vouches for nothing more (the next open is suspect unless clean)
                try:
                    remove_file_durably(self.store_dir, BOOT_FILE_NAME)
                except OSError as exc:
                    log.error("store %s: cannot remove the boot marker after the failure: %s", self.store_dir, exc)

    def check_not_failed(self) -> None:
        if self.failed is not None:
            raise DLedgerError(f"store {self.store_dir} failed ({self.failed}); reopen it", DISK_ERROR)

    def sync_failed(self, what: str, exc: OSError) -> DLedgerError:
        """An msync raised: fail the store; the error to raise to the caller."""
        self.fail(f"{what} failed: {exc}")
        return DLedgerError(f"store {self.store_dir} failed ({self.failed}); reopen it", DISK_ERROR)
