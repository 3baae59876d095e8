"""Small file stores for crash tests: tiny segments, so roll-over and scans stay cheap."""

from __future__ import annotations

from dledger.entry import DLedgerEntry
from dledger.store import DLedgerMmapFileStore
from dledger.store.store_io import StoreIO

DATA_FILE_SIZE = 1024
INDEX_FILE_SIZE = 32 * 64
MODES = ("page_cache", "fsync")


def open_small(store_dir: str, durability: str = "page_cache", **kwargs) -> DLedgerMmapFileStore:
    kwargs.setdefault("data_file_size", DATA_FILE_SIZE)
    kwargs.setdefault("index_file_size", INDEX_FILE_SIZE)
    return DLedgerMmapFileStore.open(store_dir, durability=durability, **kwargs)


def body(i: int, n: int = 16) -> bytes:
    """A body with no zero byte, distinct per ``i`` (zeroing any part of it changes it)."""
    return bytes(((i * 7 + k) % 251) + 1 for k in range(n))


def append_bodies(store, bodies) -> list[DLedgerEntry]:
    """Append each body as leader; returns the stamped entries (index, term, pos, body)."""
    return [store.append_as_leader(DLedgerEntry(body=b)) for b in bodies]


def snapshot(store) -> list[tuple[int, int, int, bytes]]:
    """``(index, term, pos, body)`` of every entry, read back through ``get``."""
    return [(e.index, e.term, e.pos, e.body) for e in store.iter_entries()]


class Machine(StoreIO):
    """The real disk on a machine whose boot a test decides: ``reboot()`` starts a new boot (the
    page cache is gone), ``boot = None`` makes the boot unknown."""

    def __init__(self) -> None:
        self.boots = 0
        self.boot: str | None = "boot-0"

    def reboot(self) -> None:
        self.boots += 1
        self.boot = f"boot-{self.boots}"

    def boot_id(self) -> str | None:
        return self.boot
