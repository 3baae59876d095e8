"""StoreBase: what the file store and the memory store share, written once.

Everything here is expressed through ``get``, ``get_entry_term``, ``batch_append_as_follower``
and the ledger fields
(``ledger_before_begin_index``, ``ledger_end_index``, ``committed_index``), which each store
implements its own way.
"""

from __future__ import annotations

from collections.abc import Iterator

from dledger.entry import DLedgerEntry, encode
from dledger.errors import INCONSISTENT_STATE, INDEX_LESS_THAN_LOCAL_BEGIN, DLedgerError


class StoreBase:
    ledger_before_begin_index: int
    ledger_end_index: int
    committed_index: int

    def append_as_follower(self, entry: DLedgerEntry, leader_term: int, leader_id: str | None = None) -> DLedgerEntry:
        """Append one entry received from the leader, at the leader's position (``entry.pos``).

        The entry is encoded as it came (its ``body_crc`` kept) and goes through
        ``batch_append_as_follower``, so one entry is checked exactly as a pushed batch is.
        The role and the leader id are the core's to check.
        """
        self.batch_append_as_follower(encode(entry, compute_crc=False), leader_term, leader_id)
        return entry

    def iter_entries(self, begin: int | None = None, end: int | None = None) -> Iterator[DLedgerEntry]:
        """Entries ``begin..end`` (inclusive; default: the whole log), each checked as by ``get``."""
        lo = self.ledger_before_begin_index + 1 if begin is None else max(begin, self.ledger_before_begin_index + 1)
        hi = self.ledger_end_index if end is None else min(end, self.ledger_end_index)
        for i in range(lo, hi + 1):
            yield self.get(i)

    def __iter__(self) -> Iterator[DLedgerEntry]:
        return self.iter_entries()

    def get_first_log_of_target_term(self, term: int, end_index: int) -> DLedgerEntry | None:
        """The first entry of ``term`` in the run of entries ending at ``end_index`` (used to answer a vote or a COMPARE with the first index of a term)."""
        found = None
        i = min(end_index, self.ledger_end_index)
        while i > self.ledger_before_begin_index:
            t = self.get_entry_term(i)
            if t == term:
                found = i
            elif t < term:
                break
            i -= 1
        return self.get(found) if found is not None else None

    def _check_truncatable(self, truncate_index: int) -> None:
        check_truncatable(self, truncate_index)


def check_truncatable(bounds, truncate_index: int) -> None:
    """Refuse to truncate before the log's begin or into committed entries (``bounds``: a store,
    or the file store's shared state: ``ledger_before_begin_index``, ``committed_index``)."""
    if truncate_index <= bounds.ledger_before_begin_index:
        raise DLedgerError(f"cannot truncate at {truncate_index}: log begins at "
                           f"{bounds.ledger_before_begin_index + 1}", INDEX_LESS_THAN_LOCAL_BEGIN)
    if truncate_index <= bounds.committed_index:
        raise DLedgerError(f"refusing to truncate committed entry {truncate_index} "
                           f"(committed index {bounds.committed_index})", INCONSISTENT_STATE)
