"""Consumer reads: pull a topic-queue by queue offset, query by key, look up by message id.

Everything read goes through the consume queues and the key index, which hold committed and
dispatched messages only, so a consumer never sees a message that could still be lost, on any
replica (a follower serves what it has dispatched). ``get_messages`` returns the decoded
messages from ``queue_offset`` on (at most ``max_count``) and the next queue offset to ask for,
which equals ``queue_offset`` at the end of the queue (RocketMQ's ``getMessage`` with
``nextBeginOffset``). A ``queue_offset`` below the queue's min offset (``min_queue_offset``:
its earlier messages are gone from this replica's log) reads from the min offset. Key lookups check each
candidate's real KEYS / UNIQ_KEY and topic (the index keeps hashes only). A topic or queue id
no put could have used (``put_checks``) has no messages; a ``queue_offset`` or ``max_count``
that is not an int is a ``ValueError`` naming it.
"""

from __future__ import annotations

from dledger.broker.message_codec import Message, MessageFormatError, decode, parse_message_id
from dledger.broker.put_checks import queue_id_problem, topic_problem


def _int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: must be an int, got {type(value).__name__}")
    return value


def get_messages(log, topic: str, queue_id: int, queue_offset: int, max_count: int = 32) -> tuple[list[Message], int]:
    queue_offset = max(0, _int(queue_offset, "queue_offset"))
    max_count = _int(max_count, "max_count")
    if max_count <= 0 or topic_problem(topic) or queue_id_problem(queue_id):
        return [], queue_offset

    def units():
        cq = log.reput.find_queue(topic, queue_id)
        if cq is None:
            return queue_offset, []
        start = max(queue_offset, log.reput.min_queue_offset(log.server.store, topic, queue_id))
        return start, cq.units(start, max_count)

    start, found = log._on_runtime(units)
    out = []
    for phys, size, _tags in found:
        raw = log.get_message(phys, size)
        if raw is None:
            break
        out.append(decode(raw))
    return out, start + len(out)


def query_by_key(log, topic: str, key: str, max_num: int = 32) -> list[Message]:
    if topic_problem(topic) or not isinstance(key, str) or not key or _int(max_num, "max_num") <= 0:
        return []
    offsets = log._on_runtime(lambda: log.reput.index.lookup(topic, key, max_num * 4))
    out = []
    for phys in offsets:
        raw = log.get_message_at(phys)
        if raw is None:
            continue
        m = decode(raw)
        if m.topic == topic and (key == m.uniq_key or key in m.key_list):
            out.append(m)
            if len(out) >= max_num:
                break
    return out


def look_message_by_id(log, msg_id: str) -> Message | None:
    """The committed message an offset message id names (None if there is none; a
    ``MessageFormatError`` when ``msg_id`` is not an offset message id)."""
    _host, phys = parse_message_id(msg_id)
    raw = log.get_message_at(phys)
    if raw is None:
        return None
    try:
        return decode(raw)
    except MessageFormatError:
        return None
