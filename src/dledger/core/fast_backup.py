"""Raft's fast backup: where a leader's next COMPARE asks after a follower's entry turned out of
another term (``EntryPusher``'s COMPARE state, ``core.entry_pusher``).

A mismatch answer names the follower's term at the compared index (``x_term``) and where that
term's run starts in its log (``x_index``). Entries of one term agree wherever two logs hold them
(log matching): when the leader holds entries of ``x_term``, the logs agree up to the last of them
and differ after it, so the next COMPARE asks there; without any, the follower's whole run
differs: it asks just below it. Never lower: the TRUNCATE after a match drops everything above
it, and entries the follower shares with this leader, committed ones included, would have one
copy fewer until pushed again (seed 91056). A follower that named no term (the compared index
lies past its end, or its entry could not be read) is asked at its end index instead.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dledger.errors import DLedgerError

if TYPE_CHECKING:
    from dledger.store import LogStore

log = logging.getLogger("dledger.core.entry_pusher")


def next_after_mismatch(store: "LogStore", self_id: str, compared: int, x_term: int, x_index: int,
                        end_index: int) -> int:
    """The next ``next`` (COMPARE asks at ``next - 1``) after the follower's entry ``compared`` turned
    out of term ``x_term`` (its run starting at ``x_index``; ``end_index``: the follower's log end)."""
    if x_term == -1:
        return end_index + 1
    try:
        # the last entry of a term <= x_term at or below ``compared`` (terms never decrease)
        lo, hi = store.ledger_before_begin_index, min(compared, store.ledger_end_index)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if store.get_entry_term(mid) <= x_term:
                lo = mid
            else:
                hi = mid - 1
        held = lo > store.ledger_before_begin_index and store.get_entry_term(lo) == x_term
    except DLedgerError as exc:
        log.warning("%s: cannot find the last entry of term %d: %s", self_id, x_term, exc)
        return compared                    # one index lower: never below an agreeing entry
    return max(lo + 1, x_index) if held else x_index
