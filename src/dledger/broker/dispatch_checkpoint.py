"""The dispatch checkpoint: how far the reput service's files are durable.

``<root>/dispatch.checkpoint`` names the next entry to dispatch and, for every consume queue
and key-index file, how many units (entries) it held when the checkpoint was written. It is
written only after those files were synced (``ReputService.checkpoint_job``), to a temporary file that
is synced, renamed over the old one, and the directory synced: so after any crash or power
loss it describes files that hold at least that much, intact. What lies beyond it may be
lost, torn or half written; recovery cuts every file back to the counts and dispatches again
from ``next_index`` (the units are a function of the committed log, so they come back the
same)::

    dledger-dispatch-checkpoint 1
    next <next_index> <next_physical_offset>
    queue <topic, percent-encoded> <queue id> <units>
    index <file name, percent-encoded> <entries>
    crc <CRC-32 of the lines above, hex>

A file that does not parse, or whose CRC does not match, is no checkpoint at all: everything
is dispatched again from the start of the log. The format of earlier versions (one line,
``next_index next_physical_offset``, no counts) is still read: its files are then cut by
physical offset instead.
"""

from __future__ import annotations

import os
import zlib
from urllib.parse import quote, unquote
from dataclasses import dataclass, field

from dledger.broker.checkpoint_writer import write_atomic

NAME = "dispatch.checkpoint"
MAGIC = "dledger-dispatch-checkpoint 1"


@dataclass
class DispatchCheckpoint:
    next_index: int = 0
    next_physical_offset: int = 0
    #: units per ``(topic, queue id)``; None: not recorded (an old checkpoint, or none)
    queues: dict[tuple[str, int], int] | None = None
    #: entries per key-index file name; None: not recorded
    index_files: dict[str, int] | None = None
    #: why the file was not used (missing, damaged), for the log; None when it was
    problem: str | None = field(default=None, compare=False)

    def text(self) -> str:
        lines = [MAGIC, f"next {self.next_index} {self.next_physical_offset}"]
        lines += [f"queue {quote(t, safe='')} {q} {n}" for (t, q), n in sorted((self.queues or {}).items())]
        lines += [f"index {quote(name, safe='')} {n}" for name, n in sorted((self.index_files or {}).items())]
        body = "\n".join(lines) + "\n"
        return body + f"crc {zlib.crc32(body.encode()):08x}\n"


def parse(text: str) -> DispatchCheckpoint:
    """The checkpoint ``text`` holds; one with ``problem`` set (and nothing recorded) when it
    holds none."""
    first = text.split("\n", 1)[0]
    if first != MAGIC:
        parts = text.split()
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            return DispatchCheckpoint(int(parts[0]), int(parts[1]))     # the earlier format
        return DispatchCheckpoint(problem="not a dispatch checkpoint")
    body, sep, tail = text.rpartition("crc ")
    try:
        if not sep or int(tail.strip(), 16) != zlib.crc32(body.encode()):
            return DispatchCheckpoint(problem="its CRC does not match (torn or damaged)")
        cp = DispatchCheckpoint(queues={}, index_files={})
        for line in body.splitlines()[1:]:
            kind, *rest = line.split(" ")
            if kind == "next":
                cp.next_index, cp.next_physical_offset = int(rest[0]), int(rest[1])
            elif kind == "queue":
                cp.queues[(unquote(rest[0]), int(rest[1]))] = int(rest[2])
            elif kind == "index":
                cp.index_files[unquote(rest[0])] = int(rest[1])
            else:
                return DispatchCheckpoint(problem=f"an unknown line {line[:40]!r}")
    except (ValueError, IndexError):
        return DispatchCheckpoint(problem="a line does not parse")
    return cp


def read(root: str) -> DispatchCheckpoint:
    try:
        with open(os.path.join(root, NAME), encoding="utf-8", errors="replace") as f:
            return parse(f.read())
    except FileNotFoundError:
        return DispatchCheckpoint(problem="there is none")
    except OSError as exc:
        return DispatchCheckpoint(problem=f"it cannot be read ({exc.strerror or exc})")


def write(root: str, cp: DispatchCheckpoint) -> None:
    """Durably replace the checkpoint (the files it counts must be synced first)."""
    write_atomic(os.path.join(root, NAME), cp.text().encode())


__all__ = ["MAGIC", "NAME", "DispatchCheckpoint", "parse", "read", "write"]
