"""Durability: what an acknowledged append survives. A leaf module (no dledger imports).

- ``PAGE_CACHE``: an append returns once its bytes are in the page cache, so it survives a
  process crash; the periodic flush (``flush_if_due``) and ``flush()`` msync them and write
  the checkpoint. Like Java DLedger's default.
- ``FSYNC``: every append call msyncs what it wrote (data, then index) before it returns: one
  sync covers the whole batch (group commit).

``Durability`` is a ``str`` enum, so the config's plain strings (``"page_cache"``, ``"fsync"``)
compare equal to its members and are accepted wherever a mode is.
"""

from __future__ import annotations

from enum import Enum


class Durability(str, Enum):
    PAGE_CACHE = "page_cache"
    FSYNC = "fsync"

    def __str__(self) -> str:
        return self.value


PAGE_CACHE = Durability.PAGE_CACHE
FSYNC = Durability.FSYNC
DURABILITY_MODES = tuple(Durability)
