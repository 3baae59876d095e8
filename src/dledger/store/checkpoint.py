"""The ``checkpoint`` file: ``endIndex`` and ``committedIndex`` (legacy DLedger format, see docs/format.md).

Extra keys, all ignored by Java's reader:
- ``beforeBeginIndex`` / ``beforeBeginTerm`` keep the term of the entry before the log's first
  entry across restarts, which the data files cannot tell;
- ``endTerm`` / ``endPos``: the term and data position of entry ``endIndex`` when the
  checkpoint was written, so recovery can check the checkpoint against the files and not only
  against the index unit it names (another writer, e.g. Java DLedger, may have truncated and
  rewritten the log since);
- ``crc``: the CRC-32 of the lines before it (``properties.py``).

``endIndex`` is the last index whose data and index units were flushed before the checkpoint was
written; recovery trusts the log up to it (after checking it, see ``recovery.py``) and
validates only what comes after, so restart time does not grow with the log.
``committedIndex`` is the commit index known at that moment.

A torn, empty, garbage or damaged (checksum, unknown key, a value out of bounds) checkpoint is
ignored with a warning (recovery then scans from the last segments, as Java DLedger does); it
never stops startup. A file without ``crc`` (Java's) is accepted unchecked.

``write_checkpoint`` replaces the file atomically (tmp, fsync, rename, directory fsync): a
write the disk refuses leaves the previous checkpoint in place and raises ``OSError``; what the
store makes of it is in ``flusher.py``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from dledger.entry import MAX_INDEX, MAX_TERM
from dledger.store.properties import read_checked, write_properties_atomic

log = logging.getLogger(__name__)

CHECKPOINT_FILE_NAME = "checkpoint"

_KEYS = frozenset(("endIndex", "committedIndex", "beforeBeginIndex", "beforeBeginTerm",
                   "endTerm", "endPos"))


@dataclass(slots=True, frozen=True)
class Checkpoint:
    end_index: int
    committed_index: int
    before_begin_index: int = -1
    before_begin_term: int = -1
    #: term and data position of entry ``end_index`` (None: not recorded, e.g. Java's file)
    end_term: int | None = None
    end_pos: int | None = None


def _bounded(path: str, name: str, value: int, lo: int, hi: int) -> int:
    if not lo <= value <= hi:
        raise ValueError(f"field {name}={value} out of bounds [{lo}, {hi}]")
    return value


def read_checkpoint(directory: str) -> Checkpoint | None:
    path = os.path.join(directory, CHECKPOINT_FILE_NAME)
    try:
        props, crc = read_checked(path)
        if props is None:
            return None
        if crc == "bad":
            raise ValueError("checksum mismatch")
        unknown = set(props) - _KEYS
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")

        def field(name: str, default: str | None, lo: int, hi: int) -> int | None:
            raw = props.get(name, default) if default is not None else props[name]
            return _bounded(path, name, int(raw), lo, hi)

        cp = Checkpoint(field("endIndex", None, -1, MAX_INDEX),
                        field("committedIndex", None, -1, MAX_INDEX),
                        field("beforeBeginIndex", "-1", -1, MAX_INDEX),
                        field("beforeBeginTerm", "-1", -1, MAX_TERM),
                        int(props["endTerm"]) if "endTerm" in props else None,
                        int(props["endPos"]) if "endPos" in props else None)
        if cp.end_term is not None:
            _bounded(path, "endTerm", cp.end_term, -1, MAX_TERM)
        if cp.end_pos is not None:
            _bounded(path, "endPos", cp.end_pos, -1, (1 << 63) - 1)
    except (ValueError, KeyError) as exc:
        log.warning("ignoring unreadable checkpoint %s: %s", path, exc)
        return None
    return cp


def write_checkpoint(directory: str, cp: Checkpoint) -> None:
    items = [("endIndex", str(cp.end_index)),
             ("committedIndex", str(cp.committed_index)),
             ("beforeBeginIndex", str(cp.before_begin_index)),
             ("beforeBeginTerm", str(cp.before_begin_term))]
    if cp.end_term is not None and cp.end_pos is not None:
        items += [("endTerm", str(cp.end_term)), ("endPos", str(cp.end_pos))]
    write_properties_atomic(os.path.join(directory, CHECKPOINT_FILE_NAME), items)
