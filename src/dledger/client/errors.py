"""What a client call can end in besides an answer.

- ``AppendOutcomeUnknown``: the append was sent but its outcome is unclear (the connection
  broke or no answer came in time, or the leader answered EXPIRED_TERM or
  WAIT_QUORUM_ACK_TIMEOUT): it may be committed, now or later. The client never resends it
  (that could store the body twice); the caller decides, e.g. by reading the log.
- ``AppendRefusedError``: the leader refused the append before taking it (an empty batch, a
  body over the entry size limit, an unknown group): certainly not appended.
- ``ClusterUnavailableError``: no leader took the request within the client's timeout, and
  every attempt failed before the request was taken (connections refused, NOT_LEADER,
  leadership transfer in progress, full pending queue): for an append, certainly not appended.
"""

from __future__ import annotations

from dledger.errors import DLedgerError
from dledger.protocol import DLedgerResponseCode as Code


class AppendOutcomeUnknown(DLedgerError):
    """The append may or may not have been committed; it was not resent."""

    code = Code.WAIT_QUORUM_ACK_TIMEOUT

    def __init__(self, message: str, *, node_id: str | None = None, response=None) -> None:
        super().__init__(message, int(response.code) if response is not None else None)
        self.node_id = node_id
        self.response = response


class AppendRefusedError(DLedgerError):
    """The leader refused the append before taking it (``response`` tells why)."""

    def __init__(self, message: str, response) -> None:
        super().__init__(message, int(response.code))
        self.response = response


class ClusterUnavailableError(DLedgerError, TimeoutError):
    """No leader took the request within the timeout; nothing was taken."""

    code = Code.LEADER_NOT_READY


__all__ = ["AppendOutcomeUnknown", "AppendRefusedError", "ClusterUnavailableError"]
