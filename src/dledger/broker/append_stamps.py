"""The append hook's stamps: each message's queue offset, physical offset and store time,
written into its bytes on the leader as the store appends it (RocketMQ's CommitLog stamps
them as it writes a message).

``stamp_messages(records, starts, sizes, positions, table, stamped, now)`` does it for a batch of
records laid back to back in the writable buffer ``records`` (record ``i`` begins at
``starts[i]``, is ``sizes[i]`` bytes long, header included, and lies at log position
``positions[i]``): for each whose body is a message (``message_codec.locate``), its queue
offset is ``table[(topic, queue_id)]`` (0 when absent; the table moves on by one), written at
the message's queueOffset field with its physical offset (``position + 48``) after it, ``now``
(ms) at its storeTimestamp, and ``stamped[position] = (queue_offset, now)``. Records whose
body is not a message are left as they are. It answers how many it stamped.

``python_stamp_messages`` is the reference; the compiled twin (``speedups``) is used where it
was built. ``locate`` is ``message_codec.locate`` (a message's topic, queue id and
store-timestamp position), compiled where it was built. The commit log's append hook (``commit_log``) runs it once per batch where the store
writes a batch in one piece, and the per-record form (the same stamps) elsewhere.
"""

from __future__ import annotations

import struct

from dledger.broker import message_codec
from dledger.broker.message_codec import PHYSICAL_OFFSET_POSITION, QUEUE_OFFSET_POSITION
from dledger.broker.speedups import compiled
from dledger.entry import BODY_OFFSET

_STAMP = struct.Struct(">q")
_STAMP2 = struct.Struct(">qq")
assert PHYSICAL_OFFSET_POSITION == QUEUE_OFFSET_POSITION + 8

locate = compiled.locate if compiled is not None else message_codec.locate


def stamp_one(view, body_offset: int, position: int, table: dict, stamped: dict, now: int) -> bool:
    """Stamp the record ``view`` (its body at ``body_offset``) at log position ``position``, as
    ``stamp_messages`` stamps each record; whether its body was a message."""
    found = locate(view, body_offset)
    if found is None:
        return False
    topic, queue_id, ts_pos = found
    key = (topic, queue_id)
    qo = table.get(key, 0)
    table[key] = qo + 1
    _STAMP2.pack_into(view, body_offset + QUEUE_OFFSET_POSITION, qo, position + body_offset)
    _STAMP.pack_into(view, body_offset + ts_pos, now)
    stamped[position] = (qo, now)
    return True


def python_stamp_messages(records, starts: list[int], sizes: list[int], positions: list[int], table: dict,
                          stamped: dict, now: int) -> int:
    """The reference ``stamp_messages``: ``stamp_one`` on each record's view."""
    count = 0
    with memoryview(records) as whole:
        for start, size, position in zip(starts, sizes, positions, strict=True):
            with whole[start:start + size] as view:
                count += stamp_one(view, BODY_OFFSET, position, table, stamped, now)
    return count


stamp_messages = compiled.stamp_messages if compiled is not None else python_stamp_messages
