"""StoreOptions: every setting of a file store, one frozen record built once.

``DLedgerMmapFileStore(store_dir, options)`` takes its settings from this record;
``StoreOptions.from_config(config)`` builds it from a node's configuration (``DLedgerConfig``),
so nothing re-types the fields one by one. The record is read by duck typing: the store layer
does not import ``dledger.config`` (imports point down), it only knows the field names.

Rules:
- a bad setting is refused when the record is built (``ValueError`` naming the setting), before
  any file is touched;
- the values are kept as given; what the store derives from them (the largest entry a segment
  can hold, the retention floor of one hour, the set of cleaning hours, the disk-full ratio) is
  derived by the properties here, in one place;
- ``with_(**changes)``: the same options with some settings changed (a read-only open of the
  same directory, say).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dledger.entry import BODY_OFFSET, INDEX_UNIT_SIZE, MAX_RECORD_SIZE, MIN_BLANK_LEN
from dledger.store.durability import DURABILITY_MODES, PAGE_CACHE, Durability
from dledger.store.log_store import DEFAULT_DATA_FILE_SIZE, DEFAULT_INDEX_FILE_SIZE

#: how often a page_cache-mode store writes its checkpoint (``flush_if_due``)
DEFAULT_CHECKPOINT_INTERVAL_MS = 1000


@dataclass(frozen=True)
class StoreOptions:
    """The settings of one file store (see the module docstring)."""

    data_file_size: int = DEFAULT_DATA_FILE_SIZE
    index_file_size: int = DEFAULT_INDEX_FILE_SIZE
    durability: Durability | str = PAGE_CACHE
    max_entry_size: int = MAX_RECORD_SIZE
    #: where the data segments live (default: ``<store_dir>/data``)
    data_path: str | None = None
    read_only: bool = False
    file_reserved_hours: float = 72
    #: ";"-list of the hours of the day when expired segments are deleted
    delete_when: str = "04"
    disk_space_ratio_to_check_expired: float = 0.70
    disk_space_ratio_to_force_clean: float = 0.85
    enable_disk_force_clean: bool = True
    flush_interval_ms: int = 10
    checkpoint_interval_ms: int = DEFAULT_CHECKPOINT_INTERVAL_MS
    #: page_cache mode: run the periodic msyncs on the flush thread (where it is supported)
    background_flush: bool = False
    #: with ``background_flush``: after its msync, the flush thread pages out (``MADV_PAGEOUT``)
    #: the synced pages that lie more than this many bytes behind each list's end, so that new
    #: pages reuse freed memory instead of growing the page cache (0: never; see
    #: ``background_flush.py``)
    release_pages_behind: int = 32 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.durability not in DURABILITY_MODES:
            raise ValueError(f"durability must be one of {tuple(m.value for m in DURABILITY_MODES)}, "
                             f"got {self.durability!r}")
        object.__setattr__(self, "durability", Durability(self.durability))
        if self.index_file_size % INDEX_UNIT_SIZE:
            raise ValueError(f"index_file_size must be a multiple of {INDEX_UNIT_SIZE}, "
                             f"got {self.index_file_size}")
        if not isinstance(self.release_pages_behind, int) or self.release_pages_behind < 0:
            raise ValueError(f"release_pages_behind must be a byte count >= 0, got {self.release_pages_behind!r}")
        if self.max_entry_size < BODY_OFFSET:
            raise ValueError(f"max_entry_size must be at least {BODY_OFFSET}, got {self.max_entry_size}")
        if not isinstance(self.delete_when, str):
            raise ValueError(f"delete_when must be a ';'-list of hours, got {self.delete_when!r}")
        try:
            self.delete_hours
        except ValueError:
            raise ValueError(f"delete_when must be a ';'-list of hours, got {self.delete_when!r}") from None

    @classmethod
    def from_config(cls, config, **overrides) -> "StoreOptions":
        """The options a node's configuration (a ``DLedgerConfig``) gives its file store;
        ``overrides`` set what the configuration does not hold (``background_flush``, which the
        runtime decides; ``read_only``; ``checkpoint_interval_ms``)."""
        c = config
        return cls(**{"data_file_size": c.mapped_file_size_for_entry_data,
                      "index_file_size": c.mapped_file_size_for_entry_index,
                      "durability": c.durability,
                      "file_reserved_hours": c.file_reserved_hours,
                      "delete_when": c.delete_when,
                      "disk_space_ratio_to_check_expired": c.disk_space_ratio_to_check_expired,
                      "disk_space_ratio_to_force_clean": c.disk_space_ratio_to_force_clean,
                      "enable_disk_force_clean": c.enable_disk_force_clean,
                      "flush_interval_ms": c.flush_file_interval,
                      **overrides})

    def with_(self, **changes) -> "StoreOptions":
        """These options with ``changes`` applied (checked again)."""
        return dataclasses.replace(self, **changes)

    # -- what the store derives from the settings ------------------------------------------
    @property
    def entry_size_limit(self) -> int:
        """The largest record the store accepts: ``max_entry_size``, but never more than a data
        segment can hold with its end blank."""
        return min(self.max_entry_size, self.data_file_size - MIN_BLANK_LEN)

    @property
    def reserved_hours(self) -> float:
        """How long a data segment is kept (at least one hour)."""
        return max(1.0, self.file_reserved_hours)

    @property
    def delete_hours(self) -> set[int]:
        """The hours of the day when expired segments are deleted."""
        return {int(h) for h in self.delete_when.split(";") if h.strip()}

    @property
    def disk_full_ratio(self) -> float:
        """Above this share of the disk used, appends are refused (``DISK_FULL``)."""
        return min(self.disk_space_ratio_to_force_clean + 0.05, 0.95)
