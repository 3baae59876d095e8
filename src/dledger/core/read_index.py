"""ReadIndex: reads waiting for the leader to confirm it still leads (READ_INDEX_READ).

A read registered at ``now`` with the commit index of that moment completes with SUCCESS at
that index once a heartbeat round sent at or after ``now`` reached a quorum (or at once in a
single-member group); it fails when this node stops leading or shuts down. Waiters complete
in registration order.

Seam: ``complete_read(token, code, index)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from dledger.protocol import DLedgerResponseCode as Code


class ReadWaiter(NamedTuple):
    token: Any
    read_index: int
    registered_at: int


class ReadIndex:
    def __init__(self, complete_read: Callable[[Any, int, int], None]) -> None:
        self._complete_read = complete_read
        self.waiters: list[ReadWaiter] = []

    def __bool__(self) -> bool:
        return bool(self.waiters)

    def add(self, now: int, token: Any, read_index: int) -> None:
        self.waiters.append(ReadWaiter(token, read_index, now))

    def confirmed(self, round_sent_at: int) -> None:
        """Leadership was confirmed as of ``round_sent_at``: complete the reads it covers."""
        if not self.waiters:
            return
        keep = []
        for w in self.waiters:
            if w.registered_at <= round_sent_at:
                self._complete_read(w.token, Code.SUCCESS, w.read_index)
            else:
                keep.append(w)
        self.waiters = keep

    def fail(self, code: int) -> None:
        waiters, self.waiters = self.waiters, []
        for w in waiters:
            self._complete_read(w.token, code, -1)
