"""The ``checkpoint`` file: ``endIndex`` and ``committedIndex`` (legacy DLedger format, see docs/format.md).

Extra keys ``beforeBeginIndex`` / ``beforeBeginTerm`` (ignored by Java's reader) keep the term
of the entry before the log's first entry across restarts, which the data files cannot tell.

``endIndex`` is the last index whose data and index units were flushed before the checkpoint was
written; recovery trusts the log up to it and validates only what comes after, so restart time
does not grow with the log. ``committedIndex`` is the commit index known at that moment.

A torn, empty or garbage checkpoint is ignored with a warning (recovery then scans from the
last segments, as Java DLedger does); it never stops startup.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from dledger.store.properties import read_properties, write_properties_atomic

log = logging.getLogger(__name__)

CHECKPOINT_FILE_NAME = "checkpoint"


@dataclass(slots=True, frozen=True)
class Checkpoint:
    end_index: int
    committed_index: int
    before_begin_index: int = -1
    before_begin_term: int = -1


def read_checkpoint(directory: str) -> Checkpoint | None:
    path = os.path.join(directory, CHECKPOINT_FILE_NAME)
    try:
        props = read_properties(path)
        if props is None:
            return None
        cp = Checkpoint(int(props["endIndex"]), int(props["committedIndex"]),
                        int(props.get("beforeBeginIndex", "-1")), int(props.get("beforeBeginTerm", "-1")))
    except (ValueError, KeyError) as exc:
        log.warning("ignoring unreadable checkpoint %s: %s", path, exc)
        return None
    if cp.end_index < -1 or cp.committed_index < -1:
        log.warning("ignoring checkpoint %s with negative indices %s", path, cp)
        return None
    return cp


def write_checkpoint(directory: str, cp: Checkpoint) -> None:
    write_properties_atomic(os.path.join(directory, CHECKPOINT_FILE_NAME),
                            [("endIndex", str(cp.end_index)),
                             ("committedIndex", str(cp.committed_index)),
                             ("beforeBeginIndex", str(cp.before_begin_index)),
                             ("beforeBeginTerm", str(cp.before_begin_term))])
