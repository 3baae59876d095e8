"""A put's arguments checked and laid out as a CommitLog message (the broker's producer side).

``PutEncoder(store_host)`` holds what every put of one commit log shares (its store host, the
born hosts seen before, packed once). ``encode(topic, queue_id, body, tags, keys, properties,
born_host, flag, born_ms, limit)`` is one message: the bytes ``message_codec.encode_message``
gives (TAGS, then KEYS joined by a space, set among the caller's properties, in that order where
the caller did not name them), or a refused ``PutMessageResult`` (MESSAGE_ILLEGAL naming the
field, PROPERTIES_SIZE_EXCEEDED). It never raises for bad input. ``encode_batch(messages,
born_ms, limit)`` is ``put_messages``: a list of dicts of those arguments; the list of bytes, or
the first refusal (its detail naming ``messages[i]``), as a refused message stops the batch.

``encode`` is the reference. A batch is encoded by the compiled twin of its loop
(``speedups``: ``encode_puts``) where it was built: it takes each message whose values have the
usual types (a ``dict``, a ``str`` topic this process has found good, ``int``, ``bytes``, a
``str`` or a list or tuple of ``str`` keys, a born host seen before) and hands anything else,
at the first such message, back to ``encode``, which refuses it or encodes it; the loop then
goes on in C. Same bytes, same refusals, both ways (``tests/broker/test_put_encode.py``).
"""

from __future__ import annotations

import dataclasses
import zlib

from dledger.broker.message_codec import MessageFormatError, encode_message, host_field
from dledger.broker.put_checks import GOOD_TOPICS, put_problem
from dledger.broker.put_result import PutMessageResult, PutMessageStatus, refused
from dledger.broker.speedups import compiled

#: the fields a message of ``put_messages`` may have (``put_message``'s arguments)
PUT_FIELDS = frozenset({"topic", "queue_id", "body", "tags", "keys", "properties", "born_host", "flag"})
#: born hosts kept packed, at most this many (then the table starts again)
HOSTS_KEPT = 1024

_encode_puts = compiled.encode_puts if compiled is not None else None


class PutEncoder:
    """Encodes the puts of one commit log (its store host is every message's)."""

    def __init__(self, store_host) -> None:
        self.store_host = store_host
        #: born host (as the caller gave it) -> (packed address, port), for the compiled loop
        self.hosts: dict = {}
        self._store_packed = host_field(store_host, "storeHost")

    def encode(self, topic, queue_id, body, tags, keys, properties, born_host, flag, born_ms: int,
               limit: int) -> bytes | PutMessageResult:
        """One message's bytes, or the refusal (see the module docstring)."""
        why = put_problem(topic, queue_id, body, tags, keys, properties, born_host, flag)
        if why is not None:
            return refused(PutMessageStatus.MESSAGE_ILLEGAL, why)
        if isinstance(keys, str):
            keys = [keys]
        props = dict(properties) if properties else {}
        if tags:
            props["TAGS"] = tags
        if keys:
            props["KEYS"] = " ".join(keys)
        try:
            raw = encode_message(topic=topic, body=body if type(body) is bytes else bytes(body), queue_id=queue_id,
                                 flag=flag, properties=props, born_timestamp=born_ms,
                                 born_host=self.store_host if born_host is None else born_host,
                                 store_host=self.store_host)
        except MessageFormatError as exc:
            status = (PutMessageStatus.PROPERTIES_SIZE_EXCEEDED if exc.field == "properties"
                      else PutMessageStatus.MESSAGE_ILLEGAL)
            return refused(status, str(exc))
        except (TypeError, AttributeError) as exc:
            return refused(PutMessageStatus.MESSAGE_ILLEGAL, f"bad value: {exc}")
        if len(raw) > limit:
            return refused(PutMessageStatus.MESSAGE_ILLEGAL, f"message: {len(raw)} bytes; at most {limit}")
        if born_host is not None and type(born_host) in (tuple, str):
            self._keep_host(born_host)
        return raw

    def _keep_host(self, born_host) -> None:
        hosts = self.hosts
        if born_host not in hosts:
            if len(hosts) >= HOSTS_KEPT:
                hosts.clear()
            hosts[born_host] = host_field(born_host, "bornHost")

    def encode_batch(self, messages, born_ms: int, limit: int, compiled_loop: bool = True) -> list[bytes] | PutMessageResult:
        """``put_messages``' messages encoded, or the first refusal (see the module docstring);
        ``compiled_loop`` False runs the reference alone."""
        if not isinstance(messages, (list, tuple)):
            return refused(PutMessageStatus.MESSAGE_ILLEGAL,
                           f"messages: must be a list of dicts, got {type(messages).__name__}")
        fast = _encode_puts if compiled_loop and type(messages) is list else None
        raws: list[bytes] = []
        i, n = 0, len(messages)
        while i < n:
            if fast is not None:
                i = fast(messages, i, born_ms, limit, GOOD_TOPICS, self.hosts, self._store_packed,
                         zlib.crc32, raws)
                if i >= n:
                    break
            m = messages[i]
            if not isinstance(m, dict):
                return refused(PutMessageStatus.MESSAGE_ILLEGAL,
                               f"messages[{i}]: must be a dict, got {type(m).__name__}")
            if not PUT_FIELDS.issuperset(m):
                unknown = m.keys() - PUT_FIELDS
                return refused(PutMessageStatus.MESSAGE_ILLEGAL,
                               f"messages[{i}]: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
            raw = self.encode(m.get("topic"), m.get("queue_id", 0), m.get("body"), m.get("tags"), m.get("keys", ()),
                              m.get("properties"), m.get("born_host"), m.get("flag", 0), born_ms, limit)
            if type(raw) is not bytes:
                return dataclasses.replace(raw, detail=f"messages[{i}]: {raw.detail}")
            raws.append(raw)
            i += 1
        return raws


__all__ = ["HOSTS_KEPT", "PUT_FIELDS", "PutEncoder"]
