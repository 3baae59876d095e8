"""What a put returns: RocketMQ's ``PutMessageStatus`` and ``PutMessageResult``.

``status`` is PUT_OK when a quorum holds the message. The others, and when they happen:
SERVICE_NOT_AVAILABLE (this node is not the writable master; ``leader_id`` names the leader
when it is known), FLUSH_SLAVE_TIMEOUT (no quorum acknowledged in time, or the term moved on
while the message waited for one; the message may still commit later), MESSAGE_ILLEGAL (an
empty or oversized topic or message, a bad host, a queue id out of range),
PROPERTIES_SIZE_EXCEEDED (properties over 32767 bytes), OS_PAGECACHE_BUSY (the leader's pending
window is full), UNKNOWN_ERROR (anything else: ``detail`` says what; the message may be in the
log). Only PUT_OK carries ``wrote_offset`` (the message's physical offset), ``wrote_bytes``,
``queue_offset`` and ``msg_id``; a message refused before its append was taken was not written.
"""

from __future__ import annotations

import asyncio
import enum
from concurrent.futures import Future
from dataclasses import dataclass


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


@dataclass(frozen=True, slots=True)
class PutMessageResult:
    status: PutMessageStatus
    wrote_offset: int = -1
    wrote_bytes: int = 0
    queue_offset: int = -1
    msg_id: str | None = None
    store_timestamp: int = 0
    leader_id: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK


#: each slot's own setter, in field order (what the frozen class's ``__init__`` reaches through
#: ``object.__setattr__``, with a name look-up each)
(_set_status, _set_wrote_offset, _set_wrote_bytes, _set_queue_offset, _set_msg_id, _set_store_timestamp,
 _set_leader_id, _set_detail) = (PutMessageResult.__dict__[name].__set__ for name in PutMessageResult.__slots__)


def put_ok(wrote_offset: int, wrote_bytes: int, queue_offset: int, msg_id: str, store_timestamp: int,
           leader_id: str | None) -> PutMessageResult:
    """``PutMessageResult(PUT_OK, ...)`` (equal to it), built slot by slot: the put path's answer,
    one per message, at about 60% of the frozen dataclass's ``__init__``."""
    r = object.__new__(PutMessageResult)
    _set_status(r, PutMessageStatus.PUT_OK)
    _set_wrote_offset(r, wrote_offset)
    _set_wrote_bytes(r, wrote_bytes)
    _set_queue_offset(r, queue_offset)
    _set_msg_id(r, msg_id)
    _set_store_timestamp(r, store_timestamp)
    _set_leader_id(r, leader_id)
    _set_detail(r, "")
    return r


def refused(status: PutMessageStatus, detail: str, leader_id: str | None = None) -> PutMessageResult:
    return PutMessageResult(status, leader_id=leader_id, detail=detail)


class AwaitableFuture(Future):
    """A ``concurrent.futures.Future`` that asyncio code can also ``await``."""

    def __await__(self):
        return asyncio.wrap_future(self).__await__()


def done_future(value) -> AwaitableFuture:
    """An ``AwaitableFuture`` that already holds ``value``."""
    f = AwaitableFuture()
    f.set_result(value)
    return f
