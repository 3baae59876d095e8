"""Reads of a replica's consume queues for the remoting handlers (blocking: the server runs
them on its worker threads; each read is one call on the node's runtime thread, as
``consumer`` does). A queue holds offsets ``min .. max``: its min offset is 0 unless retention
removed the messages before it, or the replica's log began later (it caught up past the
leader's retention); a queue nobody sent to is empty."""

from __future__ import annotations

import struct

from dledger.broker.message_codec import store_timestamp_position, SYS_FLAG_POSITION

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def max_offset(log, topic: str, queue_id: int) -> int:
    return log.max_queue_offset(topic, queue_id)


def queue_ends(log, keys) -> dict[tuple[str, int], int]:
    """The max offset of each ``(topic, queue id)`` of ``keys``, read in one runtime call."""
    def read():
        out = {}
        for topic, queue_id in keys:
            cq = log.reput.find_queue(topic, queue_id)
            out[(topic, queue_id)] = cq.max_offset if cq is not None else 0
        return out
    return log._on_runtime(read)


def min_offset(log, topic: str, queue_id: int) -> int:
    return log.min_queue_offset(topic, queue_id)


def units(log, topic: str, queue_id: int, offset: int,
          count: int) -> tuple[int, int, list[tuple[int, int, int]]]:
    """``(min offset, max offset, up to count units from offset)``; a unit is ``(physical
    offset, size, tags code)``; none when ``offset`` is below the min offset."""
    def read():
        cq = log.reput.find_queue(topic, queue_id)
        if cq is None:
            return 0, 0, []
        lo = log.reput.min_queue_offset(log.server.store, topic, queue_id)
        return lo, cq.max_offset, (cq.units(offset, count) if lo <= offset < cq.max_offset else [])
    return log._on_runtime(read)


def store_timestamp(log, topic: str, queue_id: int, offset: int) -> int | None:
    """The store timestamp of the message at ``offset`` of a queue (None if unreadable)."""
    _lo, _end, found = units(log, topic, queue_id, offset, 1)
    if not found:
        return None
    phys, size, _tags = found[0]
    head = log.get_message(phys, min(size, store_timestamp_position(0x10) + 8))
    if head is None or len(head) < SYS_FLAG_POSITION + 4:
        return None
    pos = store_timestamp_position(_I32.unpack_from(head, SYS_FLAG_POSITION)[0])
    return _I64.unpack_from(head, pos)[0] if pos + 8 <= len(head) else None


def search_offset(log, topic: str, queue_id: int, timestamp: int) -> int:
    """RocketMQ's ``getOffsetInQueueByTime``: the first offset whose store timestamp is at or
    after ``timestamp`` (the max offset when every message is older; 0 for an empty queue),
    among the offsets the replica still holds."""
    lo, hi = min_offset(log, topic, queue_id), max_offset(log, topic, queue_id)
    while lo < hi:
        mid = (lo + hi) // 2
        ts = store_timestamp(log, topic, queue_id, mid)
        if ts is None or ts >= timestamp:
            hi = mid
        else:
            lo = mid + 1
    return lo


__all__ = ["max_offset", "min_offset", "queue_ends", "search_offset", "store_timestamp", "units"]
