"""Exceptions of dledger.

A leaf module (standard library only), and the one home of the response codes:
``DLedgerResponseCode`` (Java DLedger's numbers; ``dledger.protocol`` re-exports it). Every
error that maps to a code carries it as a plain ``int`` in ``code``.

Three families, kept apart on purpose:
- local misuse (the host called us wrongly): ``ValueError``/``TypeError`` subclasses or
  ``DLedgerError`` with the matching code;
- bad data found on disk or on the wire: ``CorruptEntryError`` / ``CorruptStoreError`` /
  ``StoreLayoutError`` name the file and byte offset, so an operator can find it;
- a misbehaving peer: ``PeerProtocolError``, raised where a peer's request is validated, is
  the one exception the core answers as the peer's fault (UNEXPECTED_ARGUMENT). It is not a
  ``DLedgerError`` (a handler's catch of store problems must not take it for one), and no
  builtin exception stands for it: a ``ValueError``, ``IndexError`` or ``struct.error``
  escaping a handler is a bug in the core and reaches the host.
"""

from __future__ import annotations

from enum import IntEnum


class DLedgerResponseCode(IntEnum):
    UNKNOWN = -1
    SUCCESS = 200
    TIMEOUT = 300
    METADATA_ERROR = 301
    NETWORK_ERROR = 302
    UNSUPPORTED = 303
    UNKNOWN_GROUP = 400
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    REPEATED_REQUEST = 412
    REPEATED_PUSH = 413
    DISK_ERROR = 414
    DISK_FULL = 415
    TERM_NOT_READY = 416
    FALL_BEHIND_TOO_MUCH = 417
    TAKE_LEADERSHIP_FAILED = 418
    INDEX_LESS_THAN_LOCAL_BEGIN = 419
    REQUEST_WITH_EMPTY_BODYS = 420
    PUSH_REQUEST_IS_FULL = 421
    NEWER_INSTALL_SNAPSHOT_REQUEST_EXIST = 422
    #: dledger's own: the sender's members (``--peers``) differ from the receiver's; refused
    PEERS_MISMATCH = 430
    #: dledger's own: this follower cannot rebuild its state machine from its log; it needs
    #: the leader's snapshot (``core.snapshot_receiver``)
    SNAPSHOT_NEEDED = 431
    #: dledger's own: a membership change is refused while the one before is not committed
    #: (changes go one at a time, ``core.membership_change``)
    MEMBERSHIP_CHANGE_PENDING = 432
    INTERNAL_ERROR = 500
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    ILLEGAL_MEMBER_STATE = 504
    LEADER_NOT_READY = 505
    LEADER_TRANSFERRING = 506
    LOAD_SNAPSHOT_ERROR = 507
    INSTALL_SNAPSHOT_ERROR = 508

    @classmethod
    def of(cls, code: int) -> "DLedgerResponseCode":
        """The member for ``code``; unknown numbers map to ``UNKNOWN`` (as Java)."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


# the codes the errors below carry, as plain ints
INDEX_OUT_OF_RANGE = int(DLedgerResponseCode.INDEX_OUT_OF_RANGE)
UNEXPECTED_ARGUMENT = int(DLedgerResponseCode.UNEXPECTED_ARGUMENT)
DISK_ERROR = int(DLedgerResponseCode.DISK_ERROR)
DISK_FULL = int(DLedgerResponseCode.DISK_FULL)
INDEX_LESS_THAN_LOCAL_BEGIN = int(DLedgerResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN)
INCONSISTENT_TERM = int(DLedgerResponseCode.INCONSISTENT_TERM)
INCONSISTENT_INDEX = int(DLedgerResponseCode.INCONSISTENT_INDEX)
INCONSISTENT_STATE = int(DLedgerResponseCode.INCONSISTENT_STATE)
INTERNAL_ERROR = int(DLedgerResponseCode.INTERNAL_ERROR)


class DLedgerError(Exception):
    """An error with a DLedger response code (``code``, an int)."""

    code: int = INTERNAL_ERROR

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class EntryTooLargeError(DLedgerError, ValueError):
    """An entry body exceeds the configured maximum entry size."""

    code = UNEXPECTED_ARGUMENT


class CorruptEntryError(DLedgerError):
    """A record's bytes do not form a valid entry (bad magic, size, body length or CRC).

    ``path`` and ``offset`` (file-relative) are set when the record came from a file;
    ``position`` is the global log position when known.
    """

    code = DISK_ERROR

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None,
                 position: int | None = None) -> None:
        where = []
        if path is not None:
            where.append(f"file {path}")
        if offset is not None:
            where.append(f"offset {offset}")
        if position is not None:
            where.append(f"log position {position}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.path = path
        self.offset = offset
        self.position = position


class CorruptStoreError(CorruptEntryError):
    """Durable data of a store is damaged; the store refuses to serve or open past it."""


class StoreLayoutError(DLedgerError):
    """A store directory is not laid out as expected (file names, sizes, gaps, foreign files)."""

    code = DISK_ERROR


class TermFileError(DLedgerError):
    """The ``currterm`` file exists but cannot be parsed; startup must stop."""

    code = DISK_ERROR


class StoreLockedError(DLedgerError):
    """A writable open found the store directory locked by another writer (named in the
    message and in ``holder``: its pid and host name)."""

    code = DISK_ERROR

    def __init__(self, message: str, *, path: str | None = None, holder: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.holder = holder


class StoreClosedError(DLedgerError):
    """An operation was attempted on a closed store."""

    code = INTERNAL_ERROR


class ReadOnlyStoreError(DLedgerError):
    """A write was attempted on a store opened read-only."""

    code = UNEXPECTED_ARGUMENT


class CorruptSnapshotError(DLedgerError):
    """A snapshot on disk (or one being received) does not hold what its meta says: a meta
    file that does not parse or whose own CRC fails, data of another size or CRC. ``path``
    names the file."""

    code = DISK_ERROR

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(f"{message} ({path})" if path else message)
        self.path = path


class PeerProtocolError(Exception):
    """A peer sent a request this node must not act on (a value no peer may send, or bytes
    that do not hold what the request says): the peer's fault, not this node's. The node
    answers the request ``code`` (UNEXPECTED_ARGUMENT) and logs the message, which names what
    is wrong; nothing the request would have changed has changed."""

    code: int = UNEXPECTED_ARGUMENT
