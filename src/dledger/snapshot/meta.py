"""SnapshotMeta: what a snapshot covers, and its ``snapshot_meta`` file.

A snapshot holds the state machine's state after applying every entry up to
``last_included_index`` (whose term is ``last_included_term``). Its meta file is JSON, the
layout Java DLedger writes (``{"lastIncludedIndex":N,"lastIncludedTerm":T}``), with three
fields of our own that Java's reader ignores:

- ``dataSize`` and ``dataCrc``: the size and the CRC-32 of the ``data`` file, so that a
  damaged or cut snapshot is found before the state machine is fed from it;
- ``metaCrc``: the CRC-32 of ``"<index>,<term>,<size>,<crc>"``, so that a flipped digit in
  the meta itself (an index or term that changed) is found too.

A meta written by Java DLedger has none of them: it is read as it is, and its data cannot be
checked beyond its presence (``checked`` is False).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from dledger.entry import crc32
from dledger.errors import CorruptSnapshotError

META_FILE_NAME = "snapshot_meta"


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    last_included_index: int
    last_included_term: int
    #: size and CRC-32 of the data file; None in a meta Java DLedger wrote
    data_size: int | None = None
    data_crc: int | None = None

    @property
    def checked(self) -> bool:
        """Can the data be checked against this meta (size and CRC known)?"""
        return self.data_size is not None and self.data_crc is not None

    def encode(self) -> bytes:
        fields = {"lastIncludedIndex": self.last_included_index, "lastIncludedTerm": self.last_included_term}
        if self.checked:
            fields.update(dataSize=self.data_size, dataCrc=self.data_crc, metaCrc=self._meta_crc())
        return json.dumps(fields, separators=(",", ":")).encode()

    def _meta_crc(self) -> int:
        return crc32(f"{self.last_included_index},{self.last_included_term},"
                     f"{self.data_size},{self.data_crc}".encode())

    @classmethod
    def decode(cls, raw: bytes, path: str | None = None) -> "SnapshotMeta":
        """Parse a meta file's bytes; ``CorruptSnapshotError`` naming ``path`` when they do not
        hold a meta (not JSON, a field missing or of the wrong kind, its own CRC failing)."""
        try:
            fields = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptSnapshotError(f"snapshot meta is not JSON: {exc}", path=path) from None
        if not isinstance(fields, dict):
            raise CorruptSnapshotError("snapshot meta is not a JSON object", path=path)

        def number(name: str, required: bool = True) -> int | None:
            v = fields.get(name)
            if v is None and not required:
                return None
            if isinstance(v, bool) or not isinstance(v, int):
                raise CorruptSnapshotError(f"snapshot meta field {name} is {v!r}, not a number", path=path)
            return v

        index, term = number("lastIncludedIndex"), number("lastIncludedTerm")
        size, crc, meta_crc = number("dataSize", False), number("dataCrc", False), number("metaCrc", False)
        if index < -1 or term < -1:
            raise CorruptSnapshotError(f"snapshot meta names index {index}, term {term}", path=path)
        if (size is None) != (crc is None) or (size is None) != (meta_crc is None):
            raise CorruptSnapshotError("snapshot meta has some of dataSize, dataCrc, metaCrc but not all",
                                       path=path)
        meta = cls(index, term, size, crc)
        if size is not None and (size < 0 or meta._meta_crc() != meta_crc):
            raise CorruptSnapshotError("snapshot meta fails its own CRC (a field was damaged)", path=path)
        return meta

    def __str__(self) -> str:
        return f"snapshot of index {self.last_included_index} (term {self.last_included_term})"


__all__ = ["META_FILE_NAME", "SnapshotMeta"]
