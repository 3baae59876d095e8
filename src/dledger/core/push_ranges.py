"""PushRanges: the encoded records a leader reads for its APPEND pushes, read once for all
followers.

A leader's log only grows at its end while it leads, so a range read for one follower is
valid for the others: the dispatchers share the last ranges read (up to 256, keyed by their
first index, the oldest forgotten first). Rules:

- a range is served only while the log's begin stays where it was when it was read: when
  retention or a reset moves it, everything read before is forgotten, so nothing is served
  from a segment retention deleted (the pusher never reads at or below the begin either);
- the pusher forgets them all when its role changes and when it cuts its own log
  (``forget``);
- when the store refuses a range (a damaged record in it), the first record alone is read, so
  that a follower still gets what precedes the damage; a damaged record itself is never read
  for a push, and the refusal reaches the pusher.

State: the store and the config; one read per push, no call per entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from dledger.errors import DLedgerError

if TYPE_CHECKING:
    from dledger.store import LogStore

#: how many ranges are kept
KEPT = 256


class Range(NamedTuple):
    """Encoded records read for a push: ``count`` entries, the last one of ``last_term``; the
    entry before the first is of ``pre_term``."""

    raw: bytes
    count: int
    last_term: int
    pre_term: int


class PushRanges:
    def __init__(self, store: "LogStore", config) -> None:
        self.store = store
        self.cfg = config
        self._ranges: dict[int, Range] = {}
        #: the log's before-begin index when the kept ranges were read
        self._begin = -1

    def forget(self) -> None:
        self._ranges = {}

    def read(self, first: int) -> Range:
        """The records to push from ``first`` (kept). ``DLedgerError`` when even the first
        record cannot be read."""
        store, cfg = self.store, self.cfg
        if store.ledger_before_begin_index != self._begin:
            # the log's head moved (retention, a reset): what was read before is not served
            self._ranges = {}
            self._begin = store.ledger_before_begin_index
        cached = self._ranges.get(first)
        if cached is not None:
            return cached
        try:
            raw, count = store.get_raw_range(first, cfg.max_batch_append_size, cfg.max_batch_append_count)
        except DLedgerError:
            if cfg.max_batch_append_count == 1:
                raise
            raw, count = store.get_raw_range(first, cfg.max_batch_append_size, 1)
        last_term = store.get_entry_term(first + count - 1)
        pre_term = store.get_entry_term(first - 1) if first > 0 else -1
        if len(self._ranges) >= KEPT:
            del self._ranges[next(iter(self._ranges))]
        rng = self._ranges[first] = Range(raw, count, last_term, pre_term)
        return rng
