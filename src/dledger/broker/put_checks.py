"""What a put must be before it is encoded: the checks a RocketMQ broker makes on a message
(``TopicValidator``, the queue id, the message size), plus the types a Python caller can get
wrong. Each returns None when the value is good, else the ``detail`` of the MESSAGE_ILLEGAL
status, naming the field and what is wrong with it. Nothing here raises.

Topic names follow RocketMQ's ``TopicValidator``: letters, digits, ``%``, ``|``, ``_`` and
``-`` only (so a topic is always a safe directory name under ``consumequeue/``), at most 32767
bytes (the v2 message layout's i16 length; over 127 bytes the message is written with magic v2).
"""

from __future__ import annotations

import re
from itertools import repeat

_TOPIC = re.compile(r"[%|a-zA-Z0-9_-]+")
MAX_TOPIC_BYTES = 32767
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


def _kind(value) -> str:
    return type(value).__name__


def topic_problem(topic) -> str | None:
    if type(topic) is str and topic in GOOD_TOPICS:
        return None
    why = _topic_problem(topic)
    if why is None and type(topic) is str:
        if len(GOOD_TOPICS) >= GOOD_TOPICS_MAX:
            GOOD_TOPICS.clear()
        GOOD_TOPICS.add(topic)
    return why


#: topics found good (a put's topic is checked once, not per message); at most this many
GOOD_TOPICS: set[str] = set()
GOOD_TOPICS_MAX = 4096


def _topic_problem(topic) -> str | None:
    if not isinstance(topic, str):
        return f"topic: must be a str, got {_kind(topic)}"
    if not topic:
        return "topic: is empty"
    if len(topic) > MAX_TOPIC_BYTES:
        return f"topic: {len(topic)} characters; at most {MAX_TOPIC_BYTES}"
    if _TOPIC.fullmatch(topic) is None:
        bad = next(ch for ch in topic if _TOPIC.fullmatch(ch) is None)
        return f"topic: {topic[:40]!r} holds {bad!r}; only letters, digits, '%', '|', '_' and '-' are allowed"
    return None


def queue_id_problem(queue_id) -> str | None:
    if isinstance(queue_id, bool) or not isinstance(queue_id, int) or not 0 <= queue_id <= _I32_MAX:
        return f"queue_id: {queue_id!r} is not an int in 0..2**31-1"
    return None


def put_problem(topic, queue_id, body, tags, keys, properties, born_host, flag) -> str | None:
    """The first thing wrong with ``put_message``'s arguments, or None."""
    why = topic_problem(topic) or queue_id_problem(queue_id)
    if why:
        return why
    if not isinstance(body, (bytes, bytearray, memoryview)):
        return f"body: must be bytes, got {_kind(body)}"
    if tags is not None and not isinstance(tags, str):
        return f"tags: must be a str or None, got {_kind(tags)}"
    if keys is not None and not isinstance(keys, str):
        if not isinstance(keys, (list, tuple, set, frozenset)):
            return f"keys: must be a str or a list of str, got {_kind(keys)}"
        if not all(map(isinstance, keys, repeat(str))):
            bad = next(k for k in keys if not isinstance(k, str))
            return f"keys: must be a str or a list of str; one is {_kind(bad)}"
    if properties is not None:
        if not isinstance(properties, dict):
            return f"properties: must be a dict of str to str, got {_kind(properties)}"
        bad = next(((k, v) for k, v in properties.items() if not isinstance(k, str) or not isinstance(v, str)), None)
        if bad is not None:
            return f"properties: must be a dict of str to str; {bad[0]!r}: {bad[1]!r} is not"
    if isinstance(flag, bool) or not isinstance(flag, int) or not _I32_MIN <= flag <= _I32_MAX:
        return f"flag: {flag!r} is not a 32-bit int"
    if born_host is not None:
        return host_problem(born_host, "born_host")
    return None


def host_problem(host, name: str) -> str | None:
    """A host is ``(address, port)`` or ``"address:port"`` (``"[v6]:port"``), port 0..65535."""
    if isinstance(host, tuple) and len(host) == 2:
        addr, port = host
    elif isinstance(host, str):
        addr, sep, port = host.rpartition(":")
        if not sep:
            return f"{name}: {host!r} is not 'address:port'"
        addr = addr.strip("[]")
        try:
            port = int(port)
        except ValueError:
            return f"{name}: {host!r} has no numeric port"
    else:
        return f"{name}: must be (address, port) or 'address:port', got {_kind(host)}"
    if not isinstance(addr, str):
        return f"{name}: the address must be a str, got {_kind(addr)}"
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        return f"{name}: port {port!r} is not in 0..65535"
    return None


__all__ = ["GOOD_TOPICS", "MAX_TOPIC_BYTES", "host_problem", "put_problem", "queue_id_problem", "topic_problem"]
