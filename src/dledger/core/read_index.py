"""ReadIndex: reads waiting for the leader to confirm it still leads (READ_INDEX_READ).

A read registered at ``now`` with the commit index of that moment completes with SUCCESS at
that index once a heartbeat round sent at or after ``now`` reached a quorum (or at once in a
single-member group); it fails when this node stops leading or shuts down. Waiters complete
in registration order.

Its decisions are ``ReadDone`` intents (``core.intents``), returned to the node.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dledger.core.intents import NONE, ReadDone
from dledger.protocol import DLedgerResponseCode as Code


class ReadWaiter(NamedTuple):
    token: Any
    read_index: int
    registered_at: int


class ReadIndex:
    def __init__(self) -> None:
        self.waiters: list[ReadWaiter] = []

    def __bool__(self) -> bool:
        return bool(self.waiters)

    def add(self, now: int, token: Any, read_index: int) -> None:
        self.waiters.append(ReadWaiter(token, read_index, now))

    def confirmed(self, round_sent_at: int) -> list[ReadDone] | tuple:
        """Leadership was confirmed as of ``round_sent_at``: the reads it covers complete."""
        if not self.waiters:
            return NONE
        keep, done = [], []
        for w in self.waiters:
            if w.registered_at <= round_sent_at:
                done.append(ReadDone(w.token, Code.SUCCESS, w.read_index))
            else:
                keep.append(w)
        self.waiters = keep
        return done

    def fail(self, code: int) -> list[ReadDone]:
        """Every waiting read fails with ``code``."""
        waiters, self.waiters = self.waiters, []
        return [ReadDone(w.token, code, -1) for w in waiters]
